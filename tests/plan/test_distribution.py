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


def _profiled(values: list[float]) -> Distribution:
    from podium.engine.profile import QUANTILE_POINTS, percentile

    values.sort()
    return Distribution.from_percentiles(QUANTILE_POINTS,
                                         [percentile(values, p) for p in QUANTILE_POINTS])


@pytest.mark.parametrize(("share", "mean_s"), [(0.5, 0.004), (0.3, 0.050)])
def test_a_hosts_stalls_come_out_of_a_measured_wait(share: float, mean_s: float) -> None:
    # Model calls of ~20 ms, timed on a loop the host kept off its core `share` of the
    # time in episodes of `mean_s`: the profile's percentiles carry the stalls; taken out,
    # the body is the model's again, and the tail much nearer it than measured.
    rng = random.Random(1)
    calls = [rng.lognormvariate(-3.9, 0.35) for _ in range(100_000)]
    timed = [c + (rng.expovariate(1 / mean_s) if rng.random() < share else 0.0)
             for c in calls]
    model, measured = _profiled(calls), _profiled(timed)
    back = measured.without_stalls(share, mean_s)
    for u in (0.1, 0.5, 0.9):
        assert back.quantile(u) == pytest.approx(model.quantile(u), rel=0.05)
    true, was, now = model.quantile(0.99), measured.quantile(0.99), back.quantile(0.99)
    assert abs(now - true) < 0.4 * abs(was - true)
    assert back.mean == pytest.approx(model.mean, rel=0.05)
    assert measured.without_stalls(0.0, mean_s) == measured


def test_a_measured_delay_comes_out_of_a_measured_wait() -> None:
    # The same calls, timed with a delay whose distribution was measured apart (a timer's
    # lag on the loop): matched back, the calls' percentiles again.
    rng = random.Random(2)
    calls = [rng.lognormvariate(-3.9, 0.35) for _ in range(100_000)]
    delays = [rng.expovariate(1 / 0.004) if rng.random() < 0.5 else 0.0 for _ in calls]
    timed = [c + d for c, d in zip(calls, delays, strict=True)]
    model, measured, lag = _profiled(calls), _profiled(timed), _profiled(delays)
    back = measured.less(lag)
    # From 18 percentiles of each, within 8 % (10 % at the p99), where the measured
    # was 8–12 % over.
    for u in (0.5, 0.9):
        assert back.quantile(u) == pytest.approx(model.quantile(u), rel=0.08)
    assert back.quantile(0.99) == pytest.approx(model.quantile(0.99), rel=0.10)
    assert back.mean == pytest.approx(model.mean, rel=0.05)
    assert measured.less(constant(0.0)) == measured
