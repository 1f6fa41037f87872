"""``podium plan``'s predictions against measurements on this machine (issue #37).

1. A profile at one load: ``podium bench --json`` of a ReAct agent with real waits (a
   20 ms model, a 5 ms tool; 6 tool steps and an answer) at ``--profile-concurrency``,
   as the last level of a sweep whose lighter level (``--calibration-concurrency``)
   prices a wake-up of the loaded loop (:func:`podium.plan.profile.wake_cost_across_levels`).
2. From it alone, for 1 and 2 worker processes: the predicted saturation throughput
   (``podium.plan.saturation_rate``) against the measured one (closed load, ``--closed``
   runs in flight per worker, :func:`podium.plan.check.measure_closed`).
3. At 50 % and 85 % of the saturation measured just before: the predicted run p99 (the
   simulation, :func:`podium.plan.predict`) against the measured one (Poisson arrivals
   for ``--seconds``, :func:`podium.plan.check.measure_open`).

``--rounds`` rounds of (saturation, 50 %, saturation, 85 %) per worker count; the table
has the medians, and each round's error beside them. Targets: saturation within ±20 %,
p99 within ±30 %.

Every process shares this machine's cores with whatever else runs on it, so each figure
is predicted for the host it met: just before and just after each measurement, as many
probe processes as workers run for ``--probe-s``, busy as the workers are planned to be,
and their off-core share and mean run-queue wait are the prediction's
:class:`~podium.plan.HostStalls` ("off core", "stall"). Beside it: the forecast from the
probe before alone, the prediction for a core of its own ("own core": what a fleet on
dedicated cores gets), and for the stalls the workers' loops met during the measurement
("run host", schedstat: the model's error apart from how well the probes caught the
machine); the workers' CPU use, the load on the core they had ("ρ": their CPU over the
time they held or waited for one), the share of their ready time they waited for a CPU
("starved"), the share of the time any task here waited for one (PSI "some") and the
load average.

Every measured process (the profile, the workers, the probes) runs in a session of its
own at ``--priority`` (nice -10; :mod:`podium.plan.priority`): Linux shares the CPUs
between sessions first, and at the ordinary priority a worker got what the machine's
other sessions left it, a share that moved by half from one measurement to the next.
The measured p99 comes with its 95 % interval (block bootstrap, runs in arrival order).

    python bench/bench_plan.py [--profile-concurrency 100] [--rounds 3] [--no-priority]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podium.plan import (
    HostStalls,
    Kind,
    PlanOptions,
    RunShape,
    SimResult,
    load_profile,
    predict,
    saturation_rate,
)
from podium.plan.check import Measured, host_stalls_here, measure_closed, measure_open
from podium.plan.priority import spawn
from podium.plan.profile import loop_wakes

SCENARIO = """\
[agent]
name = "react"

[model]
ttft_ms = 20
per_token_ms = 0
jitter = "lognormal"

[script]
tool = "lookup"
tool_steps = 6

[[tools]]
name = "lookup"
latency_ms = 5
"""


def take_profile(scenario: str, concurrency: int, runs: int, out: str,
                 priority: int | None, calibration: int = 0) -> bool:
    """The profile, at ``priority`` (as the workers it plans for); whether it had it.
    ``calibration``: a lighter level first (a sweep, the profile its last level), which
    prices a wake-up of the loaded loop (:func:`podium.plan.profile.wake_cost_across_levels`)."""
    load = (["--sweep", f"{calibration},{concurrency}"] if calibration
            else ["--concurrency", str(concurrency)])
    cmd = [sys.executable, "-m", "podium.cli.main", "bench", "--scenario", scenario,
           *load, "--runs", str(runs), "--json"]
    with open(out, "wb") as f:
        proc, ok = spawn(cmd, priority, stdout=f)
        if proc.wait() != 0:
            raise SystemExit(f"podium bench failed (exit {proc.returncode})")
    return ok


def cpu_pressure() -> float:
    """Microseconds some task on this machine waited for a CPU, so far (Linux PSI; 0 where
    absent): over a measurement, the share of its time the machine was oversubscribed."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return 0.0


class Pressure:
    def __enter__(self) -> Pressure:
        self.t0, self.p0 = time.perf_counter(), cpu_pressure()
        return self

    def __exit__(self, *exc: object) -> None:
        self.share = (cpu_pressure() - self.p0) / 1e6 / (time.perf_counter() - self.t0)


def off(measured: float, predicted: float) -> float:
    return measured / predicted - 1.0


