"""What a :class:`~podium.models.pool.BackendPool` keeps of its calls: one waiting for a
backend, what one call has spent on tries, what a failed attempt cost and whether its
error means the backend is gone; and the pool's statistics."""

from __future__ import annotations

import asyncio

import msgspec

from podium.errors import ModelHTTPError, ModelTimeoutError, ModelUnavailableError
from podium.messages import Usage
from podium.models.base import ModelRequest
from podium.models.openai_wire import StreamTruncatedError
from podium.models.pool_backend import Backend, BackendStatistics

__all__ = (
    "FAILOVER_STATUSES",
    "NoHealthyBackend",
    "PoolStatistics",
    "QueuedCall",
    "Tries",
    "attempt_usage",
    "backend_lost",
)

FAILOVER_STATUSES = frozenset({502, 503})  # the backend (or the proxy before it) is not serving


class PoolStatistics(msgspec.Struct, frozen=True):
    """A snapshot of the pool."""

    backends: tuple[BackendStatistics, ...]
    waiting: int
    failovers: int


class NoHealthyBackend(ModelUnavailableError):
    """Handed to queued calls when every backend of their groups went down; they wait."""


class Tries:
    """What one call has spent: moves to another backend, and tries again of backends
    that had all failed it."""

    __slots__ = ("failovers", "retries")

    def __init__(self) -> None:
        self.failovers = self.retries = 0


class QueuedCall:
    __slots__ = ("chain", "exclude", "future")

    def __init__(self, chain: tuple[str, ...], exclude: frozenset[str]) -> None:
        self.chain = chain
        self.exclude = exclude
        self.future: asyncio.Future[Backend] = asyncio.get_running_loop().create_future()


def attempt_usage(request: ModelRequest, exc: BaseException | None, pieces: int) -> Usage:
    """An estimate of what a failed attempt cost: the prompt, if the backend took the
    request (it answered, or a stream began), and one output token per delta it streamed.
    A refused connection cost nothing."""
    took = pieces > 0 or isinstance(exc, ModelHTTPError | StreamTruncatedError | ModelTimeoutError)
    if not took:
        return Usage()
    return Usage(request.prompt_tokens, pieces, 0, 1)


def backend_lost(exc: BaseException) -> bool:
    """Whether a call's error means its backend is gone (fail over) or the call is wrong."""
    if isinstance(exc, StreamTruncatedError):
        return True  # cut, or ended before the reply did: the backend's fault, not the call's
    if isinstance(exc, ModelHTTPError):
        return exc.status in FAILOVER_STATUSES and not exc.invalid_request
    return isinstance(exc, ModelUnavailableError)
