"""Admission control: which new runs the gateway takes, and which it sheds with a 429.

Three tiers, checked in this order for every new run:

1. **Backlog** (per pool): the runs already waiting in the pool's queue,
   worked off by its worker slots at the measured run duration, must leave a
   new run able to finish within the pool's latency target; otherwise
   ``queue_full``.
2. **Token buckets**, per tenant and per pool (rate and burst from the
   config): ``rate_limited``, with ``Retry-After`` computed from the bucket.
3. **The adaptive limit**: an AIMD controller lowers the admitted rate while
   the serving process's CPU load or event-loop lag is over its threshold, and
   raises it again as they recover: ``overloaded``. CPU load is the larger of the
   process's CPU utilization and its loop thread's CPU demand (the time it ran or
   waited to run): on a shared machine or under a container's CPU quota a
   saturated loop gets only a share of a core, and only the demand shows it.

Tokens are taken only when every tier admits the run (a refused run costs
the tenant nothing). Each limiter reports ``statistics()``; the metrics read
those.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

import msgspec

from podium.config import AdaptiveConfig, LimitsConfig, PoolConfig
from podium.gateway.auth import Tenant
from podium.gateway.errors import ApiError
from podium.lifecycle import stop_task
from podium.observe.looplag import LoopLagMonitor

__all__ = (
    "Admission",
    "AdmissionStatistics",
    "AimdController",
    "BacklogGate",
    "TokenBucket",
)

Clock = Callable[[], float]


class BucketStatistics(msgspec.Struct, frozen=True):
    rate: float
    burst: float
    tokens: float
    admitted: int
    rejected: int


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``rate == 0`` means unlimited."""

    def __init__(self, rate: float, burst: float = 0.0, *, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.rate = rate
        self.burst = burst if burst > 0 else max(1.0, rate)
        self._tokens = self.burst
        self._stamp = clock()
        self.admitted = 0
        self.rejected = 0

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    def wait_time(self, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens are there (0: now)."""
        if self.unlimited:
            return 0.0
        self._refill()
        missing = n - self._tokens
        return 0.0 if missing <= 0 else missing / self.rate

    def take(self, n: float = 1.0) -> None:
        if not self.unlimited:
            self._refill()
            self._tokens -= n
        self.admitted += 1

    def set_rate(self, rate: float, burst: float | None = None) -> None:
        self._refill()
        self.rate = rate
        if burst is not None:
            self.burst = burst
            self._tokens = min(self._tokens, burst)

    def statistics(self) -> BucketStatistics:
        if not self.unlimited:
            self._refill()
        return BucketStatistics(self.rate, self.burst, self._tokens, self.admitted, self.rejected)


class GateStatistics(msgspec.Struct, frozen=True):
    slots: int
    run_s: float
    latency_target_s: float
    max_waiting: int
    rejected: int


class BacklogGate:
    """Bounds a pool's backlog to what its ``slots`` can finish within ``latency_target_s``.

    A run arriving behind ``waiting`` others waits about ``waiting × run_s /
    slots`` and then runs for ``run_s``; it is refused when that passes the
    target. ``run_s`` is a moving average of measured runs (seeded by
    ``expected_run_s``).
    """

    def __init__(
        self, slots: int, latency_target_s: float, expected_run_s: float, max_queue: int
    ) -> None:
        self.slots = max(1, slots)
        self.latency_target_s = latency_target_s
        self.run_s = expected_run_s
        self.max_queue = max_queue
        self.rejected = 0

    def observe(self, run_s: float, weight: float = 0.05) -> None:
        """Fold one finished run's duration into the estimate."""
        self.run_s += weight * (max(run_s, 1e-6) - self.run_s)

    @property
    def max_waiting(self) -> int:
        room = max(0.0, self.latency_target_s - self.run_s)
        return min(self.max_queue, int(self.slots * room / self.run_s))

    def retry_after(self, waiting: int) -> float | None:
        """None if a run may join ``waiting`` others, else seconds until one could."""
        limit = self.max_waiting
        if waiting < limit:
            return None
        self.rejected += 1
        return max(self.run_s, (waiting - limit + 1) * self.run_s / self.slots)

    def statistics(self) -> GateStatistics:
        return GateStatistics(
            self.slots, self.run_s, self.latency_target_s, self.max_waiting, self.rejected
        )


class AimdStatistics(msgspec.Struct, frozen=True):
    limit: float
    max_rate: float
    cpu_utilization: float
    loop_lag_ms: float
    overloaded: bool
    decreases: int
    increases: int
    #: Share of the last interval the loop thread ran or waited to run (0.0: not measured).
    cpu_demand: float = 0.0


def _process_cpu() -> float:
    return time.process_time()


#: The calling thread's scheduler statistics (Linux): nanoseconds on a CPU, nanoseconds
#: runnable but waiting for one, timeslices.
_SCHEDSTAT = "/proc/thread-self/schedstat"


def thread_cpu_demand() -> float | None:
    """Seconds the calling thread has run or waited to run (None where the kernel does
    not say). Waiting counts as demand: a thread that could run and did not is short of
    CPU, whether another process took it or a cgroup's quota ran out."""
    try:
        with open(_SCHEDSTAT, "rb") as stats:
            ran, waited = stats.read().split()[:2]
        return (int(ran) + int(waited)) / 1e9
    except (OSError, ValueError):  # not Linux, or no scheduler statistics
        return None


class AimdController:
    """Additive-increase, multiplicative-decrease limit on the admitted rate.

    Each :meth:`step` (every ``interval_s`` when started) samples, since the previous
    step, the CPU utilization of this process and the CPU demand of the thread that
    steps (the loop's: the time it ran or waited to run), and the recent loop lag.
    Overloaded: either CPU figure over ``cpu_threshold`` or the lag over its own; the
    limit becomes ``min(limit, admitted rate) × decrease``. Otherwise it grows by
    ``increase × max_rate`` up to ``max_rate``.
    """

    def __init__(
        self,
        config: AdaptiveConfig,
        lag: LoopLagMonitor | None = None,
        *,
        cpu_clock: Clock = _process_cpu,
        demand_clock: Callable[[], float | None] = thread_cpu_demand,
        clock: Clock = time.monotonic,
    ) -> None:
        self.config = config
        self.lag = lag
        self._cpu_clock = cpu_clock
        # Read on the loop thread only (start and step run there): it is that thread's.
        self._demand_clock = demand_clock
        self._clock = clock
        self.limit = config.max_rate
        self.bucket = TokenBucket(self.limit, max(1.0, self.limit), clock=clock)
        self._cpu0 = cpu_clock()
        self._t0 = clock()
        self._admitted0 = 0
        self._demand0: float | None = None
        self.cpu_utilization = 0.0
        self.cpu_demand = 0.0
        self.loop_lag_ms = 0.0
        self.overloaded = False
        self.decreases = 0
        self.increases = 0
        self._task: asyncio.Task[None] | None = None
        #: Set whenever the limit moves (tests and dashboards await it instead of polling).
        self.changed = asyncio.Event()

    def step(self) -> float:
        """One control decision; returns the new limit (runs/s)."""
        cfg = self.config
        now, cpu = self._clock(), self._cpu_clock()
        dt = max(1e-6, now - self._t0)
        self.cpu_utilization = max(0.0, (cpu - self._cpu0) / dt)
        demand, before = self._demand_clock(), self._demand0
        self.cpu_demand = 0.0  # where the kernel does not say (or no baseline yet)
        if demand is not None and before is not None:
            self.cpu_demand = max(0.0, demand - before) / dt
        admitted = self.bucket.admitted
        admitted_rate = (admitted - self._admitted0) / dt
        self._t0, self._cpu0, self._demand0, self._admitted0 = now, cpu, demand, admitted
        self.loop_lag_ms = self.lag.recent_ms() if self.lag is not None else 0.0
        cpu_load = max(self.cpu_utilization, self.cpu_demand)
        self.overloaded = cpu_load > cfg.cpu_threshold or self.loop_lag_ms > cfg.lag_threshold_ms
        old = self.limit
        if self.overloaded:
            base = min(self.limit, admitted_rate) if admitted_rate > 0 else self.limit
            self.limit = max(cfg.min_rate, base * cfg.decrease)
            self.decreases += 1
        elif self.limit < cfg.max_rate:
            self.limit = min(cfg.max_rate, self.limit + cfg.increase * cfg.max_rate)
            self.increases += 1
        if self.limit != old:
            self.bucket.set_rate(self.limit, max(1.0, self.limit * cfg.interval_s))
            self.changed.set()
        return self.limit

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval_s)
            self.step()

    def start(self) -> None:
        if self.config.enabled and (self._task is None or self._task.done()):
            self._t0, self._cpu0 = self._clock(), self._cpu_clock()
            self._demand0 = self._demand_clock()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="podium-aimd")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    def statistics(self) -> AimdStatistics:
        return AimdStatistics(
            self.limit,
            self.config.max_rate,
            self.cpu_utilization,
            self.loop_lag_ms,
            self.overloaded,
            self.decreases,
            self.increases,
            self.cpu_demand,
        )


