"""Client-side tools through ``/v1/chat/completions`` with the official OpenAI SDK: the tools
a client sends reach the model, a call to one comes back as ``tool_calls``, and the
client's ``tool`` messages resume the same run (in-process gateway, real SDK over ASGI)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import openai
import pytest
from gateway_agents import react, weatherman

from conftest import KEY_A, KEY_B, gateway_client
from podium import Agent, FunctionModel, tool_call_reply
from podium.engine.records import ToolOutcome
from podium.gateway.service import Gateway, ServedAgent
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse

pytestmark = pytest.mark.anyio

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}


def _two_cities(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    if messages[-1].role == "tool":
        return " / ".join(m.content for m in messages if m.role == "tool")
    return tool_call_reply(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"}))


def _one_then_another(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    answers = [m.content for m in messages if m.role == "tool"]
    if len(answers) < 2:
        city = ("Oslo", "Rome")[len(answers)]
        return tool_call_reply(("get_weather", {"city": city}))
    return " then ".join(answers)


@contextlib.asynccontextmanager
async def sdk(key: str = KEY_A) -> AsyncIterator[tuple[Gateway, openai.AsyncOpenAI]]:
    twice = Agent("twice", FunctionModel(_two_cities), "You compare.")
    chain = Agent("chain", FunctionModel(_one_then_another), "You ask twice.")
    agents = [ServedAgent(weatherman()), ServedAgent(react()), ServedAgent(twice),
              ServedAgent(chain)]
    async with gateway_client(None, agents, key=key) as (gw, http):
        yield gw, openai.AsyncOpenAI(base_url="http://podium.test/v1", api_key=key,
                                     http_client=http, max_retries=0)


async def test_a_client_tool_call_comes_back_and_its_output_resumes_the_run() -> None:
    async with sdk() as (gw, client):
        messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
        first = await client.chat.completions.create(
            model="weatherman", messages=messages, tools=[WEATHER]
        )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls or []
        assert call.type == "function"
        assert call.function.name == "get_weather"  # lookup, the agent's own, ran here
        assert call.function.arguments == '{"city":"Oslo"}'
        assert choice.message.content == "Let me check."  # what the model said with it
        (run,) = await gw.store.list()
        assert run.status == "waiting"  # parked: no worker holds it while the client works
        messages += [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ]
        second = await client.chat.completions.create(
            model="weatherman", messages=messages, tools=[WEATHER]
        )
        assert second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.content == "The client says: sunny, 21 C"
        assert [r.run_id for r in await gw.store.list()] == [run.run_id]  # the same run
        # The same follow-up again (a client's retry) answers nothing twice.
        again = await client.chat.completions.create(
            model="weatherman", messages=messages, tools=[WEATHER]
        )
        assert again.choices[0].message.content == "The client says: sunny, 21 C"


async def test_streamed_the_tool_calls_arrive_as_openai_streams_them() -> None:
    async with sdk() as (_, client):
        messages: list[Any] = [{"role": "user", "content": "Weather in Rome?"}]
        stream = await client.chat.completions.create(
            model="weatherman", messages=messages, tools=[WEATHER], stream=True
        )
        calls: list[Any] = []
        finish = None
        async for chunk in stream:
            for c in chunk.choices:
                calls.extend(c.delta.tool_calls or [])
                finish = c.finish_reason or finish
        assert finish == "tool_calls"
        (call,) = calls
        assert call.function.name == "get_weather"
        assert call.function.arguments == '{"city":"Rome"}'
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call.id, "type": "function",
                "function": {"name": "get_weather", "arguments": call.function.arguments},
            }]},
            {"role": "tool", "tool_call_id": call.id, "content": "rain"},
        ]
        stream = await client.chat.completions.create(
            model="weatherman", messages=messages, tools=[WEATHER], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "The client says: rain"  # what the resumed run said, not its past


async def test_another_tenant_cannot_answer_the_call() -> None:
    async with sdk() as (gw, client):
        first = await client.chat.completions.create(
            model="weatherman", messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER],
        )
        (call,) = first.choices[0].message.tool_calls or []
        other = openai.AsyncOpenAI(base_url="http://podium.test/v1", api_key=KEY_B,
                                   http_client=client._client, max_retries=0)
        with pytest.raises(openai.NotFoundError):
            await other.chat.completions.create(
                model="weatherman",
                messages=[{"role": "tool", "tool_call_id": call.id, "content": "x"}],
            )
        (run,) = await gw.store.list()
        assert run.status == "waiting"


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ([{"type": "web_search"}], "only function tools"),
        ([{"type": "function", "function": {"name": "bad name!"}}], "letters, digits"),
        ([{"type": "function", "function": {"name": "lookup"}}], "has a tool of that name"),
        ([WEATHER, WEATHER], "same name"),
    ],
)
async def test_tools_the_gateway_cannot_offer_are_a_400_never_dropped(
    tools: list[Any], says: str
) -> None:
    async with sdk() as (gw, client):
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="weatherman", messages=[{"role": "user", "content": "hi"}], tools=tools
            )
        assert says in info.value.message
        assert await gw.store.list() == []


async def test_without_tools_the_model_is_offered_only_the_agents_own() -> None:
    async with sdk() as (_, client):
        reply = await client.chat.completions.create(
            model="weatherman", messages=[{"role": "user", "content": "Weather in Oslo?"}]
        )
        assert reply.choices[0].message.content == "no client tool offered; tools: ['lookup']"
        none = await client.chat.completions.create(
            model="weatherman", messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER], tool_choice="none",
        )
        assert none.choices[0].message.content == reply.choices[0].message.content


async def test_a_tenants_tool_allow_list_narrows_the_agents_tools_not_the_clients() -> None:
    async with sdk() as (gw, client):
        gw.keys.add("pk_test_narrow", "narrow", tools=["nothing_of_the_agents"])
        narrow = openai.AsyncOpenAI(base_url="http://podium.test/v1", api_key="pk_test_narrow",
                                    http_client=client._client, max_retries=0)
        first = await narrow.chat.completions.create(
            model="weatherman", messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER],
        )
        (call,) = first.choices[0].message.tool_calls or []
        assert call.function.name == "get_weather"
        (run,) = await gw.store.list()
        outcomes = [e for _, e in await gw.store.journal(run.run_id)
                    if isinstance(e, ToolOutcome)]
        refused = [o.result for o in outcomes if o.result.name == "lookup"]
        assert [r.error for r in refused] == ["forbidden"]  # the agent's own: refused


async def test_outputs_for_some_calls_of_a_step_say_which_are_missing() -> None:
    async with sdk() as (gw, client):
        messages: list[Any] = [{"role": "user", "content": "Oslo or Rome?"}]
        first = await client.chat.completions.create(
            model="twice", messages=messages, tools=[WEATHER]
        )
        oslo, rome = first.choices[0].message.tool_calls or []
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": oslo.id, "content": "sunny"})
        with pytest.raises(openai.BadRequestError, match=f"no output for the tool calls {rome.id}"):
            await client.chat.completions.create(model="twice", messages=messages, stream=True)
        messages.append({"role": "tool", "tool_call_id": rome.id, "content": "rain"})
        done = await client.chat.completions.create(model="twice", messages=messages)
        assert done.choices[0].message.content == "sunny / rain"
        assert len(await gw.store.list()) == 1


async def test_the_tool_call_replies_validate_strictly_against_the_sdks_models() -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    async with sdk() as (_, client):
        http = client._client
        body = {"model": "weatherman", "tools": [WEATHER],
                "messages": [{"role": "user", "content": "Weather in Oslo?"}]}
        reply = ChatCompletion.model_validate((await http.post("/v1/chat/completions",
                                                               json=body)).json())
        assert reply.choices[0].finish_reason == "tool_calls"
        streamed = await http.post("/v1/chat/completions", json={**body, "stream": True})
        datas = [line[6:] for line in streamed.text.splitlines()
                 if line.startswith("data: ") and line != "data: [DONE]"]
        chunks = [ChatCompletionChunk.model_validate_json(d) for d in datas]
        assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_a_retried_follow_up_gets_the_calls_its_run_made_next() -> None:
    async with sdk() as (_, client):
        messages: list[Any] = [{"role": "user", "content": "Oslo, then Rome?"}]
        first = await client.chat.completions.create(
            model="chain", messages=messages, tools=[WEATHER]
        )
        (oslo,) = first.choices[0].message.tool_calls or []
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": oslo.id, "content": "sunny"}]
        second = await client.chat.completions.create(model="chain", messages=messages)
        (rome,) = second.choices[0].message.tool_calls or []
        assert rome.function.arguments == '{"city":"Rome"}'
        retried = await client.chat.completions.create(model="chain", messages=messages)
        assert retried.choices[0].message.tool_calls == second.choices[0].message.tool_calls
        streamed = await client.chat.completions.create(model="chain", messages=messages,
                                                        stream=True)
        calls = [c for chunk in [c async for c in streamed] for ch in chunk.choices
                 for c in ch.delta.tool_calls or []]
        assert [c.id for c in calls] == [rome.id]
        messages += [second.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": rome.id, "content": "rain"}]
        done = await client.chat.completions.create(model="chain", messages=messages)
        assert done.choices[0].message.content == "sunny then rain"
