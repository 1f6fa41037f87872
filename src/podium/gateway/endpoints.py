"""The handlers of the HTTP API, by the operation names of the route table
(:data:`podium.gateway.routes.OPERATIONS`), and the request readers they share (query
strings, path parameters, the ``Idempotency-Key`` header). Each ``*_handlers`` function
closes over one :class:`~podium.gateway.service.Gateway`; :mod:`podium.gateway.app`
builds the routes from the table and these.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from podium.engine.children import child_runs
from podium.engine.records import RUN_STATUSES
from podium.errors import ConfigError
from podium.gateway import openai_facade, responses
from podium.gateway.errors import ApiError
from podium.gateway.http_io import json_response, read_json, sse_response
from podium.gateway.live import follow_live
from podium.gateway.metrics import CONTENT_TYPE
from podium.gateway.routes import EPOCH_PATTERN
from podium.gateway.schemas import (
    AgentList,
    AgentOut,
    ApprovalList,
    DecisionIn,
    Health,
    ModelList,
    ModelOut,
    Readiness,
    RunCreate,
    RunList,
    ThreadCreate,
    ThreadDeleted,
    ThreadList,
    ToolOut,
    approval_out,
    run_out,
    thread_detail,
    thread_out,
)
from podium.gateway.service import Gateway
from podium.gateway.sse import MAX_EVENT_ID, parse_last_event_id
from podium.observe.inspect import read_progress
from podium.observe.tracing import submit_context
from podium.threads.record import check_thread_id

__all__ = (
    "Handler",
    "conversation_handlers",
    "idempotency_key",
    "openai_handlers",
    "run_handlers",
    "service_handlers",
)

#: What a route calls: Starlette's request in, a response out.
Handler = Callable[[Request], Awaitable[Response]]

_encode = msgspec.json.Encoder().encode
_STATUSES = RUN_STATUSES
_MAX_IDEMPOTENCY_KEY = 255


def _query(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    params = request.query_params
    for name in params:
        if name not in allowed:
            raise ApiError(422, "invalid_request", f"unknown query parameter {name!r}", field=name)
    return {k: params[k] for k in params}


def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` header (1–255 visible ASCII characters), if any."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 1 <= len(key) <= _MAX_IDEMPOTENCY_KEY or not key.isascii() or not key.isprintable():
        raise ApiError(
            422,
            "invalid_request",
            f"Idempotency-Key must be 1 to {_MAX_IDEMPOTENCY_KEY} visible ASCII characters",
            field="idempotency-key",
        )
    return key


def _after(header: str | None, query: str | None) -> int:
    """Where an event stream resumes: ``Last-Event-ID`` wins over ``?after=``."""
    if header is not None:
        after = parse_last_event_id(header)  # junk from a client's cache counts as -1
        field = "last-event-id"
    elif query is not None:
        field = "after"
        text = query.strip()
        digits = text[1:] if text.startswith("-") else text
        # isascii: str.isdigit() is true of '²' and other digits int() refuses
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 20:
            raise ApiError(422, "invalid_request", "after must be an integer", field=field)
        after = int(text)
    else:
        return -1
    if not -1 <= after <= MAX_EVENT_ID:
        raise ApiError(
            422,
            "invalid_request",
            f"{field} must be an event id from -1 to {MAX_EVENT_ID}",
            field=field,
        )
    return after


def _limit(query: Mapping[str, str]) -> int:
    raw_limit = query.get("limit", "100")
    # Length first: int() of thousands of digits is slow, and refused past 4300.
    digits = raw_limit.lstrip("0") or "0"
    ascii_digits = raw_limit.isascii() and raw_limit.isdigit()  # '²' is a digit to isdigit()
    if not (ascii_digits and len(digits) <= 4) or not 1 <= int(digits) <= 1000:
        raise ApiError(
            422, "invalid_request", "limit must be an integer from 1 to 1000", field="limit"
        )
    return int(digits)


_EPOCH = re.compile(EPOCH_PATTERN)


def _epoch(query: Mapping[str, str], name: str) -> float | None:
    """A time bound of a listing: epoch seconds (``1733250000`` or ``1733250000.5``)."""
    raw = query.get(name)
    if raw is None:
        return None
    if not _EPOCH.fullmatch(raw):
        raise ApiError(422, "invalid_request",
                       f"{name} must be epoch seconds (digits, an optional fraction)", field=name)
    return float(raw)


def _thread_id(request: Request) -> str:
    try:
        return check_thread_id(request.path_params["thread_id"])
    except ConfigError as exc:
        raise ApiError(422, "invalid_request", str(exc), field="thread_id") from None


def _created_headers(run_id: str, replayed: bool) -> dict[str, str]:
    headers = {"Location": f"/v1/runs/{run_id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return headers


def run_handlers(gw: Gateway) -> dict[str, Handler]:
    """Runs: create (answered at once, after a wait, or as a stream), read, list, follow,
    cancel."""
    max_body = gw.config.server.max_body_bytes
    body_timeout = gw.config.server.body_timeout_s

    async def create_run(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        key = idempotency_key(request)
        body = await read_json(request, RunCreate, max_body, body_timeout)
        run_id = gw.new_run_id(tenant, key)
        # Listening before the run exists: its worker streams it from the first token.
        tokens = await gw.listen(run_id) if body.stream else None
        try:
            with submit_context(gw.tracer, request.headers, body.metadata, body.agent) as metadata:
                record, replayed = await gw.submit(
                    tenant,
                    body.agent,
                    body.input,
                    metadata,
                    idempotency_key=key,
                    run_id=run_id,
                    thread_id=body.thread_id,
                )
                if body.wait and not body.stream:  # the server span covers the wait it serves
                    record = await gw.wait(
                        record.run_id, body.wait_timeout_s or gw.config.server.wait_timeout_s
                    )
                    return json_response(run_out(record), 200 if record.done else 202,
                                         _created_headers(record.run_id, replayed))
        except BaseException:
            if tokens is not None:
                tokens.close()
            raise
        headers = _created_headers(record.run_id, replayed)
        if body.stream:
            frames = follow_live(gw.store, record.run_id, -1, tokens)
            return sse_response(gw.stream(frames, tokens), headers)
        return json_response(run_out(record), 202, headers)

    async def get_run(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        record = await gw.get(tenant, request.path_params["run_id"])
        # A running run's steps and tokens so far: its record has them at its end.
        return json_response(run_out(await read_progress(gw.store, record)))

    async def run_children(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        record = await gw.get(tenant, request.path_params["run_id"])
        children = await child_runs(gw.store, record)
        return json_response(RunList("list", [run_out(r) for r in children]))

    async def run_events(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        query = _query(request, frozenset({"after"}))
        after = _after(request.headers.get("last-event-id"), query.get("after"))
        record = await gw.get(tenant, request.path_params["run_id"])
        tokens = None if record.done else await gw.listen(record.run_id)
        frames = follow_live(gw.store, record.run_id, after, tokens)
        return sse_response(gw.stream(frames, tokens))

    async def cancel_run(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        record = await gw.cancel(tenant, request.path_params["run_id"])
        # Not ended within the cancel's wait: requested, for a driver to honour (202).
        return json_response(run_out(record), 200 if record.done else 202)

    async def list_runs(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        query = _query(request, frozenset({"status", "agent", "limit", "since", "until"}))
        status = query.get("status")
        if status is not None and status not in _STATUSES:
            raise ApiError(
                422,
                "invalid_request",
                f"status must be one of {', '.join(_STATUSES)}",
                field="status",
            )
        records = await gw.store.list(
            tenant=tenant.name, status=status, agent=query.get("agent"), limit=_limit(query),
            since=_epoch(query, "since"), until=_epoch(query, "until"),
        )
        return json_response(RunList("list", [run_out(r) for r in records]))

    return {
        "createRun": create_run,
        "listRuns": list_runs,
        "getRun": get_run,
        "runEvents": run_events,
        "runChildren": run_children,
        "cancelRun": cancel_run,
    }


def conversation_handlers(gw: Gateway) -> dict[str, Handler]:
    """What a person answers (tool calls waiting for approval) and threads (conversations
    that runs continue)."""
    max_body = gw.config.server.max_body_bytes
    body_timeout = gw.config.server.body_timeout_s

    async def list_approvals(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        pending = await gw.approvals(tenant, request.path_params.get("run_id"))
        return json_response(ApprovalList("list", [approval_out(p) for p in pending]))

    async def decide(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        body = await read_json(request, DecisionIn, max_body, body_timeout)
        arguments = None if body.arguments is None else _encode(body.arguments).decode()
        record = await gw.decide(
            tenant,
            request.path_params["run_id"],
            request.path_params["call_id"],
            body.decision,
            message=body.message,
            arguments=arguments,
            by=body.by,
        )
        return json_response(run_out(record))

    async def create_thread(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        body = await read_json(request, ThreadCreate, max_body, body_timeout)
        thread = await gw.create_thread(tenant, body.ttl_s, body.metadata)
        headers = {"Location": f"/v1/threads/{thread.thread_id}"}
        return json_response(thread_out(thread), 201, headers)

    async def list_threads(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        query = _query(request, frozenset({"limit"}))
        found = await gw.store.list_threads(tenant=tenant.name, limit=_limit(query))
        return json_response(ThreadList("list", [thread_out(t) for t in found]))

    async def get_thread(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        thread_id = _thread_id(request)
        return json_response(thread_detail(await gw.get_thread(tenant, thread_id)))

    async def delete_thread(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        thread_id = _thread_id(request)
        await gw.delete_thread(tenant, thread_id)
        return json_response(ThreadDeleted(thread_id, "thread.deleted", True))

    return {
        "listApprovals": list_approvals,
        "listRunApprovals": list_approvals,
        "decideApproval": decide,
        "createThread": create_thread,
        "listThreads": list_threads,
        "getThread": get_thread,
        "deleteThread": delete_thread,
    }


def openai_handlers(gw: Gateway) -> dict[str, Handler]:
    """The agents served, and OpenAI's shapes of them: models, chat completions, the
    Responses API."""
    max_body = gw.config.server.max_body_bytes
    body_timeout = gw.config.server.body_timeout_s

    async def list_agents(request: Request) -> Response:
        gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        data = [
            AgentOut(
                s.name,
                s.agent.description,
                s.agent.model.name,
                s.pool,
                s.agent.max_steps,
                [ToolOut(t.name, t.description, t.parameters) for t in s.agent.tools.values()],
                None if s.agent.output is None else s.agent.output.schema,
            )
            for s in gw.agents.values()
        ]
        return json_response(AgentList("list", data))

    served_since = int(time.time())

    async def list_models(request: Request) -> Response:
        # OpenAI's clients list "models": here they are the agents a chat completion can name.
        gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        data = [ModelOut(name, "model", served_since, "podium") for name in gw.agents]
        return json_response(ModelList("list", data))

    async def get_model(request: Request) -> Response:
        gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        name = gw.served(request.path_params["model"], field="model").name
        return json_response(ModelOut(name, "model", served_since, "podium"))

    async def chat_completions(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        key = idempotency_key(request)
        body = await read_json(request, openai_facade.ChatRequest, max_body, body_timeout)
        return await openai_facade.complete(
            gw, tenant, body, idempotency_key=key, headers=request.headers
        )

    async def create_response(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        key = idempotency_key(request)
        body = await read_json(request, responses.ResponsesRequest, max_body, body_timeout)
        return await responses.create_response(
            gw, tenant, body, idempotency_key=key, headers=request.headers
        )

    async def get_response(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        return json_response(
            await responses.get_response(gw, tenant, request.path_params["response_id"])
        )

    return {
        "listAgents": list_agents,
        "listModels": list_models,
        "getModel": get_model,
        "createChatCompletion": chat_completions,
        "createResponse": create_response,
        "getResponse": get_response,
    }


def service_handlers(gw: Gateway) -> dict[str, Handler]:
    """The process's own: liveness, readiness, metrics."""

    async def healthz(request: Request) -> Response:
        return json_response(Health("ok"))

    async def readyz(request: Request) -> Response:
        checks = await gw.readiness()
        ok = all(v == "ok" for v in checks.values())
        return json_response(
            Readiness("ready" if ok else "unavailable", checks), 200 if ok else 503
        )

    async def metrics(request: Request) -> Response:
        # Process-wide numbers (every tenant's traffic): operators only.
        gw.keys.authenticate_admin(request.headers)
        await gw.refresh_queue_figures()
        return Response(gw.metrics.render(), media_type=CONTENT_TYPE)

    return {"healthz": healthz, "readyz": readyz, "metrics": metrics}
