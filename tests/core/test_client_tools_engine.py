"""Client-side tools in the engine: a run whose metadata carries a client's tools offers
them to its model, parks on a call to one (no worker holds it), and resumes on another
engine, from its journal, with the answer a client gave (SQLite store, as a restart)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from podium import Agent, Engine, FunctionModel, tool, tool_call_reply
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse
from podium.store.sqlite import SQLiteRunStore
from podium.tools.client import (
    CLIENT_QUESTION,
    CLIENT_TOOLS_KEY,
    ClientToolSpec,
    encode_client_tools,
    with_client_tools,
)

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = {CLIENT_TOOLS_KEY: encode_client_tools([ClientToolSpec("get_weather", "Weather.", SCHEMA)])}


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"


def _reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    if messages[-1].role == "tool":
        return f"it is {messages[-1].content}"
    assert [t.name for t in request.tools] == ["lookup", "get_weather"]
    assert request.tools[1].parameters == SCHEMA  # the client's schema, as it sent it
    return tool_call_reply(("get_weather", {"city": "Oslo"}))


def agent() -> Agent:
    return Agent("weather", FunctionModel(_reply), "You report.", [lookup])


async def test_a_client_tool_call_parks_the_run_and_its_answer_resumes_it_elsewhere(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    async with Engine(SQLiteRunStore(path)) as first:
        record = await first.run(agent(), "Weather in Oslo?", metadata=dict(TOOLS))
        assert record.status == "waiting"
        (pending,) = await first.pending_approvals()
        assert (pending.tool, pending.kind, pending.question) == (
            "get_weather", "interrupt", CLIENT_QUESTION
        )
        assert pending.arguments == '{"city":"Oslo"}'
        await first.decide(record.run_id, pending.call_id, answer="sunny")
    async with Engine(SQLiteRunStore(path)) as second:
        done = await second.resume(agent(), record.run_id)
    assert done.status == "completed", done.error
    assert done.output == "it is sunny"


async def test_client_tools_clashing_with_the_agents_fail_the_run_with_a_reason() -> None:
    clash = {CLIENT_TOOLS_KEY: encode_client_tools([ClientToolSpec("lookup", "", SCHEMA)])}
    async with Engine() as engine:
        record = await engine.run(agent(), "hi", metadata=clash)
    assert (record.status, record.reason) == ("failed", "invalid_tools")
    assert "has a tool of that name" in (record.error or "")


def test_the_agent_with_client_tools_is_a_copy_made_once() -> None:
    base = agent()
    with_tools = with_client_tools(base, TOOLS[CLIENT_TOOLS_KEY])
    assert with_client_tools(base, TOOLS[CLIENT_TOOLS_KEY]) is with_tools
    assert list(base.tools) == ["lookup"]  # the agent itself is unchanged
    assert list(with_tools.tools) == ["lookup", "get_weather"]
    assert with_tools.prefix.tokens > base.prefix.tokens
