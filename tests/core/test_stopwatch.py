"""The stopwatch's CPU figures: exact per slice with ``clock="thread"``, sampled by default.

A fake CPU clock that runs at half the wall clock's rate stands for a thread the
OS preempts half the time: every phase's CPU must come out at about half its
running time, whether the slice was measured or estimated from the measured ones.
"""

from __future__ import annotations

import time

import pytest

from podium.engine import stopwatch
from podium.engine.stopwatch import SAMPLE_EVERY, SampledStopwatch, Stopwatch


def half_speed_clock() -> int:
    return time.perf_counter_ns() // 2


def spin(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
def test_cpu_is_the_running_time_scaled_by_the_clock_and_waiting_is_not_cpu(kind: type) -> None:
    stopwatch._calibration.ratio = 1.0  # a fresh process's estimate
    sw = kind.start(half_speed_clock)
    profiles = []
    for step in range(10 * SAMPLE_EVERY):
        spin(200_000)
        sw.lap(0)
        sw.suspend(1)
        time.sleep(0.002)  # waiting: wall time of phase 1, no CPU
        sw.resume(1)
        spin(200_000)
        sw.lap(1)
        profile = sw.snapshot(step, 0, 0)
        sw.close_step(profile)
        profiles.append(profile)
    sw.finish()
    late = profiles[-SAMPLE_EVERY:]  # past the calibration's first slices
    for p in late:
        assert p is not None
        assert p.wall_ns[1] > 2_000_000 > p.cpu_ns[1]  # the sleep is waiting, not CPU
        ratio0 = p.cpu_ns[0] / p.wall_ns[0]
        assert 0.35 < ratio0 < 0.65, (kind.__name__, p)


def test_the_sampled_stopwatch_reads_the_cpu_clock_on_few_slices() -> None:
    reads = 0

    def counting_clock() -> int:
        nonlocal reads
        reads += 1
        return time.thread_time_ns()

    sw = SampledStopwatch.start(counting_clock)
    slices = 10 * SAMPLE_EVERY
    for step in range(slices // 2):
        sw.lap(0)
        sw.suspend(1)
        sw.resume(1)
        profile = sw.snapshot(step, 0, 0)
        sw.close_step(profile)
    sw.finish()
    assert reads <= 2 * (slices // SAMPLE_EVERY + 1), reads


def test_a_resumed_run_files_new_steps_after_its_replayed_ones_and_never_rescales_those() -> None:
    """The held steps are a range of the run's own profile list: a run resumed from its
    journal starts with the replayed profiles in it, and only the steps it runs now are
    held and settled (with a fake clock at half speed, so settling rescales them)."""
    from podium.engine.profile import StepProfile

    replayed = [StepProfile(0, (1,) * 6, (1,) * 6), StepProfile(1, (2,) * 6, (2,) * 6)]
    steps = list(replayed)
    sw = Stopwatch.start(half_speed_clock, steps=steps)
    for step in (2, 3, 4):
        spin(100_000)
        sw.lap(0)
        profile = sw.snapshot(step, 0, 0)
        sw.close_step(profile)
    assert [p.step for p in steps] == [0, 1, 2, 3, 4]
    sw.finish()
    assert steps[:2] == [StepProfile(0, (1,) * 6, (1,) * 6), StepProfile(1, (2,) * 6, (2,) * 6)]
    for p in steps[2:]:
        assert p.wall_ns[0] > 0
        assert 0.35 < p.cpu_ns[0] / p.wall_ns[0] < 0.65, p  # settled at the clock's rate
    sw.finish()  # nothing held any more: a second finish changes nothing
    assert len(steps) == 5
