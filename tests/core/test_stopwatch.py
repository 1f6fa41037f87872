"""The stopwatch's CPU figures: exact per slice with ``clock="thread"``, sampled by default.

A fake CPU clock that runs at half the wall clock's rate stands for a thread the
OS preempts half the time: every phase's CPU must come out at about half its
running time, whether the slice was measured or estimated from the measured ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from podium.engine import exact_stopwatch, sampled_stopwatch
from podium.engine.profile import StepProfile
from podium.engine.stopwatch import ENDS, SAMPLE_EVERY, SampledStopwatch, Stopwatch
from podium.observe.threadclock import ThreadClock


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
def test_cpu_is_the_running_time_scaled_by_the_clock_and_waiting_is_not_cpu(
    kind: type, clocks: FakeClocks
) -> None:
    # Fake clocks, not a spinning thread: a real one preempted between its two clock reads
    # moved the ratio past its bounds on a busy machine.
    # A fresh process's estimate.
    sampled_stopwatch._calibration.set(1.0, sampled_stopwatch.SAMPLED_TOLERANCE)

    def half_cpu() -> int:
        return clocks.cpu // 2

    sw = kind.start(half_cpu)
    profiles = []
    for step in range(10 * SAMPLE_EVERY):
        clocks.advance(200_000)
        sw.lap(0)
        wait(clocks, sw, 1, 2_000_000)  # waiting: wall time of phase 1, no CPU
        clocks.advance(200_000)
        sw.lap(1)
        profile = sw.snapshot(step, 0, 0)
        sw.close_step(profile)
        profiles.append(profile)
    sw.finish()
    late = profiles[-SAMPLE_EVERY:]  # past the calibration's first slices
    for p in late:
        assert p is not None
        assert p.wall_ns[1] > 2_000_000 > p.cpu_ns[1]  # the wait is waiting, not CPU
        ratio0 = p.cpu_ns[0] / p.wall_ns[0]
        assert 0.35 < ratio0 < 0.65, (kind.__name__, p)


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
def test_a_wait_books_the_stamped_phase_ends_and_keeps_no_int_for_them(
    kind: type[Stopwatch], clocks: FakeClocks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The phase ends stamped before a wait are booked at it and then set to 0 ("not
    stamped"): a waiting run's figures hold no int object for them. The step's walls are
    what the stamps made them, and the stamps after the wait count."""
    # A fresh process's ratio (1.0), not the one earlier tests' fake clocks left.
    monkeypatch.setattr(sampled_stopwatch, "_calibration", sampled_stopwatch._Calibration())
    sw = kind.start(clocks.thread)
    t = sw.t
    for phase, ns in enumerate((10, 20, 30)):
        clocks.advance(ns)
        t[ENDS + phase] = clocks.perf()
    clocks.advance(5)
    wait(clocks, sw, 3, 1_000)
    assert t[ENDS : ENDS + 5] == [0] * 5
    clocks.advance(7)
    t[ENDS + 3] = clocks.perf()
    clocks.advance(3)
    t[ENDS + 4] = clocks.perf()
    profile = sw.snapshot(0, 1, 0)
    assert profile is not None
    assert profile.wall_ns[:5] == (10, 20, 30, 5 + 1_000 + 7, 3)
    sw.close_step(profile)
    assert profile.cpu_ns[:5] == (10, 20, 30, 12, 3)


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


