"""One circuit breaker for everything that can fail repeatedly: tools and model endpoints."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import msgspec

from podium.errors import ConfigError

__all__ = ("BreakerPolicy", "BreakerState", "BreakerStatistics", "CircuitBreaker")

BreakerState = Literal["closed", "open", "half_open"]


class BreakerPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Open after ``failure_threshold`` consecutive failures; probe after ``reset_timeout_s``."""

    failure_threshold: int = 5
    reset_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ConfigError("a breaker's failure_threshold must be at least 1")


class BreakerStatistics(msgspec.Struct, frozen=True):
    """A snapshot of a :class:`CircuitBreaker`."""

    state: BreakerState
    consecutive_failures: int
    opened: int
    rejected: int


class CircuitBreaker:
    """A consecutive-failure circuit breaker.

    ``closed``: calls pass. After ``failure_threshold`` consecutive failures it
    is ``open``: calls are refused at once until ``reset_timeout_s`` passes.
    Then ``half_open``: one probe passes; its success closes the breaker, its
    failure opens it again for another ``reset_timeout_s``.
    """

    __slots__ = (
        "_clock",
        "_consecutive",
        "_opened",
        "_opened_at",
        "_probing",
        "_rejected",
        "policy",
    )

    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float] | None = None) -> None:
        self.policy = policy
        self._clock = clock or time.monotonic
        self._consecutive = 0
        self._opened_at: float | None = None
        self._probing = False
        self._opened = 0
        self._rejected = 0

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._clock() - self._opened_at >= self.policy.reset_timeout_s:
            return "half_open"
        return "open"

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive

    def allow(self) -> bool:
        """Whether a call may start now (a half-open breaker lets one probe through)."""
        if self._opened_at is None:
            return True
        if self.state == "half_open" and not self._probing:
            self._probing = True
            return True
        self._rejected += 1
        return False

    def record_success(self) -> None:
        self._consecutive = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self) -> None:
        self._consecutive += 1
        threshold_met = self._consecutive >= self.policy.failure_threshold
        if self._probing or (self._opened_at is None and threshold_met):
            self._opened_at = self._clock()
            self._opened += 1
        self._probing = False

    def abandon(self) -> None:
        """The call ended without a verdict (cancelled): let another probe through."""
        self._probing = False

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a probe through (0 when not open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self.policy.reset_timeout_s - (self._clock() - self._opened_at))

    def statistics(self) -> BreakerStatistics:
        return BreakerStatistics(self.state, self._consecutive, self._opened, self._rejected)
