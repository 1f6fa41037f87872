"""Timeouts, retries and the circuit breaker of one model endpoint (sans I/O).

The client asks :class:`RetryPolicy` how long to wait before the next
attempt and asks :class:`CircuitBreaker` whether to try at all; neither
sleeps nor reads a clock it was not given, so both are tested without a loop.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable

import msgspec

from podium.breaker import BreakerPolicy, BreakerStatistics
from podium.breaker import CircuitBreaker as _SharedBreaker
from podium.errors import ConfigError, ModelUnavailableError

__all__ = (
    "BreakerStatistics",
    "CircuitBreaker",
    "RetryPolicy",
    "Timeouts",
    "parse_retry_after",
)


class Timeouts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Every wait of a call is bounded by one of these (seconds).

    ``first_byte_s`` runs from sending the request to the response headers
    (for a non-streamed call that is the whole generation); ``read_s`` bounds
    each read of the body (the gap between two streamed chunks); ``total_s``
    bounds the whole call, retries and their backoff included.
    ``token_idle_s`` bounds the time a stream may go without a token once its
    headers arrived: keep-alive comments (``: ping``) keep ``read_s`` from
    firing but are not progress, so a stalled server is cut off here rather
    than at ``total_s``. ``first_token_s`` (None: no bound of its own) bounds a
    streamed call from its request to its first token: a server that takes the
    request and then makes no progress (hung, stopped) is cut off there, and a
    pool takes it for stuck. A call that is not streamed sends nothing before
    its whole reply, so it has no first token to wait for.
    """

    connect_s: float = 5.0
    first_byte_s: float = 300.0
    read_s: float = 60.0
    total_s: float = 600.0
    token_idle_s: float = 120.0
    first_token_s: float | None = None


class RetryPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Exponential backoff with full jitter; ``Retry-After`` wins when the server sends it.

    ``attempts`` counts every try, the first included. A ``Retry-After``
    above ``max_retry_after_s`` ends the retries: the server asked for longer
    than the caller should wait.
    """

    attempts: int = 4
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    max_retry_after_s: float = 30.0
    statuses: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504})

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError("RetryPolicy.attempts must be at least 1")

    def delay(
        self, retry: int, rng: random.Random, retry_after: float | None = None
    ) -> float | None:
        """Seconds to wait before retry number ``retry`` (0-based), or None to stop."""
        if retry + 1 >= self.attempts:
            return None
        if retry_after is not None:
            if retry_after > self.max_retry_after_s:
                return None
            # a little jitter on top, so clients told the same date do not return together
            return retry_after + rng.uniform(0.0, self.backoff_s)
        return rng.uniform(0.0, min(self.max_backoff_s, self.backoff_s * (2**retry)))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class CircuitBreaker(_SharedBreaker):
    """The shared breaker with an endpoint's vocabulary: :meth:`check` raises
    :class:`ModelUnavailableError` while open, so callers fail fast instead of
    queueing on a dead endpoint."""

    __slots__ = ("name",)

    def __init__(
        self,
        failures: int = 5,
        reset_s: float = 5.0,
        *,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(BreakerPolicy(failures, reset_s), clock=clock)
        self.name = name

    def check(self) -> None:
        """Raise if no call may go now; in half-open state only one probe may."""
        if not self.allow():
            raise ModelUnavailableError(
                f"circuit open for {self.name or 'endpoint'} after {self.consecutive_failures}"
                f" failures (next probe in {self.retry_in():.1f}s)"
            )

    success = _SharedBreaker.record_success
    failure = _SharedBreaker.record_failure
