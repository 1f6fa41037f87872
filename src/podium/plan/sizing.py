"""The plan: from run shapes, their rates and a p99 target to a fleet.

1. **The floor.** A run cannot be faster than its own waits and CPU with no queueing at
   all: simulated with the CPU never busy, its p99 is the least any fleet can promise. A
   target below it is refused (:class:`~podium.plan.profile.PlanError`), naming it.
2. **A first count (Erlang C).** The CPU demand, ``Σ rate × CPU per run``, in cores; the
   fewest cores at ``max_utilization``, and the fewest an M/M/c pool would need to keep
   a burst's mean wait within the target's slack: the larger is where the search starts.
3. **The simulation decides.** Worker processes are separate loops and a run stays on
   the one that took it, so each is simulated as its own queue at ``rate / N``
   (:func:`~podium.plan.simulate.simulate`): the smallest ``N`` whose runs, every kind of
   them, meet the p99 target is the plan.
4. **Around the workers.** Runs in flight per worker (the simulation's p99.9, with a
   margin) is ``--concurrency``; Little's law gives the model calls in flight
   (``rate × steps × model time``); gateways and Redis are sized from their CPU per run
   and per step (measured figures, options to override); the busiest of them is the
   bottleneck, and its utilization says the headroom.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from podium.plan.profile import PlanError
from podium.plan.queueing import little_l, min_servers
from podium.plan.simulate import HostStalls, LoopWakes, SimResult, simulate
from podium.plan.workload import RunShape

__all__ = ("Kind", "Plan", "PlanOptions", "Resource", "floor_p99", "make_plan",
           "predict", "saturation_rate")


class Kind(msgspec.Struct, frozen=True):
    shape: RunShape
    rate: float  # runs per second


class PlanOptions(msgspec.Struct, frozen=True):
    """The planner's assumptions; the defaults are measured figures (docs/plan.md)."""

    #: The highest CPU utilization a worker process is planned at.
    max_utilization: float = 0.85
    #: Gateway CPU per run (submit, the run's events) and what a replica may be loaded to.
    gateway_cpu_s_per_run: float = 0.0017
    gateway_utilization: float = 0.6
    #: Redis commands and Redis CPU per step (checkpoint, journal, queue, heartbeats).
    redis_ops_per_step: float = 14.0
    redis_cpu_s_per_step: float = 80e-6
    redis_utilization: float = 0.6
    #: Runs in flight per worker: the simulation's p99.9 times this.
    concurrency_margin: float = 1.25
    #: Simulated runs per evaluation, and the seed (a plan is the same every time).
    sim_runs: int = 20_000
    seed: int = 1
    #: How a worker's loop sleeps and what waking it costs (the profile's price of a
    #: wake-up, its clock's tick); None: a loop that wakes for free.
    loop_wakes: LoopWakes | None = None


DEFAULT_OPTIONS = PlanOptions()


class Resource(msgspec.Struct, frozen=True):
    name: str
    utilization: float
    #: Runs per second at which this resource saturates (utilization 1).
    saturates_at: float


class KindResult(msgspec.Struct, frozen=True):
    name: str
    rate: float
    steps: float
    cpu_ms_per_run: float
    floor_p99_s: float
    predicted_p50_s: float
    predicted_p99_s: float


class Plan(msgspec.Struct, frozen=True):
    target_p99_s: float
    rate: float
    workers: int
    cores: int
    concurrency_per_worker: int
    runs_in_flight: float
    worker_utilization: float
    erlang_c_cores: int
    gateway_replicas: int
    redis_ops_per_s: float
    redis_cpu_cores: float
    #: Redis instances (Redis Cluster shards) to keep each at ``redis_utilization``.
    redis_shards: int
    model_calls_in_flight: float
    model_calls_in_flight_p99: int
    kinds: tuple[KindResult, ...]
    resources: tuple[Resource, ...]
    bottleneck: str
    #: How much more load the bottleneck takes before it saturates (0.25: 25 % more).
    headroom: float
    #: How much of the target the slowest kind's predicted p99 leaves (0.4: 40 % of it).
    p99_headroom: float


def _scaled(kinds: Sequence[Kind], factor: float) -> list[tuple[RunShape, float]]:
    return [(k.shape, k.rate * factor) for k in kinds]


def predict(kinds: Sequence[Kind], workers: int, options: PlanOptions = DEFAULT_OPTIONS,
            concurrency: int | None = None, stalls: HostStalls | None = None) -> SimResult:
    """One worker of ``workers``, each taking an equal share of the arrivals (on a host
    that takes its core away as ``stalls`` says, if given)."""
    return simulate(_scaled(kinds, 1.0 / workers), servers=1, concurrency=concurrency,
                    runs=options.sim_runs, seed=options.seed, stalls=stalls,
                    wakes=options.loop_wakes)


def floor_p99(kinds: Sequence[Kind], options: PlanOptions = DEFAULT_OPTIONS) -> SimResult:
    """The runs with no queueing: as many cores as runs could ever need, at a trickle."""
    total = sum(k.rate for k in kinds)
    return simulate(_scaled(kinds, 1.0 / total), servers=10_000, runs=options.sim_runs,
                    seed=options.seed)


