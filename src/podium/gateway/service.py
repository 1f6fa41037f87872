"""The gateway's work behind the HTTP routes: submit, look up, wait for, cancel runs.

It is coded against the :class:`~podium.store.base.RunStore` and
:class:`~podium.queue.base.RunQueue` interfaces. In the embedded mode it also
owns an :class:`~podium.engine.driver.Engine` and in-process
:class:`~podium.worker.worker.Worker` s on a local queue; its engine observer
then wakes waiting requests the moment their run ends and feeds the measured
run durations to admission. In the distributed mode (a Redis store and queue,
workers elsewhere) waiting follows the run's journal instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence

from podium.agent import Agent
from podium.config import Config
from podium.engine.driver import Engine, new_run_id
from podium.engine.hook import combine
from podium.engine.records import (
    JournalEntry,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
)
from podium.gateway.admission import Admission
from podium.gateway.auth import KeyRing, Tenant
from podium.gateway.errors import ApiError
from podium.gateway.metrics import GatewayMetrics
from podium.lifecycle import stop_task
from podium.observe.blocking import BlockingDetector, detector_from_env
from podium.observe.looplag import LoopLagMonitor
from podium.observe.metrics import RunMetrics
from podium.observe.tracing import RunTracer, tracer_from_env
from podium.queue.base import QueueItem, RunQueue
from podium.store.base import RunStore
from podium.worker.worker import Worker

__all__ = ("Gateway", "ServedAgent")

_READY_TIMEOUT_S = 2.0


class ServedAgent:
    """An agent as the gateway serves it: under a name, in a pool."""

    __slots__ = ("agent", "name", "pool")

    def __init__(self, agent: Agent, name: str | None = None, pool: str = "default") -> None:
        self.agent = agent
        self.name = name or agent.name
        self.pool = pool


class Gateway:
    """Runs submitted over HTTP, with admission control in front of the queue.

    ``engine`` and ``workers`` are given in the embedded mode only.
    """

    def __init__(
        self,
        config: Config,
        agents: Sequence[ServedAgent],
        store: RunStore,
        queue: RunQueue,
        keys: KeyRing,
        *,
        engine: Engine | None = None,
        workers: Sequence[Worker] = (),
        lag: LoopLagMonitor | None = None,
    ) -> None:
        self.config = config
        self.agents: dict[str, ServedAgent] = {a.name: a for a in agents}
        self.store = store
        self.queue = queue
        self.keys = keys
        self.engine = engine
        self.workers = list(workers)
        self.lag = lag or LoopLagMonitor(0.05)
        self.blocking: BlockingDetector | None = None  # PODIUM_BLOCKING_MS; started in start()
        self.tracer: RunTracer | None = None
        self.run_metrics: RunMetrics | None = None
        self.pools = list(dict.fromkeys([*config.pool_names(), *(a.pool for a in agents)]))
        self.admission = Admission(config.limits, config.pools, self.lag)
        self.metrics = GatewayMetrics(lambda: self)
        self._worker_tasks: list[asyncio.Task[None]] = []
        self._finished: dict[str, list[asyncio.Future[None]]] = {}
        self._service_ns: dict[str, int] = {}
        self._admitted_at: dict[str, tuple[str, float]] = {}
        if engine is not None:
            engine.observers.append(self._observe)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self.lag.start()
        self.blocking = self.blocking or detector_from_env()
        if self.blocking is not None:
            self.blocking.start()
        self.tracer = tracer_from_env()  # OTEL_* configured: spans, trace context to workers
        if self.engine is not None and self.run_metrics is None:  # engine steps on /metrics
            self.run_metrics = RunMetrics(self.metrics.registry, own_gauges=False)
            self.run_metrics.start(queue=self.queue, blocking=self.blocking,
                                   agents=[a.agent for a in self.agents.values()])
            self.engine.hook = combine(self.engine.hook, self.run_metrics, self.tracer)
        self.admission.controller.start()
        self._worker_tasks = [
            asyncio.create_task(w.run(), name=f"podium-worker-{w.pool}") for w in self.workers
        ]

    async def stop(self) -> None:
        """Drain: stop admitting, let in-flight runs finish within the grace period."""
        grace = self.config.server.drain_grace_s
        await asyncio.gather(*(w.drain(grace) for w in self.workers))
        for task in self._worker_tasks:
            await stop_task(task)
        await self.admission.controller.stop()
        await self.lag.stop()
        if self.run_metrics is not None:
            await self.run_metrics.stop()
        if self.blocking is not None:
            self.blocking.stop()
        if self.engine is not None:
            await self.engine.aclose()
        await self.queue.aclose()
        await self.store.aclose()

    # -- runs -------------------------------------------------------------------------------

    def served(self, name: str, field: str = "agent") -> ServedAgent:
        served = self.agents.get(name)
        if served is None:
            raise ApiError(404, "not_found", f"no agent named {name!r}", field=field)
        return served

    async def submit(
        self,
        tenant: Tenant,
        agent_name: str,
        user_input: str,
        metadata: Mapping[str, str],
        *,
        field: str = "agent",
    ) -> RunRecord:
        """Admit (or refuse with a 429) and enqueue a new run."""
        served = self.served(agent_name, field)
        waiting = await self.queue.depth(served.pool)
        self.admission.admit(tenant, served.pool, waiting)
        record = RunRecord(
            new_run_id(),
            served.name,
            user_input,
            tenant=tenant.name,
            pool=served.pool,
            metadata=dict(metadata),
        )
        await self.store.create(record)
        if self.engine is not None:  # only the engine observer ever clears it
            self._admitted_at[record.run_id] = (served.pool, time.monotonic())
        try:
            await self.queue.submit(
                QueueItem(record.run_id, served.name, served.pool, tenant.name, time.time())
            )
        except (ConnectionError, OSError) as exc:
            record.status, record.reason, record.error = "failed", "enqueue_failed", str(exc)
            record.finished_at = time.time()
            await self.store.update(record)
            raise ApiError(503, "unavailable", "the run queue is unreachable") from exc
        return record

    async def get(self, tenant: Tenant, run_id: str) -> RunRecord:
        """The tenant's run; another tenant's run is as absent as a run that never was."""
        record = await self.store.get(run_id)
        if record is None or record.tenant != tenant.name:
            raise ApiError(404, "not_found", f"no run {run_id!r}", field="run_id")
        return record

    async def wait(self, run_id: str, wait_s: float) -> RunRecord:
        """The run's record once it has ended, or as it stands after ``wait_s`` seconds."""
        record = await self.store.get(run_id)
        if record is None or record.done:
            assert record is not None
            return record
        if self.engine is not None:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._finished.setdefault(run_id, []).append(fut)
            try:
                record = await self.store.get(run_id)  # it may have ended meanwhile
                if record is not None and not record.done:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(fut, wait_s)
            finally:
                waiters = self._finished.get(run_id)
                if waiters is not None and fut in waiters:
                    waiters.remove(fut)
                    if not waiters:
                        del self._finished[run_id]
        else:
            await self._follow_until_done(run_id, wait_s)
        record = await self.store.get(run_id)
        assert record is not None
        return record

    async def _follow_until_done(self, run_id: str, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        after = -1
        while (left := deadline - time.monotonic()) > 0:
            items = await self.store.wait_journal(run_id, after, min(left, 5.0))
            if any(isinstance(e, RunFinished) for _, e in items):
                return
            if items:
                after = items[-1][0]
            else:
                record = await self.store.get(run_id)
                if record is None or record.done:
                    return

    async def cancel(self, tenant: Tenant, run_id: str) -> RunRecord:
        record = await self.get(tenant, run_id)
        if record.done:
            raise ApiError(409, "conflict", f"run {run_id!r} already {record.status}")
        if self.engine is not None and self.engine.cancel(run_id):
            return await self.wait(run_id, 10.0)
        if record.status == "queued":
            # Not claimed yet: end it here; a worker that claims it later finds it done.
            final = RunFinished(time.time(), "cancelled", error="cancelled", reason="cancelled")
            record.status, record.error, record.reason = "cancelled", "cancelled", "cancelled"
            record.finished_at = final.ts
            await self.store.append(run_id, (final,), record=record)
            self._observe(run_id, final)
            if self.engine is not None:
                self.engine.cancel(run_id)  # claimed in between: stop it too
            return record
        # Running on another process: leave the request where its worker looks for it,
        # then report the run as it stands once it has ended (or after the wait).
        await self.store.request_cancel(run_id)
        return await self.wait(run_id, 10.0)

    # -- engine observer (embedded mode) ----------------------------------------------------

    def _observe(self, run_id: str, entry: JournalEntry) -> None:
        if isinstance(entry, StepCommitted | StepRecord):
            if entry.profile is not None:
                self._service_ns[run_id] = self._service_ns.get(run_id, 0) + sum(
                    entry.profile.wall_ns
                )
            return
        if not isinstance(entry, RunFinished):
            return
        service_ns = self._service_ns.pop(run_id, 0)
        admitted = self._admitted_at.pop(run_id, None)
        if admitted is not None:
            pool, t0 = admitted
            if service_ns:
                self.admission.observe_run(pool, service_ns / 1e9)
            self.metrics.run_latency.labels(pool).observe(time.monotonic() - t0)
        for fut in self._finished.pop(run_id, ()):
            if not fut.done():
                fut.set_result(None)

    # -- readiness --------------------------------------------------------------------------

    async def readiness(self) -> dict[str, str]:
        """``{component: "ok" | reason}`` for the store, the queue and each agent's model."""
        checks: dict[str, str] = {}

        async def check(name: str, probe: asyncio.Future[object] | object) -> None:
            try:
                async with asyncio.timeout(_READY_TIMEOUT_S):
                    if asyncio.iscoroutine(probe) or isinstance(probe, asyncio.Future):
                        await probe
                checks[name] = "ok"
            except Exception as exc:  # readiness reports every failure, whatever its kind
                checks[name] = f"{type(exc).__name__}: {exc}"[:200] or "error"

        await check("store", self.store.list(limit=1))
        await check("queue", self.queue.depth(self.pools[0]))
        for served in self.agents.values():
            model = served.agent.model
            probe = getattr(model, "health", None)
            await check(f"model:{served.name}", probe() if callable(probe) else None)
        return checks
