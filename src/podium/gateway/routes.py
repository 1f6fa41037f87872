"""The HTTP API's route table: every operation the gateway serves, typed, in one place.

:mod:`podium.gateway.app` binds a handler to each entry's ``name`` to build its Starlette
routes; :mod:`podium.gateway.openapi` renders the same entries (bodies' schemas from the
msgspec structs named here) as the OpenAPI document. A route served and not documented,
or documented and not served, cannot happen: both come from :data:`OPERATIONS`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podium.engine.records import RUN_STATUSES
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

__all__ = ("EPOCH_PATTERN", "OPERATIONS", "Operation", "Reply", "openapi_path")

#: Epoch seconds as the run listing takes them (gateway.app's ``_EPOCH``).
EPOCH_PATTERN = r"^[0-9]{1,12}(\.[0-9]{1,9})?$"


@dataclass(frozen=True, slots=True)
class Reply:
    """One status code's answer: its description and body (a struct as JSON, the name of
    an event schema as Server-Sent Events, both, or plain text)."""

    description: str
    body: type | None = None
    #: The event schema of a ``text/event-stream`` body (podium.gateway.openapi_events).
    events: str | None = None
    text: bool = False


@dataclass(frozen=True, slots=True)
class Operation:
    """One method on one path. ``path`` is Starlette's (``{model:path}``);
    :func:`openapi_path` is the document's. ``errors`` are the error statuses it may
    answer, each with the one error body."""

    method: str
    path: str
    name: str
    summary: str
    replies: Mapping[str, Reply]
    request: type | None = None
    errors: tuple[str, ...] = ()
    parameters: tuple[Mapping[str, Any], ...] = ()
    auth: bool = True


_PATH_CONVERTER = re.compile(r"\{(\w+):\w+\}")


def openapi_path(path: str) -> str:
    """Starlette's path as OpenAPI writes it: ``/v1/models/{model:path}`` → ``{model}``."""
    return _PATH_CONVERTER.sub(r"{\1}", path)


_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Makes the request safe to retry: a retry with the same key (per tenant) "
    "returns the run the first attempt made (with `Idempotent-Replayed: true`) instead of "
    "starting another; the same key with a different agent, input or metadata is a 422.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
}
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
_LIMIT = {
    "name": "limit",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
}
_LIST_RUNS = (
    {
        "name": "status",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": list(RUN_STATUSES)},
    },
    {"name": "agent", "in": "query", "required": False, "schema": {"type": "string"}},
    _LIMIT,
    *(
        {
            "name": bound,
            "in": "query",
            "required": False,
            "description": f"Runs created {word} this time (epoch seconds, inclusive).",
            "schema": {"type": "string", "pattern": EPOCH_PATTERN},
        }
        for bound, word in (("since", "at or after"), ("until", "at or before"))
    ),
)
_RESUME = (
    _RUN_ID,
    {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "description": "The id of the last event received (wins over `after`); a value that "
        "is not a number counts as -1.",
        "schema": {"type": "string", "pattern": "^(-1|[0-9]{1,15})$"},
    },
    {
        "name": "after",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": -1, "maximum": MAX_EVENT_ID},
    },
)


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


