"""The loop's sleeps in the simulation (:class:`podium.plan.LoopWakes`): a wake-up's CPU
held before the first burst after a sleep, against the closed form of an M/G/1 queue with
setup times; the loop's tick batching what wakes it."""

from __future__ import annotations

import random

import pytest
from tests.plan.test_queueing import Constant, Exponential

from podium.plan import LoopWakes, simulate
from podium.plan.profile import LOOP_TICK_S, ProfileFacts, loop_wakes
from podium.plan.queueing import mg1_setup_wait, mg1_setup_wakeups


class BurstWaitBurst:
    """A run of a burst, a constant wait and a burst: two wake-ups at a trickle."""

    def __init__(self, burst_s: float, wait_s: float) -> None:
        self.burst_s, self.wait_s = burst_s, wait_s

    def segments(self, rng: random.Random) -> tuple[list[float], frozenset[int]]:
        return [self.burst_s, self.wait_s, self.burst_s], frozenset({1})


@pytest.mark.parametrize(("rho", "setup_over_s"), [(0.3, 2.0), (0.7, 0.5), (0.5, 4.0)])
def test_the_wait_and_the_wakeups_are_those_of_mg1_with_setup_times(
        rho: float, setup_over_s: float) -> None:
    s = 0.001
    rate, setup = rho / s, setup_over_s * s
    result = simulate([(Exponential(s), rate)], runs=300_000, seed=11,
                      wakes=LoopWakes(setup))
    # A run is one burst: its latency is its wait (the setup included) and its burst.
    wait = result.classes[0].mean_s - s
    assert wait == pytest.approx(mg1_setup_wait(rate, s, 1.0, setup), rel=0.03)
    assert result.wakeups_per_run == pytest.approx(mg1_setup_wakeups(rate, s, setup),
                                                   rel=0.02)


def test_a_saturated_loop_never_sleeps_and_never_pays() -> None:
    s = 0.001
    plain = simulate([(Constant(s), 2 / s)], runs=20_000, seed=3)
    woken = simulate([(Constant(s), 2 / s)], runs=20_000, seed=3, wakes=LoopWakes(0.01))
    assert woken.wakeups_per_run < 1e-3
    assert woken.rate == pytest.approx(plain.rate, rel=0.01)


def test_on_its_tick_a_loop_wakes_at_most_once_a_tick_and_waits_end_on_one() -> None:
    work = BurstWaitBurst(20e-6, 0.0203)
    rate = 3000.0  # six bursts a millisecond: a loop that woke for each would wake often
    free = simulate([(work, rate)], runs=20_000, seed=4, wakes=LoopWakes(1e-6))
    ticked = simulate([(work, rate)], runs=20_000, seed=4, wakes=LoopWakes(1e-6, 1e-3))
    assert free.wakeups_per_run * rate > 2_000
    assert ticked.wakeups_per_run * rate <= 1_000 * 1.01
    # At a trickle: the wait seen on the tick after it ends (20.3 ms: on the 21st or 22nd,
    # as the run came between ticks), the whole run never on the free loop's 20.34 ms.
    lone = simulate([(work, 0.5)], runs=2_000, seed=4, wakes=LoopWakes(0.0, 1e-3))
    assert 0.0207 < lone.classes[0].mean_s < 0.0222
    assert lone.classes[0].p50_s != pytest.approx(0.02034, abs=2e-4)


def test_wakes_are_for_one_loop_and_sane() -> None:
    with pytest.raises(ValueError, match="one loop"):
        simulate([(Exponential(0.01), 50.0)], servers=2, runs=100, wakes=LoopWakes(1e-4))
    with pytest.raises(ValueError):
        LoopWakes(-1.0)


def _facts(kind: str, wake_us: float | None) -> ProfileFacts:
    return ProfileFacts(path="p.json", kind=kind, runs=100, steps=700, cpu_counted="process",
                        wake_cpu_us=wake_us, wake_cpu_from="levels" if wake_us else None)


def test_a_profile_says_how_its_loop_wakes() -> None:
    assert loop_wakes([_facts("sweep", 137.0)]) == LoopWakes(137e-6, LOOP_TICK_S)
    # A store's runs waited on I/O: no tick. Several profiles: the dearest wake-up.
    assert loop_wakes([_facts("runs", 90.0), _facts("bench", 120.0)]) == LoopWakes(120e-6)
    assert loop_wakes([_facts("bench", None)]) is None
