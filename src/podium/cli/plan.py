"""``podium plan``: from a measured workload profile to a fleet, and a check of it here.

::

    podium bench --scenario react.toml --json > react.json
    podium plan --from react.json --rate 200 --p99 2s
    podium plan --from react.json --rate 200 --p99 2s --model-latency x2 --tool-p99 3s
    podium plan --from a.json --rate 10 --from b.json --rate 50 --p99 5s --json
    podium plan --mix agents.toml --p99 5s --values helm
    podium plan --from react.json --rate 200 --p99 2s --check

The method is in docs/plan.md (:mod:`podium.plan`).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podium.cli.common import non_empty, positive_int

if TYPE_CHECKING:
    from podium.plan.profile import ProfileFacts
    from podium.plan.workload import RunShape

__all__ = ("duration", "register")

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "m": 60.0}


def duration(value: str) -> float:
    """An argparse type: seconds as ``2``, ``2s``, ``250ms``, ``300us``; above 0."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us|µs|m)?\s*", value)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a time like 2s, 250ms or 300us, got "
                                         f"{value!r}")
    x = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value!r}")
    return x


def factor_or_duration(value: str) -> tuple[str, float]:
    """``x2`` (or ``2x``): a factor; a time (``40ms``): the new median."""
    m = re.fullmatch(r"\s*(?:x([0-9]*\.?[0-9]+)|([0-9]*\.?[0-9]+)x)\s*", value)
    if m:
        k = float(m.group(1) or m.group(2))
        if k <= 0:
            raise argparse.ArgumentTypeError(f"a factor must be above 0, got {value!r}")
        return ("factor", k)
    return ("median", duration(value))


