"""Several tool calls in one reply run at the same time."""

from __future__ import annotations

import asyncio

import pytest
from _helpers import journal_results, scripted

from podium import Agent, Engine, tool, tool_call_reply

pytestmark = pytest.mark.anyio


async def test_parallel_calls_in_one_reply_overlap() -> None:
    # Each call waits at a barrier that only opens once all three have started: run one by
    # one, the first would time out.
    barrier = asyncio.Barrier(3)

    @tool(timeout=2.0)
    async def meet(i: int) -> str:
        """Wait for the others."""
        await barrier.wait()
        return f"met {i}"

    reply = tool_call_reply(*(("meet", f'{{"i": {i}}}') for i in range(3)))
    agent = Agent("t", scripted(reply, "done"), tools=[meet])
    async with Engine() as engine:
        record = await engine.run(agent, "go")
        journal = await engine.store.journal(record.run_id)
    assert record.status == "completed"
    outcomes = sorted(r.content for r in journal_results(journal))
    assert outcomes == ["met 0", "met 1", "met 2"]
    assert record.profile is not None
    assert record.profile.steps[0].tool_calls == 3


async def test_results_reach_the_model_in_call_order() -> None:
    @tool
    async def wait_then(i: int, delay: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(delay)
        return f"r{i}"

    seen: list[list[str]] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(
                ("wait_then", '{"i": 0, "delay": 0.03}'),
                ("wait_then", '{"i": 1, "delay": 0.0}'),
                ("wait_then", '{"i": 2, "delay": 0.01}'),
            )
        seen.append([m.content for m in messages if m.role == "tool"])
        return "done"

    from podium import FunctionModel

    agent = Agent("t", FunctionModel(reply), tools=[wait_then])
    record = await agent.run("go")
    assert record.status == "completed"
    assert seen == [["r0", "r1", "r2"]]
