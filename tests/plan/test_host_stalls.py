"""A shared host's stalls in the simulation: exact results for one loop whose core is
taken away at random (exponential episodes, preemptive-resume)."""

from __future__ import annotations

import pytest
from tests.plan.test_queueing import Constant, Exponential

from podium.plan import HostStalls, Kind, RunShape, saturation_rate, simulate
from podium.plan.distribution import constant


def test_at_a_trickle_a_burst_waits_out_the_stall_it_meets_and_those_it_runs_into() -> None:
    # A lone burst arriving at a random moment: off its core with probability `share`, for
    # the episode's residual (exponential: the whole mean); then S of work spread over
    # up-time, S / (1 - share) on average. Exact, with no queueing to speak of.
    share, mean_s, s = 0.4, 0.010, 0.002
    stalls = HostStalls(share, mean_s)
    result = simulate([(Constant(s), 0.5)], runs=200_000, seed=3, stalls=stalls)
    expected = share * mean_s + s / (1 - share)
    assert result.classes[0].mean_s == pytest.approx(expected, rel=0.02)


def test_an_overloaded_loop_completes_what_its_share_of_the_core_allows() -> None:
    share, service = 0.3, 0.001
    # Twice the arrivals it can serve: the loop works all the time it has its core.
    result = simulate([(Exponential(service), 2.0 / service)], runs=100_000, seed=5,
                      stalls=HostStalls(share, 0.004))
    assert result.utilization == pytest.approx(1 - share, rel=0.02)
    shape = RunShape("one", steps=1, tool_share=0.0, cpu_before_model=service / 2,
                     cpu_after_model=service / 2, cpu_after_tools=0.0,
                     model_wait=constant(0.0), tool_wait=constant(0.0))
    assert saturation_rate([Kind(shape, 1.0)], 2, HostStalls(share, 0.004)) == \
        pytest.approx(2 * (1 - share) / service)


def test_no_stalls_is_the_plain_simulation() -> None:
    plain = simulate([(Exponential(0.01), 50.0)], runs=5_000, seed=2)
    for none in (None, HostStalls(0.0, 0.01), HostStalls(0.5, 0.0)):
        assert simulate([(Exponential(0.01), 50.0)], runs=5_000, seed=2,
                        stalls=none) == plain
    stalled = simulate([(Exponential(0.01), 50.0)], runs=5_000, seed=2,
                       stalls=HostStalls(0.2, 0.01))
    assert stalled.classes[0].p99_s > plain.classes[0].p99_s


def test_stalls_are_for_one_loop_and_a_share_below_one() -> None:
    with pytest.raises(ValueError, match="one loop"):
        simulate([(Exponential(0.01), 50.0)], servers=2, runs=100,
                 stalls=HostStalls(0.2, 0.01))
    for bad in ((1.0, 0.01), (-0.1, 0.01), (0.2, -1.0)):
        with pytest.raises(ValueError, match="host stalls"):
            HostStalls(*bad)
