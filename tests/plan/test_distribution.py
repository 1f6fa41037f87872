"""A measured distribution read back as a quantile function, and the what-ifs on it."""

from __future__ import annotations

import random

import pytest

from podium.plan.distribution import Distribution, constant


def test_quantiles_interpolate_between_the_measured_points() -> None:
    d = Distribution.from_percentiles([0, 50, 100], [0.010, 0.020, 0.060])
    assert d.quantile(0.0) == 0.010 and d.quantile(1.0) == 0.060
    assert d.quantile(0.25) == pytest.approx(0.015)
    assert d.quantile(0.75) == pytest.approx(0.040)
    assert d.mean == pytest.approx(0.5 * 0.015 + 0.5 * 0.040)


def test_draws_follow_the_distribution_tail_included() -> None:
    d = Distribution.from_percentiles([0, 50, 90, 99, 100], [1.0, 2.0, 3.0, 10.0, 20.0])
    rng = random.Random(4)
    draws = sorted(d.draw(rng) for _ in range(100_000))
    assert draws[50_000] == pytest.approx(2.0, rel=0.02)
    assert draws[99_000] == pytest.approx(10.0, rel=0.03)
    assert sum(draws) / len(draws) == pytest.approx(d.mean, rel=0.01)


def test_bad_percentiles_are_refused_and_values_made_monotonic() -> None:
    with pytest.raises(ValueError, match="increase"):
        Distribution.from_percentiles([0, 50, 50, 100], [1, 2, 3, 4])
    with pytest.raises(ValueError, match="as many"):
        Distribution.from_percentiles([0, 100], [1])
    assert Distribution.from_percentiles([0, 50, 100], [3, 2, 5]).values == (3.0, 3.0, 5.0)


def test_a_slower_tail_keeps_the_body() -> None:
    d = Distribution.from_percentiles([0, 50, 90, 99, 100], [0.01, 0.05, 0.1, 0.2, 0.3])
    slow = d.with_quantile(0.99, 3.0)
    assert slow.quantile(0.99) == pytest.approx(3.0)
    # Up to the p98 the calls are the ones measured; the top percent about 3 s.
    for p in (0.2, 0.5, 0.9, 0.98):
        assert slow.quantile(p) == pytest.approx(d.quantile(p))
    assert d.quantile(0.98) < slow.quantile(0.985) < 3.0
    assert slow.quantile(1.0) == pytest.approx(0.3 + 3.0 - 0.2)
    assert d.with_quantile(0.99, 0.02).quantile(0.99) == pytest.approx(0.02)


def test_scaled_and_shifted() -> None:
    d = Distribution.from_percentiles([0, 100], [0.010, 0.030])
    assert d.scaled(2).values == (0.020, 0.060)
    assert d.shifted(-0.015).values == (0.0, 0.015)
    assert constant(0.5).quantile(0.3) == 0.5
