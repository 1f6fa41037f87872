"""A chat request's ``response_format`` schema is checked against the agent's output type:
the official OpenAI SDK's ``parse`` with the agent's shape (a pydantic model, strict) is
served, another shape is a 400 that says where they differ, before any run starts."""

from __future__ import annotations

from typing import Any, Literal

import httpx
import msgspec
import openai
import pydantic
import pytest

from conftest import KEY_A, default_agents, gateway_client
from podium import Agent, Scenario, SimulatedModel
from podium.gateway.app import create_app
from podium.gateway.errors import ApiError
from podium.gateway.response_format import check_response_format, mismatch, normalise
from podium.gateway.service import ServedAgent
from podium.output import OutputSpec

pytestmark = pytest.mark.anyio


class Item(msgspec.Struct):
    """One line of an order."""

    sku: str
    qty: int = 1


class Verdict(msgspec.Struct):
    """A refund decision."""

    order_id: str
    refund: bool
    kind: Literal["full", "partial"] = "full"
    note: str | None = None
    items: list[Item] = []


class Node(msgspec.Struct):
    name: str
    children: list[Node] = []


ANSWER = {"order_id": "A-1", "refund": True, "kind": "full", "note": None, "items": []}


class PItem(pydantic.BaseModel):
    sku: str
    qty: int


class Same(pydantic.BaseModel):
    """The agent's shape, written for pydantic (every field required, as strict mode has)."""

    order_id: str
    refund: bool
    kind: Literal["full", "partial"]
    note: str | None
    items: list[PItem]


class WrongType(pydantic.BaseModel):
    order_id: str
    refund: str
    kind: Literal["full", "partial"]
    note: str | None
    items: list[PItem]


class Fewer(pydantic.BaseModel):
    order_id: str
    refund: bool


def agents() -> list[ServedAgent]:
    model = SimulatedModel(Scenario(output=ANSWER))
    return [*default_agents(), ServedAgent(Agent("triage", model, output_type=Verdict))]


def spec(output_type: Any) -> OutputSpec:
    return OutputSpec(output_type, "native")


async def test_the_sdk_parses_with_the_agents_shape_and_is_refused_another() -> None:
    async with gateway_client(agents=agents()) as (gw, _):
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with (
            httpx.AsyncClient(transport=transport) as http,
            openai.AsyncOpenAI(
                base_url="http://podium.test/v1", api_key=KEY_A, http_client=http, max_retries=0
            ) as client,
        ):
            messages: Any = [{"role": "user", "content": "Refund A-1?"}]
            parsed = await client.chat.completions.parse(
                model="triage", messages=messages, response_format=Same
            )
            assert parsed.choices[0].message.parsed == Same.model_validate(ANSWER)
            for wrong, said in (
                (WrongType, "at refund, the agent's schema is {\"type\":\"boolean\"}"),
                (Fewer, "the request's lacks items, kind, note"),
            ):
                with pytest.raises(openai.BadRequestError) as info:
                    await client.chat.completions.parse(
                        model="triage", messages=messages, response_format=wrong
                    )
                error = info.value.body
                assert isinstance(error, dict), error
                assert error["type"] == "response_format_mismatch", error
                assert said in error["message"] and "Verdict" in error["message"], error
        runs = await gw.store.list(agent="triage")
        assert len(runs) == 1  # the refused requests started no run


async def test_a_format_without_a_schema_is_accepted_and_a_malformed_one_refused() -> None:
    async with gateway_client(agents=agents()) as (_, client):
        messages = [{"role": "user", "content": "Refund A-1?"}]
        for fmt in (
            {"type": "json_object"},
            {"type": "json_schema", "json_schema": {"name": "Verdict"}},
        ):
            ok = await client.post(
                "/v1/chat/completions",
                json={"model": "triage", "messages": messages, "response_format": fmt},
            )
            assert ok.status_code == 200, ok.text
            content = ok.json()["choices"][0]["message"]["content"]
            assert msgspec.json.decode(content) == ANSWER
        bad = await client.post(
            "/v1/chat/completions",
            json={
                "model": "triage",
                "messages": messages,
                "response_format": {"type": "json_schema", "json_schema": {"schema": [1]}},
            },
        )
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_response_format"


def test_normalising_drops_annotations_required_strictness_and_order() -> None:
    ours = {
        "$ref": "#/$defs/V",
        "$defs": {
            "V": {
                "title": "V",
                "type": "object",
                "properties": {
                    "k": {"enum": ["b", "a"], "default": "a"},
                    "n": {"anyOf": [{"type": "null"}, {"type": "integer"}]},
                    "one": {"const": "x"},
                },
                "required": ["k"],
            }
        },
    }
    theirs = {
        "type": "object",
        "additionalProperties": False,
        "required": ["k", "n", "one"],
        "properties": {
            "k": {"type": "string", "enum": ["a", "b"], "title": "K"},
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "n"},
            "one": {"type": "string", "enum": ["x"]},
        },
    }
    assert normalise(ours) == normalise(theirs)
    # A constraint is part of the shape; a map's value schema too.
    assert normalise({"type": "string", "maxLength": 3}) != normalise({"type": "string"})
    assert normalise({"type": "object", "additionalProperties": {"type": "integer"}}) != (
        normalise({"type": "object", "additionalProperties": {"type": "string"}})
    )


def test_mismatch_reads_the_type_not_its_request_wrapper() -> None:
    """A list answer is the list (the {"result": ...} wrapper is how the model is asked,
    not what the client receives); a recursive type compares without looping."""
    listed = spec(list[Item])
    assert mismatch(listed, {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}}}) is None
    wrapped = {"type": "object", "properties": {"result": {"type": "array"}}}
    assert "the root" in (mismatch(listed, wrapped) or "")
    with pytest.raises(ApiError) as refused:
        check_response_format("lister", listed, {"name": "items", "schema": wrapped})
    assert refused.value.status == 400 and "the answer is the bare value" in str(refused.value)

    tree = spec(Node)
    same = {"$ref": "#/$defs/T", "$defs": {"T": {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/T"}}
    }}}}
    assert mismatch(tree, same) is None
    assert mismatch(spec(int), {"type": "string"}) is not None
