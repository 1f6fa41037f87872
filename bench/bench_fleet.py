"""A fleet on network namespaces: scale-out with worker hosts, Redis CPU per step, and the
latency cost of replacing every worker under load.

Builds the hosts of ``tests/fleet`` (a Redis host, two gateway hosts, three worker hosts, a
client host on a bridge; root only) with real ``redis-server``, ``podium serve --redis``
and ``podium worker`` processes, serving ``tests.fleet.fleet_app:plain`` (each run: 4 model
calls on the simulated model, 3 tool waits of ``--tool-delay`` seconds), then:

1. **scale-out**: for 1, 2 and 3 worker hosts, ``--runs`` runs through both gateways
   (``--concurrency`` at once): steps/s, and Redis's CPU (``INFO cpu``, main thread and
   children) and commands per step, so the point where Redis becomes the limit shows,
   beside the CPU the workers and gateways spend per step (/proc);
2. **rolling restart**: runs at ``--rate`` per second for a steady phase, then while each
   worker is replaced in turn (a new one up, then SIGTERM to the old): p50/p99 of run
   latency in each phase, lost runs (must be 0).

All processes share this machine's cores: steps/s measures the whole fleet on these
cores, not one worker host's capacity; Redis CPU per step is the figure that carries.

    sudo python bench/bench_fleet.py [--runs 400] [--rate 20] [--phase 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fleet.fleet_app import TOOL_STEPS  # noqa: E402
from tests.fleet.netns import fleet_unavailable  # noqa: E402
from tests.fleet.podium_fleet import WORKERS, PodiumFleet  # noqa: E402

STEPS_PER_RUN = TOOL_STEPS + 1  # a model call per tool step, and the final answer


def _info(fleet: PodiumFleet) -> dict[str, float]:
    out: dict[str, float] = {}
    for section in ("cpu", "stats"):
        for line in fleet.redis_cli("INFO", section).splitlines():
            name, _, value = line.partition(":")
            try:
                out[name] = float(value)
            except ValueError:
                continue
    return out


def _redis_cpu(info: dict[str, float]) -> float:
    return sum(info.get(k, 0.0) for k in
               ("used_cpu_sys", "used_cpu_user", "used_cpu_sys_children",
                "used_cpu_user_children"))


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _pids(fleet: PodiumFleet) -> tuple[list[int], list[int]]:
    return ([w.proc.pid for w in fleet.workers.values()],
            [g.pid for g in fleet.gateways.values()])


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scale_out(fleet: PodiumFleet, hosts: int, runs: int, concurrency: int) -> dict[str, Any]:
    before = _info(fleet)
    workers, gateways = _pids(fleet)
    workers_cpu, gateways_cpu = _cpu_s(workers), _cpu_s(gateways)
    t0 = time.monotonic()
    report = fleet.client(runs, tag=f"scale-{hosts}-{time.time_ns()}", concurrency=concurrency,
                          deadline_s=300)
    elapsed = time.monotonic() - t0
    after = _info(fleet)
    workers_cpu, gateways_cpu = _cpu_s(workers) - workers_cpu, _cpu_s(gateways) - gateways_cpu
    done = [r for r in report["runs"] if r["status"] == "completed"]
    steps = len(done) * STEPS_PER_RUN
    cpu = _redis_cpu(after) - _redis_cpu(before)
    commands = after["total_commands_processed"] - before["total_commands_processed"]
    return {
        "worker_hosts": hosts, "runs": len(done), "errors": len(report["errors"]),
        "seconds": round(elapsed, 2), "steps_per_s": round(steps / elapsed, 1),
        "redis_cpu_share": round(cpu / elapsed, 3),
        "redis_cpu_us_per_step": round(cpu / steps * 1e6, 1) if steps else None,
        "redis_commands_per_step": round(commands / steps, 1) if steps else None,
        "worker_cpu_us_per_step": round(workers_cpu / steps * 1e6, 1) if steps else None,
        "gateway_cpu_us_per_step": round(gateways_cpu / steps * 1e6, 1) if steps else None,
    }


def _latencies(report: dict[str, Any]) -> dict[str, Any]:
    seconds = [r["seconds"] for r in report["runs"] if r["status"] == "completed"]
    return {
        "runs": len(seconds), "errors": len(report["errors"]),
        "not_completed": sum(r["status"] != "completed" for r in report["runs"]),
        "p50_s": round(_percentile(seconds, 0.5), 3), "p99_s": round(_percentile(seconds, 0.99), 3),
        "mean_s": round(statistics.fmean(seconds), 3) if seconds else None,
    }


def rolling(fleet: PodiumFleet, rate: float, phase_s: float) -> dict[str, Any]:
    runs = int(rate * phase_s)
    steady = fleet.client(runs, tag=f"steady-{time.time_ns()}", rate=rate, concurrency=256,
                          deadline_s=phase_s + 120)
    argv = fleet.client_argv(runs, tag=f"rolling-{time.time_ns()}", rate=rate, concurrency=256,
                             deadline_s=phase_s + 120)
    client = subprocess.Popen(fleet.net.argv("client", argv), stdout=subprocess.PIPE)
    replaced = 0
    try:
        for host in fleet.worker_hosts:
            replacement = fleet.start_worker(host)
            fleet.wait_ready(replacement)
            fleet.stop_worker(host, signal.SIGTERM)
            fleet.workers[host] = replacement
            replaced += 1
        out, _ = client.communicate(timeout=phase_s + 180)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    return {"rate": rate, "replaced": replaced, "steady": _latencies(steady),
            "rolling": _latencies(json.loads(out))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="runs per scale-out point")
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--rate", type=float, default=20.0, help="runs/s in the rolling phase")
    parser.add_argument("--phase", type=float, default=15.0, help="seconds per rolling phase")
    parser.add_argument("--tool-delay", type=float, default=0.01)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if why := fleet_unavailable():
        print(f"bench_fleet: {why}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"cpus": os.cpu_count(), "scale_out": []}
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, PodiumFleet(
        Path(tmp), WORKERS, agent="tests.fleet.fleet_app:plain", tool_delay_s=args.tool_delay,
        concurrency=256,
    ) as fleet:
        for host in WORKERS[1:]:
            fleet.stop_worker(host)
        for k in range(1, len(WORKERS) + 1):
            if k > 1:
                w = fleet.workers[WORKERS[k - 1]] = fleet.start_worker(WORKERS[k - 1])
                fleet.wait_ready(w)
            fleet.client(20, tag=f"warm-{k}", deadline_s=60)  # connections, imports
            results["scale_out"].append(scale_out(fleet, k, args.runs, args.concurrency))
        results["rolling_restart"] = rolling(fleet, args.rate, args.phase)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"fleet on {results['cpus']} CPUs (every host shares them)")
    print("worker hosts  steps/s  Redis CPU share  Redis us/step  commands/step"
          "  worker us/step  gateway us/step  errors")
    for row in results["scale_out"]:
        print(f"{row['worker_hosts']:>12}  {row['steps_per_s']:>7}  {row['redis_cpu_share']:>15}"
              f"  {row['redis_cpu_us_per_step']:>13}  {row['redis_commands_per_step']:>13}"
              f"  {row['worker_cpu_us_per_step']:>14}  {row['gateway_cpu_us_per_step']:>15}"
              f"  {row['errors']:>6}")
    r = results["rolling_restart"]
    for phase in ("steady", "rolling"):
        p = r[phase]
        print(f"{phase:>8}: {p['runs']} runs at {r['rate']:g}/s, p50 {p['p50_s']} s, "
              f"p99 {p['p99_s']} s, lost {p['errors'] + p['not_completed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