_BODY = ("400", "401", "413", "415", "422")
_READ = ("401", "404", "422", "503")

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "POST", "/v1/runs", "createRun",
        "Start a run: 202 with its id, its result (wait) or its events (stream)",
        {
            "200": Reply("The finished run (wait), or its events as SSE (stream).",
                         RunOut, events="RunEvent"),
            "202": Reply("Accepted: the run is queued (or still running after the wait "
                         "timeout).", RunOut),
        },
        request=RunCreate, errors=(*_BODY, "404", "408", "429", "503"),
        parameters=(_IDEMPOTENCY_KEY,),
    ),
    Operation(
        "GET", "/v1/runs", "listRuns", "The tenant's runs, newest first",
        {"200": Reply("Runs.", RunList)}, errors=("401", "422", "503"), parameters=_LIST_RUNS,
    ),
    Operation(
        "GET", "/v1/runs/{run_id}", "getRun",
        "A run: status, output, usage, error and workload profile",
        {"200": Reply("The run.", RunOut)}, errors=_READ, parameters=(_RUN_ID,),
    ),
    Operation(
        "GET", "/v1/runs/{run_id}/events", "runEvents",
        "The run's events as SSE, live; resumable with Last-Event-ID",
        {"200": Reply("Server-Sent Events.", events="RunEvent")}, errors=_READ,
        parameters=_RESUME,
    ),
    Operation(
        "GET", "/v1/runs/{run_id}/children", "runChildren",
        "The child runs a run's sub-agent calls started, in call order",
        {"200": Reply("Child runs.", RunList)}, errors=_READ, parameters=(_RUN_ID,),
    ),
    Operation(
        "POST", "/v1/runs/{run_id}/cancel", "cancelRun", "Cancel a queued or running run",
        {
            "200": Reply("The cancelled run.", RunOut),
            "202": Reply("Cancel requested; the run as it stands: its driver did not end it "
                         "within 10 s (a worker, or the next server that takes the run up, "
                         "ends it).", RunOut),
        },
        errors=("401", "404", "409", "422", "503"), parameters=(_RUN_ID,),
    ),
    Operation(
        "GET", "/v1/runs/{run_id}/approvals", "listRunApprovals",
        "The run's tool calls waiting for a human",
        {"200": Reply("Pending calls.", ApprovalList)}, errors=_READ, parameters=(_RUN_ID,),
    ),
    Operation(
        "POST", "/v1/runs/{run_id}/approvals/{call_id}", "decideApproval",
        "Approve (optionally with edited arguments), reject or answer a waiting call; the "
        "step's last decision resumes the run on a worker",
        {"200": Reply("The run, waiting or queued again.", RunOut)},
        request=DecisionIn, errors=(*_BODY, "404", "409", "503"),
        parameters=(_RUN_ID, _path_param("call_id")),
    ),
    Operation(
        "GET", "/v1/approvals", "listApprovals",
        "The tenant's tool calls waiting for a human (approval or a question)",
        {"200": Reply("Pending calls.", ApprovalList)}, errors=("401", "422", "503"),
    ),
    Operation(
        "POST", "/v1/threads", "createThread",
        "Start a thread (a conversation): runs created with its id continue it",
        {"201": Reply("The new thread.", ThreadOut)},
        request=ThreadCreate, errors=(*_BODY, "408", "503"),
    ),
    Operation(
        "GET", "/v1/threads", "listThreads", "The tenant's threads, most recently used first",
        {"200": Reply("Threads.", ThreadList)}, errors=("401", "422", "503"),
        parameters=(_LIMIT,),
    ),
    Operation(
        "GET", "/v1/threads/{thread_id}", "getThread",
        "A thread: its conversation (compacted, as the next run starts from it) and its run "
        "ids",
        {"200": Reply("The thread.", ThreadDetail)}, errors=_READ, parameters=(_THREAD_ID,),
    ),
    Operation(
        "DELETE", "/v1/threads/{thread_id}", "deleteThread", "Forget a thread (its runs stay)",
        {"200": Reply("Deleted.", ThreadDeleted)}, errors=_READ, parameters=(_THREAD_ID,),
    ),
    Operation(
        "GET", "/v1/agents", "listAgents",
        "The served agents and their tools (with JSON Schemas)",
        {"200": Reply("Agents.", AgentList)}, errors=("401", "422"),
    ),
    Operation(
        "GET", "/v1/models", "listModels",
        "OpenAI-compatible: the served agents, as models a chat completion can name",
        {"200": Reply("Models.", ModelList)}, errors=("401", "422"),
    ),
    Operation(
        "GET", "/v1/models/{model:path}", "getModel",
        "OpenAI-compatible: one served agent, as a model",
        {"200": Reply("The model.", ModelOut)}, errors=("401", "404", "422"),
        parameters=(_path_param("model"),),
    ),
    Operation(
        "POST", "/v1/chat/completions", "createChatCompletion",
        "OpenAI-compatible: `model` names an agent; the reply is its answer",
        {"200": Reply("A chat.completion, or chat.completion.chunk events (stream).",
                      ChatCompletion, events="ChatCompletionEvent")},
        request=ChatRequest, errors=(*_BODY, "404", "408", "429", "502", "503", "504"),
        parameters=(_IDEMPOTENCY_KEY,),
    ),
    Operation(
        "POST", "/v1/responses", "createResponse",
        "OpenAI's Responses API: `model` names an agent; the response is its run (see "
        "docs/openai-compat.md)",
        {"200": Reply("A response, or its typed events (stream).", ResponseObject,
                      events="ResponseEvent")},
        request=ResponsesRequest,
        errors=(*_BODY, "404", "408", "409", "429", "502", "503", "504"),
        parameters=(_IDEMPOTENCY_KEY,),
    ),
    Operation(
        "GET", "/v1/responses/{response_id}", "getResponse",
        "A stored response, as its run stands now",
        {"200": Reply("The response.", ResponseObject)}, errors=("401", "404", "422"),
        parameters=(_path_param("response_id"),),
    ),
    Operation(
        "GET", "/healthz", "healthz", "Alive", {"200": Reply("Alive.", Health)}, auth=False,
    ),
    Operation(
        "GET", "/readyz", "readyz", "Store, queue and model backends reachable",
        {"200": Reply("Ready.", Readiness), "503": Reply("Not ready.", Readiness)},
        auth=False,
    ),
    Operation(
        "GET", "/metrics", "metrics",
        "Prometheus metrics (operator keys only: they cover every tenant)",
        {"200": Reply("Prometheus text format.", text=True)}, errors=("401", "403"),
    ),
)
