"""Several endpoints behind one model name: health, capacity, affinity, LAS, routing.

::

    pool = BackendPool(
        [
            Backend(OpenAIChatModel("http://gpu-a:8000/v1", "qwen"), capacity=64, group="gpu"),
            Backend(OpenAIChatModel("http://gpu-b:8000/v1", "qwen"), capacity=64, group="gpu"),
            Backend(OpenAIChatModel("http://cpu-a:8080/v1", "qwen"), capacity=4, group="cpu"),
        ],
        rules=[RoutingRule("cpu", tags=("small",))],
        default_group="gpu",
    )

* A backend takes traffic only after a health check passes (``/health`` or
  ``/v1/models``, see :data:`~podium.models.openai.HEALTH_PATHS`); checks
  repeat every ``health_interval_s``; a backend that fails is drained (no new
  calls) and re-admitted once it passes again. Real replies are proof of
  life too: a probe that *times out* on a backend that is serving calls or
  answered one within ``liveness_s`` is no verdict (a busy server is not a
  dead one); a refused connection or an error answer still drains it.
* Each backend runs at most ``capacity`` calls (its batch size); a call goes
  to its run's previous backend if that one has a free slot (session
  affinity: its KV/prefix cache is reused), else to the backend with the
  fewest outstanding calls relative to capacity.
* When every eligible backend is full, calls queue in a
  :class:`~podium.models.pool_sched.LASQueue`: least attained service first.
* A call that fails because its backend went away (connection refused, a
  stream cut, a 502/503 such as llama.cpp's "Loading model") is checked,
  drained if dead, and retried on another backend; with none other (a pool of
  one, or every backend failed it) the same ones are tried again after a
  backoff (``Retry-After`` honoured) as the backend's :class:`RetryPolicy`
  allows; if it fails for good the error says why the backend was lost.
* Calls that time out one after another on a backend whose health path still
  answers (a wedged engine) take it out for ``eject_s`` (doubling each time,
  up to 5 minutes) while another backend of its group is healthy.
* Health from behaviour: a call whose backend took it and made no progress
  (:class:`~podium.models.openai_errors.BackendStalledError`: no first token, or
  no token for the idle bound) gets its backend probed at once, drained if the
  probe gets no answer, and moves to another healthy backend (a stream after a
  reset). Calls in flight count as load only while they make progress: a
  stopped server's stuck calls do not keep it in the pool.
* With no healthy backend a call waits up to ``healthy_wait_s`` for one to
  come up (a rolling restart), with health checks every ``0.5`` s meanwhile.
  The backends' ``Timeouts.total_s`` bounds a call, that wait and its retries
  included. Drains and re-admissions are logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TypeVar

from podium.errors import ConfigError, ModelHTTPError, ModelTimeoutError, ModelUnavailableError
from podium.lifecycle import stop_task
from podium.messages import Usage
from podium.models.base import Model, ModelRequest, ModelResponse, StreamDelta
from podium.models.openai_errors import BackendStalledError
from podium.models.openai_wire import StreamTruncatedError
from podium.models.pool_backend import Backend, BackendStatistics
from podium.models.pool_calls import (
    FAILOVER_STATUSES,
    NoHealthyBackend,
    PoolStatistics,
    QueuedCall,
    Tries,
    attempt_usage,
    backend_lost,
)
from podium.models.pool_health import PoolHealth
from podium.models.pool_routing import Router, RoutingRule
from podium.models.pool_sched import LASQueue, service_level
from podium.models.resilience import RetryPolicy, Timeouts

log = logging.getLogger(__name__)

__all__ = ("Backend", "BackendPool", "BackendStatistics", "PoolStatistics")

V = TypeVar("V")
_DEFAULT_CALL_S = Timeouts().total_s  # a call's bound when no backend says its own
_DEFAULT_RETRY = RetryPolicy()


class BackendPool(PoolHealth, Model):
    """A :class:`Model` spreading calls over backends (see the module docstring)."""

    def __init__(
        self,
        backends: Sequence[Backend],
        *,
        rules: Sequence[RoutingRule] = (),
        default_group: str | None = None,
        fallback: Mapping[str, Sequence[str]] | None = None,
        name: str = "pool",
        health_interval_s: float = 5.0,
        health_timeout_s: float = 2.0,
        unhealthy_after: int = 2,
        healthy_after: int = 1,
        queue_timeout_s: float = 300.0,
        las_quantum_s: float = 1.0,
        failover_attempts: int = 2,
        affinity_entries: int = 100_000,
        healthy_wait_s: float = 30.0,
        liveness_s: float | None = None,
        eject_s: float = 30.0,
    ) -> None:
        if not backends:
            raise ConfigError("a BackendPool needs at least one backend")
        names = [b.name for b in backends]
        if len(set(names)) != len(names):
            raise ConfigError(f"backend names must be unique: {names}")
        self.name = name
        self.backends = tuple(backends)
        # A call may land on any backend: ask natively only if every one of them can.
        native = all(b.model.structured_output == "native" for b in self.backends)
        self.structured_output = "native" if native else "tool"
        # Traces name the backends' provider; a pool mixing providers names itself.
        providers = {b.model.provider for b in self.backends}
        self.provider = providers.pop() if len(providers) == 1 else "podium.pool"
        # And the model they are asked for, when they all ask for the same one.
        asked = {b.model.traced_model for b in self.backends}
        self.request_model = asked.pop() if len(asked) == 1 else None
        for b in self.backends:
            if hasattr(b.model, "failover_statuses"):
                # a restarting server answers 503 on every path: send the call elsewhere
                # now instead of retrying it there (see backend_lost)
                b.model.failover_statuses = FAILOVER_STATUSES
        groups = list(dict.fromkeys(b.group for b in backends))
        self._groups = {g: [b for b in backends if b.group == g] for g in groups}
        self.router = Router(
            rules, default_group=default_group or groups[0], groups=groups, fallback=fallback
        )
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.unhealthy_after = unhealthy_after
        self.healthy_after = healthy_after
        self.queue_timeout_s = queue_timeout_s
        self.las_quantum_s = las_quantum_s
        self.failover_attempts = failover_attempts
        self.healthy_wait_s = healthy_wait_s
        self.eject_s = eject_s
        # A call's bound, waits and retries included: the longest its backends allow.
        bounds = [getattr(b.model, "timeouts", None) for b in self.backends]
        self._call_s = max(
            (t.total_s for t in bounds if isinstance(t, Timeouts)), default=_DEFAULT_CALL_S
        )
        self._rng = random.Random()
        #: How long a call waits for a healthy backend: within the call's own bound.
        self._wait_s = min(healthy_wait_s, self._call_s)
        self.liveness_s = 3 * health_interval_s if liveness_s is None else liveness_s
        self._came_up = asyncio.Event()  # set (and replaced) when a backend is admitted
        self._said_down = False  # the warning that calls wait for a backend, once an outage
        self._kick = asyncio.Event()  # wakes the health loop early
        self._awaiting = 0  # calls waiting for a healthy backend
        self._closed = False
        self._queues: dict[tuple[str, ...], LASQueue[QueuedCall]] = {}
        self._affinity: OrderedDict[str, Backend] = OrderedDict()
        self._service: OrderedDict[str, float] = OrderedDict()
        self._affinity_entries = affinity_entries
        self._started: asyncio.Task[None] | None = None
        self._health_task: asyncio.Task[None] | None = None
        self.failovers = 0

    async def aclose(self) -> None:
        starting = self._started
        if starting is not None and not starting.done():
            starting.cancel()
            await asyncio.wait([starting])
        task, self._health_task = self._health_task, None
        await stop_task(task)
        self._closed = True
        self._came_up.set()  # calls waiting for a healthy backend give up now
        for queue in self._queues.values():
            for call in queue.drain():
                if not call.future.done():
                    call.future.set_exception(ModelUnavailableError(f"{self.name} closed"))
        for b in self.backends:
            await b.model.aclose()

    # --- slots ------------------------------------------------------------------

    def _active_group(self, chain: tuple[str, ...]) -> str | None:
        for g in chain:
            if any(b.state == "healthy" for b in self._groups[g]):
                return g
        return None

    def _pick(self, run_id: str, group: str, exclude: frozenset[str]) -> Backend | None:
        if run_id:
            b = self._affinity.get(run_id)
            if b is not None and b.group == group and b.free and b.name not in exclude:
                return b
        best: Backend | None = None
        best_load = 2.0
        for b in self._groups[group]:
            if b.free and b.name not in exclude:
                load = b.outstanding / b.capacity
                if load < best_load:
                    best, best_load = b, load
        return best

    async def _acquire(
        self, request: ModelRequest, exclude: frozenset[str], deadline: float
    ) -> Backend:
        """A slot on a healthy backend of the request's groups; waits while none is
        healthy until ``deadline`` (loop time), then raises :class:`ModelUnavailableError`."""
        chain = self.router.chain(request)
        while True:
            group = self._active_group(chain)
            if group is None:
                await self._await_healthy(chain, deadline)
                continue
            backend = self._pick(request.run_id, group, exclude)
            if backend is not None:
                backend.outstanding += 1
                return backend
            if all(b.name in exclude for b in self._groups[group] if b.state == "healthy"):
                raise ModelUnavailableError(
                    f"{self.name}: every healthy backend already failed this call"
                )
            try:
                return await self._enqueue(request, chain, exclude)
            except NoHealthyBackend:
                continue  # its groups went down while it queued: wait for one to come up

    async def _await_healthy(self, chain: tuple[str, ...], deadline: float) -> None:
        loop = asyncio.get_running_loop()
        if self._closed:
            raise ModelUnavailableError(f"{self.name} closed")
        if loop.time() >= deadline:
            raise ModelUnavailableError(
                f"{self.name}: no healthy backend in groups {chain}"
                + (f" after waiting {self._wait_s:g}s" if self._wait_s > 0 else "")
                + self._why_down(chain)
            )
        if not self._said_down and self._wait_s > 0:
            # Once per outage: a call may wait healthy_wait_s in silence otherwise.
            self._said_down = True
            log.warning("%s: no healthy backend in groups %s; calls wait up to %gs for one%s",
                        self.name, chain, self._wait_s, self._why_down(chain))
        self._awaiting += 1
        self._kick.set()  # check now, then every _WAITING_INTERVAL_S while calls wait
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline):
                    await self._came_up.wait()
        finally:
            self._awaiting -= 1

    def _why_down(self, chain: tuple[str, ...]) -> str:
        reasons = [
            f"{b.name}: {type(b.last_error).__name__}: {b.last_error}"
            for g in chain
            for b in self._groups[g]
            if b.last_error is not None
        ]
        return f" (last errors: {'; '.join(reasons)})" if reasons else ""

    async def _enqueue(
        self, request: ModelRequest, chain: tuple[str, ...], exclude: frozenset[str]
    ) -> Backend:
        call = QueuedCall(chain, exclude)
        attained = max(request.attained_service_s, self._service.get(request.run_id, 0.0))
        affine = self._affinity.get(request.run_id) if request.run_id else None
        queue = self._queues.get(chain)
        if queue is None:
            queue = self._queues[chain] = LASQueue()
        waiter = queue.push(
            call,
            service_level(attained, self.las_quantum_s),
            affine.name if affine is not None else None,
        )
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                return await call.future
        except BaseException as exc:
            queue.remove(waiter)
            fut = call.future
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled() and fut.exception() is None:
                self._release(fut.result(), "", 0.0, False)  # handed a slot as we gave up
            if isinstance(exc, TimeoutError):
                raise ModelTimeoutError(
                    f"{self.name}: no backend slot within {self.queue_timeout_s}s"
                ) from None
            raise

    def _eligible(self, backend: Backend) -> Callable[[QueuedCall], bool]:
        def ok(call: QueuedCall) -> bool:
            return backend.name not in call.exclude

        return ok

    def _dispatch(self, backend: Backend) -> None:
        """Hand ``backend``'s free slots to the best waiting calls that may use it."""
        while backend.free:
            best: tuple[tuple[int, int], LASQueue[QueuedCall]] | None = None
            ok = self._eligible(backend)
            for chain, queue in self._queues.items():
                if not queue or self._active_group(chain) != backend.group:
                    continue
                key = queue.peek_key(backend.name, ok)
                if key is not None and (best is None or key < best[0]):
                    best = (key, queue)
            if best is None:
                return
            call = best[1].pop(backend.name, ok)
            if call is None or call.future.done():
                continue
            backend.outstanding += 1
            call.future.set_result(backend)

    def _release(self, backend: Backend, run_id: str, service_s: float, ok: bool) -> None:
        backend.outstanding -= 1
        if not ok and run_id and self._affinity.get(run_id) is backend:
            del self._affinity[run_id]  # the run's next call (a retry) may go elsewhere
        if ok:
            backend.served += 1
            backend.timeouts_in_row = 0
            backend.ejections = 0
            backend.last_ok = time.monotonic()
            if run_id:
                self._remember(self._affinity, run_id, backend)
                self._remember(self._service, run_id, self._service.get(run_id, 0.0) + service_s)
        self._dispatch(backend)

    def _remember(self, table: OrderedDict[str, V], key: str, value: V) -> None:
        table[key] = value
        table.move_to_end(key)
        if len(table) > self._affinity_entries:
            table.popitem(last=False)

    def _fail_stranded(self) -> None:
        """Fail queued calls that no healthy backend can serve any more."""
        for chain, queue in self._queues.items():
            if queue and self._active_group(chain) is None:
                for call in queue.drain():
                    if not call.future.done():
                        call.future.set_exception(
                            NoHealthyBackend(f"{self.name}: no healthy backend in {chain}")
                        )

    async def _after_stall(
        self,
        request: ModelRequest,
        backend: Backend,
        exc: BackendStalledError,
        exclude: frozenset[str],
        tries: Tries,
        end: float,
    ) -> frozenset[str]:
        """``backend`` took the call and made no progress. It is counted as a timeout (in
        a row, they take it out for ``eject_s``) and probed at once: no answer, or an
        error, drains it now (its calls proved it stuck, whatever its load). The call
        moves to another healthy backend if there is one and time is left; else ``exc``
        is raised."""
        self._timed_out(backend, exc)
        if backend.state == "healthy":
            result = await backend.probe(self.health_timeout_s)
            if result != "ok" and backend.state == "healthy":  # (another call drained it)
                backend._passes = 0
                backend._fails += 1
                self._drain(backend)
        exclude |= {backend.name}
        loop = asyncio.get_running_loop()
        if (
            tries.failovers >= self.failover_attempts
            or loop.time() >= end
            or not self._alternative(request, exclude)
        ):
            raise exc
        tries.failovers += 1
        self.failovers += 1
        backend.failovers += 1
        return exclude

    # --- calls --------------------------------------------------------------------

    def _deadlines(self) -> tuple[float, float]:
        """The loop times by which a call gives up waiting for a healthy backend, and
        by which it ends whatever happens: its backends' ``total_s`` (``timeout_s`` in
        ``podium.toml``: one call, retries included) bounds both."""
        now = asyncio.get_running_loop().time()
        return now + self._wait_s, now + self._call_s

    def _alternative(self, request: ModelRequest, exclude: frozenset[str]) -> bool:
        """Whether a healthy backend of the request's groups has not failed this call."""
        group = self._active_group(self.router.chain(request))
        return group is not None and any(
            b.state == "healthy" and b.name not in exclude for b in self._groups[group]
        )

    async def _after_loss(
        self,
        request: ModelRequest,
        backend: Backend,
        exc: BaseException,
        exclude: frozenset[str],
        tries: Tries,
        end: float,
    ) -> frozenset[str]:
        """``backend`` failed this call and is checked; the backends to leave out of its
        next try. Drained (its health check failed too): another backend, or whichever
        passes its health check within ``healthy_wait_s`` (this one too, back). Still
        healthy, with another healthy backend: that one, at once. Either is a failover,
        ``failover_attempts`` at most. Still healthy and none other left (one backend, or
        all failed the call): the same ones again after a backoff (``Retry-After``
        honoured), as a lone client retries, within the backend's retry policy and the
        call's time. Else ``exc`` is raised."""
        await self._on_backend_error(backend, exc)
        drained = backend.state != "healthy"
        if not drained:
            exclude |= {backend.name}
        if drained or self._alternative(request, exclude):
            if tries.failovers >= self.failover_attempts:
                raise exc
            tries.failovers += 1
            self.failovers += 1
            backend.failovers += 1
            return exclude
        policy = getattr(backend.model, "retry", None)
        if not isinstance(policy, RetryPolicy):
            policy = _DEFAULT_RETRY
        retry_after = exc.retry_after if isinstance(exc, ModelHTTPError) else None
        delay = policy.delay(tries.retries, self._rng, retry_after)
        loop = asyncio.get_running_loop()
        if delay is None or loop.time() + delay >= end:
            raise exc
        tries.retries += 1
        backend.retries += 1
        await asyncio.sleep(delay)
        return frozenset()

    async def _acquire_after(
        self,
        request: ModelRequest,
        exclude: frozenset[str],
        deadline: float,
        cause: BaseException | None,
    ) -> Backend:
        try:
            return await self._acquire(request, exclude, deadline)
        except ModelUnavailableError as exc:
            if cause is None:
                raise
            # keep what went wrong on the backend that was lost, not only "no backend"
            raise ModelUnavailableError(f"{exc}; the call failed on: {cause}") from cause

    async def request(self, request: ModelRequest) -> ModelResponse:
        await self.start()
        exclude: frozenset[str] = frozenset()
        wait_until, end = self._deadlines()
        cause: BaseException | None = None
        tries = Tries()
        spent = Usage()  # what the failed attempts cost (they count, as the server billed)
        while True:
            backend = await self._acquire_after(request, exclude, wait_until, cause)
            t0 = time.perf_counter()
            ok = False
            stalled: BackendStalledError | None = None
            try:
                response = await backend.model.request(request)
                ok = True
                if spent.requests:
                    response.usage = response.usage + spent
                    response.usage_estimated = True
                return response
            except (ModelUnavailableError, StreamTruncatedError, ModelHTTPError) as exc:
                if not backend_lost(exc):
                    raise
                cause = exc
            except BackendStalledError as exc:
                cause = stalled = exc
            except ModelTimeoutError as exc:
                self._timed_out(backend, exc)
                raise
            except asyncio.CancelledError:
                backend.cancelled += 1
                raise
            finally:
                self._release(backend, request.run_id, time.perf_counter() - t0, ok)
            spent = spent + attempt_usage(request, cause, 0)
            if stalled is not None:
                exclude = await self._after_stall(request, backend, stalled, exclude, tries, end)
            else:
                exclude = await self._after_loss(request, backend, cause, exclude, tries, end)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta]:
        """Stream from one backend; fails over like :meth:`request`. A call that fails
        over after deltas were yielded starts again from the beginning on the next
        backend, after a ``StreamDelta(reset=True)``: never spliced onto the text the
        lost backend had sent (the two generations differ)."""
        await self.start()
        exclude: frozenset[str] = frozenset()
        wait_until, end = self._deadlines()
        cause: BaseException | None = None
        tries = Tries()
        spent = Usage()  # what the failed attempts cost (they count, as the server billed)
        flowed = False  # deltas of this call went out: a restart must say so first
        while True:
            backend = await self._acquire_after(request, exclude, wait_until, cause)
            if flowed:
                flowed = False
                yield StreamDelta(reset=True)
            t0 = time.perf_counter()
            ok = False
            stalled: BackendStalledError | None = None
            pieces = 0  # token deltas of this attempt
            try:
                async for delta in backend.model.stream(request):
                    flowed = True
                    if delta.response is not None and spent.requests:
                        delta.response.usage = delta.response.usage + spent
                        delta.response.usage_estimated = True
                    else:
                        pieces += 1
                    yield delta
                ok = True
                return
            except (ModelUnavailableError, StreamTruncatedError, ModelHTTPError) as exc:
                if not backend_lost(exc):
                    raise
                cause = exc
            except BackendStalledError as exc:
                cause = stalled = exc
            except ModelTimeoutError as exc:
                self._timed_out(backend, exc)
                raise
            except asyncio.CancelledError:
                backend.cancelled += 1
                raise
            finally:
                self._release(backend, request.run_id, time.perf_counter() - t0, ok)
            spent = spent + attempt_usage(request, cause, pieces)
            if stalled is not None:
                exclude = await self._after_stall(request, backend, stalled, exclude, tries, end)
            else:
                exclude = await self._after_loss(request, backend, cause, exclude, tries, end)

    async def health(self, timeout_s: float = 2.0) -> bool:
        """True if at least one backend is healthy (runs the first health round if needed)."""
        async with asyncio.timeout(timeout_s):
            await self.start()
        return any(b.state == "healthy" for b in self.backends)

    @property
    def health_error(self) -> str | None:
        """Why no backend is healthy (each one's last error), None while one is."""
        if any(b.state == "healthy" for b in self.backends):
            return None
        why = self._why_down(tuple(self._groups))
        return why.removeprefix(" (last errors: ").removesuffix(")") or "no backend is healthy"

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            tuple(
                BackendStatistics(
                    b.name,
                    b.group,
                    b.state,
                    b.outstanding,
                    b.capacity,
                    b.served,
                    b.failures,
                    drains=b.drains,
                    failovers=b.failovers,
                    retries=b.retries + getattr(b.model, "retries", 0),
                    timeouts=b.timeouts,
                    cancelled=b.cancelled,
                )
                for b in self.backends
            ),
            sum(len(q) for q in self._queues.values()),
            self.failovers,
        )
