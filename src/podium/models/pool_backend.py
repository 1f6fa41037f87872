"""One backend of a :class:`~podium.models.pool.BackendPool`: its model, capacity,
group, state, and the health probe that tells a dead server from a busy one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

import msgspec

from podium.errors import ConfigError, ModelTimeoutError, ModelUnavailableError
from podium.models.base import Model

__all__ = ("Backend", "BackendState", "BackendStatistics", "HealthCheck", "ProbeResult")

BackendState = Literal["pending", "healthy", "drained"]
ProbeResult = Literal["ok", "down", "timeout"]
HealthCheck = Callable[[float], Awaitable[bool]]
_GUARD_S = 0.05


class Backend:
    """One endpoint of a pool: a model, its batch capacity and its group.

    ``health`` is an async ``fn(timeout_s) -> bool``; by default the model's
    own ``health`` method (``OpenAIChatModel`` has one) or always healthy.
    """

    def __init__(
        self,
        model: Model,
        *,
        capacity: int = 64,
        group: str = "default",
        name: str | None = None,
        health: HealthCheck | None = None,
    ) -> None:
        if capacity < 1:
            raise ConfigError("backend capacity must be at least 1")
        self.model = model
        self.capacity = capacity
        self.group = group
        self.name = name or model.name
        probe = health or getattr(model, "health", None)
        self._health: HealthCheck | None = probe
        self.state: BackendState = "pending"
        self.outstanding = 0
        self.served = 0
        self.failures = 0
        self.last_ok = 0.0  # time.monotonic() of the last successful call
        self.last_error: BaseException | None = None  # why it was last drained or failed
        self.timeouts_in_row = 0  # calls that timed out since its last reply
        self.ejections = 0  # times it was left out for timeouts since its last reply
        self.ejected_until = 0.0  # time.monotonic() before which it takes no calls
        # what the metrics count (monotonic totals)
        self.drains = 0  # times it was taken out of the pool (probe, stalls, timeouts)
        self.failovers = 0  # calls moved from it to another backend
        self.retries = 0  # calls tried again on it by the pool after a backoff
        self.timeouts = 0  # calls that got no reply or no progress in time
        self.cancelled = 0  # calls cut by their caller (a run's deadline, a cancel)
        self._fails = 0
        self._passes = 0

    @property
    def free(self) -> bool:
        return self.state == "healthy" and self.outstanding < self.capacity

    async def probe(self, timeout_s: float) -> ProbeResult:
        """``ok``, ``down`` (refused, an error answer, False) or ``timeout`` (no answer)."""
        if self._health is None:
            return "ok"
        try:
            # A little past the check's own bound, so that a check that keeps it (the
            # model's: it names the URL that did not answer) says so first.
            async with asyncio.timeout(timeout_s + _GUARD_S):
                ok = await self._health(timeout_s)
        except ModelTimeoutError as exc:
            self.last_error = exc
            return "timeout"
        except TimeoutError:
            self.last_error = ModelTimeoutError(f"no answer to its health check in {timeout_s:g}s")
            return "timeout"
        except Exception as exc:  # a probe that breaks is a failed probe
            self.last_error = exc
            return "down"
        if not ok:  # what the probe saw (the URL, refused or an error status), if it says
            why = getattr(self.model, "health_error", None) or "its health check failed"
            self.last_error = ModelUnavailableError(why)
        return "ok" if ok else "down"


class BackendStatistics(msgspec.Struct, frozen=True):
    """A snapshot of one backend."""

    name: str
    group: str
    state: BackendState
    outstanding: int
    capacity: int
    served: int
    failures: int
    drains: int = 0
    failovers: int = 0
    #: tries again of its calls: the pool's, and the endpoint client's own (HTTP retries)
    retries: int = 0
    timeouts: int = 0
    cancelled: int = 0