def test_a_resumed_run_files_new_steps_after_its_replayed_ones_and_never_rescales_those(
    clocks: FakeClocks,
) -> None:
    """The held steps are a range of the run's own profile list: a run resumed from its
    journal starts with the replayed profiles in it, and only the steps it runs now are
    held and settled (with a fake clock at half speed, so settling rescales them)."""
    from podium.engine.profile import StepProfile

    replayed = [StepProfile(0, (1,) * 6, (1,) * 6), StepProfile(1, (2,) * 6, (2,) * 6)]
    steps = list(replayed)

    def half_cpu() -> int:
        return clocks.cpu // 2

    sw = Stopwatch.start(half_cpu, steps=steps)
    for step in (2, 3, 4):
        clocks.advance(100_000)
        sw.lap(0)
        profile = sw.snapshot(step, 0, 0)
        sw.close_step(profile)
    clocks.advance(1_000)  # the slice goes on after the last step: shared among its steps
    sw.finish()
    assert [p.step for p in steps] == [0, 1, 2, 3, 4]
    assert steps[:2] == [StepProfile(0, (1,) * 6, (1,) * 6), StepProfile(1, (2,) * 6, (2,) * 6)]
    for p in steps[2:]:
        assert p.wall_ns[0] > 0
        assert 0.35 < p.cpu_ns[0] / p.wall_ns[0] < 0.65, p  # settled at the clock's rate
    sw.finish()  # nothing held any more: a second finish changes nothing
    assert len(steps) == 5


class FakeClocks:
    """A wall clock the test moves by hand and a CPU clock that runs with it except while
    the thread waits: what a real loop thread's two clocks do."""

    def __init__(self) -> None:
        self.wall = 1_000
        self.cpu = 0
        self.waiting = False

    def advance(self, ns: int) -> None:
        self.wall += ns
        if not self.waiting:
            self.cpu += ns

    def perf(self) -> int:
        return self.wall

    def thread(self) -> int:
        return self.cpu


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> FakeClocks:
    fake = FakeClocks()
    for module in (exact_stopwatch, sampled_stopwatch):
        monkeypatch.setattr(module, "_perf", fake.perf)
    # The loop thread's anchor, read with the fake clocks; the ratio from the sampled
    # slices, not from the scheduler's statistics of the real thread.
    own = ThreadClock()
    own.schedstat = False
    for module in (exact_stopwatch, sampled_stopwatch):
        monkeypatch.setattr(module, "thread_clock", own)
    return fake


def wait(clocks: FakeClocks, sw: Stopwatch, phase: int, ns: int) -> None:
    """``phase`` waits ``ns``: wall time, no CPU."""
    sw.suspend(phase)
    clocks.waiting = True
    clocks.advance(ns)
    clocks.waiting = False
    sw.resume(phase)


def waited_step(
    clocks: FakeClocks, sw: Stopwatch, step: int, store_wait: int = 0
) -> StepProfile | None:
    """10 ns assembling, a model call that runs 5, waits 1,000 and runs 5 more, 10 parsing,
    an instant tool that did 7 ns of CPU off the loop, 3 merging, and a 4 ns checkpoint
    (after waiting ``store_wait`` for the store)."""
    clocks.advance(10)
    sw.lap(0)
    clocks.advance(5)
    wait(clocks, sw, 1, 1_000)
    clocks.advance(5)
    sw.lap(1)
    clocks.advance(10)
    sw.lap(2)
    sw.lap(3)
    sw.add_cpu(3, 7)
    clocks.advance(3)
    sw.lap(4)
    profile = sw.snapshot(step, 1, 0)
    if store_wait:
        wait(clocks, sw, 5, store_wait)
    clocks.advance(4)
    sw.close_step(profile)
    return profile


