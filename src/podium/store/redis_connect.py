"""The Redis client Podium uses, and Redis's errors as Podium's: one place, so the store,
the queue and the token channel connect and fail alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from podium.errors import (
    RunNotFoundError,
    StaleRunError,
    StoreError,
    StoreUnavailableError,
    ThreadNotFoundError,
)
from podium.store.redis_replies import is_refusal, refusal_reason

__all__ = ("UNAVAILABLE", "connect", "translate_errors", "translated")

#: Errors that mean "Redis is away"; redis-py retries these with backoff first.
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)


def connect(
    url: str = "redis://127.0.0.1:6379/0",
    *,
    retries: int = 2,
    socket_timeout: float = 10.0,
    connect_timeout: float = 0.5,
    max_connections: int | None = None,
) -> aioredis.Redis:
    """A redis-py asyncio client tuned for Podium: hiredis, a few jittered retries.

    With the defaults a command fails within about two seconds when Redis is away
    (the error says so quickly; callers that can wait retry on their own), and the
    next command after Redis is back reconnects. ``socket_timeout`` bounds a read,
    so it stays above the longest blocking read (8 s).
    """
    return aioredis.Redis.from_url(
        url,
        retry=Retry(ExponentialWithJitterBackoff(cap=0.25, base=0.05), retries),
        retry_on_error=[RedisConnectionError, RedisTimeoutError, ConnectionResetError],
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        health_check_interval=30,
        max_connections=max_connections,
    )


def translated(exc: Exception) -> Exception:
    """The Podium error for a Redis error (raise it ``from`` the original)."""
    if isinstance(exc, UNAVAILABLE) or is_refusal(exc):  # refused writes: "not now", a 503
        # Alive but refusing (out of memory, a replica) is not "unreachable": say which.
        reason = refusal_reason(exc)
        if reason is not None:
            return StoreUnavailableError(f"{reason}: {exc}")
        return StoreUnavailableError(f"redis unavailable: {exc}")
    message = str(exc)
    if message.startswith("PODIUM_STALE"):
        return StaleRunError(message.removeprefix("PODIUM_STALE "))
    if message.startswith("PODIUM_NOTFOUND"):
        return RunNotFoundError(message.removeprefix("PODIUM_NOTFOUND "))
    if message.startswith("PODIUM_THREAD_NOTFOUND"):
        return ThreadNotFoundError(message.removeprefix("PODIUM_THREAD_NOTFOUND "))
    if message.startswith("PODIUM_EXISTS"):
        return StoreError(f"run {message.removeprefix('PODIUM_EXISTS ')} exists")
    return StoreError(message)


@asynccontextmanager
async def translate_errors() -> AsyncIterator[None]:
    """Redis's errors become Podium's at this boundary."""
    try:
        yield
    except (*UNAVAILABLE, ResponseError) as exc:
        raise translated(exc) from exc