def saturation_rate(kinds: Sequence[Kind], workers: int,
                    stalls: HostStalls | None = None) -> float:
    """Runs per second (in the kinds' proportions) at which ``workers`` loops are busy all
    the time they have a core (all of it, or ``1 - stalls.share``): the throughput a
    closed test at high concurrency reaches."""
    total = sum(k.rate for k in kinds)
    cpu_per_run = sum(k.rate / total * k.shape.cpu_per_run for k in kinds)
    return workers * (1.0 - (stalls.share if stalls else 0.0)) / cpu_per_run


def make_plan(kinds: Sequence[Kind], target_p99_s: float,
              options: PlanOptions = DEFAULT_OPTIONS) -> Plan:
    total = sum(k.rate for k in kinds)
    floor = floor_p99(kinds, options)
    for kind, least in zip(kinds, floor.classes, strict=True):
        if least.p99_s > target_p99_s:
            s = kind.shape
            raise PlanError(
                f"p99 {target_p99_s:g} s cannot be met for {s.name}: its runs take p99 "
                f"{least.p99_s:.3g} s with no queueing at all ({s.steps:g} model calls of "
                f"{s.model_wait.quantile(0.5) * 1e3:.3g} ms median, "
                f"{s.tool_share * s.steps:g} tool calls of "
                f"{s.tool_wait.quantile(0.5) * 1e3:.3g} ms median per run)")
    demand = sum(k.rate * k.shape.cpu_per_run for k in kinds)  # cores
    by_utilization = max(1, math.ceil(demand / options.max_utilization))
    # Erlang C, as if the fleet's CPU were one pool: the mean wait per burst the target's
    # slack allows over the floor.
    bursts = sum(k.rate * k.shape.steps * k.shape.bursts_per_step for k in kinds)
    mean_burst = demand / bursts
    bursts_per_run = bursts / total
    slack = max(target_p99_s - max(c.p99_s for c in floor.classes), 1e-6)
    erlang = min_servers(bursts, mean_burst, slack / bursts_per_run)
    start = max(by_utilization, erlang)

    def meets(n: int) -> tuple[bool, SimResult]:
        result = predict(kinds, n, options)
        return all(c.p99_s <= target_p99_s for c in result.classes), result

    n = start
    ok, result = meets(n)
    if not ok:  # grow by doubling, then halve the gap back
        low = n
        while not ok:
            low, n = n, n * 2
            if n > 100_000:
                raise PlanError(f"p99 {target_p99_s:g} s is not met with 100,000 workers: "
                                "the target is too close to the runs' own latency")
            ok, result = meets(n)
        high, best = n, result
        while high - low > 1:
            mid = (low + high) // 2
            ok, r = meets(mid)
            if ok:
                high, best = mid, r
            else:
                low = mid
        n, result = high, best
    concurrency = max(8, math.ceil(result.runs_in_flight_p999 * options.concurrency_margin))
    workers_sat = saturation_rate(kinds, n)
    gateway = max(2, math.ceil(total * options.gateway_cpu_s_per_run
                               / options.gateway_utilization))
    steps_rate = sum(k.rate * k.shape.steps for k in kinds)
    redis_cpu = steps_rate * options.redis_cpu_s_per_step
    model_calls = sum(little_l(k.rate * k.shape.steps, k.shape.model_wait.mean) for k in kinds)
    # n independent workers: the mean adds up, the spread by √n.
    spread = max(0.0, result.model_calls_p99 - result.model_calls_mean)
    model_p99 = math.ceil(model_calls + spread * math.sqrt(n))
    steps_per_run = steps_rate / total
    shards = max(1, math.ceil(redis_cpu / options.redis_utilization))
    resources = (
        Resource("worker CPU", demand / n, workers_sat),
        Resource("gateway CPU", total * options.gateway_cpu_s_per_run / gateway,
                 gateway / options.gateway_cpu_s_per_run),
        Resource("Redis (one thread)" if shards == 1 else f"Redis ({shards} shards)",
                 redis_cpu / shards, shards / (steps_per_run * options.redis_cpu_s_per_step)),
    )
    bottleneck = max(resources, key=lambda r: r.utilization)
    kind_results = tuple(
        KindResult(k.shape.name, k.rate, k.shape.steps, k.shape.cpu_per_run * 1e3,
                   f.p99_s, r.p50_s, r.p99_s)
        for k, f, r in zip(kinds, floor.classes, result.classes, strict=True))
    worst = max(r.p99_s for r in result.classes)
    return Plan(
        target_p99_s=target_p99_s, rate=total, workers=n, cores=n,
        concurrency_per_worker=concurrency,
        runs_in_flight=result.runs_in_flight_mean * n,
        worker_utilization=demand / n, erlang_c_cores=erlang,
        gateway_replicas=gateway, redis_ops_per_s=steps_rate * options.redis_ops_per_step,
        redis_cpu_cores=redis_cpu,
        redis_shards=shards,
        model_calls_in_flight=model_calls,
        model_calls_in_flight_p99=model_p99, kinds=kind_results, resources=resources,
        bottleneck=bottleneck.name,
        headroom=bottleneck.saturates_at / total - 1.0,
        p99_headroom=1.0 - worst / target_p99_s,
    )
