"""The ASGI app: routes of the HTTP API over a :class:`~podium.gateway.service.Gateway`.

Start-up and shut-down are one lifespan (workers start, then drain); every
error, whatever raised it, leaves as the one body shape of
:mod:`podium.gateway.errors`. Example::

    app = create_app(gateway)
    uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podium.gateway import openai_facade
from podium.gateway.dashboard import dashboard_routes
from podium.gateway.errors import ApiError, ErrorBody, ErrorDetail, error_from_validation
from podium.gateway.metrics import CONTENT_TYPE
from podium.gateway.openapi import openapi_document
from podium.gateway.schemas import (
    AgentList,
    AgentOut,
    Health,
    Readiness,
    RunCreate,
    RunList,
    ToolOut,
    run_out,
)
from podium.gateway.service import Gateway
from podium.gateway.sse import follow_journal, parse_last_event_id
from podium.observe.tracing import submit_context

__all__ = ("create_app", "json_response", "read_json")

log = logging.getLogger("podium.gateway")

T = TypeVar("T")

_encode = msgspec.json.Encoder().encode
_STATUSES = ("queued", "running", "completed", "failed", "cancelled")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def json_response(
    body: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        _encode(body), status, headers=dict(headers or {}), media_type="application/json"
    )


def sse_response(
    frames: AsyncIterator[bytes], headers: Mapping[str, str] | None = None
) -> Response:
    return StreamingResponse(
        frames, media_type="text/event-stream", headers={**_SSE_HEADERS, **(headers or {})}
    )


async def read_json(request: Request, type_: type[T], max_bytes: int) -> T:
    """Decode the body into ``type_``: 415 if not JSON, 413 if too big, 400/422 if invalid."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"expected Content-Type: application/json, got {content_type or 'none'!r}",
            field="content-type",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise _too_large(max_bytes)
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        raise error_from_validation(exc) from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "payload_too_large", f"the body is over the limit of {limit} bytes")


def _query(request: Request, allowed: frozenset[str]) -> dict[str, str]:
    params = request.query_params
    for name in params:
        if name not in allowed:
            raise ApiError(422, "invalid_request", f"unknown query parameter {name!r}", field=name)
    return {k: params[k] for k in params}


def _routes(gw: Gateway) -> list[Route]:
    max_body = gw.config.server.max_body_bytes

    async def create_run(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        body = await read_json(request, RunCreate, max_body)
        with submit_context(gw.tracer, request.headers, body.metadata, body.agent) as metadata:
            record = await gw.submit(tenant, body.agent, body.input, metadata)
        location = {"Location": f"/v1/runs/{record.run_id}"}
        if body.stream:
            return sse_response(follow_journal(gw.store, record.run_id), location)
        if body.wait:
            record = await gw.wait(
                record.run_id, body.wait_timeout_s or gw.config.server.wait_timeout_s
            )
            return json_response(run_out(record), 200 if record.done else 202, location)
        return json_response(run_out(record), 202, location)

    async def get_run(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        return json_response(run_out(await gw.get(tenant, request.path_params["run_id"])))

    async def run_events(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        query = _query(request, frozenset({"after"}))
        record = await gw.get(tenant, request.path_params["run_id"])
        after = parse_last_event_id(request.headers.get("last-event-id", query.get("after")))
        return sse_response(follow_journal(gw.store, record.run_id, after))

    async def cancel_run(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        return json_response(run_out(await gw.cancel(tenant, request.path_params["run_id"])))

    async def list_runs(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        query = _query(request, frozenset({"status", "agent", "limit"}))
        status = query.get("status")
        if status is not None and status not in _STATUSES:
            raise ApiError(
                422,
                "invalid_request",
                f"status must be one of {', '.join(_STATUSES)}",
                field="status",
            )
        raw_limit = query.get("limit", "100")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 1000:
            raise ApiError(
                422, "invalid_request", "limit must be an integer from 1 to 1000", field="limit"
            )
        records = await gw.store.list(
            tenant=tenant.name, status=status, agent=query.get("agent"), limit=int(raw_limit)
        )
        return json_response(RunList("list", [run_out(r) for r in records]))

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
            )
            for s in gw.agents.values()
        ]
        return json_response(AgentList("list", data))

    async def chat_completions(request: Request) -> Response:
        tenant = gw.keys.authenticate(request.headers)
        _query(request, frozenset())
        body = await read_json(request, openai_facade.ChatRequest, max_body)
        return await openai_facade.complete(gw, tenant, body)

    async def healthz(request: Request) -> Response:
        return json_response(Health("ok"))

    async def readyz(request: Request) -> Response:
        checks = await gw.readiness()
        ok = all(v == "ok" for v in checks.values())
        return json_response(
            Readiness("ready" if ok else "unavailable", checks), 200 if ok else 503
        )

    async def metrics(request: Request) -> Response:
        gw.keys.authenticate(request.headers)
        return Response(gw.metrics.render(), media_type=CONTENT_TYPE)

    spec = _encode(openapi_document())

    async def openapi(request: Request) -> Response:
        return Response(spec, media_type="application/json")

    async def runs(request: Request) -> Response:
        return await (create_run if request.method == "POST" else list_runs)(request)

    return [
        Route("/v1/runs", runs, methods=["GET", "POST"]),
        Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
        Route("/v1/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/v1/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
        Route("/v1/agents", list_agents, methods=["GET"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        *dashboard_routes(gw),
    ]


# -- errors ----------------------------------------------------------------------------------


def _error(
    status: int, type: str, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    return json_response(ErrorBody(ErrorDetail(type, message)), status, headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return json_response(exc.body(), exc.status, exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kinds = {404: "not_found", 405: "method_not_allowed"}
    return _error(
        exc.status_code, kinds.get(exc.status_code, "invalid_request"), exc.detail, exc.headers
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error(500, "internal", "internal error")


class MetricsMiddleware:
    """Counts every response by route template, method and status, and times it."""

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                route = scope.get("route")
                self.gateway.metrics.observe_request(
                    getattr(route, "path", "unmatched"),
                    scope["method"],
                    status,
                    time.perf_counter() - t0,
                )
            await send(message)

        await self.app(scope, receive, send_wrapper)


def create_app(gateway: Gateway, *, manage_lifecycle: bool = True) -> Starlette:
    """The Starlette app; with ``manage_lifecycle`` its lifespan starts and drains ``gateway``."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_lifecycle:
            await gateway.start()
        try:
            yield
        finally:
            if manage_lifecycle:
                await gateway.stop()

    handlers: dict[Any, Any] = {
        ApiError: _api_error,
        HTTPException: _http_error,
        Exception: _internal_error,
    }
    app = Starlette(
        routes=_routes(gateway),
        middleware=[Middleware(MetricsMiddleware, gateway=gateway)],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    return app