class Predictor:
    """The planner's figures for one profile: on a core of its own, or on a host that
    stalls the loop as a probe (or the measurement itself) found."""

    def __init__(self, shape: RunShape, options: PlanOptions, slots: int,
                 wake_cpu_s: float = 0.0) -> None:
        self.shape, self.options, self.slots = shape, options, slots
        self.wake_cpu_s = wake_cpu_s

    def p99_as_met(self, workers: int, rate: float, got: Measured) -> float:
        """The p99 for the machine the load met, speed and stalls: the busy CPU per run
        it measured (its CPU less its wake-ups at the profile's price of one) and the
        stalls its workers met. The queueing model's own error, apart from the host's
        drift between the profile, the reference and the load."""
        busy = got.cpu_utilization * workers / got.rate - got.wakeups_per_run * self.wake_cpu_s
        shape = self.shape.with_cpu_per_step(max(1e-9, busy) / self.shape.steps)
        sim = predict([Kind(shape, rate)], workers, self.options, concurrency=self.slots,
                      stalls=got.stalls)
        return sim.classes[0].p99_s

    def sat(self, workers: int, stalls: HostStalls | None) -> float:
        return saturation_rate([Kind(self.shape, 1.0)], workers, stalls)

    @functools.lru_cache(maxsize=64)  # noqa: B019 (one predictor a bench)
    def _sim(self, workers: int, rate: float, stalls: HostStalls | None) -> SimResult:
        return predict([Kind(self.shape, rate)], workers, self.options,
                       concurrency=self.slots, stalls=stalls)

    def p99(self, workers: int, rate: float,
            stalls: HostStalls | None) -> tuple[float, float]:
        sim = self._sim(workers, rate, stalls)
        return sim.classes[0].p99_s, sim.classes[0].p50_s

    def wakeups_per_run(self, workers: int, rate: float, stalls: HostStalls | None) -> float:
        """The loop's wake-ups per run in the simulation (against the measured ones)."""
        return self._sim(workers, rate, stalls).wakeups_per_run

    def p99_s(self, workers: int, rate: float, stalls: HostStalls | None) -> float:
        return self.p99(workers, rate, stalls)[0]


def _mean(a: HostStalls, b: HostStalls) -> HostStalls:
    return HostStalls((a.share + b.share) / 2, (a.mean_s + b.mean_s) / 2)


def _row(workers: int, what: str, target: float, probes: tuple[HostStalls, HostStalls],
         got: Measured, pressure: Pressure, measured: float,
         predict: Callable[[HostStalls | None], float]) -> dict[str, Any]:
    """One figure measured, and predicted for four hosts: the one the probes on either
    side of the measurement found (the prediction), the one the probe before it found (a
    forecast), a core of its own, and the one the workers met (schedstat)."""
    host = _mean(*probes)
    predicted = predict(host)
    forecast, dedicated, at_run = predict(probes[0]), predict(None), predict(got.stalls)
    return {"workers": workers, "what": what, "predicted": predicted, "measured": measured,
            "off": off(measured, predicted), "target": target,
            "host_off_core": host.share, "host_stall_ms": host.mean_s * 1e3,
            "forecast": forecast, "forecast_off": off(measured, forecast),
            "run_off_core": got.stalls.share, "run_stall_ms": got.stall_mean_s * 1e3,
            "predicted_dedicated": dedicated, "predicted_run_stalls": at_run,
            "cpu_utilization": got.cpu_utilization, "cpu_starved": got.cpu_starved,
            # The load on the CPU the workers had: their CPU over the time they held or
            # waited for a core (1.0 saturated, whatever the host took).
            "load_on_core": got.cpu_utilization / max(1e-9, 1.0 - got.stalls.share)
            if got.cpu_starved > 0 else got.cpu_utilization,
            "cpu_pressure": pressure.share, "load_average": os.getloadavg()[0],
            "prioritized": got.prioritized}


