"""The OpenAPI 3.1 document served at ``/openapi.json``, generated.

The paths come from the route table the app serves (:data:`podium.gateway.routes.OPERATIONS`),
the bodies' schemas from the msgspec structs that table names (one source of truth for
both); this module only renders them: error bodies, the event streams' schemas (as
``text/event-stream``), security.
"""

from __future__ import annotations

from typing import Any

import msgspec

from podium.gateway.errors import ErrorBody
from podium.gateway.openapi_events import EVENT_STRUCTS, event_schemas
from podium.gateway.routes import EPOCH_PATTERN, OPERATIONS, Operation, Reply, openapi_path

__all__ = ("EPOCH_PATTERN", "openapi_document")

_REF = "#/components/schemas/{name}"
_ERROR_TEXT = {
    "400": "The body is not JSON.",
    "401": "No API key, or an unknown one.",
    "403": "The key is a tenant's; this endpoint needs an operator key (admin = true).",
    "404": "No such run, thread, response (for this tenant) or agent.",
    "408": "The body did not arrive within server.body_timeout_s.",
    "409": "The run cannot be cancelled (it already ended), or the call was decided "
    "already (or the run no longer waits).",
    "413": "The body is over the size limit.",
    "415": "The body is not application/json.",
    "422": "A field is missing, unknown, of the wrong type or out of range.",
    "429": "Shed by admission control: retry after the Retry-After header's seconds.",
    "502": "The agent's run did not complete.",
    "503": "The run store or queue is unreachable or refuses writes (the message says "
    "why): retry after the Retry-After header's "
    "seconds (with the same Idempotency-Key when creating a run).",
    "504": "The run did not finish within the wait timeout.",
}
#: What each event stream carries (the schema of one event is in openapi_events).
_EVENTS_TEXT = {
    "RunEvent": "Server-Sent Events, one per RunEvent: `id: <seq>` (on the last event of "
    "each journal entry: resume with Last-Event-ID), `event: <name>`, `data: <one line of "
    "JSON>`, a blank line; `: keep-alive` comments while nothing happens. `final` is the "
    "last event of a run that ended; `error` ends a stream early (reconnect with "
    "Last-Event-ID).",
    "ChatCompletionEvent": "Server-Sent Events as OpenAI sends them: `data: "
    "<chat.completion.chunk>` per token, then `data: [DONE]`.",
    "ResponseEvent": "Server-Sent Events as OpenAI sends them: `event: <type>`, `data: <the "
    "event>`, each with its `sequence_number`; `response.completed` or `response.failed` "
    "last (or `error`).",
}
_AUTH: list[dict[str, list[str]]] = [{"apiKey": []}]


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(name=name)}}}


def _sse(event_schema: str) -> dict[str, Any]:
    # OpenAPI 3.1 has no item schema for a stream (3.2's itemSchema): as schemathesis and
    # other tools read a 3.1 document, the event stream's schema describes one event, parsed
    # as {event, data, id?, retry?}, its data (a JSON text) by contentSchema.
    return {
        "text/event-stream": {
            "schema": {
                "$ref": _REF.format(name=event_schema),
                "description": _EVENTS_TEXT[event_schema],
            }
        }
    }


def _reply(reply: Reply) -> dict[str, Any]:
    content: dict[str, Any] = {}
    if reply.body is not None:
        content.update(_json(reply.body.__name__))
    if reply.events is not None:
        content.update(_sse(reply.events))
    if reply.text:
        content["text/plain"] = {"schema": {"type": "string"}}
    return {"description": reply.description, "content": content}


def _errors(codes: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for code in codes:
        out[code] = {"description": _ERROR_TEXT[code], "content": _json("ErrorBody")}
        if code in ("429", "503"):
            out[code]["headers"] = {
                "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}
            }
    return out


def _operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op.name,
        "summary": op.summary,
        "security": _AUTH if op.auth else [],
    }
    if op.parameters:
        out["parameters"] = [dict(p) for p in op.parameters]
    if op.request is not None:
        out["requestBody"] = {"required": True, "content": _json(op.request.__name__)}
    out["responses"] = {
        **{code: _reply(reply) for code, reply in op.replies.items()},
        **_errors(op.errors),
    }
    return out


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for op in OPERATIONS:
        paths.setdefault(openapi_path(op.path), {})[op.method.lower()] = _operation(op)
    return paths


def _structs() -> tuple[type, ...]:
    """Every struct a body of the table names, the error body, the events' structs."""
    named: dict[str, type] = {}
    for op in OPERATIONS:
        bodies = [op.request, *(reply.body for reply in op.replies.values())]
        named.update({body.__name__: body for body in bodies if body is not None})
    return (*named.values(), ErrorBody, *EVENT_STRUCTS)


def openapi_document() -> dict[str, Any]:
    """The whole document (a plain dict, JSON-ready)."""
    _, components = msgspec.json.schema_components(_structs(), ref_template=_REF)
    components.update(event_schemas(_REF))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Podium gateway",
            "version": "1",
            "description": "Serve LLM agents over HTTP. Every error body is "
            '{"error": {"type", "message", "field"?, "retry_after"?}}.',
        },
        "paths": _paths(),
        "components": {
            "schemas": components,
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
        "security": _AUTH,
    }
