"""``podium plan --check``: the plan's workers run here, predicted against measured."""

from __future__ import annotations

import os
from pathlib import Path

from podium.plan.check import cores_here, measure_open
from podium.plan.profile import PlanError, ProfileFacts
from podium.plan.sizing import Kind, Plan, PlanOptions, predict

__all__ = ("check", "scenario_of")


def scenario_of(facts: ProfileFacts) -> str | None:
    """The scenario file the profile was taken with (None: the built-in ReAct)."""
    if facts.kind == "runs":
        raise PlanError(f"{facts.path}: a store's profile names no scenario to run: --check "
                        "needs a `podium bench --json` profile")
    name = facts.scenario
    if name is None or name == "built-in react":
        return None
    if not Path(name).is_file():
        raise PlanError(f"{facts.path}: its scenario {name!r} is not here: --check runs the "
                        "profile's own agent")
    return name


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def check(plan: Plan, kind: Kind, facts: ProfileFacts, options: PlanOptions,
          seconds: float) -> list[str]:
    scenario = scenario_of(facts)
    here = min(plan.workers, cores_here())
    rate = plan.rate / plan.workers * here  # each worker at its planned load
    predicted = predict([Kind(kind.shape, rate)], here, options,
                        concurrency=plan.concurrency_per_worker)
    measured = measure_open(scenario, here, rate, seconds, plan.concurrency_per_worker,
                            seed=options.seed)
    p, m = predicted.classes[0], measured
    load = os.getloadavg()[0]

    def row(name: str, want: str, got: str, off: float | None) -> str:
        delta = f"{off:+.0%}" if off is not None else ""
        return f"  {name:<22}{want:>14}{got:>14}{delta:>8}"

    scaled = "" if here == plan.workers else f" (the plan's {plan.workers:,}, scaled to fit)"
    lines = [
        f"check: {here} worker process(es){scaled} at {rate:,.4g} runs/s, "
        f"{m.runs:,} runs measured ({m.failed} failed); load average here {load:.1f} on "
        f"{cores_here()} cores",
        f"  {'':<22}{'predicted':>14}{'measured':>14}{'off':>8}",
        row("runs/s", f"{rate:,.1f}", f"{m.rate:,.1f}", m.rate / rate - 1),
        row("CPU per worker", f"{predicted.utilization:.0%}", f"{m.cpu_utilization:.0%}", None),
        row("waited for a CPU", "0%", f"{m.cpu_starved:.0%}", None),
        row("run p50", _ms(p.p50_s), _ms(m.p50_s), m.p50_s / p.p50_s - 1),
        row("run p99", _ms(p.p99_s), _ms(m.p99_s), m.p99_s / p.p99_s - 1),
        f"  (the measured p99's 95 % interval: {_ms(m.p99_low_s)} to {_ms(m.p99_high_s)}, "
        f"runs that were slow together counted as one episode)",
    ]
    if m.cpu_starved > 0.05 or load > cores_here():
        # The same prediction on the host the workers met: off their core as long and as
        # often as they were (podium.plan.simulate.HostStalls).
        host = predict([Kind(kind.shape, rate)], here, options,
                       concurrency=plan.concurrency_per_worker, stalls=m.stalls).classes[0]
        lines += [
            row("run p99, this host", _ms(host.p99_s), _ms(m.p99_s), m.p99_s / host.p99_s - 1),
            f"  (this machine is busier than its cores: other work kept the workers off "
            f"their cores {m.stalls.share:.0%} of their ready time, "
            f"{m.stall_mean_s * 1e3:.1f} ms at a time; the measured latencies carry it, "
            f"the last row predicts with it)"]
    return lines
