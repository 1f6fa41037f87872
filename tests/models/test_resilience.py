"""Retry policy, Retry-After parsing and the circuit breaker, without a loop."""

from __future__ import annotations

import random

import pytest

from podium.errors import ConfigError, ModelUnavailableError
from podium.models import CircuitBreaker, RetryPolicy
from podium.models.resilience import parse_retry_after


def test_backoff_is_exponential_with_full_jitter_and_bounded() -> None:
    policy = RetryPolicy(attempts=6, backoff_s=0.1, max_backoff_s=0.5)
    rng = random.Random(1)
    for retry, cap in enumerate((0.1, 0.2, 0.4, 0.5, 0.5)):
        delay = policy.delay(retry, rng)
        assert delay is not None and 0.0 <= delay <= cap
    assert policy.delay(5, rng) is None  # attempts spent


def test_retry_after_wins_and_has_a_cap() -> None:
    policy = RetryPolicy(attempts=3, backoff_s=0.01, max_retry_after_s=10)
    delay = policy.delay(0, random.Random(0), retry_after=2.0)
    assert delay is not None and 2.0 <= delay <= 2.01
    assert policy.delay(0, random.Random(0), retry_after=11.0) is None
    with pytest.raises(ConfigError):
        RetryPolicy(attempts=0)


def test_parse_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None


def test_breaker_opens_probes_once_and_closes() -> None:
    now = [0.0]
    b = CircuitBreaker(failures=2, reset_s=5.0, clock=lambda: now[0])
    b.check()
    b.failure()
    b.check()
    b.failure()
    assert b.state == "open"
    with pytest.raises(ModelUnavailableError, match=r"next probe in 5\.0s"):
        b.check()
    now[0] = 5.0
    b.check()  # the one probe
    with pytest.raises(ModelUnavailableError):
        b.check()  # a second caller while probing is refused
    b.failure()  # probe failed: open again, for another reset_s
    assert b.state == "open"
    now[0] = 10.0
    b.check()
    b.abandon()  # cancelled probe: let the next one through
    b.check()
    b.success()
    assert b.state == "closed" and b.statistics().opened == 2
