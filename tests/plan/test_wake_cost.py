"""A wake-up of the loaded loop priced across a sweep's levels: the slope of the CPU per
step on the wake-ups per step."""

from __future__ import annotations

import pytest

from podium.plan.profile import wake_cost_across_levels


def test_the_slope_of_cpu_on_wakeups_is_the_price_of_a_wakeup() -> None:
    # 50 µs of work a step and 180 µs a wake-up, at two levels and at three.
    assert wake_cost_across_levels([(50 + 180 * 0.33, 0.33), (50 + 180 * 0.15, 0.15)]) == \
        pytest.approx(180.0)
    levels = [(111.0, 0.335), (78.0, 0.154), (53.0, 0.011)]  # measured here, one each
    assert wake_cost_across_levels(levels) == pytest.approx(179.0, abs=2.0)


@pytest.mark.parametrize("levels", [
    [],
    [(80.0, 0.15)],  # one level: no slope
    [(80.0, 0.15), (83.0, 0.17)],  # wake-ups too close: the slope is the host's noise
    [(70.0, 0.33), (80.0, 0.15)],  # more CPU with fewer wake-ups: no price to take
])
def test_levels_that_cannot_tell_price_nothing(levels: list[tuple[float, float]]) -> None:
    assert wake_cost_across_levels(levels) is None
