"""The OpenAPI document describes the event streams event by event (issue 29): every event
a run or a streamed chat completion sends validates against the document's ``RunEvent`` /
``ChatCompletionEvent``, its JSON data against the event's ``contentSchema``, and every
kind of journal entry has its event documented."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from conftest import gateway_client
from podium.engine.records import JournalEntry
from podium.gateway.openapi_events import RUN_EVENTS
from podium.gateway.sse import EVENT_NAMES

pytestmark = pytest.mark.anyio

_DOC = "urn:podium:openapi"


def _validator(document: dict[str, Any], pointer: str) -> Draft202012Validator:
    """A validator of the schema at ``pointer`` in ``document``, its refs resolved there."""
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource(_DOC, resource)
    return Draft202012Validator({"$ref": f"{_DOC}#{pointer}"}, registry=registry)


def _events(stream: str) -> list[dict[str, str]]:
    """SSE frames as parsers give them: {event, data, id?, retry?} (comments skipped)."""
    events = []
    for frame in stream.split("\n\n"):
        event: dict[str, str] = {}
        data: list[str] = []
        for line in frame.splitlines():
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            if field == "data":
                data.append(value)
            else:
                event[field] = value
        if data:
            events.append({"event": "message", **event, "data": "\n".join(data)})
    return events


def _check(document: dict[str, Any], name: str, event: dict[str, str]) -> None:
    """``event`` against the component ``name``, and its data against the schema the
    component gives the data of that event (``contentSchema``, which validators only
    annotate with)."""
    at = f"/components/schemas/{name}"
    component = document["components"]["schemas"][name]
    _validator(document, at).validate(event)
    branches = component.get("allOf", [component])
    for i, branch in enumerate(branches):
        condition = branch["if"]["properties"]
        key = next(iter(condition))
        taken = "then" if event.get(key) == condition[key]["const"] else "else"
        if taken not in branch:
            continue
        data = branch[taken]["properties"]["data"]
        assert data["contentMediaType"] == "application/json"
        where = f"{at}/allOf/{i}" if "allOf" in component else at
        content = _validator(document, f"{where}/{taken}/properties/data/contentSchema")
        content.validate(json.loads(event["data"]))


def test_every_journal_entry_has_its_event_documented() -> None:
    tags = {struct.__struct_config__.tag for struct in typing.get_args(JournalEntry)}
    tags.remove("steprec")  # a whole step is sent as the events of its three parts
    kinds = {EVENT_NAMES.get(tag, tag) for tag in tags if isinstance(tag, str)}
    assert kinds | {"delta", "error"} == set(RUN_EVENTS)


async def test_a_runs_stream_matches_the_document() -> None:
    async with gateway_client() as (_, client):
        document = (await client.get("/openapi.json")).json()
        responses = document["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]
        assert responses["200"]["content"]["text/event-stream"]["schema"]["$ref"].endswith(
            "/RunEvent"
        )
        r = await client.post(
            "/v1/runs", json={"agent": "react", "input": "q", "stream": True}
        )
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _events(r.text)
        assert {"model_reply", "tool_result", "step_finished", "final"} <= {
            e["event"] for e in events
        }
        for event in events:
            _check(document, "RunEvent", event)
        run_id = r.headers["location"].rsplit("/", 1)[1]
        replay = _events((await client.get(f"/v1/runs/{run_id}/events")).text)
        assert [e["event"] for e in replay] == [e["event"] for e in events if e["event"] != "delta"]
        for event in replay:
            _check(document, "RunEvent", event)


async def test_a_wrong_event_fails_the_document() -> None:
    """The check above can fail: data not matching its event's schema is refused."""
    async with gateway_client() as (_, client):
        document = (await client.get("/openapi.json")).json()
        with pytest.raises(Exception, match="status"):
            _check(document, "RunEvent", {"event": "final", "data": '{"ts": 1.0}'})
        with pytest.raises(Exception, match="is not one of"):
            _check(document, "RunEvent", {"event": "nonsense", "data": "{}"})


async def test_a_streamed_chat_completion_matches_the_document() -> None:
    async with gateway_client() as (_, client):
        document = (await client.get("/openapi.json")).json()
        body = {
            "model": "react",
            "messages": [{"role": "user", "content": "q"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        events = _events(r.text)
        assert events[-1]["data"] == "[DONE]" and len(events) >= 3
        for event in events:
            _check(document, "ChatCompletionEvent", event)


async def test_a_streamed_response_matches_the_document() -> None:
    async with gateway_client() as (_, client):
        document = (await client.get("/openapi.json")).json()
        r = await client.post("/v1/responses", json={"model": "react", "input": "q",
                                                      "stream": True})
        assert r.status_code == 200, r.text
        events = _events(r.text)
        assert events[-1]["event"] == "response.completed"
        for event in events:
            _check(document, "ResponseEvent", event)
            assert json.loads(event["data"])["type"] == event["event"]
        final = json.loads(events[-1]["data"])["response"]
        _validator(document, "/components/schemas/ResponseObject").validate(final)
