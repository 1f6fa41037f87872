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
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podium.errors import MissingExtraError, StaleRunError
from podium.gateway.body_limit import BodyLimit
from podium.gateway.dashboard import dashboard_routes
from podium.gateway.endpoints import (
    Handler,
    conversation_handlers,
    openai_handlers,
    run_handlers,
    service_handlers,
)
from podium.gateway.errors import ApiError, ErrorBody, ErrorDetail
from podium.gateway.http_io import json_response, read_json
from podium.gateway.openapi import openapi_document
from podium.gateway.outage import RETRY_AFTER_S, UNAVAILABLE, unavailable_message
from podium.gateway.routes import OPERATIONS, Operation
from podium.gateway.service import Gateway
from podium.observe.server_span import ServerSpans

__all__ = ("create_app", "json_response", "read_json")

log = logging.getLogger("podium.gateway")

_encode = msgspec.json.Encoder().encode


def _routes(gw: Gateway) -> list[Route]:
    handlers = {
        **run_handlers(gw),
        **conversation_handlers(gw),
        **openai_handlers(gw),
        **service_handlers(gw),
    }
    routes = table_routes(OPERATIONS, handlers)
    if gw.config.server.docs:  # off: an operator who would not publish the API's shape: 404
        spec = _encode(openapi_document())

        async def openapi(request: Request) -> Response:
            return Response(spec, media_type="application/json")

        routes.append(Route("/openapi.json", openapi, methods=["GET"]))
    return [*routes, *dashboard_routes(gw)]


def table_routes(operations: Sequence[Operation], handlers: Mapping[str, Handler]) -> list[Route]:
    """One Starlette route per path of ``operations``, each method calling the handler of
    its operation's name (every operation needs one; a handler no operation names is a
    mistake too: it would be served undocumented)."""
    if missing := {op.name for op in operations} ^ set(handlers):
        raise ValueError(f"operations and handlers differ: {sorted(missing)}")
    by_path: dict[str, dict[str, Handler]] = {}
    for op in operations:
        by_path.setdefault(op.path, {})[op.method] = handlers[op.name]
    return [Route(path, _by_method(methods), methods=list(methods))
            for path, methods in by_path.items()]


def _by_method(methods: dict[str, Handler]) -> Handler:
    if len(methods) == 1:
        return next(iter(methods.values()))
    get = methods.get("GET")

    async def dispatch(request: Request) -> Response:
        # Starlette answers HEAD where GET is served: with GET's handler.
        handler = methods.get(request.method) or get
        assert handler is not None  # the route's methods are these
        return await handler(request)

    return dispatch


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


async def _unavailable(request: Request, exc: Exception) -> Response:
    # The store or the queue is unreachable: a 503 the client can retry, on a connection
    # that stays open (this handler runs inside the app, so the server keeps it alive).
    log.warning("%s %s: backend unavailable: %s", request.method, request.url.path, exc)
    retry = RETRY_AFTER_S
    body = ErrorBody(ErrorDetail("unavailable", unavailable_message(exc), retry_after=retry))
    return json_response(body, 503, {"Retry-After": str(max(1, math.ceil(retry)))})


async def _stale(request: Request, exc: Exception) -> Response:
    return _error(409, "conflict", f"the run changed meanwhile; retry: {exc}")


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The client hung up mid-body: nobody is left to answer, and it is not our error.
    # 499 (nginx's "client closed request") is what the metrics count it as.
    return Response(status_code=499)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    # The server closes the connection after an unhandled error: say so.
    return _error(500, "internal", "internal error", {"Connection": "close"})


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

    try:  # the MCP SDK is an extra: without it /mcp says what to install
        from podium.gateway.mcp_endpoint import mcp_endpoint
    except MissingExtraError as exc:
        from podium.gateway.mcp_missing import mcp_missing_endpoint

        mcp_route, mcp_running = mcp_missing_endpoint(exc)
    else:
        mcp_route, mcp_running = mcp_endpoint(gateway)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_lifecycle:
            await gateway.start()
        try:
            async with mcp_running():  # the MCP transport's task group, for /mcp
                yield
        finally:
            if manage_lifecycle:
                await gateway.stop()

    handlers: dict[Any, Any] = {
        ApiError: _api_error,
        HTTPException: _http_error,
        ClientDisconnect: _client_gone,
        StaleRunError: _stale,
        **dict.fromkeys(UNAVAILABLE, _unavailable),
        Exception: _internal_error,
    }
    app = Starlette(
        routes=[*_routes(gateway), mcp_route],
        middleware=[  # (ServerSpans outermost: a traced request's span ends with its body)
            Middleware(ServerSpans),
            Middleware(MetricsMiddleware, gateway=gateway),
            # Inside the metrics: a refused body is counted like any other answer.
            Middleware(BodyLimit, max_bytes=gateway.config.server.max_body_bytes),
        ],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    # No redirect from /v1/runs/ to /v1/runs: Starlette builds its Location from the
    # request's Host header (a client's, or an attacker's), with an empty body. A 404 in the
    # API's error shape says what is wrong.
    app.router.redirect_slashes = False
    app.state.gateway = gateway
    return app