def rate(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected runs per second, got {value!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0 runs/s, got {value!r}")
    return x


def steps(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of steps, got {value!r}") from None
    if not math.isfinite(x) or x < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value!r}")
    return x


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "plan", help="size a fleet from a measured profile: workers, concurrency, Redis, "
        "gateways, model calls in flight",
        description="From a measured workload profile (podium bench --json, podium runs "
        "profile --json) to a fleet: worker processes, concurrency, gateways, Redis and the "
        "model calls in flight for a rate and a p99; what-ifs; --check measures it here. "
        "The method: docs/plan.md.",
    )
    p.add_argument("--from", dest="sources", action="append", type=non_empty, metavar="PROFILE",
                   help="the JSON of `podium bench --json` (a sweep's too) or `podium runs "
                   "profile --json`; repeat with --rate for a mix of agents")
    p.add_argument("--rate", dest="rates", action="append", type=rate, metavar="R",
                   help="runs per second of the --from before it")
    p.add_argument("--mix", type=non_empty, metavar="FILE",
                   help="a TOML file of [[agents]] with from = PROFILE, rate = R (and name)")
    p.add_argument("--p99", type=duration, required=True, metavar="S",
                   help="the run latency every agent's p99 must meet: 2s, 800ms")
    w = p.add_argument_group("what-ifs (applied to every agent)")
    w.add_argument("--model-latency", type=factor_or_duration, metavar="xK|TIME",
                   help="model calls K times as long (x2), or with this median (400ms)")
    w.add_argument("--tool-p99", type=duration, metavar="S",
                   help="tool calls with this p99 (3s), up to their p98 as measured")
    w.add_argument("--steps", type=steps, metavar="N", help="model calls per run")
    w.add_argument("--cpu-per-step", type=duration, metavar="TIME",
                   help="CPU per step (300us): a heavier or lighter agent")
    a = p.add_argument_group("assumptions (defaults: measured figures, docs/plan.md)")
    a.add_argument("--max-utilization", type=float, default=0.85,
                   help="the highest CPU share a worker is planned at")
    a.add_argument("--cpu-cv", type=float, default=0.5,
                   help="spread of a CPU burst around its mean (coefficient of variation)")
    a.add_argument("--gateway-cpu-per-run", type=duration, default=0.0017, metavar="TIME",
                   help="gateway CPU per run (default 1.7ms)")
    a.add_argument("--redis-cpu-per-step", type=duration, default=80e-6, metavar="TIME",
                   help="Redis CPU per step (default 80us)")
    a.add_argument("--redis-ops-per-step", type=float, default=14.0,
                   help="Redis commands per step")
    a.add_argument("--sim-runs", type=positive_int, default=20_000,
                   help="simulated runs per evaluation")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    o.add_argument("--values", choices=("helm", "compose"),
                   help="print Helm values (deploy/helm/podium) or a compose snippet")
    o.add_argument("--check", action="store_true",
                   help="run the plan's workers here on the simulated model at the planned "
                   "rate (scaled to this machine's cores) and print predicted vs measured")
    o.add_argument("--check-seconds", type=duration, default=20.0, metavar="S",
                   help="how long --check loads the workers")
    p.set_defaults(handler=main)


def _sources(args: argparse.Namespace) -> list[tuple[str, float, str | None]]:
    """(profile path, rate, name) for each agent, from --from/--rate pairs or --mix."""
    from podium.plan.profile import PlanError

    pairs: list[tuple[str, float, str | None]] = []
    if args.mix:
        if args.sources or args.rates:
            raise PlanError("--mix FILE or --from/--rate pairs, not both")
        pairs = _read_mix(args.mix)
    else:
        sources, rates = args.sources or [], args.rates or []
        if not sources:
            raise PlanError("give a profile: --from PROFILE --rate R (or --mix FILE)")
        if len(sources) != len(rates):
            raise PlanError(f"{len(sources)} --from and {len(rates)} --rate: give one --rate "
                            "per --from")
        pairs = [(s, r, None) for s, r in zip(sources, rates, strict=True)]
    return pairs


def _read_mix(path: str) -> list[tuple[str, float, str | None]]:
    from podium.plan.profile import PlanError

    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise PlanError(f"--mix {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"--mix {path}: {exc}") from None
    agents = raw.get("agents")
    if not isinstance(agents, list) or not agents:
        raise PlanError(f"--mix {path}: no [[agents]] (each with from = PROFILE, rate = R)")
    out: list[tuple[str, float, str | None]] = []
    base = Path(path).parent
    for i, entry in enumerate(agents):
        src, r, name = entry.get("from"), entry.get("rate"), entry.get("name")
        if not isinstance(src, str) or not src:
            raise PlanError(f"--mix {path}: agents[{i}]: from = PROFILE is missing")
        if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) \
                or r <= 0:
            raise PlanError(f"--mix {path}: agents[{i}]: rate must be above 0 runs/s")
        if name is not None and not isinstance(name, str):
            raise PlanError(f"--mix {path}: agents[{i}]: name must be a string")
        out.append((str(base / src) if not Path(src).is_absolute() else src, float(r), name))
    return out


def main(args: argparse.Namespace) -> int:
    from podium.plan import render
    from podium.plan.profile import PlanError, load_profile, loop_wakes
    from podium.plan.sizing import Kind, PlanOptions, make_plan

    if not 0 < args.max_utilization <= 1:
        raise PlanError(f"--max-utilization {args.max_utilization:g}: give a share, 0 to 1")
    if not 0 <= args.cpu_cv <= 4:
        raise PlanError(f"--cpu-cv {args.cpu_cv:g}: give 0 (constant) to 4")
    kinds: list[Kind] = []
    facts: list[ProfileFacts] = []
    whatifs: list[str] = []
    for path, r, name in _sources(args):
        shape, fact = load_profile(path, cpu_cv=args.cpu_cv, name=name)
        shape, whatifs = _what_ifs(shape, args)
        kinds.append(Kind(shape, r))
        facts.append(fact)
    options = PlanOptions(
        max_utilization=args.max_utilization, gateway_cpu_s_per_run=args.gateway_cpu_per_run,
        redis_cpu_s_per_step=args.redis_cpu_per_step,
        redis_ops_per_step=args.redis_ops_per_step, sim_runs=args.sim_runs,
        loop_wakes=loop_wakes(facts))
    plan = make_plan(kinds, args.p99, options)
    if args.json:
        sys.stdout.buffer.write(render.plan_json(plan, facts, whatifs) + b"\n")
    elif args.values == "helm":
        print(render.helm_values(plan))
    elif args.values == "compose":
        print(render.compose_snippet(plan))
    else:
        print("\n".join(render.plan_lines(plan, facts, whatifs)))
    if args.check:
        from podium.plan.check_report import check

        if len(kinds) != 1 or whatifs:
            raise PlanError("--check measures one profile's own agent: give one --from and "
                            "no what-ifs (they change what it would measure)")
        print("\n".join(check(plan, kinds[0], facts[0], options, args.check_seconds)),
              file=sys.stderr if args.json else sys.stdout)
    return 0


def _what_ifs(shape: RunShape, args: argparse.Namespace) -> tuple[RunShape, list[str]]:
    said: list[str] = []
    if args.model_latency is not None:
        how, x = args.model_latency
        k = x if how == "factor" else x / max(shape.model_wait.quantile(0.5), 1e-9)
        shape = shape.with_model_factor(k)
        said.append(f"model latency ×{k:.3g}")
    if args.tool_p99 is not None:
        shape = shape.with_tool_p99(args.tool_p99)
        said.append(f"tool p99 {args.tool_p99:g} s")
    if args.steps is not None:
        shape = shape.with_steps(args.steps)
        said.append(f"{args.steps:g} steps")
    if args.cpu_per_step is not None:
        shape = shape.with_cpu_per_step(args.cpu_per_step)
        said.append(f"{args.cpu_per_step * 1e6:.4g} µs CPU per step")
    return shape, said
