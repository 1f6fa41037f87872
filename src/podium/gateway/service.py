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
import hashlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence

from podium.config import Config
from podium.engine.driver import Engine, new_run_id
from podium.engine.hook import combine
from podium.engine.records import (
    ApprovalRequested,
    JournalEntry,
    OutputRejected,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
)
from podium.errors import (
    StaleRunError,
    StoreError,
    ThreadNotFoundError,
)
from podium.gateway.admission import Admission
from podium.gateway.auth import KeyRing, Tenant
from podium.gateway.errors import ApiError
from podium.gateway.live import LiveFrames
from podium.gateway.metrics import GatewayMetrics
from podium.gateway.outage import UNAVAILABLE, Retrier
from podium.gateway.served import ServedAgent
from podium.gateway.service_people import GatewayConversations, no_thread
from podium.gateway.service_ready import CHANNEL_ERRORS, GatewayReadiness
from podium.gateway.sse import SHUTTING_DOWN
from podium.lifecycle import stop_task
from podium.observe.blocking import BlockingDetector, detector_from_env
from podium.observe.looplag import LoopLagMonitor
from podium.observe.metrics import RunMetrics
from podium.observe.tracing import TRACE_KEYS, RunTracer, tracer_from_env
from podium.queue.base import RunQueue
from podium.queue.stranded import queue_item, requeue_left_behind
from podium.security.allowlist import TOOLS_KEY, encode_allowed
from podium.security.redact import scrub_input
from podium.security.tenant_egress import EGRESS_KEY, encode_egress
from podium.store.base import RunStore
from podium.streaming.base import TokenChannel, TokenSubscription
from podium.streaming.local import LocalTokenChannel
from podium.tools.client import CLIENT_TOOLS_KEY, client_tool_names
from podium.worker.worker import Worker

__all__ = ("Gateway", "ServedAgent", "idempotent_run_id")

log = logging.getLogger("podium.gateway")

#: How long a submit that failed on an outage keeps trying to settle its run.
_SETTLE_S = 300.0
#: How long past its deadline a wait keeps trying a store that is down.
_OUTAGE_GRACE_S = 60.0
_SETTLE_ERRORS: tuple[type[BaseException], ...] = (*UNAVAILABLE, StoreError)


def idempotent_run_id(tenant: str, key: str) -> str:
    """The run id an ``Idempotency-Key`` stands for: the same for a retry, per tenant.

    Derived rather than looked up, so every gateway in front of the store finds the
    same run, and the store's refusal to create a run twice makes the check atomic.
    """
    digest = hashlib.sha256(b"podium-idempotency\0%s\0%s" % (tenant.encode(), key.encode()))
    return "run_" + digest.hexdigest()[:32]