def stamped_steps(clocks: FakeClocks, sw: Stopwatch, end: Callable[[int], None]) -> list[Any]:
    """Four steps whose phases end by ``end(phase)``: an instant one; one whose model and
    tool wait between its phase ends; a final answer (two phase ends, then a lap and the
    settling of the run's end); one resumed with a carried profile. Their figures."""
    profiles = []
    for phase, ns in enumerate((10, 20, 30, 40, 50)):
        clocks.advance(ns)
        end(phase)
    profiles.append(sw.snapshot(0, 1, 0))
    clocks.advance(6)
    sw.close_step(profiles[-1])
    clocks.advance(10)
    end(0)
    clocks.advance(5)
    wait(clocks, sw, 1, 1_000)
    clocks.advance(5)
    end(1)
    clocks.advance(10)
    end(2)
    clocks.advance(3)
    wait(clocks, sw, 3, 200)
    sw.add_cpu(3, 7)
    clocks.advance(1)
    end(3)
    clocks.advance(2)
    end(4)
    profiles.append(sw.snapshot(1, 1, 0))
    wait(clocks, sw, 5, 40)
    clocks.advance(3)
    sw.close_step(profiles[-1])
    sw.carry(StepProfile(2, (1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 5, 6), 1, 0))
    for phase in range(5):
        clocks.advance(phase + 1)
        end(phase)
    profiles.append(sw.snapshot(2, 1, 0))
    clocks.advance(1)
    sw.close_step(profiles[-1])
    clocks.advance(10)
    end(0)
    clocks.advance(7)
    end(1)
    clocks.advance(3)
    sw.lap(2)
    sw.settle()
    profiles.append(sw.snapshot(3, 0, 0))
    clocks.advance(2)
    sw.close_step(profiles[-1])
    sw.finish()
    return [(p.wall_ns, p.cpu_ns, p.step) for p in profiles]


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
def test_phase_ends_the_step_loop_stamps_come_out_as_laps_would(
    kind: type[Stopwatch], clocks: FakeClocks, calibration: sampled_stopwatch._Calibration
) -> None:
    """The fast lane stamps its phase ends (``t[ENDS + phase]``) instead of calling
    lap(): the figures are the same, whether the step ran in one slice, waited between
    its stamps, ended with a lap or carried a profile from before a restart."""
    sw = kind.start(clocks.thread)
    laps = stamped_steps(clocks, sw, sw.lap)
    model_ns = sw.model_ns
    sw = kind.start(clocks.thread)

    def stamp(phase: int) -> None:
        sw.t[ENDS + phase] = clocks.perf()

    assert stamped_steps(clocks, sw, stamp) == laps
    assert laps[0][0] == (10, 20, 30, 40, 50, 6)
    assert laps[1][0] == (10, 1_010, 10, 204, 2, 43)
    assert laps[1][1] == (10, 10, 10, 11, 2, 3)  # waits are not CPU; off-loop CPU is
    assert laps[2][0] == (2, 4, 6, 8, 10, 7)  # carried: 1..6, then 1..5 and 1 more
    assert laps[3][0][:3] == (10, 7, 3)
    # The model's wall time of the closed steps, for the next call's attained service.
    assert sw.model_ns == model_ns == 20 + 1_010 + 4 + 7


def test_laps_in_order_give_each_phase_the_time_since_the_last_boundary(clocks: FakeClocks) -> None:
    sw = Stopwatch.start(clocks.thread)
    for phase, ns in enumerate((10, 20, 30, 40, 50)):
        clocks.advance(ns)
        sw.lap(phase)
    profile = sw.snapshot(0, 1, 0)
    assert profile is not None
    assert profile.wall_ns == (10, 20, 30, 40, 50, 0)  # the checkpoint has not ended yet
    clocks.advance(60)
    sw.close_step(profile)
    assert profile.wall_ns == profile.cpu_ns == (10, 20, 30, 40, 50, 60)
    clocks.advance(7)  # the next step starts where the last one ended
    sw.lap(0)
    clocks.advance(3)
    sw.lap(1)
    clocks.advance(3)
    sw.lap(1)  # a phase that ends again goes on
    nxt = sw.snapshot(1, 0, 0)
    assert nxt is not None and nxt.wall_ns == (7, 6, 0, 0, 0, 0)
    sw.finish()
    assert profile.cpu_ns == (10, 20, 30, 40, 50, 60)  # exact already: no rescaling


