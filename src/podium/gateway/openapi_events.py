"""The OpenAPI description of the event streams: what each Server-Sent Event holds.

A run's stream (``POST /v1/runs`` with ``stream``, ``GET /v1/runs/{id}/events``) is
described by ``RunEvent``, a chat completion's by ``ChatCompletionEvent``. An event is
read as SSE parsers give it, ``{event, data, id?, retry?}``; ``data`` is one line of JSON
whose schema (``contentSchema``) depends on ``event``. The shapes of journal entries
come from their msgspec structs, as the other bodies' do.
"""

from __future__ import annotations

from typing import Any

from podium.engine.records import RUN_STATUSES
from podium.gateway.schemas import ChatCompletionChunk
from podium.messages import Message
from podium.security.screen import ScreenVerdict
from podium.streaming.base import TokenDelta
from podium.tools.executor import ToolResult

__all__ = ("EVENT_STRUCTS", "RESPONSE_EVENTS", "RUN_EVENTS", "event_schemas")

#: Structs the events' data refer to (added to the document's components).
EVENT_STRUCTS = (Message, ToolResult, ScreenVerdict, TokenDelta, ChatCompletionChunk)

_INT = {"type": "integer", "minimum": 0}
_NUMBER = {"type": "number"}
_TEXT = {"type": "string"}
_MAYBE_TEXT = {"anyOf": [{"type": "string"}, {"type": "null"}]}


def _ref(name: str, ref: str) -> dict[str, Any]:
    return {"$ref": ref.format(name=name)}


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    # Open to fields added later: a client reads the ones it knows.
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


