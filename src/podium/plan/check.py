"""Measuring a plan on this machine: worker processes of the profile's agent on the
simulated model, loaded as planned, against what the planner predicts for them.

A plan for more workers than this machine has cores is scaled to fit: as many workers
as cores, each at the planned rate per worker, so each loop sees the load the plan gives
it. Each worker is its own process (:mod:`podium.plan.loadgen`) with its own share of
the arrivals, as workers sharing one queue each take a share.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import msgspec

from podium.engine.profile import percentile
from podium.plan.confidence import quantile_interval
from podium.plan.loadgen import LoadResult
from podium.plan.priority import spawn
from podium.plan.profile import PlanError
from podium.plan.simulate import HostStalls

__all__ = ("Measured", "cores_here", "cpu_share_here", "host_stalls_here", "measure_closed",
           "measure_open")


class Measured(msgspec.Struct, frozen=True):
    workers: int
    #: Runs per second completed by all the workers together, over the measured span.
    rate: float
    p50_s: float
    p99_s: float
    runs: int
    failed: int
    #: CPU seconds per second of each worker, on average.
    cpu_utilization: float
    #: The share of the time each worker's loop waited for a CPU that other processes
    #: held, on average: on a shared machine, what the measurement lost to them.
    cpu_starved: float = 0.0
    #: The longest garbage-collector pause of any worker (seconds).
    gc_pause_max_s: float = 0.0
    #: The share of a core each worker's loop got while it was ready to run (its CPU over
    #: its CPU and its run-queue wait, on average): 1.0 on a machine of its own.
    cpu_share: float = 1.0
    #: The mean of one of those waits for a CPU (seconds; schedstat).
    stall_mean_s: float = 0.0
    #: The 95 % interval of the p99 (a block bootstrap over the runs in arrival order:
    #: runs slow together, as a host's stall makes them, count as one episode).
    p99_low_s: float = 0.0
    p99_high_s: float = 0.0
    #: The loops' sleeps with nothing to do, per run (each a wake-up's CPU).
    wakeups_per_run: float = 0.0
    #: Whether the workers ran at the priority asked for (False where none was).
    prioritized: bool = False

    @property
    def stalls(self) -> HostStalls:
        """The host as the workers met it: off their core ``1 - cpu_share`` of the time
        they were ready to run, in episodes of ``stall_mean_s``."""
        return HostStalls(min(0.99, max(0.0, 1.0 - self.cpu_share)), self.stall_mean_s)


def cores_here() -> int:
    return len(os.sched_getaffinity(0))


def _run_workers(commands: Sequence[Sequence[str]], timeout_s: float,
                 priority: int | None) -> Measured:
    with tempfile.TemporaryDirectory(prefix="podium-plan-") as tmp:
        outs = [Path(tmp) / f"worker-{i}.json" for i in range(len(commands))]
        started = [spawn([sys.executable, "-m", "podium.plan.loadgen", *cmd, "--out",
                          str(out)], priority,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                   for cmd, out in zip(commands, outs, strict=True)]
        results = _collect([proc for proc, _ in started], outs, timeout_s)
    return msgspec.structs.replace(_combine(results),
                                   prioritized=all(ok for _, ok in started))


def _collect(procs: Sequence[subprocess.Popen[bytes]], outs: Sequence[Path],
             timeout_s: float) -> list[LoadResult]:
    results: list[LoadResult] = []
    try:
        for proc, out in zip(procs, outs, strict=True):
            _, err = proc.communicate(timeout=timeout_s)
            if proc.returncode != 0:
                tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise PlanError(f"a measuring worker failed (exit {proc.returncode}): {tail[0]}")
            results.append(msgspec.json.decode(out.read_bytes(), type=LoadResult))
    except subprocess.TimeoutExpired:
        raise PlanError(f"the measurement took over {timeout_s:.0f} s: this machine is too "
                        "busy, or the rate too high for it") from None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _in_arrival_order(results: Sequence[LoadResult]) -> list[float]:
    """The workers' latencies merged in about the order the runs arrived (each worker's
    k-th of n runs at k/n of the span: the workers share one load)."""
    keyed = [(k / len(r.latencies_s), x) for r in results
             for k, x in enumerate(r.latencies_s)]
    keyed.sort(key=lambda kx: kx[0])
    return [x for _, x in keyed]


def _combine(results: Sequence[LoadResult]) -> Measured:
    ordered = _in_arrival_order(results)
    latencies = sorted(ordered)
    if not latencies:
        raise PlanError("the measurement finished no run")
    p99_low, p99_high = quantile_interval(ordered, 99)
    return Measured(
        workers=len(results),
        # An open load's rate over its arrivals; a closed one's over its whole window.
        rate=sum(len(r.latencies_s) / (r.arrivals_s or r.wall_s) for r in results
                 if (r.arrivals_s or r.wall_s) > 0),
        p50_s=percentile(latencies, 50),
        p99_s=percentile(latencies, 99),
        runs=len(latencies),
        failed=sum(r.failed for r in results),
        cpu_utilization=sum(r.cpu_s / r.wall_s for r in results if r.wall_s) / len(results),
        cpu_starved=sum(r.runqueue_wait_s / r.wall_s for r in results if r.wall_s)
        / len(results),
        gc_pause_max_s=max(r.gc_pause_max_s for r in results),
        cpu_share=sum(r.cpu_s / (r.cpu_s + r.runqueue_wait_s) for r in results
                      if r.cpu_s > 0) / len(results),
        stall_mean_s=sum(r.runqueue_wait_s for r in results)
        / max(1, sum(r.runqueue_episodes for r in results)),
        p99_low_s=p99_low, p99_high_s=p99_high,
        wakeups_per_run=sum(r.wakeups for r in results) / len(latencies),
    )


#: A process that computes for ``sys.argv[1]`` seconds, busy ``sys.argv[2]`` of the time
#: (bursts of half a millisecond between sleeps, as an event loop at that load: a host
#: treats a task that sleeps and wakes otherwise than one that never lets go), then prints
#: the share of its ready time it held a core and the mean of its waits for one (seconds,
#: schedstat: its run-queue wait over the times it was scheduled; 0 elsewhere).
_SPIN = ("import sys, time\n"
         "def rq():\n"
         "    try:\n"
         "        f = open('/proc/thread-self/schedstat').read().split()\n"
         "        return int(f[1]) / 1e9, int(f[2])\n"
         "    except (OSError, ValueError, IndexError):\n"
         "        return 0.0, 0\n"
         "end, duty, burst = float(sys.argv[1]), float(sys.argv[2]), 0.0005\n"
         "gap = burst * (1 - duty) / duty\n"
         "t0, c0, (w0, n0) = time.perf_counter(), time.process_time(), rq()\n"
         "while time.perf_counter() - t0 < end:\n"
         "    c1 = time.process_time()\n"
         "    while time.process_time() - c1 < burst:\n"
         "        sum(range(200))\n"
         "    if gap > 0:\n"
         "        time.sleep(gap)\n"
         "cpu, (w, n) = time.process_time() - c0, rq()\n"
         "print(cpu / (cpu + w - w0) if cpu > 0 else 1.0, (w - w0) / max(1, n - n0))\n")


def host_stalls_here(processes: int, seconds: float = 2.0, busy: float = 1.0,
                     priority: int | None = None) -> HostStalls:
    """How this machine treats ``processes`` processes now (means), each busy ``busy`` of
    the time (1.0: never sleeping, as a saturated worker): the share of its ready time
    each is kept off a core, and how long one such episode lasts. What a worker's loop can
    count on while others share the cores: 0 % on an idle machine with a core per
    process; about 80 % where five times as many runnable tasks as cores compete.
    ``priority``: the probes at that nice value, as the workers they stand for
    (:mod:`podium.plan.priority`)."""
    duty = min(1.0, max(0.05, busy))
    procs = [spawn([sys.executable, "-c", _SPIN, f"{seconds}", f"{duty}"], priority,
                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)[0]
             for _ in range(processes)]
    got = [(p.communicate(timeout=seconds + 60)[0] or b"1 0").split() for p in procs]
    share = sum(float(g[0]) for g in got) / len(got)
    episode = sum(float(g[1]) for g in got) / len(got)
    return HostStalls(min(0.99, max(0.0, 1.0 - share)), episode)


def cpu_share_here(processes: int, seconds: float = 2.0) -> float:
    """The share of a core that each of ``processes`` busy processes gets on this machine
    now (mean; see :func:`host_stalls_here`)."""
    return max(1e-3, 1.0 - host_stalls_here(processes, seconds).share)


def _scenario(scenario: str | None) -> list[str]:
    return ["--scenario", scenario] if scenario else []


def measure_open(scenario: str | None, workers: int, rate: float, seconds: float,
                 concurrency: int, *, seed: int = 1, timeout_s: float = 600,
                 priority: int | None = None) -> Measured:
    """``workers`` processes sharing Poisson arrivals at ``rate`` runs/s for about
    ``seconds`` (each at ``rate / workers``); ``priority``: at that nice value, ahead of
    the machine's other work (:mod:`podium.plan.priority`)."""
    per_worker = rate / workers
    runs = max(200, round(per_worker * seconds))
    commands = [[*_scenario(scenario), "--rate", f"{per_worker:.6g}", "--runs", str(runs),
                 "--concurrency", str(concurrency), "--seed", str(seed + i)]
                for i in range(workers)]
    return _run_workers(commands, timeout_s, priority)


def measure_closed(scenario: str | None, workers: int, concurrency: int, runs: int,
                   *, timeout_s: float = 600, priority: int | None = None) -> Measured:
    """``workers`` processes, each with ``concurrency`` runs in flight all the time: the
    saturation throughput is the measured rate."""
    commands = [[*_scenario(scenario), "--closed", str(concurrency), "--runs", str(runs)]
                for _ in range(workers)]
    return _run_workers(commands, timeout_s, priority)
