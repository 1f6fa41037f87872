"""A measured p99's confidence interval: independent draws against runs slow together."""

from __future__ import annotations

import math
import random

import pytest

from podium.plan.confidence import binomial_interval, quantile_interval


def _exponential(n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.expovariate(1.0) for _ in range(n)]


def test_independent_draws_the_interval_holds_the_true_p99_and_narrows_with_n() -> None:
    true_p99 = math.log(100.0)  # the exponential's
    widths = []
    for n in (1_000, 16_000):
        values = _exponential(n, seed=n)
        lo, hi = quantile_interval(values, 99)
        blo, bhi = binomial_interval(values, 99)
        assert lo <= true_p99 <= hi and blo <= true_p99 <= bhi
        # Independent draws: the blocks change nothing, both intervals about as wide.
        assert 0.5 < (hi - lo) / (bhi - blo) < 2.0
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 2.5  # 16 times the runs: about a quarter as wide


def test_runs_slow_together_widen_the_interval_independent_draws_do_not() -> None:
    values = _exponential(20_000, seed=3)
    for i in range(9_000, 9_300):  # one episode: 300 runs in a row held 10 s longer
        values[i] += 10.0
    lo, hi = quantile_interval(values, 99)
    blo, bhi = binomial_interval(values, 99)
    # The p99 rests on that one episode: resamples without it (p99 about 4.6) and with it
    # twice (all of the top percent in it) both come up.
    assert lo < 7.0 and hi > 10.0
    # Counted as independent draws, the same values look certain.
    assert bhi - blo < 1.0
    # Shuffled, the same values are independent draws again: a narrow interval.
    shuffled = list(values)
    random.Random(5).shuffle(shuffled)
    slo, shi = quantile_interval(shuffled, 99)
    assert shi - slo < 2.0


def test_the_interval_is_deterministic_and_refuses_no_values() -> None:
    values = _exponential(5_000, seed=9)
    assert quantile_interval(values, 99, seed=4) == quantile_interval(values, 99, seed=4)
    lo, hi = quantile_interval(values, 50)
    assert lo <= sorted(values)[2_500] <= hi
    with pytest.raises(ValueError, match="at least one"):
        quantile_interval([], 99)
    with pytest.raises(ValueError, match="at least one"):
        binomial_interval([], 99)