def test_waiting_in_a_phase_is_its_wall_time_and_not_its_cpu(clocks: FakeClocks) -> None:
    sw = Stopwatch.start(clocks.thread)
    profile = waited_step(clocks, sw, 0, store_wait=500)
    assert profile is not None
    assert profile.wall_ns == (10, 1_010, 10, 0, 3, 504)
    assert profile.cpu_ns == (10, 10, 10, 7, 3, 4)  # waiting is not CPU; off-loop CPU is
    assert sw.steps == [profile]


def test_a_profile_off_stopwatch_reads_no_clock() -> None:
    from podium.engine.stopwatch import NoStopwatch

    def no_clock() -> int:
        raise AssertionError("profile=False reads no clock")

    sw = NoStopwatch.start(no_clock)
    sw.lap(0)
    sw.suspend(1)
    sw.resume(1)
    sw.add_cpu(3, 500)
    sw.add_blocked(3, 500)  # (a tool that slept on the loop: nothing to write either)
    assert sw.snapshot(0, 0, 0) is None
    sw.close_step(None)
    sw.settle()
    sw.finish()
    # Every profile-off stopwatch shares its (zero) figures and (empty) steps: a run keeps
    # no list of its own for them, so nothing may ever be written there.
    assert sw.t == [0] * len(sw.t) and sw.steps == []
    assert NoStopwatch.start(no_clock).t is sw.t


@pytest.mark.anyio
async def test_runs_without_a_profile_leave_the_shared_figures_untouched() -> None:
    """Engine(profile=False) through instant and waiting steps: the zeros stay zeros."""
    import asyncio

    from podium import Agent, Engine, Scenario, SimulatedModel, tool
    from podium.engine.stopwatch import NoStopwatch

    @tool
    async def nap(query: str) -> str:
        """Wait a moment.

        Args:
            query: Ignored.
        """
        await asyncio.sleep(0)
        return "rested"

    agent = Agent("napper", SimulatedModel(Scenario.react("nap", {"query": "q"}, tool_steps=2)),
                  tools=[nap])
    async with Engine(profile=False) as engine:
        records = await asyncio.gather(*(engine.run(agent, "go") for _ in range(3)))
    assert all(r.status == "completed" and r.profile is not None for r in records)
    assert all(r.profile.steps == [] for r in records if r.profile is not None)
    sw = NoStopwatch.start(time.thread_time_ns)
    assert sw.t == [0] * len(sw.t) and sw.steps == []


@pytest.fixture
def calibration(monkeypatch: pytest.MonkeyPatch) -> sampled_stopwatch._Calibration:
    fresh = sampled_stopwatch._Calibration()
    monkeypatch.setattr(sampled_stopwatch, "_calibration", fresh)
    return fresh


def test_sampled_figures_are_running_time_and_the_aggregator_hears_each_step_as_it_closes(
    clocks: FakeClocks, calibration: sampled_stopwatch._Calibration
) -> None:
    heard: list[StepProfile] = []
    sw = SampledStopwatch.start(clocks.thread, heard.append)
    profile = waited_step(clocks, sw, 0)
    assert profile is not None and heard == [profile]
    assert profile.wall_ns == (10, 1_010, 10, 0, 3, 4)
    assert profile.cpu_ns == (10, 10, 10, 7, 3, 4)  # waiting is not CPU; off-loop CPU is
    clocks.advance(20)  # an instant step: one tuple for both figures
    for phase in range(5):
        sw.lap(phase)
    instant = sw.snapshot(1, 0, 0)
    clocks.advance(2)
    sw.close_step(instant)
    assert instant is not None and instant.wall_ns == (20, 0, 0, 0, 0, 2)
    assert instant.cpu_ns is instant.wall_ns
    assert heard == [profile, instant]


