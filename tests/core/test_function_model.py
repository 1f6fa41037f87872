"""FunctionModel: every shape of reply function a user may hand it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

import msgspec
import pytest
from _helpers import lookup

from podium import Agent, Engine, FunctionModel
from podium.messages import Message, ToolCall
from podium.models.base import ModelRequest, ModelResponse
from podium.models.function import tool_call_reply

pytestmark = pytest.mark.anyio


def _reply(messages: Sequence[Message]) -> ModelResponse | str:
    if messages[-1].role == "tool":
        return f"answer: {messages[-1].content}"
    return tool_call_reply(("lookup", '{"query": "A-1"}'))


async def _async_reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    await asyncio.sleep(0)
    return _reply(messages)


def _sync_returning_awaitable(
    messages: Sequence[Message], request: ModelRequest
) -> Awaitable[ModelResponse | str]:
    # A plain function that hands back a coroutine (a wrapped async client, say).
    return _async_reply(messages, request)


@pytest.mark.parametrize(
    "fn",
    [lambda messages, request: _reply(messages), _async_reply, _sync_returning_awaitable],
    ids=["sync", "async", "sync-returning-awaitable"],
)
async def test_every_kind_of_reply_function_drives_a_run(fn: object) -> None:
    async with Engine() as engine:
        record = await engine.run(Agent("fm", FunctionModel(fn), tools=[lookup]), "go")  # type: ignore[arg-type]
    assert record.status == "completed", record.error
    assert record.output == "answer: found A-1"
    assert record.steps == 2
    assert record.usage.requests == 2


def test_tool_call_reply_takes_json_text_or_a_dict_and_numbers_its_calls() -> None:
    """JSON text is kept as given, a dict (any Mapping) is encoded; the calls are numbered
    ``call_0``, ``call_1``… however many there are; anything else is refused by name."""
    many = tool_call_reply(*[("lookup", '{"query": "x"}')] * 10, ("lookup", {"query": "y"}))
    assert [c.id for c in many.tool_calls] == [f"call_{i}" for i in range(11)]
    assert many.tool_calls[0].arguments == '{"query": "x"}'
    assert many.tool_calls[10].arguments == '{"query":"y"}'
    assert many.finish_reason == "tool_calls"
    with pytest.raises(TypeError, match="the arguments of 'lookup' are int; give JSON text or"):
        tool_call_reply(("lookup", 3))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="call 0 is"):
        tool_call_reply(["lookup", "{}"])  # type: ignore[arg-type]
    # The usual reply (one call, JSON text) is made on a path of its own: the same reply.
    one = tool_call_reply(("lookup", '{"query": "x"}'), content="looking")
    assert one == msgspec.structs.replace(many, content="looking", tool_calls=many.tool_calls[:1])
    assert tool_call_reply(("lookup", {"query": "y"})).tool_calls == (
        ToolCall("call_0", "lookup", '{"query":"y"}'),
    )
    with pytest.raises(TypeError, match="call 0 is"):
        tool_call_reply(("lookup", "{}", "extra"))  # type: ignore[arg-type]