class AdmissionStatistics(msgspec.Struct, frozen=True):
    admitted: dict[str, int]
    rejected: dict[str, int]
    adaptive: AimdStatistics
    pools: dict[str, BucketStatistics]
    gates: dict[str, GateStatistics]


class Admission:
    """All tiers together: :meth:`admit` returns, or raises a 429 :class:`ApiError`."""

    def __init__(
        self,
        limits: LimitsConfig,
        pools: Mapping[str, PoolConfig],
        lag: LoopLagMonitor | None = None,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._pool_configs = dict(pools)
        self._tenants: dict[str, TokenBucket] = {}
        self._pools: dict[str, TokenBucket] = {}
        self._gates: dict[str, BacklogGate] = {}
        self.controller = AimdController(limits.adaptive, lag, clock=clock)
        self.admitted: dict[str, int] = {}
        self.rejected: dict[str, int] = {}

    def _pool_config(self, pool: str) -> PoolConfig:
        return self._pool_configs.get(pool) or PoolConfig()

    def gate(self, pool: str) -> BacklogGate:
        gate = self._gates.get(pool)
        if gate is None:
            cfg = self._pool_config(pool)
            slots = max(1, cfg.workers) * cfg.concurrency
            gate = BacklogGate(slots, cfg.latency_target_s, cfg.expected_run_s, cfg.max_queue)
            self._gates[pool] = gate
        return gate

    def _tenant_bucket(self, tenant: Tenant) -> TokenBucket:
        bucket = self._tenants.get(tenant.name)
        if bucket is None:
            rate = self.limits.tenant_rate if tenant.rate is None else tenant.rate
            burst = self.limits.tenant_burst if tenant.burst is None else tenant.burst
            bucket = self._tenants[tenant.name] = TokenBucket(rate, burst, clock=self._clock)
        return bucket

    def _pool_bucket(self, pool: str) -> TokenBucket:
        bucket = self._pools.get(pool)
        if bucket is None:
            cfg = self._pool_config(pool)
            bucket = self._pools[pool] = TokenBucket(cfg.rate, cfg.burst, clock=self._clock)
        return bucket

    def _refuse(self, pool: str, type: str, message: str, retry_after: float) -> ApiError:
        key = f"{pool}:{type}"
        self.rejected[key] = self.rejected.get(key, 0) + 1
        return ApiError(429, type, message, retry_after=retry_after)

    def admit(self, tenant: Tenant, pool: str, waiting: int) -> None:
        """Admit one run for ``tenant`` into ``pool``, behind ``waiting`` queued runs."""
        gate = self.gate(pool)
        wait = gate.retry_after(waiting)
        if wait is not None:
            why = (f"its max_queue is {gate.max_queue}" if waiting >= gate.max_queue
                   else "one more would miss its latency target")
            raise self._refuse(
                pool, "queue_full", f"pool {pool!r} has {waiting} runs waiting; {why}", wait
            )
        buckets = (
            (
                self._tenant_bucket(tenant),
                "rate_limited",
                f"tenant {tenant.name!r} is over its rate",
            ),
            (self._pool_bucket(pool), "rate_limited", f"pool {pool!r} is over its rate"),
            (
                self.controller.bucket,
                "overloaded",
                "the gateway is shedding load (CPU or loop lag)",
            ),
        )
        for bucket, type, message in buckets:
            wait = bucket.wait_time()
            if wait > 0:
                bucket.rejected += 1
                raise self._refuse(pool, type, message, wait)
        for bucket, _, _ in buckets:
            bucket.take()
        self.admitted[pool] = self.admitted.get(pool, 0) + 1

    def observe_run(self, pool: str, run_s: float) -> None:
        self.gate(pool).observe(run_s)

    def statistics(self) -> AdmissionStatistics:
        return AdmissionStatistics(
            dict(self.admitted),
            dict(self.rejected),
            self.controller.statistics(),
            {p: b.statistics() for p, b in self._pools.items()},
            {p: g.statistics() for p, g in self._gates.items()},
        )
