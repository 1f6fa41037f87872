"""Structured output through the gateway: runs and SSE final events carry the answer as a JSON
object, ``/v1/agents`` lists its schema, and the chat facade serves the official OpenAI SDK's
``response_format`` parsing (in-process, over httpx's ASGI transport)."""

from __future__ import annotations

import httpx
import msgspec
import openai
import pydantic
import pytest
from test_api import parse_sse

from conftest import KEY_A, default_agents, gateway_client
from podium import Agent, Scenario, SimStep, SimulatedModel
from podium.gateway.app import create_app
from podium.gateway.service import ServedAgent

pytestmark = pytest.mark.anyio


class Verdict(msgspec.Struct):
    """A refund decision."""

    order_id: str
    refund: bool
    reasons: list[str] = []


ANSWER = {"order_id": "A-1", "refund": True, "reasons": ["late"]}


def triage() -> Agent:
    """Answers with prose first (rejected), then the verdict."""
    model = SimulatedModel(
        Scenario(steps=(SimStep(content="Yes, refund it."),), output=ANSWER)
    )
    return Agent("triage", model, "You decide refunds.", output_type=Verdict)


def agents() -> list[ServedAgent]:
    return [*default_agents(), ServedAgent(triage())]


async def test_a_run_shows_its_structured_output_as_a_json_object() -> None:
    async with gateway_client(agents=agents()) as (_, client):
        r = await client.post("/v1/runs", json={"agent": "triage", "input": "A-1?", "wait": True})
        run = r.json()
        assert run["status"] == "completed" and run["structured"] is True
        assert run["output"] == ANSWER and run["steps"] == 2
        assert (await client.get(f"/v1/runs/{run['id']}")).json()["output"] == ANSWER
        text = await client.post("/v1/runs", json={"agent": "react", "input": "q", "wait": True})
        assert text.json()["output"] == "42." and text.json()["structured"] is False


async def test_sse_sends_the_rejected_attempt_and_a_final_event_with_the_object() -> None:
    async with gateway_client(agents=agents()) as (_, client):
        r = await client.post("/v1/runs", json={"agent": "triage", "input": "A-1?", "stream": True})
        events = parse_sse(r.text)
        names = [e["event"] for e in events]
        assert names[0] == "output_rejected" and names[-1] == "final"
        rejected = events[0]["data"]
        assert isinstance(rejected, dict) and "JSON is malformed" in rejected["error"]
        assert rejected["feedback"]["role"] == "user"
        assert "not a valid Verdict" in rejected["feedback"]["content"]
        final = events[-1]["data"]
        assert isinstance(final, dict) and final["output"] == ANSWER and final["structured"]


async def test_agents_list_the_output_schema() -> None:
    async with gateway_client(agents=agents()) as (_, client):
        listed = {a["name"]: a for a in (await client.get("/v1/agents")).json()["data"]}
    schema = listed["triage"]["output_schema"]
    assert schema["type"] == "object" and schema["required"] == ["order_id", "refund"]
    assert listed["react"]["output_schema"] is None


class PydanticVerdict(pydantic.BaseModel):
    order_id: str
    refund: bool
    reasons: list[str]


async def test_the_openai_sdk_parses_a_structured_agent_reply() -> None:
    async with gateway_client(agents=agents()) as (gw, _):
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with (
            httpx.AsyncClient(transport=transport) as http,
            openai.AsyncOpenAI(
                base_url="http://podium.test/v1", api_key=KEY_A, http_client=http, max_retries=0
            ) as client,
        ):
            messages = [{"role": "user", "content": "Refund A-1?"}]
            parsed = await client.chat.completions.parse(
                model="triage", messages=messages, response_format=PydanticVerdict  # type: ignore[arg-type]
            )
            verdict = parsed.choices[0].message.parsed
            assert verdict == PydanticVerdict(order_id="A-1", refund=True, reasons=["late"])
            plain = await client.chat.completions.create(model="triage", messages=messages)  # type: ignore[arg-type]
            assert msgspec.json.decode(plain.choices[0].message.content or "") == ANSWER
            with pytest.raises(openai.BadRequestError) as info:
                await client.chat.completions.parse(
                    model="react", messages=messages, response_format=PydanticVerdict  # type: ignore[arg-type]
                )
            assert "answers in text" in str(info.value)
            text = await client.chat.completions.create(
                model="react", messages=messages, response_format={"type": "text"}  # type: ignore[arg-type]
            )
            assert text.choices[0].message.content == "42."