def _run_events(ref: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each event of a run's stream: (what it means, its data's schema)."""
    seq = {"seq": {**_INT, "description": "The journal entry's sequence number."}}
    step = {"step": _INT, "ts": _NUMBER}
    timings = _object(
        {"tool_calls": _INT},
        {
            "wall_ms": {"type": "object", "additionalProperties": _NUMBER},
            "cpu_ms": {"type": "object", "additionalProperties": _NUMBER},
        },
    )
    usage = {"usage": {"type": "object", "additionalProperties": {"type": "integer"}}}
    call = {"index": _INT, "call_id": _TEXT, "tool": _TEXT}
    return {
        "model_reply": (
            "the model's turn at a step (its content and tool calls)",
            _object({**step, "message": _ref("Message", ref)}, {**usage, **seq}),
        ),
        "tool_result": (
            "one tool call's outcome, as the model reads it",
            _object({**step, "index": _INT, "result": _ref("ToolResult", ref)}, seq),
        ),
        "compacted": (
            "messages[start:end] of the context were replaced by a summary",
            _object(
                {**step, "start": _INT, "end": _INT, "summary": _ref("Message", ref)},
                {"method": _TEXT, **seq},
            ),
        ),
        "handed_off": (
            "a hand-off's input filter ran: the run goes on with agent and these messages "
            "(the history after the system prompt)",
            _object(
                {
                    **step,
                    "agent": _TEXT,
                    "messages": {"type": "array", "items": _ref("Message", ref)},
                },
                seq,
            ),
        ),
        "output_rejected": (
            "a reply failed the agent's output type; feedback is what the model reads next",
            _object(
                {**step, "message": _ref("Message", ref), "feedback": _ref("Message", ref)},
                {"error": _TEXT, **usage, "profile": timings, **seq},
            ),
        ),
        "step_finished": (
            "a step was checkpointed, with its phases' wall and CPU milliseconds",
            _object(step, {"profile": timings, **seq}),
        ),
        "screen": (
            "the injection screen's verdict on the run's input",
            _object({"ts": _NUMBER, "verdict": _ref("ScreenVerdict", ref)}, seq),
        ),
        "approval_requested": (
            "a tool call waits for a human (the run is waiting; the stream stays open)",
            _object(
                {**step, **call, "arguments": _TEXT},
                {"kind": {"enum": ["approval", "interrupt"]}, "question": _MAYBE_TEXT, **seq},
            ),
        ),
        "approval_decided": (
            "a human decided on a waiting call",
            _object(
                {**step, **call, "decision": {"enum": ["approve", "reject", "answer"]}},
                {"message": _MAYBE_TEXT, "arguments": _MAYBE_TEXT, "by": _MAYBE_TEXT, **seq},
            ),
        ),
        "final": (
            "the run ended: the last event (output: text, or a structured answer's JSON)",
            _object(
                {"ts": _NUMBER, "status": {"enum": list(RUN_STATUSES)}},
                {
                    "output": {"description": "Text, or the JSON of a structured answer."},
                    "error": _MAYBE_TEXT,
                    "reason": _MAYBE_TEXT,
                    "structured": {"type": "boolean"},
                    **seq,
                },
            ),
        ),
        "delta": (
            "model tokens as they arrive (no id: not resumable); offset is where they "
            "start in the step's streamed text",
            _ref("TokenDelta", ref),
        ),
        "error": (
            "the stream ends early: the store stayed unreachable (unavailable) or the "
            "server is stopping (shutting_down); reconnect with Last-Event-ID",
            _ref("ErrorBody", ref),
        ),
    }


#: The names of a run's events, in the order a step sends them.
RUN_EVENTS = tuple(_run_events("{name}"))


def _json_data(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "string", "contentMediaType": "application/json", "contentSchema": schema}


def event_schemas(ref: str) -> dict[str, Any]:
    """The component schemas ``RunEvent``, ``ChatCompletionEvent`` and ``ResponseEvent``
    (``ref``: the document's ``$ref`` template)."""
    events = _run_events(ref)
    listing = "; ".join(f"`{name}`: {meaning}" for name, (meaning, _) in events.items())
    run_event = {
        "title": "RunEvent",
        "description": f"One event of a run's stream. Events: {listing}.",
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"enum": list(events)},
            "data": {"type": "string", "description": "One line of JSON."},
            "id": {
                "type": "string",
                "pattern": "^[0-9]+$",
                "description": "The journal entry's sequence number (on the last event of "
                "each entry): the Last-Event-ID to resume after.",
            },
            "retry": {"type": "integer", "minimum": 0},
        },
        "allOf": [
            {
                "if": {"properties": {"event": {"const": name}}},
                "then": {"properties": {"data": _json_data(schema)}},
            }
            for name, (_, schema) in events.items()
        ],
    }
    chat_event = {
        "title": "ChatCompletionEvent",
        "description": "One event of a streamed chat completion, as OpenAI sends them: a "
        "chat.completion.chunk (a role chunk, one per token, one with finish_reason, a usage "
        "chunk with stream_options.include_usage), an error (the server is stopping), "
        "then the data `[DONE]`.",
        "type": "object",
        "required": ["data"],
        "properties": {"data": {"type": "string"}},
        "if": {"properties": {"data": {"const": "[DONE]"}}},
        "else": {
            "properties": {
                "data": _json_data(
                    {"anyOf": [_ref("ChatCompletionChunk", ref), _ref("ErrorBody", ref)]}
                )
            }
        },
    }
    response_event = {
        "title": "ResponseEvent",
        "description": "One event of a streamed response, as OpenAI's Responses API sends "
        "them: `event` is the data's `type` (`response.created`, `response.in_progress`, "
        "`response.output_item.added`, `response.content_part.added`, "
        "`response.output_text.delta`, `response.output_text.done`, "
        "`response.content_part.done`, `response.function_call_arguments.delta`, "
        "`response.function_call_arguments.done`, `response.output_item.done`, "
        "`response.completed`, `response.failed`, `error`), numbered by `sequence_number`.",
        "type": "object",
        "required": ["event", "data"],
        "properties": {"event": {"enum": list(RESPONSE_EVENTS)}, "data": {"type": "string"}},
        "if": {"properties": {"event": {"const": "error"}}},
        "then": {"properties": {"data": _json_data(_object(
            {"type": {"const": "error"}, "code": _TEXT, "message": _TEXT,
             "sequence_number": _INT},
        ))}},
        "else": {"properties": {"data": _json_data(_object(
            {"type": {"enum": list(RESPONSE_EVENTS)}, "sequence_number": _INT},
            {"response": _ref("ResponseObject", ref)},
        ))}},
    }
    return {"RunEvent": run_event, "ChatCompletionEvent": chat_event,
            "ResponseEvent": response_event}


#: The types of a streamed response's events.
RESPONSE_EVENTS = (
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added", "response.output_text.delta", "response.output_text.done",
    "response.content_part.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.output_item.done",
    "response.completed", "response.failed", "error",
)
