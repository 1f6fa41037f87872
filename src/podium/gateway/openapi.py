"""The OpenAPI 3.1 document served at ``/openapi.json``.

Bodies' schemas come from the msgspec structs themselves (one source of
truth); this module adds the paths, parameters, status codes and headers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from podium.engine.records import RUN_STATUSES
from podium.gateway.errors import ErrorBody
from podium.gateway.openapi_events import EVENT_STRUCTS, event_schemas
from podium.gateway.responses_schemas import ResponseObject, ResponsesRequest
from podium.gateway.schemas import (
    THREAD_ID_PATTERN,
    AgentList,
    ApprovalList,
    ChatCompletion,
    ChatRequest,
    DecisionIn,
    Health,
    ModelList,
    ModelOut,
    Readiness,
    RunCreate,
    RunList,
    RunOut,
    ThreadCreate,
    ThreadDeleted,
    ThreadDetail,
    ThreadList,
    ThreadOut,
)
from podium.gateway.sse import MAX_EVENT_ID
from podium.threads.record import MAX_THREAD_ID

__all__ = ("openapi_document",)

_REF = "#/components/schemas/{name}"
_STATUSES = list(RUN_STATUSES)
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


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": _REF.format(name=name)}}}


def _errors(*codes: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for code in codes:
        out[code] = {"description": _ERROR_TEXT[code], "content": _json("ErrorBody")}
        if code in ("429", "503"):
            out[code]["headers"] = {
                "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}
            }
    return out


def _sse(event_schema: str, text: str) -> dict[str, Any]:
    # OpenAPI 3.1 has no item schema for a stream (3.2's itemSchema): as schemathesis and
    # other tools read a 3.1 document, the event stream's schema describes one event, parsed
    # as {event, data, id?, retry?}, its data (a JSON text) by contentSchema.
    return {
        "text/event-stream": {
            "schema": {"$ref": _REF.format(name=event_schema), "description": text}
        }
    }


_RUN_SSE = _sse(
    "RunEvent",
    "Server-Sent Events, one per RunEvent: `id: <seq>` (on the last event of each journal "
    "entry: resume with Last-Event-ID), `event: <name>`, `data: <one line of JSON>`, a "
    "blank line; `: keep-alive` comments while nothing happens. `final` is the last event "
    "of a run that ended; `error` ends a stream early (reconnect with Last-Event-ID).",
)
_CHAT_SSE = _sse(
    "ChatCompletionEvent",
    "Server-Sent Events as OpenAI sends them: `data: <chat.completion.chunk>` per token, "
    "then `data: [DONE]`.",
)
_RESPONSE_SSE = _sse(
    "ResponseEvent",
    "Server-Sent Events as OpenAI sends them: `event: <type>`, `data: <the event>`, each with "
    "its `sequence_number`; `response.completed` or `response.failed` last (or `error`).",
)
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Makes the request safe to retry: a retry with the same key (per tenant) "
    "returns the run the first attempt made (with `Idempotent-Replayed: true`) instead of "
    "starting another; the same key with a different agent, input or metadata is a 422.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
}
_AUTH: list[dict[str, list[str]]] = [{"apiKey": []}]
_RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
_THREAD_ID = {
    "name": "thread_id",
    "in": "path",
    "required": True,
    "description": "A thread id (a malformed one is a 422).",
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_THREAD_ID,
        "pattern": THREAD_ID_PATTERN,
    },
}
#: Epoch seconds as the run listing takes them (gateway.app's ``_EPOCH``).
EPOCH_PATTERN = r"^[0-9]{1,12}(\.[0-9]{1,9})?$"
_LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
}


def _paths() -> dict[str, Any]:
    body_errors = ("400", "401", "413", "415", "422")
    return {
        "/v1/runs": {
            "post": {
                "operationId": "createRun",
                "summary": "Start a run: 202 with its id, its result (wait) or its events (stream)",
                "security": _AUTH,
                "parameters": [_IDEMPOTENCY_KEY],
                "requestBody": {"required": True, "content": _json("RunCreate")},
                "responses": {
                    "200": {
                        "description": "The finished run (wait), or its events as SSE (stream).",
                        "content": {**_json("RunOut"), **_RUN_SSE},
                    },
                    "202": {
                        "description": "Accepted: the run is queued (or still running "
                        "after the wait timeout).",
                        "content": _json("RunOut"),
                    },
                    **_errors(*body_errors, "404", "408", "429", "503"),
                },
            },
            "get": {
                "operationId": "listRuns",
                "summary": "The tenant's runs, newest first",
                "security": _AUTH,
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": _STATUSES},
                    },
                    {
                        "name": "agent",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                    _LIMIT,
                    *(
                        {
                            "name": bound,
                            "in": "query",
                            "required": False,
                            "description": f"Runs created {word} this time (epoch seconds, "
                            "inclusive).",
                            "schema": {"type": "string", "pattern": EPOCH_PATTERN},
                        }
                        for bound, word in (("since", "at or after"), ("until", "at or before"))
                    ),
                ],
                "responses": {
                    "200": {"description": "Runs.", "content": _json("RunList")},
                    **_errors("401", "422", "503"),
                },
            },
        },
        "/v1/runs/{run_id}": {
            "get": {
                "operationId": "getRun",
                "summary": "A run: status, output, usage, error and workload profile",
                "security": _AUTH,
                "parameters": [_RUN_ID],
                "responses": {
                    "200": {"description": "The run.", "content": _json("RunOut")},
                    **_errors("401", "404", "422", "503"),
                },
            }
        },
        "/v1/runs/{run_id}/children": {
            "get": {
                "operationId": "runChildren",
                "summary": "The child runs a run's sub-agent calls started, in call order",
                "security": _AUTH,
                "parameters": [_RUN_ID],
                "responses": {
                    "200": {"description": "Child runs.", "content": _json("RunList")},
                    **_errors("401", "404", "422", "503"),
                },
            }
        },
        "/v1/runs/{run_id}/events": {
            "get": {
                "operationId": "runEvents",
                "summary": "The run's events as SSE, live; resumable with Last-Event-ID",
                "security": _AUTH,
                "parameters": [
                    _RUN_ID,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "description": "The id of the last event received (wins over "
                        "`after`); a value that is not a number counts as -1.",
                        "schema": {"type": "string", "pattern": "^(-1|[0-9]{1,15})$"},
                    },
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": -1, "maximum": MAX_EVENT_ID},
                    },
                ],
                "responses": {
                    "200": {"description": "Server-Sent Events.", "content": _RUN_SSE},
                    **_errors("401", "404", "422", "503"),
                },
            }
        },
        "/v1/runs/{run_id}/cancel": {
            "post": {
                "operationId": "cancelRun",
                "summary": "Cancel a queued or running run",
                "security": _AUTH,
                "parameters": [_RUN_ID],
                "responses": {
                    "200": {"description": "The cancelled run.", "content": _json("RunOut")},
                    "202": {
                        "description": "Cancel requested; the run as it stands: its driver "
                        "did not end it within 10 s (a worker, or the next server that takes "
                        "the run up, ends it).",
                        "content": _json("RunOut"),
                    },
                    **_errors("401", "404", "409", "422", "503"),
                },
            }
        },
        "/v1/approvals": {
            "get": {
                "operationId": "listApprovals",
                "summary": "The tenant's tool calls waiting for a human (approval or a question)",
                "security": _AUTH,
                "responses": {
                    "200": {"description": "Pending calls.", "content": _json("ApprovalList")},
                    **_errors("401", "422", "503"),
                },
            }
        },
        "/v1/runs/{run_id}/approvals": {
            "get": {
                "operationId": "listRunApprovals",
                "summary": "The run's tool calls waiting for a human",
                "security": _AUTH,
                "parameters": [_RUN_ID],
                "responses": {
                    "200": {"description": "Pending calls.", "content": _json("ApprovalList")},
                    **_errors("401", "404", "422", "503"),
                },
            }
        },
        "/v1/runs/{run_id}/approvals/{call_id}": {
            "post": {
                "operationId": "decideApproval",
                "summary": "Approve (optionally with edited arguments), reject or answer a "
                "waiting call; the step's last decision resumes the run on a worker",
                "security": _AUTH,
                "parameters": [
                    _RUN_ID,
                    {"name": "call_id", "in": "path", "required": True,
                     "schema": {"type": "string"}},
                ],
                "requestBody": {"required": True, "content": _json("DecisionIn")},
                "responses": {
                    "200": {"description": "The run, waiting or queued again.",
                            "content": _json("RunOut")},
                    **_errors(*body_errors, "404", "409", "503"),
                },
            }
        },
        "/v1/threads": {
            "post": {
                "operationId": "createThread",
                "summary": "Start a thread (a conversation): runs created with its id continue it",
                "security": _AUTH,
                "requestBody": {"required": True, "content": _json("ThreadCreate")},
                "responses": {
                    "201": {"description": "The new thread.", "content": _json("ThreadOut")},
                    **_errors(*body_errors, "408", "503"),
                },
            },
            "get": {
                "operationId": "listThreads",
                "summary": "The tenant's threads, most recently used first",
                "security": _AUTH,
                "parameters": [_LIMIT],
                "responses": {
                    "200": {"description": "Threads.", "content": _json("ThreadList")},
                    **_errors("401", "422", "503"),
                },
            },
        },
        "/v1/threads/{thread_id}": {
            "get": {
                "operationId": "getThread",
                "summary": "A thread: its conversation (compacted, as the next run starts "
                "from it) and its run ids",
                "security": _AUTH,
                "parameters": [_THREAD_ID],
                "responses": {
                    "200": {"description": "The thread.", "content": _json("ThreadDetail")},
                    **_errors("401", "404", "422", "503"),
                },
            },
            "delete": {
                "operationId": "deleteThread",
                "summary": "Forget a thread (its runs stay)",
                "security": _AUTH,
                "parameters": [_THREAD_ID],
                "responses": {
                    "200": {"description": "Deleted.", "content": _json("ThreadDeleted")},
                    **_errors("401", "404", "422", "503"),
                },
            },
        },
        "/v1/agents": {
            "get": {
                "operationId": "listAgents",
                "summary": "The served agents and their tools (with JSON Schemas)",
                "security": _AUTH,
                "responses": {
                    "200": {"description": "Agents.", "content": _json("AgentList")},
                    **_errors("401", "422"),
                },
            }
        },
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "summary": "OpenAI-compatible: the served agents, as models a chat completion "
                "can name",
                "security": _AUTH,
                "responses": {
                    "200": {"description": "Models.", "content": _json("ModelList")},
                    **_errors("401", "422"),
                },
            }
        },
        "/v1/models/{model}": {
            "get": {
                "operationId": "getModel",
                "summary": "OpenAI-compatible: one served agent, as a model",
                "security": _AUTH,
                "parameters": [
                    {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {"description": "The model.", "content": _json("ModelOut")},
                    **_errors("401", "404", "422"),
                },
            }
        },
        "/v1/chat/completions": {
            "post": {
                "operationId": "createChatCompletion",
                "summary": "OpenAI-compatible: `model` names an agent; the reply is its answer",
                "security": _AUTH,
                "parameters": [_IDEMPOTENCY_KEY],
                "requestBody": {"required": True, "content": _json("ChatRequest")},
                "responses": {
                    "200": {
                        "description": "A chat.completion, or chat.completion.chunk events "
                        "(stream).",
                        "content": {**_json("ChatCompletion"), **_CHAT_SSE},
                    },
                    **_errors(*body_errors, "404", "408", "429", "502", "503", "504"),
                },
            }
        },
        "/v1/responses": {
            "post": {
                "operationId": "createResponse",
                "summary": "OpenAI's Responses API: `model` names an agent; the response is its "
                "run (see docs/openai-compat.md)",
                "security": _AUTH,
                "parameters": [_IDEMPOTENCY_KEY],
                "requestBody": {"required": True, "content": _json("ResponsesRequest")},
                "responses": {
                    "200": {
                        "description": "A response, or its typed events (stream).",
                        "content": {**_json("ResponseObject"), **_RESPONSE_SSE},
                    },
                    **_errors(*body_errors, "404", "408", "409", "429", "502", "503", "504"),
                },
            }
        },
        "/v1/responses/{response_id}": {
            "get": {
                "operationId": "getResponse",
                "summary": "A stored response, as its run stands now",
                "security": _AUTH,
                "parameters": [
                    {"name": "response_id", "in": "path", "required": True,
                     "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {"description": "The response.", "content": _json("ResponseObject")},
                    **_errors("401", "404", "422"),
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Alive",
                "security": [],
                "responses": {"200": {"description": "Alive.", "content": _json("Health")}},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "security": [],
                "summary": "Store, queue and model backends reachable",
                "responses": {
                    "200": {"description": "Ready.", "content": _json("Readiness")},
                    "503": {"description": "Not ready.", "content": _json("Readiness")},
                },
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (operator keys only: they cover every tenant)",
                "security": _AUTH,
                "responses": {
                    "200": {
                        "description": "Prometheus text format.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors("401", "403"),
                },
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    """The whole document (a plain dict, JSON-ready)."""
    types = (
        RunCreate,
        RunOut,
        RunList,
        ApprovalList,
        DecisionIn,
        AgentList,
        ModelList,
        ModelOut,
        ChatRequest,
        ChatCompletion,
        ResponsesRequest,
        ResponseObject,
        ThreadCreate,
        ThreadOut,
        ThreadDetail,
        ThreadList,
        ThreadDeleted,
        ErrorBody,
        Health,
        Readiness,
        *EVENT_STRUCTS,
    )
    _, components = msgspec.json.schema_components(types, ref_template=_REF)
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