def test_sampled_figures_scale_by_the_ratio_measured_on_one_slice_in_so_many(
    clocks: FakeClocks, calibration: sampled_stopwatch._Calibration
) -> None:
    """The thread gets half its running time (the OS preempts it): the measured slices
    say so, and every step's CPU follows, measured slice or not."""

    def half_cpu() -> int:
        return clocks.cpu // 2

    sw = SampledStopwatch.start(half_cpu)
    profiles = [waited_step(clocks, sw, step) for step in range(20 * SAMPLE_EVERY)]
    ratio = calibration.ratio  # what the last step closed with
    sw.finish()
    assert 0.45 < ratio < 0.55, ratio  # halves of small spans round either way
    last = profiles[-1]
    assert last is not None and last.wall_ns == (10, 1_010, 10, 0, 3, 4)
    expected = (10 * ratio, 10 * ratio, 10 * ratio, 7, 3 * ratio, 4 * ratio)
    assert all(abs(c - e) <= 1 for c, e in zip(last.cpu_ns, expected, strict=True)), last
    assert all(p is not None and p.cpu_ns[1] <= 10 for p in profiles)  # never the wait


def test_an_instant_step_on_a_preempted_thread_is_scaled_in_its_snapshot_and_when_closed(
    clocks: FakeClocks, calibration: sampled_stopwatch._Calibration
) -> None:
    """No wait in the step (one slice): the journaled snapshot and the closed figures are
    the wall times times the ratio; closing changes only the checkpoint's."""
    calibration.set(0.75, sampled_stopwatch.SAMPLED_TOLERANCE)  # the thread got 3/4 of its time
    heard: list[StepProfile] = []
    sw = SampledStopwatch.start(clocks.thread, heard.append)
    for phase, ns in enumerate((400, 800, 40, 80, 4)):
        clocks.advance(ns)
        sw.lap(phase)
    clocks.advance(8)
    snap = sw.snapshot(0, 1, 0)
    assert snap is not None
    assert snap.wall_ns == (400, 800, 40, 80, 4, 0)
    assert snap.cpu_ns == (300, 600, 30, 60, 3, 0)
    journaled = snap.cpu_ns
    clocks.advance(12)
    sw.close_step(snap)
    assert snap.wall_ns == (400, 800, 40, 80, 4, 20)
    assert snap.cpu_ns == (300, 600, 30, 60, 3, 15)
    assert journaled == (300, 600, 30, 60, 3, 0)  # the journaled tuple is not changed
    assert heard == [snap] and sw.steps == [snap]
    clocks.advance(100)  # the next step, also instant, starts from zero
    sw.lap(0)
    nxt = sw.snapshot(1, 0, 0)
    sw.close_step(nxt)
    assert nxt is not None and nxt.cpu_ns == (75, 0, 0, 0, 0, 0)


def test_a_resumed_run_on_the_sampled_stopwatch_appends_to_its_replayed_steps(
    clocks: FakeClocks, calibration: sampled_stopwatch._Calibration
) -> None:
    """A run resumed after its worker died: the journal's profiles come first, untouched;
    the final step, filed before the run's record is written, is not filed twice."""
    replayed = [StepProfile(0, (1,) * 6, (1,) * 6), StepProfile(1, (2,) * 6, (2,) * 6)]
    steps = list(replayed)
    sw = SampledStopwatch.start(clocks.thread, steps=steps)
    waited_step(clocks, sw, 2)
    clocks.advance(10)  # the final step: settled and filed, then its checkpoint closes
    sw.lap(0)
    sw.settle()
    final = sw.snapshot(3, 0, 0)
    assert final is not None
    steps.append(final)
    clocks.advance(5)
    sw.close_step(final)
    sw.finish()
    assert [p.step for p in steps] == [0, 1, 2, 3]
    assert steps[:2] == [StepProfile(0, (1,) * 6, (1,) * 6), StepProfile(1, (2,) * 6, (2,) * 6)]
    assert final.wall_ns == final.cpu_ns == (10, 0, 0, 0, 0, 5)


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
def test_a_wait_with_nothing_run_before_it_is_still_not_cpu(
    kind: type[Stopwatch], clocks: FakeClocks, calibration: sampled_stopwatch._Calibration
) -> None:
    """A coarse clock: the slice before the wait ran for 0 ns. The step still waited."""
    sw = kind.start(clocks.thread)
    wait(clocks, sw, 1, 1_000)
    clocks.advance(5)
    sw.lap(1)
    profile = sw.snapshot(0, 0, 0)
    sw.close_step(profile)
    assert profile is not None
    assert profile.wall_ns == (0, 1_005, 0, 0, 0, 0)
    assert profile.cpu_ns == (0, 5, 0, 0, 0, 0)


