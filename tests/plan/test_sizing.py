"""The plan as pure functions: synthetic run shapes in, a fleet out."""

from __future__ import annotations

import pytest

from podium.plan import Kind, PlanError, PlanOptions, RunShape, make_plan, saturation_rate
from podium.plan.distribution import Distribution

MODEL = Distribution.from_percentiles([0, 50, 99, 100], [0.2, 0.5, 1.5, 2.0])
TOOL = Distribution.from_percentiles([0, 50, 99, 100], [0.01, 0.05, 0.3, 0.5])
OPTIONS = PlanOptions(sim_runs=4000)


def shape(cpu_per_step: float = 1e-3, steps: float = 8, name: str = "agent") -> RunShape:
    third = cpu_per_step / 3
    return RunShape(name, steps, (steps - 1) / steps, third, third, third, MODEL, TOOL)


def test_the_worker_count_follows_the_cpu_demand() -> None:
    s = shape()  # 8 ms of CPU per run: a core does at most 125 runs/s
    assert saturation_rate([Kind(s, 1.0)], 4) == pytest.approx(500.0)
    small = make_plan([Kind(s, 50.0)], 20.0, OPTIONS)
    big = make_plan([Kind(s, 1000.0)], 20.0, OPTIONS)
    assert small.workers == 1
    # 8 cores of demand at 85 % at most: at least 10 workers.
    assert big.workers >= 10 and big.worker_utilization <= 0.85
    assert big.kinds[0].predicted_p99_s <= 20.0
    # Little's law: 1000 runs/s × 8 calls × the model's mean.
    assert big.model_calls_in_flight == pytest.approx(1000 * 8 * MODEL.mean)
    assert big.model_calls_in_flight_p99 >= big.model_calls_in_flight
    assert big.concurrency_per_worker * big.workers >= big.runs_in_flight


def test_a_target_near_the_floor_needs_more_workers_than_the_cpu_alone() -> None:
    s = shape(cpu_per_step=100e-3)  # 0.8 s of CPU per run: queueing shows in the p99
    loose = make_plan([Kind(s, 5.0)], 60.0, OPTIONS)
    tight_target = loose.kinds[0].floor_p99_s * 1.1
    tight = make_plan([Kind(s, 5.0)], tight_target, OPTIONS)
    assert tight.workers > loose.workers
    assert tight.kinds[0].predicted_p99_s <= tight_target


def test_an_impossible_target_names_the_floor() -> None:
    with pytest.raises(PlanError, match=r"cannot be met for agent: its runs take p99 .* with no"):
        make_plan([Kind(shape(), 10.0)], 1.0, OPTIONS)


def test_each_kind_of_a_mix_meets_the_target_and_the_bottleneck_is_named() -> None:
    light, heavy = shape(name="light", steps=2), shape(cpu_per_step=5e-3, name="heavy")
    plan = make_plan([Kind(light, 300.0), Kind(heavy, 30.0)], 20.0, OPTIONS)
    assert [k.name for k in plan.kinds] == ["light", "heavy"]
    assert all(k.predicted_p99_s <= 20.0 for k in plan.kinds)
    assert plan.rate == 330.0
    busiest = max(plan.resources, key=lambda r: r.utilization)
    assert plan.bottleneck == busiest.name
    assert plan.headroom == pytest.approx(busiest.saturates_at / plan.rate - 1)
    # Redis is the limit once its CPU per step is high enough: 0.9 of a core, over the
    # 60 % one Redis thread is planned at, is two shards (Redis Cluster) at 45 % each.
    lighter = shape(cpu_per_step=0.5e-3, name="light", steps=2)
    redis_bound = make_plan([Kind(lighter, 300.0)], 20.0,
                            PlanOptions(sim_runs=4000, redis_cpu_s_per_step=1.5e-3))
    assert redis_bound.redis_cpu_cores == pytest.approx(300 * 2 * 1.5e-3)
    assert redis_bound.redis_shards == 2
    assert redis_bound.bottleneck == "Redis (2 shards)"
    assert redis_bound.headroom == pytest.approx(2 / (2 * 1.5e-3) / 300 - 1)
