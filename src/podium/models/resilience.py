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
from typing import Literal

import msgspec

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
    """

    connect_s: float = 5.0
    first_byte_s: float = 300.0
    read_s: float = 60.0
    total_s: float = 600.0


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


class BreakerStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a :class:`CircuitBreaker`."""

    state: Literal["closed", "open", "half_open"]
    consecutive_failures: int
    opened: int
    rejected: int


class CircuitBreaker:
    """Opens after ``failures`` consecutive failures; lets one probe through after ``reset_s``.

    While open, :meth:`check` raises :class:`ModelUnavailableError` at once,
    so callers fail fast instead of queueing on a dead endpoint. One success
    closes it again.
    """

    def __init__(
        self,
        failures: int = 5,
        reset_s: float = 5.0,
        *,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures < 1:
            raise ConfigError("CircuitBreaker.failures must be at least 1")
        self.name = name
        self.failures = failures
        self.reset_s = reset_s
        self._clock = clock
        self._consecutive = 0
        self._opened_at: float | None = None
        self._probing = False
        self._opened = 0
        self._rejected = 0

    @property
    def state(self) -> Literal["closed", "open", "half_open"]:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.reset_s:
            return "half_open"
        return "open"

    def check(self) -> None:
        """Raise if no call may go now; in half-open state only one probe may."""
        if self._opened_at is None:
            return
        state = self.state
        if state == "half_open" and not self._probing:
            self._probing = True
            return
        self._rejected += 1
        wait = max(0.0, self.reset_s - (self._clock() - self._opened_at))
        raise ModelUnavailableError(
            f"circuit open for {self.name or 'endpoint'} after {self._consecutive} failures"
            f" (next probe in {wait:.1f}s)"
        )

    def success(self) -> None:
        self._consecutive = 0
        self._opened_at = None
        self._probing = False

    def abandon(self) -> None:
        """The call ended without a verdict (cancelled): let another probe through."""
        self._probing = False

    def failure(self) -> None:
        self._consecutive += 1
        if self._probing or (self._opened_at is None and self._consecutive >= self.failures):
            self._opened_at = self._clock()
            self._opened += 1
        self._probing = False

    def statistics(self) -> BreakerStatistics:
        return BreakerStatistics(self.state, self._consecutive, self._opened, self._rejected)