def test_a_mistyped_clock_is_refused_with_the_choices() -> None:
    from podium.engine.driver import Engine
    from podium.errors import ConfigError

    with pytest.raises(ConfigError, match="sampled, thread, wall"):
        Engine(clock="smapled")  # type: ignore[arg-type]


@pytest.mark.parametrize(("ratio", "scale"), [(1.0, 1 << 16), (0.75, 3 << 14)])
def test_a_checkpoint_that_waits_after_the_snapshot_is_waiting_on_the_sampled_stopwatch(
    clocks: FakeClocks, calibration: sampled_stopwatch._Calibration, ratio: float, scale: int
) -> None:
    """The store makes the checkpoint wait after the journaled snapshot: closing works out
    the checkpoint's CPU again (its running time, scaled, plus CPU booked off the loop) and
    keeps the other phases' figures, whether or not the step waited before."""
    calibration.set(ratio, sampled_stopwatch.SAMPLED_TOLERANCE)
    assert calibration.scale == scale
    sw = SampledStopwatch.start(clocks.thread)
    waited = waited_step(clocks, sw, 0, store_wait=500)
    assert waited is not None and waited.wall_ns == (10, 1_010, 10, 0, 3, 504)
    q = ratio
    assert waited.cpu_ns == (int(10 * q), int(10 * q), int(10 * q), 7, int(3 * q), int(4 * q))
    # An instant step whose checkpoint alone waits, with CPU booked off the loop in it.
    clocks.advance(40)
    sw.lap(0)
    snap = sw.snapshot(1, 0, 0)
    assert snap is not None and snap.cpu_ns == (int(40 * q), 0, 0, 0, 0, 0)
    clocks.advance(2)
    wait(clocks, sw, 5, 300)
    sw.add_cpu(5, 9)
    clocks.advance(6)
    sw.close_step(snap)
    assert snap.wall_ns == (40, 0, 0, 0, 0, 308)
    assert snap.cpu_ns == (int(40 * q), 0, 0, 0, 0, int(8 * q) + 9)
    assert sw.steps == [waited, snap]


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
@pytest.mark.parametrize("ratio", [1.0, 0.75])
def test_a_step_journaled_first_and_profiled_as_it_closes_gets_the_same_figures(
    kind: type[Stopwatch], ratio: float, clocks: FakeClocks,
    calibration: sampled_stopwatch._Calibration,
) -> None:
    """close_new() (the entry is kept by an in-memory store and given its profile as the
    step closes) gives what snapshot() before the checkpoint and close_step() after it
    give: for a step in one slice, one that waited, on a thread the OS preempts or not."""
    calibration.set(ratio, sampled_stopwatch.SAMPLED_TOLERANCE)

    def steps(snapshot_first: bool) -> tuple[list[Any], int, list[int]]:
        sw = kind.start(clocks.thread)
        profiles = []
        for step, waits in enumerate((False, True, False)):
            for phase, ns in enumerate((10, 20, 30, 40, 50)):
                clocks.advance(ns)
                if waits and phase == 3:
                    wait(clocks, sw, 3, 100)
                sw.t[ENDS + phase] = clocks.perf()
            if snapshot_first:
                profile = sw.snapshot(step, 1, 0)
                clocks.advance(7)  # the checkpoint
                sw.close_step(profile)
            else:
                clocks.advance(7)
                profile = sw.close_new(step, 1, 0)
            assert profile is not None
            profiles.append((profile.wall_ns, profile.cpu_ns))
        sw.finish()
        return profiles, sw.model_ns, [p.step for p in sw.steps]

    first = steps(snapshot_first=True)
    assert steps(snapshot_first=False) == first
    assert first[0][0][0] == (10, 20, 30, 40, 50, 7)
    assert first[2] == [0, 1, 2]  # each filed once


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
@pytest.mark.parametrize("ratio", [1.0, 0.75])
@pytest.mark.parametrize("waits", [False, True])
def test_a_final_step_closed_in_one_call_gets_the_figures_of_settle_snapshot_and_close(
    kind: type[Stopwatch], ratio: float, waits: bool, clocks: FakeClocks,
    calibration: sampled_stopwatch._Calibration,
) -> None:
    """close_final() (the answer's step, journaled with the run's end by a store that keeps
    it, then profiled) gives what settle() and snapshot() before the write and close_step()
    after it give: after a step of the fast lane, for an answer in one slice or one whose
    model waited, on a thread the OS preempts or not."""
    calibration.set(ratio, sampled_stopwatch.SAMPLED_TOLERANCE)

    def run(one_call: bool) -> tuple[list[Any], int, list[int]]:
        sw = kind.start(clocks.thread)
        for phase, ns in enumerate((10, 20, 30, 40, 50)):  # a tool step first
            clocks.advance(ns)
            sw.t[ENDS + phase] = clocks.perf()
        clocks.advance(7)
        sw.close_new(0, 1, 0)
        for phase, ns in enumerate((11, 21, 31)):  # the answer: assembled, answered, parsed
            clocks.advance(ns)
            if waits and phase == 1:
                wait(clocks, sw, 1, 100)
            sw.t[ENDS + phase] = clocks.perf()
        if one_call:
            clocks.advance(9)  # the write
            profile = sw.close_final(1, 5)
        else:
            sw.settle()
            profile = sw.snapshot(1, 0, 5)
            assert profile is not None
            sw.steps.append(profile)
            clocks.advance(9)
            sw.close_step(profile)
        assert profile is not None and profile.tool_calls == 0 and profile.ttft_ns == 5
        sw.finish()
        return [(p.wall_ns, p.cpu_ns) for p in sw.steps], sw.model_ns, [p.step for p in sw.steps]

    first = run(one_call=False)
    assert run(one_call=True) == first
    assert first[2] == [0, 1]  # each filed once
    if not waits:
        assert first[0][1][0] == (11, 21, 31, 0, 0, 9)


@pytest.mark.parametrize("kind", [Stopwatch, SampledStopwatch])
def test_a_carried_step_and_a_long_span_after_it_book_no_negative_cpu(
    kind: type[Stopwatch], clocks: FakeClocks
) -> None:
    """A step resumed after a park (a human's or a client's answer) carries what it did
    before; a long span checked against the CPU clock afterwards must not count the
    carried wall as its own running time (it did, and booked negative CPU: a metrics
    counter refused it)."""
    sampled_stopwatch._calibration.set(1.0, sampled_stopwatch.SAMPLED_TOLERANCE)
    sw = kind.start(clocks.thread)
    sw.carry(StepProfile(0, (9_000_000,) * 6, (3_000_000,) * 6, 1, 0))
    for phase in range(5):
        clocks.advance(sampled_stopwatch.LONG_NS + 1_000_000)  # long: checked against the clock
        sw.lap(phase)
    profile = sw.snapshot(0, 1, 0)
    sw.close_step(profile)
    sw.finish()
    assert profile is not None
    assert all(cpu >= 0 for cpu in profile.cpu_ns), profile
    pairs = zip(profile.cpu_ns, profile.wall_ns, strict=True)
    assert all(cpu <= wall for cpu, wall in pairs), profile
