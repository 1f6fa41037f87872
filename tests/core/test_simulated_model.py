"""The simulated model: scripted replies, latency with jitter, and a capacity that queues."""

from __future__ import annotations

import asyncio
import random
import statistics
import time

import pytest

from podium import LatencyModel, ModelRequest, Scenario, SimStep, SimToolCall, SimulatedModel
from podium.messages import Message

REQUEST = ModelRequest([Message("system", "s"), Message("user", "hi")], prompt_tokens=10)


def test_fixed_latency_formula() -> None:
    lat = LatencyModel(ttft_s=0.1, per_token_s=0.01, prefill_per_token_s=0.001)
    assert lat.sample(random.Random(0), output_tokens=20, uncached_tokens=100) == pytest.approx(
        0.1 + 0.2 + 0.1
    )
    assert LatencyModel().instant and not lat.instant


def test_lognormal_jitter_has_mean_one_and_varies() -> None:
    lat = LatencyModel(ttft_s=0.1, jitter="lognormal", sigma=0.25)
    rng = random.Random(42)
    samples = [lat.sample(rng, 0) for _ in range(20_000)]
    assert all(s > 0 for s in samples)
    assert statistics.fmean(samples) == pytest.approx(0.1, rel=0.02)
    assert statistics.pstdev(samples) == pytest.approx(0.1 * 0.25, rel=0.15)
    assert min(samples) < 0.08 < 0.12 < max(samples)


def test_same_seed_same_latencies() -> None:
    lat = LatencyModel(ttft_s=0.1, jitter="lognormal")
    a, b = random.Random(7), random.Random(7)
    assert [lat.sample(a, 5) for _ in range(5)] == [lat.sample(b, 5) for _ in range(5)]


@pytest.mark.anyio
async def test_scenario_steps_then_final() -> None:
    model = SimulatedModel(
        Scenario(
            steps=(SimStep(tool_calls=(SimToolCall("f", {"x": 1}), SimToolCall("g", "{bad"))),),
            final="the end",
        )
    )
    first = await model.request(REQUEST)
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_0_0", "f", '{"x":1}'),
        ("call_0_1", "g", "{bad"),
    ]
    assert first.finish_reason == "tool_calls"
    later = await model.request(ModelRequest(REQUEST.messages, step=1))
    assert (later.content, later.tool_calls, later.finish_reason) == ("the end", (), "stop")
    assert model.calls == 2
    # Asked again, the step comes from the rendered cache: the same reply, the same usage.
    again = await model.request(REQUEST)
    assert (again.tool_calls, again.usage, again.finish_reason) == (
        first.tool_calls, first.usage, "tool_calls"
    )


@pytest.mark.anyio
async def test_policy_function_decides() -> None:
    model = SimulatedModel(lambda req: f"echo {req.messages[-1].content}")
    assert (await model.request(REQUEST)).content == "echo hi"


@pytest.mark.anyio
async def test_latency_is_waited() -> None:
    model = SimulatedModel(Scenario(final="x"), latency=LatencyModel(ttft_s=0.05))
    t0 = time.perf_counter()
    await model.request(REQUEST)
    assert time.perf_counter() - t0 >= 0.045


@pytest.mark.anyio
async def test_capacity_queues_requests_beyond_it() -> None:
    model = SimulatedModel(Scenario(final="x"), latency=LatencyModel(ttft_s=0.04), capacity=2)
    t0 = time.perf_counter()
    replies = await asyncio.gather(*(model.request(REQUEST) for _ in range(6)))
    elapsed = time.perf_counter() - t0
    assert [r.content for r in replies] == ["x"] * 6
    assert model.peak_running == 2
    assert model.running == 0
    assert elapsed >= 3 * 0.04 * 0.9  # three waves of two (a wait is never shorter)
    # "Not one by one" is peak_running == 2, not an upper bound on the time a busy machine
    # takes to run six waits.


@pytest.mark.anyio
async def test_prefix_cache_accounting() -> None:
    model = SimulatedModel(Scenario(final="x"))
    first = ModelRequest(REQUEST.messages, run_id="r", prompt_tokens=100, prefix_tokens=40)
    second = ModelRequest(REQUEST.messages, run_id="r", prompt_tokens=130, prefix_tokens=40, step=1)
    assert (await model.request(first)).usage.cached_tokens == 40
    assert (await model.request(second)).usage.cached_tokens == 100
