"""The workload profile: every phase of every step timed; percentiles over many runs."""

from __future__ import annotations

import pytest

from podium import (
    Agent,
    Engine,
    LatencyModel,
    ProfileAggregator,
    RunProfile,
    Scenario,
    SimulatedModel,
    StepProfile,
    tool,
)
from podium.engine.profile import PHASES, STEP_PHASES, percentile
from podium.engine.stopwatch import CpuClock


def test_phase_names() -> None:
    assert STEP_PHASES == ("assemble", "model", "parse", "tools", "merge", "checkpoint")
    assert ("admit", *STEP_PHASES) == PHASES


def test_nearest_rank_percentile() -> None:
    values = list(range(1, 101))
    assert percentile(values, 50) == 50
    assert percentile(values, 95) == 95
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile(values, 0) == 1
    assert percentile([], 50) == 0.0


def test_aggregator_percentiles_and_cpu_share() -> None:
    agg = ProfileAggregator()
    ms = 1_000_000
    for i in range(1, 101):
        wall = (i * ms, 2 * ms, 0, 0, 0, 0)
        cpu = (i * ms // 2, 2 * ms, 0, 0, 0, 0)
        agg.add_step(StepProfile(i, wall, cpu, ttft_ns=i * ms))
    agg.finish_run(admit_ns=5 * ms)
    summary = agg.summary()
    assert (summary.runs, summary.steps) == (1, 100)
    a = summary.phases["assemble"]
    assert (a.wall_p50_ms, a.wall_p95_ms, a.wall_p99_ms) == (50.0, 95.0, 99.0)
    assert a.cpu_share == pytest.approx(0.5, abs=0.01)
    assert a.samples == 100
    m = summary.phases["model"]
    assert (m.wall_p50_ms, m.cpu_share, m.wait_ms_total) == (2.0, 1.0, 0.0)
    assert summary.phases["admit"].wall_p50_ms == 5.0
    assert summary.ttft_p50_ms == 50.0 and summary.ttft_p99_ms == 99.0
    total_cpu_ms = sum(i / 2 + 2 for i in range(1, 101))
    assert summary.cpu_us_per_step == pytest.approx(total_cpu_ms * 1000 / 100)


def test_add_run_equals_steps_plus_finish() -> None:
    steps = [StepProfile(i, (i, 0, 0, 0, 0, 0), (i, 0, 0, 0, 0, 0)) for i in range(1, 5)]
    a, b = ProfileAggregator(), ProfileAggregator()
    a.add_run(RunProfile(admit_ns=7, steps=steps))
    for s in steps:
        b.add_step(s)
    b.finish_run(7)
    assert a.summary() == b.summary()


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"


@pytest.mark.anyio
@pytest.mark.parametrize("clock", ["sampled", "thread"])
async def test_every_phase_of_every_step_is_recorded(clock: CpuClock) -> None:
    agent = Agent(
        "t",
        SimulatedModel(
            Scenario.react("lookup", {"query": "q"}, tool_steps=3),
            latency=LatencyModel(ttft_s=0.01),
        ),
        tools=[lookup],
    )
    agg = ProfileAggregator()
    async with Engine(aggregator=agg, clock=clock) as engine:
        records = [await engine.run(agent, "go") for _ in range(3)]
    for record in records:
        profile = record.profile
        assert profile is not None
        assert [s.step for s in profile.steps] == [0, 1, 2, 3]
        for s in profile.steps:
            assert len(s.wall_ns) == len(s.cpu_ns) == len(STEP_PHASES)
            assert all(w >= 0 for w in s.wall_ns)
            assert all(c >= 0 for c in s.cpu_ns)
            assert s.wall_ns[1] >= 5_000_000  # the model phase waited (uvloop timers are coarse)
            assert s.cpu_ns[1] < s.wall_ns[1] / 2  # and waiting is not CPU
        assert [s.tool_calls for s in profile.steps] == [1, 1, 1, 0]
        totals = profile.phase_totals()
        assert set(totals) == set(PHASES)
        assert profile.wall_ns == sum(w for w, _ in totals.values())
    summary = agg.summary()
    assert (summary.runs, summary.steps) == (3, 12)
    # The answer steps called no tool: no sample of the tools and merge phases.
    assert {p: summary.phases[p].samples for p in STEP_PHASES} == {
        "assemble": 12, "model": 12, "parse": 12, "tools": 9, "merge": 9, "checkpoint": 12
    }
    assert summary.phases["model"].wall_p50_ms >= 5


def test_profiles_print_as_readable_text() -> None:
    wall = (10_000, 2_000_000, 0, 500_000, 0, 30_000)
    step = StepProfile(3, wall, (10_000, 100_000, 0, 0, 0, 30_000), 1)
    text = str(step)
    assert text.startswith("step 3: assemble 0.01 ms (CPU 0.01), model 2.00 ms (CPU 0.10)")
    assert "parse" not in text and "1 tool call(s)" in text
    run = RunProfile(admit_ns=1_000_000, steps=[step])
    lines = str(run).splitlines()
    assert lines[0].split() == ["phase", "wall", "ms", "CPU", "ms", "blocked", "ms", "wait", "ms"]
    assert lines[1].split() == ["admit", "1.00", "0.00", "0.00", "1.00"]
    assert lines[2 + STEP_PHASES.index("model")].split() == ["model", "2.00", "0.10", "0.00",
                                                              "1.90"]
    assert lines[-2].split()[0] == "total" and lines[-1] == "(1 step)"
    assert "_ns" not in str(run)
    # A tool that slept on the loop: blocked, neither CPU nor waiting.
    tools = STEP_PHASES.index("tools")
    step.blocked_ns = (0, 0, 0, 400_000, 0, 0)
    assert "tools 0.50 ms (CPU 0.00, 0.40 blocked)" in str(step)
    row = str(run).splitlines()[2 + tools].split()
    assert row == ["tools", "0.50", "0.00", "0.40", "0.10"]
