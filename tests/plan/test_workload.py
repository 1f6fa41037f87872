"""A run's shape: the segments the simulation runs, and the what-ifs."""

from __future__ import annotations

import random

import pytest

from podium.plan.distribution import Distribution, constant
from podium.plan.workload import RunShape

MODEL = Distribution.from_percentiles([0, 50, 100], [0.015, 0.020, 0.030])
TOOL = Distribution.from_percentiles([0, 50, 100], [0.003, 0.005, 0.010])


def react(steps: float = 7, tool_share: float = 6 / 7) -> RunShape:
    return RunShape("react", steps, tool_share, 40e-6, 30e-6, 20e-6, MODEL, TOOL, cpu_cv=0.0)


def test_segments_alternate_cpu_and_waits_with_the_model_calls_tagged() -> None:
    segs, models = react().segments(random.Random(1))
    # 6 steps with tools (burst, model, burst, tool) and the answer (burst, model, burst).
    assert len(segs) == 6 * 4 + 3
    assert sorted(models) == [1, 5, 9, 13, 17, 21, 25]
    assert all(0.015 <= segs[i] <= 0.030 for i in models)
    tools = [i for i in range(1, len(segs), 2) if i not in models]
    assert len(tools) == 6 and all(0.003 <= segs[i] <= 0.010 for i in tools)
    cpu = segs[0::2]
    # The first burst is the first prompt; between a tool and the next model call the
    # merge, checkpoint and next prompt run as one burst.
    assert cpu[0] == pytest.approx(40e-6) and cpu[2] == pytest.approx(20e-6 + 40e-6)
    assert sum(cpu) == pytest.approx(7 * 90e-6)


def test_a_fractional_step_count_is_its_mean() -> None:
    shape = RunShape("x", 2.5, 0.0, 1e-4, 0.0, 0.0, MODEL, constant(0.0))
    rng = random.Random(2)
    counts = [len(shape.segments(rng)[1]) for _ in range(20_000)]
    assert set(counts) == {2, 3}
    assert sum(counts) / len(counts) == pytest.approx(2.5, rel=0.02)


def test_what_ifs() -> None:
    shape = react()
    assert shape.with_model_factor(2).model_wait.mean == pytest.approx(2 * MODEL.mean)
    twelve = shape.with_steps(12)
    assert twelve.steps == 12 and twelve.tool_share * 12 == pytest.approx(11)
    assert twelve.cpu_per_run == pytest.approx(12 * shape.cpu_per_step)
    heavy = shape.with_cpu_per_step(900e-6)
    assert heavy.cpu_per_step == pytest.approx(900e-6)
    assert heavy.cpu_before_model / heavy.cpu_after_tools == pytest.approx(2.0)
    slow = shape.with_tool_p99(3.0)
    assert slow.tool_wait.quantile(0.99) == pytest.approx(3.0)
    assert slow.tool_wait.quantile(0.5) == pytest.approx(TOOL.quantile(0.5))
    assert shape.wait_per_run == pytest.approx(7 * MODEL.mean + 6 * TOOL.mean)


def test_a_share_of_a_core_stretches_every_burst() -> None:
    shape = react()
    fifth = shape.with_cpu_share(0.2)
    assert fifth.cpu_per_step == pytest.approx(5 * shape.cpu_per_step)
    assert fifth.model_wait == shape.model_wait and fifth.steps == shape.steps
    assert shape.with_cpu_share(1.0) == shape
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="CPU share"):
            shape.with_cpu_share(bad)
