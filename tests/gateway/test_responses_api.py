"""``/v1/responses`` under the official OpenAI SDK: create, stream (typed events with their
sequence numbers), read back, ``previous_response_id`` onto threads, ``store: false``, and
the client's own tools round trip. In-process gateway, real SDK over ASGI, memory store."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from gateway_agents import TALKY_ANSWER, memory, react, talky, weatherman

from conftest import KEY_A, KEY_B, gateway_client
from podium import Agent, FunctionModel
from podium.errors import ModelError
from podium.gateway.service import Gateway, ServedAgent

pytestmark = pytest.mark.anyio

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


def _broken(messages: object, request: object) -> str:
    raise ModelError("the backend is on fire")


@contextlib.asynccontextmanager
async def sdk(key: str = KEY_A) -> AsyncIterator[tuple[Gateway, openai.AsyncOpenAI]]:
    broken = Agent("broken", FunctionModel(_broken), "You fail.")
    agents = [ServedAgent(a) for a in (react(), talky(), weatherman(), memory(), broken)]
    async with gateway_client(None, agents, key=key) as (gw, http):
        yield gw, openai.AsyncOpenAI(base_url="http://podium.test/v1", api_key=key,
                                     http_client=http, max_retries=0)


async def test_create_answers_with_the_runs_answer_and_its_tool_calls_as_items() -> None:
    async with sdk() as (gw, client):
        response = await client.responses.create(model="react", input="what is podium?")
        assert response.object == "response"
        assert response.status == "completed"
        assert response.output_text == "42."
        kinds = [item.type for item in response.output]
        assert kinds == ["mcp_call", "mcp_call", "message"]  # two server-side lookups
        call = response.output[0]
        assert call.type == "mcp_call"
        assert call.name == "lookup"
        assert call.output == "Result for podium: 42 items found."
        assert response.usage is not None
        assert response.usage.total_tokens == (
            response.usage.input_tokens + response.usage.output_tokens
        ) > 0
        again = await client.responses.retrieve(response.id)
        assert again.model_dump() == {**response.model_dump(), "tools": [],
                                      "instructions": None}
        (run,) = await gw.store.list()
        assert response.id == "resp_" + run.run_id.removeprefix("run_")


async def test_a_stream_sends_the_typed_events_in_sequence() -> None:
    async with (
        sdk() as (_, client),
        client.responses.stream(model="talky", input="where is A-1?") as stream,
    ):
        events = [event async for event in stream]
        final = await stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for kind in ("response.output_item.added", "response.content_part.added",
                 "response.output_text.done", "response.content_part.done",
                 "response.output_item.done"):
        assert kind in kinds
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 5  # token by token, as the backend produced them
    assert "".join(deltas) == TALKY_ANSWER == final.output_text
    done = [e.item for e in events if e.type == "response.output_item.done"]
    # (the SDK's stream helper adds its own `parsed` to the final response's texts)
    assert [(i.id, i.type, i.status) for i in done] == [
        (i.id, i.type, i.status) for i in final.output
    ]
    indices = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert indices == list(range(len(final.output)))


async def test_previous_response_id_continues_the_conversation_and_branches() -> None:
    async with sdk() as (_, client):
        first = await client.responses.create(model="memory", input="my name is Ada")
        assert first.output_text == "heard: my name is Ada"
        second = await client.responses.create(
            model="memory", input="what is my name?", previous_response_id=first.id
        )
        assert second.output_text == "heard: my name is Ada | what is my name?"
        assert second.previous_response_id == first.id
        third = await client.responses.create(
            model="memory", input="and now?", previous_response_id=second.id
        )
        assert third.output_text == "heard: my name is Ada | what is my name? | and now?"
        # Another continuation of the first: a branch, without the second's turn.
        branch = await client.responses.create(
            model="memory", input="hello again", previous_response_id=first.id
        )
        assert branch.output_text == "heard: my name is Ada | hello again"


async def test_instructions_are_read_once_per_conversation() -> None:
    async with sdk() as (gw, client):
        first = await client.responses.create(
            model="memory", input="hi", instructions="Be brief."
        )
        second = await client.responses.create(
            model="memory", input="again", instructions="Be brief.",
            previous_response_id=first.id,
        )
        assert first.instructions == "Be brief."
        runs = {r.run_id: r for r in await gw.store.list()}
        inputs = sorted(r.input for r in runs.values())
    opening = "Conversation so far:\nsystem: Be brief.\n\nuser: hi"
    assert inputs == [opening, "again"]  # not "Be brief." again in the second's
    assert second.output_text == f"heard: {opening} | again"


async def test_store_false_is_neither_read_back_nor_continued() -> None:
    async with sdk() as (_, client):
        response = await client.responses.create(model="memory", input="secret", store=False)
        assert response.output_text == "heard: secret"
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(
                model="memory", input="more", previous_response_id=response.id
            )


async def test_another_tenant_cannot_read_nor_continue_a_response() -> None:
    async with sdk() as (_, client):
        response = await client.responses.create(model="memory", input="mine")
    async with sdk(KEY_B) as (_, other):
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(response.id)
    async with sdk() as (_, client):
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve("resp_" + "0" * 32)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve("not-an-id")


async def test_a_client_tool_call_is_a_function_call_item_and_its_output_resumes() -> None:
    async with sdk() as (gw, client):
        first = await client.responses.create(
            model="weatherman", input="Weather in Oslo?", tools=[WEATHER]
        )
        assert first.status == "completed"
        kinds = [i.type for i in first.output]
        assert kinds == ["message", "mcp_call", "function_call"]
        call = first.output[2]
        assert call.type == "function_call"
        assert call.name == "get_weather"
        assert call.arguments == '{"city":"Oslo"}'
        (run,) = await gw.store.list()
        assert run.status == "waiting"
        second = await client.responses.create(
            model="weatherman", previous_response_id=first.id, tools=[WEATHER],
            input=[{"type": "function_call_output", "call_id": call.call_id,
                    "output": "sunny"}],
        )
        assert second.output_text == "The client says: sunny"
        assert second.id != first.id
        assert [r.run_id for r in await gw.store.list()] == [run.run_id]  # the same run
        # Each response reads back as it was: the first still ends with the call.
        assert (await client.responses.retrieve(first.id)).output[-1].type == "function_call"
        assert (await client.responses.retrieve(second.id)).output_text == (
            "The client says: sunny"
        )
        # A follow-up that sends the whole conversation (no previous_response_id), as the
        # OpenAI Agents SDK does by default, resumes it too (here: answered already).
        items: list[Any] = [{"role": "user", "content": "Weather in Oslo?"},
                            *[i.model_dump(exclude_none=True) for i in first.output],
                            {"type": "function_call_output", "call_id": call.call_id,
                             "output": "sunny"}]
        again = await client.responses.create(model="weatherman", input=items,
                                               tools=[WEATHER])
        assert again.output_text == "The client says: sunny"


async def test_a_streamed_client_tool_call_and_its_resume() -> None:
    async with sdk() as (_, client):
        async with client.responses.stream(
            model="weatherman", input="Weather in Rome?", tools=[WEATHER]
        ) as stream:
            events = [e async for e in stream]
            first = await stream.get_final_response()
        kinds = [e.type for e in events]
        assert "response.function_call_arguments.delta" in kinds
        assert "response.function_call_arguments.done" in kinds
        assert kinds[-1] == "response.completed"
        (call,) = [i for i in first.output if i.type == "function_call"]
        assert call.arguments == '{"city":"Rome"}'
        stream2 = await client.responses.create(
            model="weatherman", previous_response_id=first.id, stream=True,
            input=[{"type": "function_call_output", "call_id": call.call_id,
                    "output": "rain"}],
        )
        later = [e async for e in stream2]
        assert later[-1].type == "response.completed"
        text = "".join(e.delta for e in later if e.type == "response.output_text.delta")
        assert text == "The client says: rain"  # what the resumed run said, not its past


async def test_requests_podium_cannot_serve_are_a_400_saying_why() -> None:
    async with sdk() as (gw, client):
        with pytest.raises(openai.BadRequestError, match="only function tools"):
            await client.responses.create(model="weatherman", input="hi",
                                          tools=[{"type": "web_search"}])
        with pytest.raises(openai.BadRequestError, match="text only"):
            await client.responses.create(model="memory", input=[{
                "role": "user",
                "content": [{"type": "input_image", "image_url": "http://x/y.png"}],
            }])
        with pytest.raises(openai.BadRequestError, match="output_type"):
            await client.responses.create(model="memory", input="hi", text={
                "format": {"type": "json_schema", "name": "x", "schema": {}}})
        first = await client.responses.create(
            model="weatherman", input="Weather in Oslo?", tools=[WEATHER]
        )
        with pytest.raises(openai.BadRequestError, match="waits for the output"):
            await client.responses.create(model="weatherman", input="hello?",
                                          previous_response_id=first.id)
        assert len(await gw.store.list()) == 1


async def test_a_retried_continuation_with_its_idempotency_key_is_the_same_response() -> None:
    async with sdk() as (gw, client):
        first = await client.responses.create(model="memory", input="hi")
        key = {"Idempotency-Key": "turn-2"}
        a = await client.responses.create(model="memory", input="again", extra_headers=key,
                                          previous_response_id=first.id)
        b = await client.responses.create(model="memory", input="again", extra_headers=key,
                                          previous_response_id=first.id)
        assert a.id == b.id
        assert b.output_text == "heard: hi | again"
        assert len(await gw.store.list()) == 2


async def test_a_failed_run_is_a_502_and_streamed_a_response_failed() -> None:
    async with sdk() as (gw, client):
        with pytest.raises(openai.InternalServerError) as info:
            await client.responses.create(model="broken", input="go")
        assert info.value.status_code == 502
        assert "the backend is on fire" in info.value.message
        stream = await client.responses.create(model="broken", input="go", stream=True)
        events = [e async for e in stream]
        assert events[-1].type == "response.failed"
        response = events[-1].response
        assert response.status == "failed"
        assert response.error is not None
        assert "the backend is on fire" in response.error.message
        assert len(await gw.store.list()) == 2  # no retry started another


async def test_bodies_and_events_validate_strictly_against_the_sdks_own_models() -> None:
    """The SDK builds its objects without validating them: validate here, field by field,
    what the gateway sends against ``openai.types.responses``' models."""
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    events = TypeAdapter(ResponseStreamEvent)
    async with sdk() as (_, client):
        http = client._client
        body = {"model": "weatherman", "input": "Weather in Oslo?", "tools": [WEATHER]}
        made = await http.post("/v1/responses", json=body)
        assert made.status_code == 200, made.text
        first = Response.model_validate(made.json())
        assert [i.type for i in first.output] == ["message", "mcp_call", "function_call"]
        call = first.output[2]
        assert call.type == "function_call"
        streamed = await http.post("/v1/responses", json={
            "model": "weatherman", "stream": True, "previous_response_id": first.id,
            "input": [{"type": "function_call_output", "call_id": call.call_id,
                       "output": "sunny"}],
        })
        datas = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
        parsed = [events.validate_json(d) for d in datas]
        assert parsed[-1].type == "response.completed"
        Response.model_validate(json.loads(datas[-1])["response"])
        read = await http.get(f"/v1/responses/{first.id}")
        Response.model_validate(read.json())
        for model in ("talky", "broken"):  # token deltas; a failed run's response.failed
            streamed = await http.post("/v1/responses", json={
                "model": model, "input": "go", "stream": True})
            datas = [line[6:] for line in streamed.text.splitlines()
                     if line.startswith("data: ")]
            kinds = [events.validate_json(d).type for d in datas]
            assert kinds[-1] == ("response.completed" if model == "talky" else "response.failed")