class Gateway(GatewayReadiness, GatewayConversations):
    """Runs submitted over HTTP, with admission control in front of the queue.

    ``engine`` and ``workers`` are given in the embedded mode only. ``tokens`` carries
    model tokens from the workers to streaming clients: in the embedded mode it
    defaults to an in-process channel shared with ``engine``; without one, streams
    carry whole journal events only.
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
        tokens: TokenChannel | None = None,
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
        self._settling: set[asyncio.Task[None]] = set()
        # Event streams open now (ended, each with a reconnect event, once a stopping
        # server's runs have paused) and the stop's drain, once it has begun.
        self._streams: weakref.WeakSet[LiveFrames] = weakref.WeakSet()
        self._draining: asyncio.Task[None] | None = None
        self.stopped = False  # the drain is over: streams and waits end at once
        if engine is not None:
            engine.observers.append(self._observe)
            if tokens is None:
                tokens = engine.tokens or LocalTokenChannel()
            engine.tokens = engine.tokens or tokens
        self.tokens = tokens

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        # OTEL_* configured: spans, trace context to workers. First: importing the SDK and
        # its exporter holds the loop ~0.1 s, a stall of start-up, not of serving.
        self.tracer = tracer_from_env()
        self.lag.start()
        self.blocking = self.blocking or detector_from_env()
        if self.blocking is not None:
            self.blocking.start()
        if self.engine is not None and self.run_metrics is None:  # engine steps on /metrics
            self.run_metrics = RunMetrics(self.metrics.registry, own_gauges=False)
            self.run_metrics.start(queue=self.queue, blocking=self.blocking,
                                   agents=[a.agent for a in self.agents.values()])
            self.engine.hook = combine(self.engine.hook, self.run_metrics, self.tracer)
        self.admission.controller.start()
        if self.engine is not None:  # embedded: the queue died with the last server, if any
            await requeue_left_behind(self.store, self.queue)
        self._worker_tasks = [
            asyncio.create_task(w.run(), name=f"podium-worker-{w.pool}") for w in self.workers
        ]
        # Whether the store takes writes, asked now and then even when no probe asks: a
        # change (Redis full, a replica, an evicting policy set at run time) is logged.
        self._worker_tasks.append(
            asyncio.create_task(self._watch_store(), name="podium-store-health")
        )

    def begin_stop(self) -> None:
        """The server stops taking connections: drain the workers (runs pause at a step
        boundary within ``drain_grace_s``), then end the event streams and waits still
        open, each with where the run stands, so the server's own grace ends on time and
        no client is cut off mid-event. Idempotent."""
        if self._draining is None:
            self._draining = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        grace = self.config.server.drain_grace_s
        try:
            # The runs under way go on for two thirds of the grace (a stream's run may end
            # meanwhile, as its client waits for); those still running then pause at their
            # next step boundary, within the rest of it.
            await asyncio.gather(
                *(w.drain(grace / 3, finish_s=grace * 2 / 3) for w in self.workers)
            )
        finally:
            self.stopped = True
            for stream in list(self._streams):
                stream.shut(self._settle_s())
            for waiters in self._finished.values():
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)

    def stream(
        self, frames: AsyncIterator[bytes], tokens: TokenSubscription | None,
        farewell: bytes = SHUTTING_DOWN,
    ) -> LiveFrames:
        """An event stream's body, ended (with ``farewell``) if the server stops."""
        body = LiveFrames(frames, tokens, farewell)
        self._streams.add(body)
        if self.stopped:  # came in on a kept-alive connection after the drain
            body.shut(self._settle_s())
        return body

    def _settle_s(self) -> float:
        """How long a stopping server's streams may go on delivering what their runs have
        journaled (a run that finished in the drain: its ``final`` is on its way) before
        the farewell: a tenth of the grace, a second at most, inside uvicorn's own."""
        return min(1.0, self.config.server.drain_grace_s / 10)

    async def stop(self) -> None:
        """Drain: stop admitting, let in-flight runs finish within the grace period."""
        self.begin_stop()
        assert self._draining is not None
        await self._draining
        for task in [*self._worker_tasks, *self._settling]:
            await stop_task(task)
        await self.admission.controller.stop()
        await self.lag.stop()
        if self.run_metrics is not None:
            await self.run_metrics.stop()
        if self.blocking is not None:
            self.blocking.stop()
        if self.engine is not None:
            await self.engine.aclose()
        if self.tokens is not None:
            await self.tokens.aclose()
        # The models' HTTP sessions (opened by runs or by /readyz probes) end with the gateway.
        for model in {id(s.agent.model): s.agent.model for s in self.agents.values()}.values():
            await model.aclose()
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
        idempotency_key: str | None = None,
        run_id: str | None = None,
        thread_id: str | None = None,
        client_tools: Mapping[str, str] | None = None,
    ) -> tuple[RunRecord, bool]:
        """Admit (or refuse with a 429) and enqueue a new run; ``(record, replayed)``.

        With an ``idempotency_key`` a retry of the same request returns the run the
        first attempt made (``replayed``) instead of starting another; the same key
        with a different agent, input or metadata is a 422. ``thread_id``: the run
        continues the tenant's thread (404 if the tenant has none by that id). ``run_id`` is the id
        :meth:`new_run_id` gave (to listen to the run's tokens before it starts).
        ``client_tools``: the metadata :mod:`podium.gateway.client_tools` made of the
        request's function tools (the client's own metadata cannot set it).
        """
        served = self.served(agent_name, field)
        # The secrets the agent declares never reach the store, the queue or an event.
        user_input = scrub_input(served.agent, user_input)
        run_id = run_id or self.new_run_id(tenant, idempotency_key)
        if idempotency_key is not None:
            existing = await self.store.get(run_id)
            if existing is not None:
                if existing.thread_id != thread_id:
                    raise _mismatch(existing.run_id)
                return self._replay(existing, served, user_input, metadata), True
        waiting = await self.queue.depth(served.pool)
        self.admission.admit(tenant, served.pool, waiting)
        record = RunRecord(
            run_id,
            served.name,
            user_input,
            tenant=tenant.name,
            pool=served.pool,
            metadata=dict(metadata),
            thread_id=thread_id,
        )
        record.metadata.pop(CLIENT_TOOLS_KEY, None)
        client_names: frozenset[str] = frozenset()
        if client_tools:
            record.metadata.update(client_tools)
            client_names = client_tool_names(record.metadata)
        if tenant.tools is not None:  # enforced by the worker; the client cannot widen it
            # (its own tools it runs itself: they are no server tool it could reach)
            record.metadata[TOOLS_KEY] = encode_allowed({*tenant.tools, *client_names})
        record.metadata.pop(EGRESS_KEY, None)  # the tenant's, never the client's
        if tenant.egress is not None:  # enforced by the engine that executes the run
            record.metadata[EGRESS_KEY] = encode_egress(tenant.egress)
        try:
            if thread_id is None:
                await self.store.create(record)
            else:  # stored, then joined to the thread (404 if the tenant has no such thread)
                await self.threads.create_run(record)
        except ThreadNotFoundError:
            raise no_thread(str(thread_id)) from None
        except UNAVAILABLE:
            # The write may have landed before its reply was lost: settle it once the
            # store is back, so no run is left that no client knows about.
            self._settle_later(record, enqueue=idempotency_key is not None)
            raise
        except StoreError as exc:
            if isinstance(exc, StaleRunError):
                raise
            existing = await self.store.get(run_id)
            if existing is None:
                raise
            if existing.created_at != record.created_at:
                if idempotency_key is None:  # a random id taken: cannot happen, but loud
                    raise
                # Created meanwhile by a concurrent retry with the same key: that run it is.
                return self._replay(existing, served, user_input, metadata), True
            # Our own create landed before its reply was lost, and the store's retry of
            # it found the run there: it is created; go on and enqueue it.
        if self.engine is not None:  # only the engine observer ever clears it
            self._admitted_at[record.run_id] = (served.pool, time.monotonic())
        try:
            await self._enqueue(record)
        except UNAVAILABLE:
            # With a key the client's retry will find this run: enqueue it once the queue
            # is back. Without one the client will start another run: fail this one.
            self._settle_later(record, enqueue=idempotency_key is not None)
            raise
        return record, False

    def new_run_id(self, tenant: Tenant, idempotency_key: str | None = None) -> str:
        """The id :meth:`submit` will give the run (derived from the key, if any)."""
        if idempotency_key is not None:
            return idempotent_run_id(tenant.name, idempotency_key)
        return new_run_id()

    async def listen(self, run_id: str) -> TokenSubscription | None:
        """Subscribe to the run's model tokens; None without a channel or while it is away
        (the stream then carries whole journal events, nothing is lost)."""
        if self.tokens is None:
            return None
        try:
            return await self.tokens.subscribe(run_id)
        except CHANNEL_ERRORS as exc:
            log.warning("run %s: streaming whole steps only, no token channel: %s", run_id, exc)
            return None

    async def _enqueue(self, record: RunRecord) -> None:
        # At the record's stored version: a worker's sweep that finds the run stranded (this
        # process died before its submit) submits the same version, and it is queued once.
        await self.queue.submit(queue_item(record, time.time()))

    def _replay(
        self,
        existing: RunRecord,
        served: ServedAgent,
        user_input: str,
        metadata: Mapping[str, str],
    ) -> RunRecord:
        if (
            existing.agent != served.name
            or existing.input != user_input
            or _client_metadata(existing.metadata) != _client_metadata(metadata)
        ):
            raise _mismatch(existing.run_id)
        return existing

    def _settle_later(self, record: RunRecord, *, enqueue: bool) -> None:
        task = asyncio.create_task(self._settle(record, enqueue), name=f"settle:{record.run_id}")
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle(self, record: RunRecord, enqueue: bool) -> None:
        """After a failed submit: enqueue the run (``enqueue``) or fail it, if it was created."""
        retry = Retrier(time.monotonic() + _SETTLE_S, max_s=2.0)
        try:
            stored = await retry.call(self.store.get, record.run_id)
            if stored is None or stored.created_at != record.created_at:
                return  # not created by this attempt (or a retry made its own)
            if stored.status != "queued":
                return
            if stored.started_at is not None and not enqueue:  # a worker has it
                return
            if enqueue:
                await retry.call(self._enqueue, stored)
                return
            stored.status, stored.reason = "failed", "enqueue_failed"
            stored.error = "the run queue was unreachable when the run was submitted"
            stored.finished_at = time.time()
            await retry.call(self.store.update, stored)
        except _SETTLE_ERRORS as exc:
            log.warning("run %s: could not settle its failed submit: %s", record.run_id, exc)

    async def get(self, tenant: Tenant, run_id: str) -> RunRecord:
        """The tenant's run; another tenant's run is as absent as a run that never was."""
        record = await self.store.get(run_id)
        if record is None or record.tenant != tenant.name:
            raise ApiError(404, "not_found", f"no run {run_id!r}", field="run_id")
        return record

    async def wait(self, run_id: str, wait_s: float) -> RunRecord:
        """The run's record once it has ended, or as it stands after ``wait_s`` seconds.

        An outage of the store is ridden out: the wait keeps trying (for up to
        ``_OUTAGE_GRACE_S`` past its own deadline) and answers once the store is back.
        """
        deadline = time.monotonic() + wait_s
        retry = Retrier(deadline + _OUTAGE_GRACE_S)
        record = await self._record(retry, run_id)
        if _settled(record) or self.stopped:
            return record
        if self.engine is not None:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._finished.setdefault(run_id, []).append(fut)
            try:
                record = await self._record(retry, run_id)  # it may have ended meanwhile
                if not _settled(record):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(fut, wait_s)
            finally:
                waiters = self._finished.get(run_id)
                if waiters is not None and fut in waiters:
                    waiters.remove(fut)
                    if not waiters:
                        del self._finished[run_id]
        else:
            await self._follow_until_done(run_id, deadline, retry)
        return await self._record(retry, run_id)

    async def _record(self, retry: Retrier, run_id: str) -> RunRecord:
        record = await retry.call(self.store.get, run_id)
        if record is None:  # expired or deleted while we waited
            raise ApiError(404, "not_found", f"no run {run_id!r}", field="run_id")
        return record

    async def _follow_until_done(self, run_id: str, deadline: float, retry: Retrier) -> None:
        after = -1
        while (left := deadline - time.monotonic()) > 0 and not self.stopped:
            # (1 s at a time once stopping: a wait ends soon after the drain)
            chunk = 1.0 if self._draining is not None else 5.0
            items = await retry.call(self.store.wait_journal, run_id, after, min(left, chunk))
            if any(isinstance(e, RunFinished) for _, e in items):
                return
            if items:
                after = items[-1][0]
            # A request for a human settles the wait only while the run waits on it: the
            # journal read from its start holds those of decisions taken long ago (the
            # wait and the cancel of a run resumed after an approval answered at once).
            asked = any(isinstance(e, ApprovalRequested) for _, e in items)
            if (asked or not items) and _settled(await self._record(retry, run_id)):
                return

    async def cancel(self, tenant: Tenant, run_id: str) -> RunRecord:
        record = await self.get(tenant, run_id)
        if record.done:
            raise ApiError(409, "conflict", f"run {run_id!r} already {record.status}")
        ended = await self._cancel(record)
        if ended.status == "waiting":  # it parked on a human as the cancel came: end it there
            ended = await self._cancel(ended)
        if ended.done and ended.status != "cancelled":
            # Its end was being written when the cancel came: it keeps that end, and the
            # client hears so as it would have a moment later (not a 200 for a no-op).
            raise ApiError(
                409, "conflict", f"run {run_id!r} {ended.status} before the cancel took effect"
            )
        return ended

    #: How long a cancel waits for the run's driver to end it (else: 202, requested).
    cancel_wait_s = 10.0

    async def _cancel(self, record: RunRecord) -> RunRecord:
        run_id = record.run_id
        engine = self.engine
        if engine is not None and engine.cancel(run_id):
            return await self.wait(run_id, self.cancel_wait_s)
        if record.status in ("queued", "waiting"):
            # Not claimed yet, or parked on a human (no worker holds it): end it here; a
            # worker that claims it meanwhile adopts that end (in this process through the
            # engine, elsewhere by the store's fencing).
            try:
                if engine is None:
                    await self._cancel_stored(record)
                    await self._forget_submitted(record)
                    return record
                if await engine.cancel_stored(record):
                    await self._forget_submitted(record)
                    return record
                # a driver started: it was cancelled
                return await self.wait(run_id, self.cancel_wait_s)
            except StaleRunError:
                pass  # a worker advanced it meanwhile: ask that worker, below
        if engine is not None and record.status == "running" and self._no_other_driver():
            # Not driven here, and no other process could be driving it: left by a server
            # that died (this one did not resume it: it was not alone on the file then), or
            # between drivers here. Nobody would read a request: end it now.
            try:
                await engine.end_stored(record, "cancelled", "cancelled", "cancelled")
                return record
            except StaleRunError:
                pass  # a driver took it up meanwhile: ask it, below
        # Running (here but between drivers, or on another process): leave the request where
        # its worker looks for it, then report the run as it stands once it has ended.
        await self.store.request_cancel(run_id)
        if engine is not None:
            engine.cancel(run_id)  # a driver that started meanwhile
        return await self.wait(run_id, self.cancel_wait_s)

    async def _forget_submitted(self, record: RunRecord) -> None:
        """A run ended here, in the store: the queue forgets its last submitted version now.
        One that waited for a human has no item in the queue to ack, and on Redis its key
        was left for 7 days; a queued one's item is acked all the same by the worker that
        claims it and finds it ended (nothing queues an ended run again)."""
        with contextlib.suppress(*CHANNEL_ERRORS):  # the key expires on its own
            await self.queue.forget(record.run_id)

    def _no_other_driver(self) -> bool:
        """Whether only this process can drive the store's runs: a SQLite file it alone has
        open, or an in-memory store with the in-process queue (not a shared queue's)."""
        alone = self.store.sole_user()
        return alone is True or (alone is None and not self.queue.shared)

    async def _cancel_stored(self, record: RunRecord) -> None:
        final = RunFinished(time.time(), "cancelled", error="cancelled", reason="cancelled")
        record.status, record.error, record.reason = "cancelled", "cancelled", "cancelled"
        record.finished_at = final.ts
        await self.store.append(record.run_id, (final,), record=record)
        self._observe(record.run_id, final)

    # -- engine observer (embedded mode) ----------------------------------------------------

    def _observe(self, run_id: str, entry: JournalEntry) -> None:
        if isinstance(entry, StepCommitted | StepRecord | OutputRejected):
            if entry.profile is not None:
                self._service_ns[run_id] = self._service_ns.get(run_id, 0) + sum(
                    entry.profile.wall_ns
                )
            return
        if isinstance(entry, ApprovalRequested):  # parked: waiting requests answer now
            for fut in self._finished.pop(run_id, ()):
                if not fut.done():
                    fut.set_result(None)
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

def _settled(record: RunRecord) -> bool:
    """Whether a wait for the run is over: it ended, or it waits for a human."""
    return record.done or record.status == "waiting"
def _mismatch(run_id: str) -> ApiError:
    return ApiError(
        422,
        "idempotency_mismatch",
        "this Idempotency-Key was used with a different request "
        f"(run {run_id}); use a new key for a new request",
        field="idempotency-key",
    )


def _client_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """Metadata as the client sent it: without what the gateway stamps on (a tenant's
    tools, the request's trace context: a retry comes with a new one)."""
    return {
        k: v
        for k, v in metadata.items()
        if k != TOOLS_KEY and k != EGRESS_KEY and k != CLIENT_TOOLS_KEY and k not in TRACE_KEYS
    }
