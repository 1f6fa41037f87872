"""A plan as people and tools read it: a table, one JSON object, Helm values or compose."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from podium.plan.profile import ProfileFacts
from podium.plan.sizing import Plan

__all__ = ("compose_snippet", "helm_values", "plan_json", "plan_lines")


def _s(seconds: float) -> str:
    """Seconds as a person reads them: 180 ms, 2.4 s."""
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def plan_lines(plan: Plan, facts: Sequence[ProfileFacts], whatifs: Sequence[str]) -> list[str]:
    """The plan as lines of text (the table ``podium plan`` prints)."""
    rows: list[tuple[str, str]] = [
        ("target", f"{plan.rate:,.4g} runs/s at p99 ≤ {_s(plan.target_p99_s)}"),
        ("worker processes (cores)",
         f"{plan.workers:,}  (one core each, {plan.worker_utilization:.0%} busy; "
         f"Erlang C, the CPU as one pool: {plan.erlang_c_cores:,})"),
        ("concurrency per worker",
         f"{plan.concurrency_per_worker:,}  (--concurrency; runs in flight in all: "
         f"{plan.runs_in_flight:,.0f} on average)"),
        ("gateway replicas", f"{plan.gateway_replicas:,}"),
        ("Redis", f"{plan.redis_ops_per_s:,.0f} ops/s, " + (
            f"{plan.redis_cpu_cores:.2f} of its one thread's core" if plan.redis_shards == 1
            else f"{plan.redis_cpu_cores:.2f} cores: {plan.redis_shards} shards "
                 "(Redis Cluster), one thread each")),
        ("model calls in flight",
         f"{plan.model_calls_in_flight:,.0f} on average, {plan.model_calls_in_flight_p99:,} "
         "at p99: what the backends must hold at once"),
    ]
    rows.extend(
        (f"  {k.name}", f"{k.rate:,.4g} runs/s × {k.steps:.3g} steps, "
                        f"{k.cpu_ms_per_run:.3g} ms CPU/run: p50 {_s(k.predicted_p50_s)}, "
                        f"p99 {_s(k.predicted_p99_s)} (floor {_s(k.floor_p99_s)})")
        for k in plan.kinds)
    rows.extend((f"  {r.name}", f"{r.utilization:.0%} busy, saturates at "
                                f"{r.saturates_at:,.4g} runs/s") for r in plan.resources)
    rows.append(("bottleneck", f"{plan.bottleneck}: {plan.headroom:.0%} more load before it "
                               f"saturates; p99 uses {1 - plan.p99_headroom:.0%} of the target"))
    width = max(len(name) for name, _ in rows)
    out = [f"{name:<{width}}  {value}" for name, value in rows]
    for f in facts:
        cpu = "process CPU" if f.cpu_counted == "process" else \
            "phases' CPU only (the loop's own work not counted: a bench profile counts it)"
        at = f", {f.concurrency} concurrent" if f.concurrency else ""
        util = f", CPU {f.utilization:.0%} busy" if f.utilization is not None else ""
        wake = (f"; wake-ups from idle at {f.wake_cpu_us:.0f} µs each off it (from the "
                f"{f.wake_cpu_from})" if f.wake_cpu_us is not None else "")
        out.append(f"from {f.path}: {f.kind} profile, {f.runs:,} runs, {f.steps:,} steps"
                   f"{at}{util}; {cpu}{wake}")
        if f.warning:
            out.append(f"  note: {f.warning}")
    if whatifs:
        out.append(f"what-if: {', '.join(whatifs)}")
    return out


def plan_json(plan: Plan, facts: Sequence[ProfileFacts], whatifs: Sequence[str]) -> bytes:
    body: dict[str, Any] = {**msgspec.to_builtins(plan),
                            "profiles": msgspec.to_builtins(list(facts)),
                            "whatifs": list(whatifs)}
    return msgspec.json.encode(body)


def helm_values(plan: Plan) -> str:
    """Values for deploy/helm/podium: one single-core worker pod per process. Helm replaces
    a list rather than merging it, so the pool is written whole (the chart's defaults for
    what the plan does not decide)."""
    return "\n".join((
        "# podium plan: helm upgrade --install podium deploy/helm/podium -f plan-values.yaml",
        "gateway:",
        f"  replicas: {plan.gateway_replicas}",
        "  autoscaling:",
        f"    minReplicas: {plan.gateway_replicas}",
        f"    maxReplicas: {max(10, 2 * plan.gateway_replicas)}",
        "worker:",
        f"  concurrency: {plan.concurrency_per_worker}",
        "pools:",
        "  - name: default",
        f"    replicas: {plan.workers}",
        "    procs: 0",
        '    cpu: "1"',
        "    memory: 1Gi",
        '    namespace: ""',
        "    createNamespace: false",
        "    resourceQuota: {}",
        "    keda:",
        f"      minReplicas: {plan.workers}",
        f"      maxReplicas: {2 * plan.workers}",
        "      targetUtilizationPercent: 80",
        "      pollingInterval: 15",
        "      cooldownPeriod: 300",
    ))


def compose_snippet(plan: Plan) -> str:
    """For deploy/compose.yaml: the worker count and their --concurrency."""
    return "\n".join((
        f"# podium plan: WORKERS={plan.workers} docker compose -f deploy/compose.yaml up -d",
        "services:",
        "  worker:",
        f"    scale: {plan.workers}",
        "    command: [worker, --config, /etc/podium/podium.toml, --pool, default,",
        f'              --concurrency, "{plan.concurrency_per_worker}", --grace, "20",',
        '              --metrics-port, "9100"]',
        "    cpus: 1.0",
        f"# gateways: {plan.gateway_replicas} (compose.yaml runs gateway-a and gateway-b)",
    ))
