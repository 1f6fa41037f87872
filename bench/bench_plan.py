"""``podium plan``'s predictions against measurements on this machine (issue #37).

1. A profile at one load: ``podium bench --json`` of a ReAct agent with real waits (a
   20 ms model, a 5 ms tool; 6 tool steps and an answer) at ``--profile-concurrency``.
2. From it alone, for 1 and 2 worker processes: the predicted saturation throughput
   (``podium.plan.saturation_rate``) against the measured one (closed load, ``--closed``
   runs in flight per worker, :func:`podium.plan.check.measure_closed`).
3. At 50 % and 85 % of the measured saturation: the predicted run p99 (the simulation,
   :func:`podium.plan.predict`) against the measured one (Poisson arrivals for
   ``--seconds``, :func:`podium.plan.check.measure_open`).

Targets: saturation within ±20 %, p99 within ±30 %. Every process shares this machine's
cores with whatever else runs on it, so the prediction is for the CPU a worker can count
on here: just before each measurement, as many busy processes as workers run for
``--probe-s`` and the share of a core each got ("share") is the planned core's speed
(:meth:`podium.plan.RunShape.with_cpu_share`). Beside it: the prediction for a core of
its own ("own core": what a fleet on dedicated cores gets), and for the share the workers'
loops did get while ready to run during the measurement ("run share", schedstat: the
model's error apart from how well the probe foresaw the machine); the workers' CPU use,
the share of the time their loops waited for a CPU others held ("starved"), the share of
the time any task here waited for one (PSI "some") and the load average.

    nice python bench/bench_plan.py [--profile-concurrency 100] [--seconds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from podium.plan import Kind, PlanOptions, load_profile, predict, saturation_rate
from podium.plan.check import cpu_share_here, measure_closed, measure_open

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


def take_profile(scenario: str, concurrency: int, runs: int, out: str) -> None:
    cmd = [sys.executable, "-m", "podium.cli.main", "bench", "--scenario", scenario,
           "--concurrency", str(concurrency), "--runs", str(runs), "--json"]
    with open(out, "wb") as f:
        subprocess.run(cmd, stdout=f, check=True)


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


def run(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    scenario = str(Path(tmp) / "react-20ms.toml")
    Path(scenario).write_text(SCENARIO)
    profile = str(Path(tmp) / "profile.json")
    take_profile(scenario, args.profile_concurrency, args.profile_runs, profile)
    shape, facts = load_profile(profile)
    options = PlanOptions(sim_runs=args.sim_runs)
    rows: list[dict[str, Any]] = []

    def sat(workers: int, share: float) -> float:
        return saturation_rate([Kind(shape.with_cpu_share(share), 1.0)], workers)

    def p99(workers: int, rate: float, share: float) -> tuple[float, float]:
        sim = predict([Kind(shape.with_cpu_share(share), rate)], workers, options,
                      concurrency=args.slots)
        return sim.classes[0].p99_s, sim.classes[0].p50_s

    for workers in (1, 2):
        probe = cpu_share_here(workers, args.probe_s)
        with Pressure() as pressure:
            closed = measure_closed(scenario, workers, args.closed, args.closed_runs)
        predicted_sat = sat(workers, probe)
        rows.append({"workers": workers, "what": "saturation runs/s",
                     "predicted": predicted_sat, "measured": closed.rate,
                     "off": off(closed.rate, predicted_sat), "target": 0.20,
                     # The same prediction for a core of its own, and for the share of a
                     # core the workers got during the measurement (schedstat).
                     "probe_share": probe, "run_share": closed.cpu_share,
                     "predicted_dedicated": sat(workers, 1.0),
                     "predicted_run_share": sat(workers, closed.cpu_share),
                     # The CPU a run cost at saturation against the profile's: the planner's
                     # accounting apart from how much of a core this machine gave.
                     "predicted_cpu_ms_per_run": shape.cpu_per_run * 1e3,
                     "measured_cpu_ms_per_run": closed.cpu_utilization * workers
                     / closed.rate * 1e3,
                     "cpu_utilization": closed.cpu_utilization,
                     "cpu_starved": closed.cpu_starved, "cpu_pressure": pressure.share,
                     "load_average": os.getloadavg()[0]})
        for share in (0.5, 0.85):
            rate = share * closed.rate
            probe = cpu_share_here(workers, args.probe_s)
            with Pressure() as pressure:
                got = measure_open(scenario, workers, rate, args.seconds, args.slots)
            predicted, predicted_p50 = p99(workers, rate, probe)
            rows.append({"workers": workers, "what": f"p99 s at {share:.0%}",
                         "rate": rate, "predicted": predicted,
                         "measured": got.p99_s, "off": off(got.p99_s, predicted),
                         "target": 0.30, "predicted_p50": predicted_p50,
                         "probe_share": probe, "run_share": got.cpu_share,
                         "predicted_dedicated": p99(workers, rate, 1.0)[0],
                         "predicted_run_share": p99(workers, rate, min(1.0, got.cpu_share))[0],
                         "measured_p50": got.p50_s, "measured_rate": got.rate,
                         "cpu_utilization": got.cpu_utilization,
                         "cpu_starved": got.cpu_starved, "cpu_pressure": pressure.share,
                         "gc_pause_max_s": got.gc_pause_max_s,
                         "failed": got.failed, "load_average": os.getloadavg()[0]})
    return {"profile": {"concurrency": facts.concurrency, "runs_per_s": facts.runs_per_s,
                        "cpu_utilization": facts.utilization,
                        "cpu_us_per_step": shape.cpu_per_step * 1e6,
                        "run_p99_s": facts.run_p99_s},
            "cores": len(os.sched_getaffinity(0)), "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile-concurrency", type=int, default=100)
    p.add_argument("--profile-runs", type=int, default=4000)
    p.add_argument("--closed", type=int, default=512, help="runs in flight per worker")
    p.add_argument("--closed-runs", type=int, default=12000, help="runs per worker, closed")
    p.add_argument("--seconds", type=float, default=15.0, help="open load per point")
    p.add_argument("--slots", type=int, default=1024, help="--concurrency of a worker")
    p.add_argument("--sim-runs", type=int, default=20_000)
    p.add_argument("--probe-s", type=float, default=2.0,
                   help="seconds of the CPU-share probe before each measurement")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, tmp)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    prof = result["profile"]
    print(f"profile: concurrency {prof['concurrency']}, {prof['runs_per_s']:.0f} runs/s, "
          f"CPU {prof['cpu_utilization']:.0%} busy, {prof['cpu_us_per_step']:.1f} µs CPU per "
          f"step; {result['cores']} cores (shared with other work)")
    print(f"{'workers':>7}  {'what':<18}{'predicted':>11}{'measured':>11}{'off':>8}"
          f"{'target':>8}{'in':>4}  {'CPU':>5} {'starved':>7} {'PSI':>5}  load avg"
          f"  {'share':>5} {'own core':>9} {'off':>6} {'run share':>10} {'off':>6}")
    for r in result["rows"]:
        inside = "yes" if abs(r["off"]) <= r["target"] else "no"
        if "measured_cpu_ms_per_run" in r:
            print(f"{r['workers']:>7}  {'CPU ms per run':<18}"
                  f"{r['predicted_cpu_ms_per_run']:>11.3f}{r['measured_cpu_ms_per_run']:>11.3f}"
                  f"{off(r['measured_cpu_ms_per_run'], r['predicted_cpu_ms_per_run']):>+8.0%}")
        print(f"{r['workers']:>7}  {r['what']:<18}{r['predicted']:>11.3f}"
              f"{r['measured']:>11.3f}{r['off']:>+8.0%}{r['target']:>7.0%}{inside:>5}"
              f"  {r['cpu_utilization']:>5.0%} {r['cpu_starved']:>7.0%}"
              f" {r['cpu_pressure']:>5.0%}"
              f"  {r['load_average']:8.1f}  {r['probe_share']:>5.2f}"
              f" {r['predicted_dedicated']:>9.3f}"
              f" {off(r['measured'], r['predicted_dedicated']):>+6.0%}"
              f" {r['predicted_run_share']:>10.3f}"
              f" {off(r['measured'], r['predicted_run_share']):>+6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
