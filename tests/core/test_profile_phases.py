"""The aggregator's phases: a phase a step did not have is no sample of it, a phase with no
sample has no percentile, and CPU done in parallel off the loop is kept."""

from __future__ import annotations

import pytest

from podium import ProfileAggregator, StepProfile

MS = 1_000_000


def step(i: int, tools_ms: float, *, calls: int, tools_cpu_ms: float = 0.0) -> StepProfile:
    wall = (MS // 100, 20 * MS, MS // 100, int(tools_ms * MS), MS // 100 if calls else 0, MS)
    cpu = (MS // 100, MS // 10, MS // 100, int(tools_cpu_ms * MS), MS // 100 if calls else 0, MS)
    return StepProfile(i, wall, cpu, tool_calls=calls)


def test_tools_and_merge_percentiles_come_from_the_steps_that_called_tools() -> None:
    """One 100 ms tool step, then the answer: the tools p50 read 0 (the answer step's)."""
    agg = ProfileAggregator()
    for _ in range(10):
        agg.add_step(step(0, 100.0, calls=1))
        agg.add_step(step(1, 0.0, calls=0))
        agg.finish_run(0)
    summary = agg.summary()
    tools, merge = summary.phases["tools"], summary.phases["merge"]
    assert (tools.samples, merge.samples) == (10, 10)
    assert tools.wall_p50_ms == tools.wall_p99_ms == 100.0
    assert merge.wall_p50_ms == 0.01
    assert summary.phases["model"].samples == 20  # every step calls the model
    # Totals are unchanged: the answer steps' zeros add nothing.
    assert tools.wait_ms_total == pytest.approx(1000.0)


def test_a_phase_with_no_sample_has_no_percentile() -> None:
    empty = ProfileAggregator().summary()
    for name, phase in empty.phases.items():
        assert (phase.wall_p50_ms, phase.wall_p95_ms, phase.wall_p99_ms) == (None, None, None)
        assert phase.cpu_share is None and phase.samples == 0, name
        assert phase.cells() == ("-", "-", "-", "0.0", "0.0", "0.0", "-")
    agg = ProfileAggregator()  # answers only: no step called a tool
    agg.add_step(step(0, 0.0, calls=0))
    agg.finish_run(0)
    tools = agg.summary().phases["tools"]
    assert (tools.samples, tools.wall_p50_ms, tools.cpu_share) == (0, None, None)
    assert agg.summary().phases["model"].wall_p50_ms == 20.0


def test_parallel_cpu_above_wall_is_kept_and_granularity_is_cut() -> None:
    """Two CPU tools in parallel: 100 ms of CPU in 86 ms of wall time was counted as 86."""
    agg = ProfileAggregator()
    agg.add_step(step(0, 86.0, calls=2, tools_cpu_ms=100.0))
    agg.finish_run(0)
    tools = agg.summary().phases["tools"]
    assert tools.cpu_ms_total == pytest.approx(100.0)
    assert tools.cpu_share == pytest.approx(100 / 86)
    assert tools.wait_ms_total == 0.0
    assert tools.cells()[6] == "116%"

    grain = ProfileAggregator()  # 0.2 ms over a 5 ms phase: the clocks, not parallel work
    grain.add_step(step(0, 5.0, calls=1, tools_cpu_ms=5.2))
    grain.finish_run(0)
    assert grain.summary().phases["tools"].cpu_ms_total == pytest.approx(5.0)


def test_one_steps_parallel_cpu_does_not_hide_another_steps_wait() -> None:
    agg = ProfileAggregator()
    agg.add_step(step(0, 10.0, calls=2, tools_cpu_ms=30.0))  # all CPU, in parallel
    agg.add_step(step(1, 20.0, calls=1))  # all waiting
    agg.finish_run(0)
    tools = agg.summary().phases["tools"]
    assert (tools.cpu_ms_total, tools.wait_ms_total) == pytest.approx((30.0, 20.0))
