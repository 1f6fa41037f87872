"""Each model call is told how much model time its run has had (its attained service):
a backend pool serves the runs that have had least first."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from _helpers import lookup

from podium import Agent, Engine, FunctionModel, tool
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse
from podium.models.function import tool_call_reply

pytestmark = pytest.mark.anyio

MODEL_S = 0.02


async def test_each_model_call_carries_the_model_time_of_the_steps_before_it() -> None:
    told: list[float] = []

    async def slow(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        told.append(request.attained_service_s)
        await asyncio.sleep(MODEL_S)
        if sum(m.role == "tool" for m in messages) < 3:  # three tool steps (the fast lane)
            return tool_call_reply(("lookup", '{"query": "A-1"}'))
        return "done"

    async with Engine() as engine:
        record = await engine.run(Agent("slow", FunctionModel(slow), tools=[lookup]), "go")
    assert record.status == "completed" and record.steps == 4
    assert told[0] == 0.0
    for step, attained in enumerate(told[1:], start=1):
        # At least the model's waits so far; a step's other phases are not model time.
        # (uvloop may wake a timer up to a millisecond early)
        assert step * (MODEL_S - 0.001) <= attained < step * MODEL_S + 1.0, told
    assert told == sorted(told)
    assert record.profile is not None
    model_walls = [s.wall_ns[1] / 1e9 for s in record.profile.steps]
    assert told[3] == pytest.approx(sum(model_walls[:3]), abs=1e-6)


@tool(side_effects=True, requires_approval=True)
async def refund(amount: int) -> str:
    """Refund.

    Args:
        amount: How much.
    """
    return "refunded"


async def test_a_run_driven_again_after_a_human_counts_the_model_time_it_had() -> None:
    """The run parks for an approval at its third step and is resumed: the calls after
    the resume are told the model time of every earlier step (they started from 0)."""
    told: list[float] = []

    async def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        told.append(request.attained_service_s)
        await asyncio.sleep(MODEL_S)
        if request.step == 2:
            return tool_call_reply(("refund", '{"amount": 5}'))
        if request.step < 5:
            return tool_call_reply(("lookup", '{"query": "A-1"}'))
        return "done"

    agent = Agent("a", FunctionModel(reply), tools=[lookup, refund])
    async with Engine() as engine:
        record = await engine.run(agent, "go")
        (pending,) = await engine.pending_approvals(record.run_id)
        await engine.decide(record.run_id, pending.call_id, approve=True)
        done = await engine.resume(agent, record.run_id)
    assert done.status == "completed" and done.profile is not None
    walls = [s.wall_ns[1] / 1e9 for s in done.profile.steps]
    assert len(told) == len(walls) == 6
    for step in range(6):
        assert told[step] == pytest.approx(sum(walls[:step]), abs=1e-6), (step, told, walls)
