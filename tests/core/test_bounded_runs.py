"""Bounded runs: calls per reply, stuck sync tools, the default deadline, observation budgets."""

from __future__ import annotations

import asyncio
import math
import threading

import msgspec
import pytest
from _helpers import args, ctx, scripted

from podium import Agent, Engine, FunctionModel, ModelResponse, tool, tool_call_reply
from podium.agent import DEFAULT_DEADLINE_S, DEFAULT_MAX_TOOL_CALLS, ContextPolicy
from podium.engine.records import ModelTurn, StepRecord
from podium.messages import ToolCall
from podium.store.memory import MemoryRunStore
from podium.tools import ToolExecutor

pytestmark = pytest.mark.anyio


def counting_tool() -> tuple[list[int], object]:
    ran: list[int] = []

    @tool
    async def note(n: int) -> str:
        """Note a number.

        Args:
            n: The number.
        """
        ran.append(n)
        return f"noted {n}"

    return ran, note


async def test_calls_past_the_cap_become_error_observations() -> None:
    ran, note = counting_tool()
    calls = [("note", f'{{"n": {i}}}') for i in range(2000)]
    agent = Agent(
        "t",
        scripted(tool_call_reply(*calls), "done"),
        tools=[note],  # type: ignore[list-item]
        max_tool_calls=8,
    )
    async with Engine() as engine:
        record = await engine.run(agent, "go")
        journal = await engine.store.journal(record.run_id)
    assert record.status == "completed"  # over-cap calls are not invalid calls
    assert sorted(ran) == list(range(8))
    results = [r for _, e in journal for r in getattr(e, "results", ())]
    results += [e.result for _, e in journal if hasattr(e, "result")]
    assert len(results) == 2000
    refused = [r for r in results if r.error == "too_many_calls"]
    assert len(refused) == 1992 and not any(r.ok for r in refused)
    assert "at most 8 run per reply" in refused[0].content


def test_default_limits_are_documented_values() -> None:
    agent = Agent("t", scripted("x"))
    assert agent.deadline_s == DEFAULT_DEADLINE_S == 600.0
    assert agent.max_tool_calls == DEFAULT_MAX_TOOL_CALLS == 32
    assert Agent("t", scripted("x"), deadline_s=None).deadline_s is None


async def test_stuck_sync_tools_do_not_starve_the_pool() -> None:
    """After more stuck calls than threads, an instant sync tool still answers."""
    release = threading.Event()
    entered = threading.Semaphore(0)

    @tool(timeout=0.05)
    def stuck() -> str:
        """Blocks its thread until the test ends."""
        entered.release()
        release.wait()
        return "late"

    @tool(timeout=30)
    def instant() -> str:
        """Answers at once."""
        return "now"

    executor = ToolExecutor(max_threads=2)
    try:
        stuck_results = await asyncio.gather(
            *(executor.execute(stuck, args(stuck), ctx(i)) for i in range(5))
        )
        assert [r.error for r in stuck_results] == ["timeout"] * 5
        assert executor.abandoned_threads == 5
        # With a fixed pool of 2 this would wait behind the stuck calls and time out.
        result = await executor.execute(instant, args(instant), ctx(9))
        assert (result.ok, result.content) == (True, "now")
    finally:
        release.set()
        executor.close()


async def test_abandoned_threads_are_bounded_and_counted_back() -> None:
    release = threading.Event()
    returned = threading.Semaphore(0)

    @tool(timeout=0.02)
    def stuck() -> str:
        """Blocks its thread until released."""
        release.wait()
        returned.release()
        return "late"

    executor = ToolExecutor(max_threads=1, max_abandoned=2)
    try:
        await asyncio.gather(*(executor.execute(stuck, args(stuck), ctx(i)) for i in range(2)))
        assert executor.abandoned_threads == 2
        release.set()
        for _ in range(2):
            await asyncio.to_thread(returned.acquire)
        while executor.abandoned_threads:  # counted back on their threads
            await asyncio.to_thread(lambda: None)
        assert executor._threads.abandoned_total == 2  # type: ignore[attr-defined]
    finally:
        executor.close()


async def test_a_hung_model_call_fails_the_run_at_its_deadline() -> None:
    async def hang(messages: object, request: object) -> str:
        await asyncio.Event().wait()
        return ""

    agent = Agent("t", FunctionModel(hang), deadline_s=0.05)
    record = await agent.run("go")
    assert (record.status, record.reason) == ("failed", "deadline")


async def test_a_run_can_set_its_own_deadline() -> None:
    async def hang(messages: object, request: object) -> str:
        await asyncio.Event().wait()
        return ""

    agent = Agent("t", FunctionModel(hang), deadline_s=None)
    async with Engine() as engine:
        record = await engine.run(agent, "go", deadline_s=0.05)
        assert (record.status, record.reason) == ("failed", "deadline")
        assert record.deadline_s == 0.05
        quick = Agent("q", scripted("ok"), deadline_s=0.01)
        unlimited = await engine.run(quick, "go", deadline_s=math.inf)
        assert unlimited.status == "completed"


async def test_rejected_calls_are_cut_to_the_budget_in_context_and_journal() -> None:
    huge = "x" * 10_000_000
    ran, note = counting_tool()
    seen: list[int] = []

    def reply(messages: object, request: object) -> ModelResponse | str:
        msgs = list(messages)  # type: ignore[call-overload]
        if msgs[-1].role == "tool":
            seen.append(
                sum(
                    len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
                    for m in msgs
                )
            )
            return "done"
        return ModelResponse(
            tool_calls=(
                ToolCall("c0", huge, "{}"),
                ToolCall("c1", "note", '{"n": "' + huge + '"}'),
                ToolCall(huge, "note", '{"n": 1}'),
            )
        )

    policy = ContextPolicy(max_tool_result_tokens=200)
    agent = Agent("t", FunctionModel(reply), tools=[note], context=policy)  # type: ignore[list-item]
    store = MemoryRunStore()
    async with Engine(store) as engine:
        record = await engine.run(agent, "go")
        journal = await store.journal(record.run_id)
    assert record.status == "completed"
    assert seen and seen[0] < 20_000  # the model never read the 10 MB back
    size = len(msgspec.msgpack.encode([e for _, e in journal]))
    assert size < 50_000
    results = [r for _, e in journal for r in getattr(e, "results", ())]
    results += [e.result for _, e in journal if hasattr(e, "result")]
    assert {r.error for r in results if not r.ok} == {"unknown_tool", "invalid_arguments"}
    assert all(len(r.name) < 200 and len(r.call_id) < 200 for r in results)
    turns = [e.message for _, e in journal if isinstance(e, ModelTurn | StepRecord)]
    assert all(len(c.name) + len(c.arguments) < 5_000 for m in turns for c in m.tool_calls)
    assert ran == [1]
