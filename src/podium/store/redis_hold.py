"""A run's write held through a Redis outage: sent again, unchanged, until Redis answers.

A worker whose tool call finished while Redis was away holds the call's outcome.
If it gave up on the write, the run would be driven again from the stored
journal, which lacks that outcome, and the call would run a second time (an email
sent twice, a payment made twice). So the write waits for Redis instead, up to
``hold_s``, and is sent again exactly as it was: every run write is idempotent
when repeated (a record write carries its writer's id and counter, a journal
append its explicit stream id) and fenced (a holder that lost the run to
another worker has its write refused, and it changes nothing).

Kept apart from :mod:`podium.store.redis` so that the fail-fast path (the
gateway's: a 503 within two seconds) and the holding path read separately.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ("HELD_ERRORS", "send_held")

T = TypeVar("T")

log = logging.getLogger("podium.store")

#: What says "Redis is away, the command may not have applied": worth sending again.
#: (A refusal Redis gave while loading its AOF or out of memory arrives as a connection
#: error too: the pipeline resends those itself until its patience runs out.)
HELD_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)

#: The longest pause between two sends while Redis is away: a write lands within about
#: this long of Redis answering again (before any other worker may take the run over).
_RESEND_CAP_S = 0.5


async def send_held(send: Callable[[], Awaitable[T]], hold_s: float, what: str) -> T:
    """``await send()``; while it fails as unavailable, call it again with jittered
    backoff until ``hold_s`` seconds have passed since the first call, then raise the last
    error. ``send`` must be safe to repeat (see the module docstring). ``hold_s <= 0``:
    one call, the caller's fail-fast path."""
    if hold_s <= 0:
        return await send()
    began = time.monotonic()
    failures = 0
    while True:
        try:
            reply = await send()
        except HELD_ERRORS as exc:
            waited = time.monotonic() - began
            if waited >= hold_s:
                log.error("%s: Redis away for %.1fs; the write is given up (%s)",
                          what, waited, exc)
                raise
            if failures == 0:
                log.warning("%s: Redis away (%s); holding the write for up to %gs",
                            what, exc, hold_s)
            failures += 1
            delay = random.uniform(0, min(_RESEND_CAP_S, 0.05 * 2 ** min(failures, 8)))
            await asyncio.sleep(min(delay, max(0.0, hold_s - waited)))
            continue
        if failures:
            log.warning("%s: written after %.1fs of Redis outage", what,
                        time.monotonic() - began)
        return reply
