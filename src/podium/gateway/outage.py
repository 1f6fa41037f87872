"""Riding out an outage of the store or the queue (Redis restarting, a network blip).

A request that cannot do its work without the store answers ``503`` with
``Retry-After`` (see :mod:`podium.gateway.app`); a request that is already
waiting — a ``wait`` for a run's end, an SSE follower — keeps trying instead,
so a client that was promised a final event gets it once the store is back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ("RETRY_AFTER_S", "UNAVAILABLE", "Retrier", "is_unavailable", "unavailable_message")

T = TypeVar("T")

#: What a 503 tells clients to wait before retrying (seconds).
RETRY_AFTER_S = 1.0


def _unavailable_types() -> tuple[type[BaseException], ...]:
    # The stores translate their client's errors into StoreUnavailableError and
    # QueueUnavailableError (both ConnectionErrors); redis-py's own connection errors
    # are caught too in case one slips through untranslated.
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError
    except ImportError:  # pragma: no cover - redis is a dependency, but optional in spirit
        pass
    else:
        types += [RedisConnectionError, RedisTimeoutError]
    return tuple(types)


#: Exceptions that mean "the store or queue is unreachable", not "the request is wrong".
UNAVAILABLE: tuple[type[BaseException], ...] = _unavailable_types()


def is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, UNAVAILABLE)


def unavailable_message(exc: BaseException) -> str:
    """What a 503 says: the store or queue is unreachable, or (alive) refuses writes, and
    why (out of memory, a read-only replica): an operator reading it knows where to look."""
    try:
        from podium.store.redis_replies import refusal_reason
    except ImportError:  # pragma: no cover - redis is a dependency, but optional in spirit
        reason = None
    else:
        reason = refusal_reason(exc)
    if reason is not None:
        return f"the run store or queue refuses writes: {reason}; retry later"
    return "the run store or queue is unreachable; retry later"


class Retrier:
    """Calls a store operation again while the store is unreachable, up to ``give_up_at``.

    ``on_wait`` runs before each pause (an SSE follower sends a keep-alive
    comment there, so the client and proxies see the connection is alive).
    Once ``give_up_at`` (a ``time.monotonic()`` instant) has passed, the last
    error is raised.
    """

    def __init__(self, give_up_at: float, *, first_s: float = 0.1, max_s: float = 1.0) -> None:
        self.give_up_at = give_up_at
        self.first_s = first_s
        self.max_s = max_s
        self.failures = 0

    async def call(self, op: Callable[..., Awaitable[T]], *args: object) -> T:
        """``await op(*args)``, again while it fails with an outage, until ``give_up_at``."""
        delay = self.first_s
        while True:
            try:
                result = await op(*args)
            except UNAVAILABLE:
                self.failures += 1
                left = self.give_up_at - time.monotonic()
                if left <= 0:
                    raise
                await asyncio.sleep(min(delay, left))
                delay = min(self.max_s, delay * 2)
                continue
            return result
