"""Structured output on the wire: what an OpenAI-compatible server is sent (captured on a
loopback replay server) and what ``podium sim-server`` answers to ``response_format``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
import msgspec
import pytest
from backend_servers import ReplayServer, Reply, SimServerProcess

from podium import Agent, Engine
from podium.engine.records import OutputRejected
from podium.messages import Message
from podium.models import ModelRequest, ModelSettings, OpenAIChatModel, RetryPolicy
from podium.models.openai_wire import RequestEncoder
from podium.output import OutputSpec

pytestmark = pytest.mark.anyio


class Address(msgspec.Struct):
    city: str
    zip: str


class Customer(msgspec.Struct):
    """A customer record."""

    name: str
    age: int
    addresses: list[Address]
    vip: bool = False


def completion(content: str | None = None, calls: Sequence[tuple[str, str]] = ()) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return msgspec.json.encode(body)


GOOD = '{"name": "Ada", "age": 36, "addresses": [{"city": "London", "zip": "N1"}]}'


def test_the_encoder_sends_a_json_schema_response_format_once_built() -> None:
    spec = OutputSpec(Customer, "native")
    encoder = RequestEncoder("m", extra_body={"top_k": 5})
    request = ModelRequest([Message("user", "hi")], settings=ModelSettings(output=spec.request))
    body = msgspec.json.decode(encoder.encode(request))
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and body["top_k"] == 5
    assert fmt["json_schema"]["name"] == "Customer"
    assert fmt["json_schema"]["description"] == "A customer record."
    schema = fmt["json_schema"]["schema"]
    # the root is the object itself (OpenAI refuses a root $ref); nested types stay in $defs
    assert schema["type"] == "object" and "$ref" not in schema
    assert set(schema["$defs"]) == {"Address"}
    assert "strict" not in fmt["json_schema"]
    assert encoder.encode(request) == encoder.encode(request)
    tool_mode = ModelSettings(output=OutputSpec(Customer, "tool").request)
    plain = msgspec.json.decode(encoder.encode(ModelRequest([Message("user", "hi")],
                                                            settings=tool_mode)))
    assert "response_format" not in plain


async def test_native_mode_sends_response_format_and_retries_a_bad_answer(
    replay: ReplayServer,
) -> None:
    replay.script(
        Reply(body=completion('{"name": "Ada"}')),
        Reply(body=completion(GOOD)),
    )
    model = OpenAIChatModel(replay.base_url, "m", retry=RetryPolicy(attempts=1))
    agent = Agent("crm", model, output_type=Customer)
    async with Engine() as engine:
        record = await engine.run(agent, "Who is Ada?")
    assert record.status == "completed"
    assert record.output_as(Customer) == Customer("Ada", 36, [Address("London", "N1")])
    first, second = replay.requests
    assert first["response_format"]["type"] == "json_schema"
    assert first["response_format"]["json_schema"]["schema"]["required"] == [
        "name", "age", "addresses"
    ]
    assert "tools" not in first
    assert second["response_format"] == first["response_format"]
    feedback = second["messages"][-1]
    assert feedback["role"] == "user" and "missing required field `age`" in feedback["content"]


async def test_tool_mode_offers_final_result_and_no_response_format(
    replay: ReplayServer,
) -> None:
    replay.script(Reply(body=completion(None, [("final_result", GOOD)])))
    model = OpenAIChatModel(replay.base_url, "m", structured_output="tool")
    record = await Agent("crm", model, output_type=Customer).run("Who is Ada?")
    assert record.output_as(Customer).name == "Ada"
    (sent,) = replay.requests
    assert "response_format" not in sent
    (tool,) = sent["tools"]
    assert tool["function"]["name"] == "final_result"
    assert tool["function"]["parameters"]["required"] == ["name", "age", "addresses"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_the_sim_server_answers_the_requested_schema(
    sim_server: SimServerProcess, stream: bool
) -> None:
    model = OpenAIChatModel(sim_server.base_url, "podium-sim", stream=stream)
    record = await Agent("crm", model, output_type=Customer).run("Who?")
    assert record.status == "completed", record.error
    customer = record.output_as(Customer)
    assert customer.addresses and customer.addresses[0].city == "podium"


async def test_the_sim_server_refuses_a_malformed_response_format(
    sim_server: SimServerProcess,
) -> None:
    url = sim_server.base_url + "/chat/completions"
    messages = [{"role": "user", "content": "hi"}]
    async with aiohttp.ClientSession() as http:
        no_schema = {"type": "json_schema", "json_schema": {"name": "x"}}
        for bad in ({"type": "json_schema"}, {"type": "xml"}, no_schema):
            async with http.post(url, json={"messages": messages, "response_format": bad}) as r:
                assert r.status == 400, bad
                assert "error" in await r.json()
        async with http.post(
            url, json={"messages": messages, "response_format": {"type": "json_object"}}
        ) as r:
            body = await r.json()
        assert isinstance(msgspec.json.decode(body["choices"][0]["message"]["content"]), dict)


async def test_an_agent_fails_with_invalid_output_when_the_server_never_complies(
    replay: ReplayServer,
) -> None:
    replay.default = Reply(body=completion("I cannot do JSON"))
    model = OpenAIChatModel(replay.base_url, "m")
    async with Engine() as engine:
        record = await engine.run(Agent("crm", model, output_type=Customer), "Who?")
        entries = [e for _, e in await engine.store.journal(record.run_id)]
    assert record.status == "failed" and record.reason == "invalid_output"
    assert len(replay.requests) == 3 and sum(isinstance(e, OutputRejected) for e in entries) == 3
