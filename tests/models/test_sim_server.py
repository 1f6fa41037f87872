"""The real ``podium sim-server`` subprocess on loopback, driven by OpenAIChatModel."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest
from backend_servers import SimServerProcess

from podium.errors import ModelHTTPError
from podium.messages import Message
from podium.models import (
    ModelRequest,
    ModelSettings,
    OpenAIChatModel,
    RetryPolicy,
    StreamTruncatedError,
    ToolDefinition,
)
from podium.models.sim_server import example_arguments

pytestmark = pytest.mark.anyio

TOOLS = (
    ToolDefinition(
        "search",
        "Search the web",
        {
            "type": "object",
            "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["q", "n"],
        },
    ),
)
SYSTEM = Message("system", "You are a research agent. " * 20)


def req(*history: Message, **settings: object) -> ModelRequest:
    return ModelRequest(
        messages=[SYSTEM, *history],
        tools=TOOLS,
        settings=ModelSettings(**settings),  # type: ignore[arg-type]
    )


async def test_agent_loop_tool_calls_then_answer(sim_server: SimServerProcess) -> None:
    history: list[Message] = [Message("user", "find podium")]
    async with OpenAIChatModel(sim_server.base_url, "podium-sim") as m:
        for _ in range(3):
            r = await m.request(req(*history))
            assert r.finish_reason == "tool_calls"
            assert r.tool_calls[0].name == "search"
            assert r.tool_calls[0].arguments == '{"q":"podium","n":1}'
            history += [
                Message("assistant", "", tool_calls=r.tool_calls),
                Message("tool", "result", tool_call_id=r.tool_calls[0].id),
            ]
        r = await m.request(req(*history))
    assert r.finish_reason == "stop" and r.content and not r.tool_calls
    assert r.usage.cached_tokens > 0  # the history prefix was cached by earlier calls


async def test_streamed_tool_call_arrives_in_pieces(sim_server: SimServerProcess) -> None:
    async with OpenAIChatModel(sim_server.base_url, "podium-sim") as m:
        deltas = [d async for d in m.stream(req(Message("user", "stream it")))]
    pieces = [d.arguments for d in deltas if d.arguments]
    assert len(pieces) > 1 and "".join(pieces) == '{"q":"podium","n":1}'
    final = deltas[-1].response
    assert final is not None and final.tool_calls[0].arguments == "".join(pieces)
    assert final.ttft_s is not None and len(final.token_times_s) == len(pieces)


async def test_streamed_answer_and_max_tokens(sim_server: SimServerProcess) -> None:
    async with OpenAIChatModel(sim_server.base_url, "podium-sim", stream=True) as m:
        r = await m.request(
            ModelRequest(messages=[Message("user", "hi")], settings=ModelSettings(max_tokens=3))
        )
    assert r.finish_reason == "length" and r.usage.output_tokens == 3
    assert len(r.content.split()) == 3


async def test_prefix_cache_counts_cached_tokens(sim_server: SimServerProcess) -> None:
    first = [Message("user", f"{uuid.uuid4()} a long question " * 50)]
    async with OpenAIChatModel(sim_server.base_url, "podium-sim") as m:
        r1 = await m.request(req(*first, extra_body={"sim": {"tool_steps": 0}}))
        more = [*first, Message("assistant", r1.content), Message("user", "and then?")]
        r2 = await m.request(req(*more, extra_body={"sim": {"tool_steps": 0}}))
    assert r2.usage.cached_tokens >= r1.usage.input_tokens
    assert r2.usage.cached_tokens < r2.usage.input_tokens


async def test_health_models_and_metrics(sim_server: SimServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(sim_server.root + "/health") as resp:
            assert resp.status == 200 and (await resp.json())["status"] == "ok"
        async with s.get(sim_server.base_url + "/models") as resp:
            assert (await resp.json())["data"][0]["id"] == "podium-sim"
        async with s.get(sim_server.root + "/metrics") as resp:
            text = await resp.text()
        assert "sim_capacity 4" in text and "sim_busy_seq_seconds_total" in text


async def test_queueing_beyond_capacity(sim_server_factory) -> None:  # type: ignore[no-untyped-def]
    server = sim_server_factory("--capacity", "2", "--step-ms", "10", "--output-tokens", "30")
    async with OpenAIChatModel(server.base_url, "podium-sim") as m, aiohttp.ClientSession() as s:
        calls = [asyncio.ensure_future(m.request(req(Message("user", str(i))))) for i in range(5)]
        seen = []
        for _ in range(500):  # another process: poll its metrics until the queue forms
            async with s.get(server.root + "/metrics?format=json") as resp:
                stats = await resp.json()
            seen.append((stats["running"], stats["waiting"]))
            if seen[-1] == (2, 3):  # admission happens at step boundaries
                break
            await asyncio.sleep(0.005)
        assert seen[-1] == (2, 3) and max(r for r, _ in seen) <= 2
        await asyncio.gather(*calls)
        async with s.get(server.root + "/metrics?format=json") as resp:
            stats = await resp.json()
    assert stats["running"] == 0 and stats["tokens"] == 5 * 30
    assert 0 < stats["occupancy"] <= 1 and stats["samples"]


async def test_backend_killed_mid_stream(sim_server_factory) -> None:  # type: ignore[no-untyped-def]
    server = sim_server_factory("--step-ms", "5", "--output-tokens", "400")
    async with OpenAIChatModel(server.base_url, "podium-sim") as m:
        stream = m.stream(ModelRequest(messages=[Message("user", "talk")]))
        first = await anext(stream)
        assert first.content
        server.kill()
        with pytest.raises(StreamTruncatedError) as info:
            async for _ in stream:
                pass
    assert info.value.connection_lost


async def test_bad_request_is_a_400(sim_server: SimServerProcess) -> None:
    async with OpenAIChatModel(
        sim_server.base_url, "podium-sim", retry=RetryPolicy(attempts=1)
    ) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(ModelRequest(messages=[]))
    assert info.value.status == 400


def test_example_arguments_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "k": {"type": "integer", "default": 3},
            "flag": {"type": "boolean"},
        },
        "required": ["mode", "k", "flag"],
    }
    assert example_arguments(schema) == {"mode": "fast", "k": 3, "flag": True}
