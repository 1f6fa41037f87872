"""``/v1/responses``: OpenAI's Responses API over Podium's runs.

``model`` names the agent. A response is a run (or, after a client's tool outputs, the
next part of one: see :mod:`podium.gateway.responses_view`):

- ``input`` (a string, or message / ``function_call`` / ``function_call_output`` items)
  and ``instructions`` become the run's input, as the chat facade makes one of its
  messages (a transcript before the last user message);
- ``previous_response_id`` continues that response's conversation: the new run starts
  from the history its run ended with, on a thread of its own (so two continuations of
  one response are two branches, as with OpenAI);
- ``tools`` (function tools) are the client's: a call to one ends the response with a
  ``function_call`` item, and ``function_call_output`` items with its ``call_id`` resume
  the same run, which waits for them durably (see :mod:`podium.gateway.client_tools`);
- ``store: false``: the response cannot be read back nor continued (``GET`` and
  ``previous_response_id`` answer 404); its run is kept as every run is;
- ``stream: true``: the typed events of :mod:`podium.gateway.responses_stream`.

Example::

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key=KEY)
    first = client.responses.create(model="support", input="Where is A-1?")
    later = client.responses.create(model="support", input="And A-2?",
                                    previous_response_id=first.id)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import msgspec
from starlette.responses import Response, StreamingResponse

from podium.engine.records import RunRecord
from podium.gateway.auth import Tenant
from podium.gateway.client_tools import (
    client_calls,
    client_tools_metadata,
    parse_call_id,
    resume_listening,
)
from podium.gateway.errors import ApiError, run_still_going, run_waiting
from podium.gateway.openai_facade import input_from_messages
from podium.gateway.responses_input import input_messages, tool_outputs
from podium.gateway.responses_schemas import ResponseObject, ResponsesRequest
from podium.gateway.responses_stream import SHUTTING_DOWN, response_events
from podium.gateway.responses_view import (
    Segment,
    parse_response_id,
    response_id,
    response_object,
)
from podium.gateway.schemas import ChatMessage
from podium.gateway.service import Gateway
from podium.observe.tracing import submit_context
from podium.streaming.base import TokenSubscription
from podium.threads.record import ThreadRecord
from podium.tools.client import CLIENT_TOOLS_KEY, decode_client_tools

__all__ = ("ResponsesRequest", "create_response", "get_response")

_encode = msgspec.json.Encoder().encode
#: Run metadata the Responses API keeps of a request (never shown as the user's metadata).
STORE_KEY = "podium.response.store"
PREVIOUS_KEY = "podium.response.previous"
INSTRUCTIONS_KEY = "podium.response.instructions"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _shown(record: RunRecord) -> bool:
    return record.metadata.get(STORE_KEY) != "false"


async def _previous(gw: Gateway, tenant: Tenant, rid: str) -> tuple[RunRecord, int]:
    place = parse_response_id(rid)
    if place is None:
        raise ApiError(404, "not_found", f"no response {rid!r}", field="previous_response_id")
    try:
        record = await gw.get(tenant, place[0])
    except ApiError:
        raise ApiError(404, "not_found", f"no response {rid!r}",
                       field="previous_response_id") from None
    if not _shown(record):
        raise ApiError(404, "not_found", f"no response {rid!r} (it was made with store: false)",
                       field="previous_response_id")
    return record, place[1]


async def _thread_after(gw: Gateway, tenant: Tenant, prev: RunRecord, run_id: str) -> str:
    """A new thread whose history is the one ``prev``'s run ends with, for the run
    ``run_id`` to start from. Its own thread for each run (named after it), so continuing
    one response twice makes two branches, and a retry with the same Idempotency-Key (the
    same run id) finds the thread its first attempt made."""
    thread_id = "thr_" + run_id.removeprefix("run_")
    existing = await gw.store.get_thread(thread_id)
    if existing is not None:
        if existing.tenant != tenant.name:  # cannot be, short of a collision: refuse it
            raise ApiError(409, "conflict", f"thread {thread_id} is taken")
        return thread_id
    thread = ThreadRecord(thread_id, tenant.name, runs=[prev.run_id])
    if prev.thread_id is not None:  # its history is that thread's, with prev folded in
        base = await gw.get_thread(tenant, prev.thread_id)
        thread.history = list(base.history)
        if prev.run_id in base.runs[: base.settled]:
            thread.runs = []  # folded in already: the history is where it ended
    # else the keeper folds prev's run in (from its journal) when the new run's turn comes
    thread.touch(thread.created_at)
    await gw.store.create_thread(thread)
    return thread.thread_id


def _request_fields(body: ResponsesRequest) -> dict[str, Any]:
    """What a response says of the request that made it."""
    fields: dict[str, Any] = {
        "instructions": body.instructions,
        "metadata": dict(body.metadata or {}),
        "tools": list(body.tools or []),
        "previous_response_id": body.previous_response_id,
        "store": body.store,
        "temperature": body.temperature,
        "top_p": body.top_p,
    }
    if body.tool_choice is not None:
        fields["tool_choice"] = body.tool_choice
    if body.parallel_tool_calls is not None:
        fields["parallel_tool_calls"] = body.parallel_tool_calls
    if body.max_output_tokens is not None:
        fields["max_output_tokens"] = int(body.max_output_tokens)
    if body.text is not None:
        fields["text"] = body.text
    return fields


def _stored_fields(record: RunRecord) -> dict[str, Any]:
    """What a response read back says of its request: what the run kept of it."""
    raw = record.metadata.get(CLIENT_TOOLS_KEY)
    tools = [
        {"type": "function", "name": s.name, "description": s.description,
         "parameters": s.parameters, "strict": False}
        for s in (decode_client_tools(raw) if raw else [])
    ]
    return {
        "metadata": {k: v for k, v in record.metadata.items() if not k.startswith("podium.")},
        "tools": tools,
        "previous_response_id": record.metadata.get(PREVIOUS_KEY),
    }


def _check_format(gw: Gateway, body: ResponsesRequest) -> bool:
    """Whether the agent answers with JSON; a JSON ``text.format`` for one that answers in
    text is a 400 (as ``response_format`` is for chat)."""
    structured = gw.served(body.model, "model").agent.output is not None
    fmt = (body.text or {}).get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in (None, "text") and not structured:
        raise ApiError(
            400, "unsupported_response_format",
            f"agent {body.model!r} answers in text: text.format {kind!r} needs an agent "
            "declared with an output_type (whose schema is used)", field="text",
        )
    return structured


async def create_response(
    gw: Gateway,
    tenant: Tenant,
    body: ResponsesRequest,
    *,
    idempotency_key: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """``POST /v1/responses``: start (or resume) the run and answer as OpenAI would."""
    structured = _check_format(gw, body)
    items: list[Any] = (
        [{"type": "message", "role": "user", "content": body.input}]
        if isinstance(body.input, str) else body.input
    )
    outputs = tool_outputs(items)
    prev: RunRecord | None = None
    if body.previous_response_id is not None:
        prev, _ = await _previous(gw, tenant, body.previous_response_id)
    tokens: TokenSubscription | None = None
    if outputs:  # the client ran the tools a response handed it: that run goes on
        run_id = str(parse_call_id(outputs[0][0])[0])  # type: ignore[index]  # checked
        if prev is not None and prev.run_id != run_id:
            raise ApiError(400, "invalid_request", "the function_call_output items answer "
                           "calls of another response than previous_response_id",
                           field="input")
        record, after, tokens = await resume_listening(
            gw, tenant, run_id, body.model, outputs, body.stream and not structured
        )
        from_step = max(parse_call_id(c)[1] for c, _ in outputs) + 1  # type: ignore[index]
    else:
        record, tokens = await _start(gw, tenant, body, items, prev, idempotency_key,
                                      headers, structured)
        after, from_step = -1, 0
    fields = _request_fields(body)
    rid = response_id(record.run_id, from_step)
    head = {"X-Podium-Run-Id": record.run_id}
    timeout = gw.config.server.wait_timeout_s
    if body.stream:
        events = response_events(gw, record, from_step, after, tokens, timeout, fields)
        return StreamingResponse(
            gw.stream(events, tokens, SHUTTING_DOWN), media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", **head},
        )
    record = await gw.wait(record.run_id, timeout)
    segment = await _segment(gw, record, from_step)
    if segment.parked is None:
        _check_answered(record, rid)
    return Response(_encode(response_object(segment, record, **fields)),
                    media_type="application/json", headers=head)


async def _start(
    gw: Gateway,
    tenant: Tenant,
    body: ResponsesRequest,
    items: list[Any],
    prev: RunRecord | None,
    idempotency_key: str | None,
    headers: Mapping[str, str] | None,
    structured: bool,
) -> tuple[RunRecord, TokenSubscription | None]:
    """A new run for the request, on a thread that continues ``prev`` if given."""
    if prev is not None:
        calls, _ = await client_calls(gw, prev)
        if calls:
            raise ApiError(
                400, "invalid_request",
                f"response {body.previous_response_id} waits for the output of its function "
                f"calls ({', '.join(c.id for c in calls)}): send function_call_output items "
                "with their call_id", field="input",
            )
    client_tools = client_tools_metadata(gw, body.model, body.tools, body.tool_choice,
                                         nested=False)
    messages = input_messages(items)
    extra: dict[str, str] = {}
    if body.instructions:
        # Sent again with every turn by most clients: read once per conversation, unless
        # they change.
        digest = _digest(body.instructions)
        if prev is None or prev.metadata.get(INSTRUCTIONS_KEY) != digest:
            messages.insert(0, ChatMessage(role="system", content=body.instructions))
        extra[INSTRUCTIONS_KEY] = digest
    if not any(m.role == "user" for m in messages):
        raise ApiError(400, "invalid_request", "input has no user message", field="input")
    if not body.store:
        extra[STORE_KEY] = "false"
    if body.previous_response_id is not None:
        extra[PREVIOUS_KEY] = body.previous_response_id
    run_id = gw.new_run_id(tenant, idempotency_key)
    thread_id = None if prev is None else await _thread_after(gw, tenant, prev, run_id)
    tokens = await gw.listen(run_id) if body.stream and not structured else None
    try:
        with submit_context(
            gw.tracer, headers or {}, body.metadata or {}, body.model, "/v1/responses"
        ) as metadata:
            record, _ = await gw.submit(
                tenant, body.model, input_from_messages(messages), {**metadata, **extra},
                field="model", idempotency_key=idempotency_key, run_id=run_id,
                thread_id=thread_id, client_tools=client_tools,
            )
    except BaseException:
        if tokens is not None:
            tokens.close()
        raise
    return record, tokens


async def _segment(gw: Gateway, record: RunRecord, from_step: int) -> Segment:
    segment = Segment(record, from_step)
    for _, entry in await gw.store.journal(record.run_id):
        segment.feed(entry)
    return segment


def _check_answered(record: RunRecord, rid: str) -> None:
    """A response that could not be made: why, as the chat facade says it."""
    if record.status == "completed":
        return
    headers = {"X-Podium-Run-Id": record.run_id, "x-should-retry": "false"}
    if record.status == "waiting":
        raise ApiError(409, "run_waiting", run_waiting(record.run_id), headers=headers)
    if record.done:
        raise ApiError(
            502, "run_failed",
            f"response {rid}: run {record.run_id} {record.status}: "
            f"{record.error or record.reason}", headers=headers,
        )
    raise ApiError(504, "timeout", run_still_going(record.run_id), headers=headers)


async def get_response(gw: Gateway, tenant: Tenant, rid: str) -> ResponseObject:
    """``GET /v1/responses/{id}``: a stored response as its run stands now."""
    place = parse_response_id(rid)
    missing = ApiError(404, "not_found", f"no response {rid!r}", field="response_id")
    if place is None:
        raise missing
    try:
        record = await gw.get(tenant, place[0])
    except ApiError:
        raise missing from None
    if not _shown(record):
        raise missing
    segment = await _segment(gw, record, place[1])
    return response_object(segment, record, **_stored_fields(record))
