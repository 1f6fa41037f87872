"""The health of a :class:`~podium.models.pool.BackendPool`'s backends: the first round of
probes before any traffic, the periodic checks (faster while calls wait for a healthy
backend), and each probe's verdict: admit a backend, leave a busy one be, drain a dead one.
A mixin: the pool's constructor sets what it reads, and the pool dispatches calls."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from podium.errors import ModelTimeoutError
from podium.models.pool_backend import Backend, ProbeResult

__all__ = ("PoolHealth",)

log = logging.getLogger("podium.models.pool")

_WAITING_INTERVAL_S = 0.5  # health checks while calls wait for a healthy backend
_EJECT_MAX_S = 300.0  # the longest a backend whose calls time out is left out


class PoolHealth:
    """Probing and the verdicts; see :class:`~podium.models.pool.BackendPool`."""

    name: str
    backends: tuple[Backend, ...]
    health_interval_s: float
    health_timeout_s: float
    unhealthy_after: int
    healthy_after: int
    liveness_s: float
    _started: asyncio.Task[None] | None
    _health_task: asyncio.Task[None] | None
    _awaiting: int
    _kick: asyncio.Event
    _came_up: asyncio.Event
    _said_down: bool
    _groups: dict[str, list[Backend]]
    eject_s: float

    def _dispatch(self, backend: Backend) -> None:
        raise NotImplementedError  # the pool's: start what waits for ``backend``

    def _fail_stranded(self) -> None:
        raise NotImplementedError  # the pool's: fail calls no backend can take now

    async def start(self) -> None:
        """Run the first health round (no traffic before it) and start the periodic checks.

        The round runs in a task of its own that every caller waits on: a caller
        cancelled meanwhile (its run was) leaves it running for the others.
        """
        task = self._started
        if task is None:
            task = self._started = asyncio.create_task(
                self._first_round(), name=f"{self.name}-start"
            )
        elif task.done():
            return  # a failed round resets _started: a finished one succeeded
        await asyncio.shield(task)

    async def _first_round(self) -> None:
        try:
            await self.check_health()
        except BaseException:
            self._started = None  # the next caller tries again
            raise
        self._health_task = asyncio.create_task(self._health_loop(), name=f"{self.name}-health")

    async def check_health(self) -> None:
        """Probe every backend once, now, and admit or drain them."""
        results = await asyncio.gather(*(b.probe(self.health_timeout_s) for b in self.backends))
        for backend, result in zip(self.backends, results, strict=True):
            self._verdict(backend, result)

    def _answered_within(self, backend: Backend, seconds: float) -> bool:
        return backend.last_ok > 0 and time.monotonic() - backend.last_ok < seconds

    async def _health_loop(self) -> None:
        while True:
            interval = self.health_interval_s
            if self._awaiting:
                interval = min(interval, _WAITING_INTERVAL_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._kick.wait()
            self._kick.clear()
            await self.check_health()

    def _verdict(self, backend: Backend, result: ProbeResult, *, now: bool = False) -> None:
        if result == "ok":
            backend._fails = 0
            backend._passes += 1
            if backend.ejected_until and time.monotonic() < backend.ejected_until:
                return  # it answers its health path, but its calls timed out: not yet
            if backend.state != "healthy" and backend._passes >= self.healthy_after:
                if backend.state == "drained":
                    log.info("%s: backend %s passed its health check: it takes calls again",
                             self.name, backend.name)
                backend.state = "healthy"
                self._came_up.set()
                self._came_up = asyncio.Event()
                self._said_down = False
                self._dispatch(backend)
            return
        if result == "timeout" and backend.state == "healthy" and self._busy(backend):
            return  # no answer from a server that is serving calls: busy, not dead
        backend._passes = 0
        backend._fails += 1
        if backend.state == "pending" or (
            backend.state == "healthy" and (now or backend._fails >= self.unhealthy_after)
        ):
            self._drain(backend)

    def _busy(self, backend: Backend) -> bool:
        """Whether a probe that got no answer may be put down to load: the backend answered
        a call lately, or its calls in flight are making progress. Calls that are stuck (a
        stopped or hung server) are not load: they must not keep it in the pool."""
        if self._answered_within(backend, self.liveness_s):
            return True
        if backend.outstanding == 0:
            return False
        progress_at = getattr(backend.model, "progress_at", None)
        if not isinstance(progress_at, float):
            return True  # a model that cannot say: its calls in flight count
        if getattr(backend.model, "unstreamed_calls", 0):
            return True  # a whole reply shows nothing before its end: no telling
        return time.monotonic() - progress_at < self.liveness_s

    def _drain(self, backend: Backend) -> None:
        why = backend.last_error
        others = sum(b.state == "healthy" and b is not backend for b in self.backends)
        reason = f"{type(why).__name__}: {why}" if why is not None else "its health check failed"
        if backend.state == "pending":
            log.warning("%s: backend %s is not taking calls: %s", self.name, backend.name, reason)
        elif backend.state == "healthy":
            backend.drains += 1
            log.warning("%s: backend %s drained (%s); %d other backend(s) take its calls",
                        self.name, backend.name, reason, others)
        backend.state = "drained"
        self._fail_stranded()
        for other in self.backends:  # calls whose group went down may use a fallback now
            self._dispatch(other)

    def _timed_out(self, backend: Backend, exc: ModelTimeoutError) -> None:
        """A call on ``backend`` got no reply in time. One is a slow generation; calls that
        time out one after another on a backend that still answers its health path (a
        wedged engine) take it out of the pool for a while, doubling each time, while
        another backend of its group is healthy: a dead one would get half the calls."""
        backend.failures += 1
        backend.timeouts += 1
        backend.last_error = exc
        backend.timeouts_in_row += 1
        if backend.state != "healthy" or backend.timeouts_in_row < self.unhealthy_after:
            return
        if not any(b.state == "healthy" and b is not backend for b in self._groups[backend.group]):
            return  # the only one left: no better place for its calls
        eject_s = min(_EJECT_MAX_S, self.eject_s * 2**backend.ejections)
        backend.ejections += 1
        backend.timeouts_in_row = 0
        backend.ejected_until = time.monotonic() + eject_s
        log.warning("%s: backend %s timed out %d calls in a row (%s): no calls for %gs",
                    self.name, backend.name, self.unhealthy_after, exc, eject_s)
        self._drain(backend)

    async def _on_backend_error(self, backend: Backend, exc: BaseException) -> None:
        backend.failures += 1
        backend.last_error = exc
        if backend.state == "healthy":
            result = await backend.probe(self.health_timeout_s)
            if result != "ok":
                self._verdict(backend, result, now=True)