def one_round(args: argparse.Namespace, scenario: str, workers: int,
              p: Predictor) -> list[dict[str, Any]]:
    """Each load right after its own saturation reference (its rate a share of the
    saturation measured seconds before), so that the two meet the same moment of the
    machine as nearly as they can; every measurement between two probes of the host, busy
    as the workers are planned to be (always, for the saturation; a share of the time at
    50 % and 85 %, which a host treats otherwise: a task that sleeps and wakes waits
    shorter for its core than one that never lets go)."""
    def probe(busy: float) -> HostStalls:
        return host_stalls_here(workers, args.probe_s, busy, args.priority)

    rows = []
    for share in (0.5, 0.85):
        before = probe(1.0)
        with Pressure() as pressure:
            closed = measure_closed(scenario, workers, args.closed, args.closed_runs,
                                    priority=args.priority)
        sat = _row(workers, f"saturation runs/s (before {share:.0%})", 0.20,
                   (before, probe(1.0)), closed, pressure, closed.rate,
                   functools.partial(p.sat, workers))
        sat["predicted_cpu_ms_per_run"] = p.shape.cpu_per_run * 1e3
        sat["measured_cpu_ms_per_run"] = closed.cpu_utilization * workers / closed.rate * 1e3
        rate = share * closed.rate
        busy = rate / workers * p.shape.cpu_per_run  # the planned load of a worker's core
        before = probe(busy)
        with Pressure() as pressure:
            got = measure_open(scenario, workers, rate, args.seconds, args.slots,
                               priority=args.priority)
        row = _row(workers, f"p99 s at {share:.0%}", 0.30, (before, probe(busy)), got,
                   pressure, got.p99_s, functools.partial(p.p99_s, workers, rate))
        row.update(rate=rate, probe_busy=busy, measured_p50=got.p50_s,
                   measured_rate=got.rate, gc_pause_max_s=got.gc_pause_max_s,
                   failed=got.failed, runs=got.runs, p99_low=got.p99_low_s,
                   p99_high=got.p99_high_s, wakeups_per_run=got.wakeups_per_run,
                   measured_cpu_ms_per_run=got.cpu_utilization * workers / got.rate * 1e3,
                   saturation_cpu_ms_per_run=sat["measured_cpu_ms_per_run"],
                   prioritized=got.prioritized,
                   predicted_as_met=p.p99_as_met(workers, rate, got),
                   sim_wakeups_per_run=p.wakeups_per_run(workers, rate, got.stalls))
        row["as_met_off"] = off(got.p99_s, row["predicted_as_met"])
        rows += [sat, row]
    return rows


