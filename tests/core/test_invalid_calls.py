"""Invalid arguments and unknown tools reach the model as error observations, and are capped."""

from __future__ import annotations

import pytest
from _helpers import tool_messages

from podium import Agent, FunctionModel, tool, tool_call_reply

pytestmark = pytest.mark.anyio

executed: list[int] = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    executed.append(a + b)
    return a + b


async def test_errors_are_observations_the_model_reads() -> None:
    executed.clear()
    seen: list[list[str]] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(
                ("add", '{"a": "one", "b": 2}'),
                ("subtract", '{"a": 1}'),
                ("add", '{"a": 1, "b": 2}'),
                ("add", "{not json"),
            )
        seen.append([m.content for m in tool_messages(messages)])
        return "ok"

    record = await Agent("t", FunctionModel(reply), tools=[add]).run("go")
    assert record.status == "completed"
    assert executed == [3]  # only the valid call ran
    (contents,) = seen
    assert len(contents) == 4
    assert contents[0].startswith("error: invalid arguments for 'add'")
    assert '"required":["a","b"]' in contents[0]  # the schema, so the model can fix its call
    assert contents[1] == "error: unknown tool 'subtract'; the tools you may call are: add"
    assert contents[2] == "3"
    assert contents[3].startswith("error: invalid arguments for 'add'")


async def test_tool_messages_answer_their_call_ids() -> None:
    answered: list[tuple[str | None, str | None]] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("nope", "{}"), ("add", '{"a": 1, "b": 1}'))
        answered.extend((m.tool_call_id, m.name) for m in tool_messages(messages))
        return "ok"

    await Agent("t", FunctionModel(reply), tools=[add]).run("go")
    assert answered == [("call_0", "nope"), ("call_1", "add")]


async def test_invalid_calls_past_the_limit_fail_the_run() -> None:
    calls = 0

    def reply(messages, request):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return tool_call_reply(("add", '{"a": "x"}'))

    agent = Agent("t", FunctionModel(reply), tools=[add], max_invalid_tool_calls=2, max_steps=50)
    record = await agent.run("go")
    assert record.status == "failed"
    assert record.reason == "invalid_tool_calls"
    assert "3 invalid tool calls (limit 2)" in (record.error or "")
    assert calls == 3


async def test_a_valid_call_with_an_oversized_id_is_answered_under_the_id_kept() -> None:
    """A model's 5,000-character call id is cut (ids are echoed back): the assistant turn
    in the context and the journal carries the cut id, and the tool message answers that
    same id (it answered a cut id while the turn kept the whole one)."""
    from podium.messages import ToolCall
    from podium.models.base import ModelResponse

    huge = "c" * 5_000
    seen: list[tuple[str, str | None]] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            call = ToolCall(huge, "add", '{"a": 1, "b": 1}')
            return ModelResponse(tool_calls=(call,), finish_reason="tool_calls")
        (turn,) = [m for m in messages if m.role == "assistant"]
        (answer,) = tool_messages(messages)
        seen.append((turn.tool_calls[0].id, answer.tool_call_id))
        return "ok"

    agent = Agent("t", FunctionModel(reply), tools=[add])
    record = await agent.run("go")
    assert record.status == "completed"
    ((turn_id, answered_id),) = seen
    assert len(turn_id) < 200 and turn_id.startswith("c" * 100)
    assert answered_id == turn_id
