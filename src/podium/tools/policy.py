"""Per-tool policies: timeout, retries with backoff and jitter, circuit breaker, concurrency."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from podium.errors import ConfigError, RetryableToolError

__all__ = ("BreakerPolicy", "BreakerStatistics", "CircuitBreaker", "ToolPolicy", "backoff_delay")


class BreakerPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Open after ``failure_threshold`` consecutive failures; probe after ``reset_timeout_s``."""

    failure_threshold: int = 5
    reset_timeout_s: float = 30.0


class ToolPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a tool is called.

    - ``timeout_s``: per attempt; ``None`` for no limit.
    - ``retries``: extra attempts for errors in ``retry_on`` (by default only
      :class:`~podium.errors.RetryableToolError` and timeouts), with exponential
      backoff from ``backoff_base_s`` capped at ``backoff_max_s`` and full jitter.
    - ``breaker``: a circuit breaker shared by every run in the process.
    - ``max_concurrency``: calls of this tool in flight at once, process-wide.
    - ``side_effects``: the tool receives an idempotency key ``run_id:step:call``.
    - ``cpu_bound``: run in the process pool instead of the thread pool (sync tools).
    - ``max_result_tokens``: overrides the agent's truncation limit for this tool.
    """

    timeout_s: float | None = 30.0
    retries: int = 0
    backoff_base_s: float = 0.1
    backoff_max_s: float = 5.0
    retry_on_timeout: bool = True
    retry_on: tuple[type[BaseException], ...] = (RetryableToolError,)
    breaker: BreakerPolicy | None = None
    max_concurrency: int | None = None
    side_effects: bool = False
    cpu_bound: bool = False
    max_result_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ConfigError("retries must be >= 0")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError("timeout_s must be positive or None")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError("max_concurrency must be >= 1 or None")


def backoff_delay(
    attempt: int, base_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(max, base × 2^attempt)]."""
    cap = min(max_s, base_s * (2**attempt))
    return (rng or random).uniform(0.0, cap)


BreakerState = Literal["closed", "open", "half_open"]


class BreakerStatistics(msgspec.Struct, frozen=True):
    state: BreakerState
    consecutive_failures: int
    opened_count: int
    rejected_count: int


class CircuitBreaker:
    """A consecutive-failure circuit breaker.

    ``closed``: calls pass. After ``failure_threshold`` consecutive failures it
    is ``open``: calls are rejected at once until ``reset_timeout_s`` passes.
    Then ``half_open``: one probe passes; success closes, failure re-opens.
    """

    __slots__ = ("_clock", "_failures", "_opened", "_opened_at", "_probing", "_rejected", "policy")

    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float] | None = None) -> None:
        self.policy = policy
        self._clock = clock or time.monotonic
        self._failures = 0
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

    def allow(self) -> bool:
        """Whether a call may start now (a half-open breaker lets one probe through)."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probing:
            self._probing = True
            return True
        self._rejected += 1
        return False

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probing = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._probing or self._failures >= self.policy.failure_threshold:
            if self._opened_at is None or self._probing:
                self._opened += 1
            self._opened_at = self._clock()
        self._probing = False

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a probe through (0 when not open)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self.policy.reset_timeout_s - (self._clock() - self._opened_at))

    def statistics(self) -> BreakerStatistics:
        return BreakerStatistics(self.state, self._failures, self._opened, self._rejected)
