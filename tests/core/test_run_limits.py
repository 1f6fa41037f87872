"""How a run ends without an answer: max_steps, deadline, cancellation, bad replies."""

from __future__ import annotations

import asyncio

import pytest
from _helpers import lookup

from podium import (
    Agent,
    Engine,
    FunctionModel,
    ModelReplyError,
    RunError,
    Scenario,
    SimulatedModel,
    tool,
)

pytestmark = pytest.mark.anyio


async def test_completed_run() -> None:
    agent = Agent(
        "t",
        SimulatedModel(Scenario.react("lookup", {"query": "q"}, tool_steps=2, final="42")),
        tools=[lookup],
    )
    record = await agent.run("go")
    assert (record.status, record.output, record.steps) == ("completed", "42", 3)
    assert record.reason is None
    assert record.usage.requests == 3
    assert record.raise_for_status() is record


async def test_max_steps_fails_the_run() -> None:
    agent = Agent(
        "t",
        SimulatedModel(Scenario.react("lookup", {"query": "q"}, tool_steps=10)),
        tools=[lookup],
        max_steps=3,
    )
    record = await agent.run("go")
    assert (record.status, record.reason, record.steps) == ("failed", "max_steps", 3)
    with pytest.raises(RunError, match="no final answer after 3 steps"):
        record.raise_for_status()


async def test_run_error_carries_the_reason_code() -> None:
    agent = Agent(
        "t",
        SimulatedModel(Scenario.react("lookup", {"query": "q"}, tool_steps=10)),
        tools=[lookup],
        max_steps=1,
    )
    record = await agent.run("go")
    with pytest.raises(RunError) as info:
        record.raise_for_status()
    assert info.value.reason == "max_steps"


async def test_deadline_fails_the_run() -> None:
    @tool(timeout=None)
    async def forever() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return ""

    agent = Agent(
        "t",
        SimulatedModel(Scenario.react("forever", tool_steps=1)),
        tools=[forever],
        deadline_s=0.05,
    )
    # The run ending at all is the proof (the tool never returns; a hang is the test's
    # timeout), not how fast a busy machine got there.
    record = await agent.run("go")
    assert (record.status, record.reason) == ("failed", "deadline")


async def test_cancel_at_an_await_point() -> None:
    started = asyncio.Event()

    @tool(timeout=None)
    async def wait_forever() -> str:
        """Blocks until cancelled."""
        started.set()
        await asyncio.Event().wait()
        return ""

    agent = Agent(
        "t", SimulatedModel(Scenario.react("wait_forever", tool_steps=1)), tools=[wait_forever]
    )
    async with Engine() as engine:
        record = await engine.create(agent, "go")
        task = engine.start(agent, record)
        await started.wait()
        assert engine.active_runs == 1
        assert engine.cancel(record.run_id)
        finished = await task
        stored = await engine.store.get(record.run_id)
        assert not engine.cancel(record.run_id)  # nothing left to cancel
    assert (finished.status, finished.reason) == ("cancelled", "cancelled")
    assert stored is not None and stored.status == "cancelled"
    assert not task.cancelled()


async def test_bad_reply_is_retried_then_fails_invalid_reply() -> None:
    calls = 0

    def reply(messages, request):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        raise ModelReplyError("truncated JSON")

    record = await Agent("t", FunctionModel(reply), model_retries=2).run("go")
    assert calls == 3
    assert (record.status, record.reason) == ("failed", "invalid_reply")
    assert "truncated JSON" in (record.error or "")


async def test_bad_reply_retry_can_succeed() -> None:
    calls = 0

    def reply(messages, request):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ModelReplyError("garbled")
        return "fine"

    record = await Agent("t", FunctionModel(reply), model_retries=2).run("go")
    assert (record.status, record.output, calls) == ("completed", "fine", 2)


async def test_async_model_error_fails_model_error() -> None:
    from podium import ModelError

    async def reply(messages, request):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        raise ModelError("backend down")

    record = await Agent("t", FunctionModel(reply)).run("go")
    assert (record.status, record.reason) == ("failed", "model_error")