def median_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each figure's median over the rounds (the ``off`` too: the median of the rounds'
    own errors, each a prediction and a measurement taken together)."""
    out = []
    for same in zip(*rounds, strict=True):
        row = dict(same[0])
        for key, value in same[0].items():
            if isinstance(value, float):
                row[key] = statistics.median(r[key] for r in same)
        row["offs"] = [r["off"] for r in same]
        row["rounds"] = list(same)
        out.append(row)
    return out


def run(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    scenario = str(Path(tmp) / "react-20ms.toml")
    Path(scenario).write_text(SCENARIO)
    profile = str(Path(tmp) / "profile.json")
    prioritized = take_profile(scenario, args.profile_concurrency, args.profile_runs, profile,
                               args.priority, args.calibration_concurrency)
    shape, facts = load_profile(profile)
    # The workers' loops sleep and wake as the profile's did: at its price of a wake-up,
    # on the loop's millisecond tick (the waits are timers: the simulated model's).
    options = PlanOptions(sim_runs=args.sim_runs,
                          loop_wakes=loop_wakes([facts]) if args.loop_wakes else None)
    predictor = Predictor(shape, options, args.slots, (facts.wake_cpu_us or 0.0) / 1e6)
    rows: list[dict[str, Any]] = []
    for workers in (1, 2):
        rounds = [one_round(args, scenario, workers, predictor) for _ in range(args.rounds)]
        rows += median_rows(rounds)
    raw = json.loads(Path(profile).read_text())
    return {"profile": {"concurrency": facts.concurrency, "runs_per_s": facts.runs_per_s,
                        "cpu_utilization": facts.utilization,
                        "cpu_us_per_step": raw.get("cpu_us_per_step"),
                        "busy_cpu_us_per_step": shape.cpu_per_step * 1e6,
                        "wakeups_per_step": raw.get("loop_wakeups_per_step"),
                        "wake_cpu_us": raw.get("loop_wake_cpu_us"),
                        "runqueue_share": raw.get("loop_runqueue_share"),
                        "wake_cpu_us_used": facts.wake_cpu_us,
                        "wake_cpu_from": facts.wake_cpu_from,
                        "levels": raw.get("sweep"),
                        "run_p99_s": facts.run_p99_s},
            "profile_json": raw,
            "cores": len(os.sched_getaffinity(0)), "rounds": args.rounds,
            "priority": args.priority if prioritized else None, "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile-concurrency", type=int, default=100)
    p.add_argument("--profile-runs", type=int, default=3000)
    p.add_argument("--calibration-concurrency", type=int, default=50,
                   help="a lighter level of the profile first, pricing a wake-up of the "
                   "loaded loop (0: none; the idle loop's figure then)")
    p.add_argument("--closed", type=int, default=512, help="runs in flight per worker")
    p.add_argument("--closed-runs", type=int, default=8000, help="runs per worker, closed")
    p.add_argument("--seconds", type=float, default=10.0, help="open load per point")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of (saturation, 50 %%, saturation, 85 %%) per worker "
                   "count: medians")
    p.add_argument("--slots", type=int, default=1024, help="--concurrency of a worker")
    p.add_argument("--sim-runs", type=int, default=20_000)
    p.add_argument("--no-loop-wakes", dest="loop_wakes", action="store_false",
                   help="simulate loops that wake for free (the model before the loop's "
                   "sleeps and wake-ups were simulated)")
    p.add_argument("--probe-s", type=float, default=1.5,
                   help="seconds of the host probe before each measurement")
    p.add_argument("--priority", type=int, default=-10,
                   help="nice value of the profile, workers and probes, each in a session "
                   "of its own (its own autogroup): ahead of the machine's other work, as "
                   "on the dedicated cores a plan is for (needs root or CAP_SYS_NICE)")
    p.add_argument("--no-priority", dest="priority", action="store_const", const=None,
                   help="measure at the machine's ordinary priority")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, tmp)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print_table(result)
    return 0


def print_table(result: dict[str, Any]) -> None:
    prof = result["profile"]
    prio = result.get("priority")
    print(f"profile: concurrency {prof['concurrency']}, {prof['runs_per_s']:.0f} runs/s, "
          f"CPU {prof['cpu_utilization']:.0%} busy, {prof['cpu_us_per_step']:.1f} µs CPU per "
          f"step ({prof['busy_cpu_us_per_step']:.1f} busy: {prof['wakeups_per_step']:.3f} "
          f"wake-ups of {prof.get('wake_cpu_us_used') or 0:.0f} µs per step off, "
          f"from the {prof.get('wake_cpu_from')}; the idle loop's {prof['wake_cpu_us']:.0f} µs), "
          f"run-queue "
          f"{prof['runqueue_share']:.0%}; {result['cores']} cores (shared with other work); "
          f"medians of {result['rounds']} rounds; "
          + (f"measured at nice {prio} (own autogroups)" if prio is not None
             else "measured at ordinary priority"))
    print(f"{'workers':>7}  {'what':<31}{'predicted':>10}{'measured':>10}{'off':>7}"
          f"{'in':>4}  {'rounds':<24}{'p99 95% CI':>14} {'CPU/run':>7} {'wake/sim':>9}"
          f"{'CPU':>5} {'ρ':>4} {'starved':>7} {'PSI':>5} {'load':>5}"
          f"  {'off core':>8} {'stall':>6} {'own core':>9} {'off':>6}"
          f" {'run host':>9} {'off':>6} {'as met':>7} {'off':>6}")
    for r in result["rows"]:
        inside = "yes" if abs(r["off"]) <= r["target"] else "no"
        if r["what"].startswith("saturation"):
            print(f"{r['workers']:>7}  {'CPU ms per run':<31}"
                  f"{r['predicted_cpu_ms_per_run']:>10.3f}{r['measured_cpu_ms_per_run']:>10.3f}"
                  f"{off(r['measured_cpu_ms_per_run'], r['predicted_cpu_ms_per_run']):>+7.0%}")
        rounds = " ".join(f"{o:+.0%}" for o in r["offs"])
        ci = (f"{r['p99_low']:.3f}–{r['p99_high']:.3f}" if "p99_low" in r else "")
        per_run = (f"{r['measured_cpu_ms_per_run']:.3f}" if "wakeups_per_run" in r else "")
        wake = (f"{r['wakeups_per_run']:.2f}/{r['sim_wakeups_per_run']:.2f}"
                if "sim_wakeups_per_run" in r else "")
        print(f"{r['workers']:>7}  {r['what']:<31}{r['predicted']:>10.3f}"
              f"{r['measured']:>10.3f}{r['off']:>+7.0%}{inside:>4}  {rounds:<24}"
              f"{ci:>14} {per_run:>7} {wake:>9}"
              f"{r['cpu_utilization']:>5.0%} {r.get('load_on_core', 0):>4.2f}"
              f" {r['cpu_starved']:>7.0%}"
              f" {r['cpu_pressure']:>5.0%} {r['load_average']:5.1f}"
              f"  {r['host_off_core']:>8.0%} {r['host_stall_ms']:>4.1f}ms"
              f" {r['predicted_dedicated']:>9.3f}"
              f" {off(r['measured'], r['predicted_dedicated']):>+6.0%}"
              f" {r['predicted_run_stalls']:>9.3f}"
              f" {off(r['measured'], r['predicted_run_stalls']):>+6.0%}"
              + (f" {r['predicted_as_met']:>7.3f} {r['as_met_off']:>+6.0%}"
                 if "predicted_as_met" in r else ""))


if __name__ == "__main__":
    sys.exit(main())
