"""``/mcp``: every served agent as an MCP tool on the gateway (streamable HTTP).

Any MCP client can call a durable Podium agent: the tool ``NAME`` takes ``input`` and
returns the run's final answer. Each call goes through the gateway's own path (API key,
tenant, admission, :meth:`Gateway.submit`, a worker, :meth:`Gateway.wait`), so the run is
journaled, resumable and listed in ``/v1/runs`` for the caller's tenant like any other.
The endpoint is stateless (no MCP session kept between requests) and answers in JSON, so
any gateway replica can serve any request; the API key is checked on every request.
A W3C trace context in the call's ``params._meta`` (the OpenTelemetry conventions for
MCP), else in the request's ``traceparent`` header, is continued by the run.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from podium.errors import MissingExtraError

try:
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as SDKServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
    from mcp.server.transport_security import TransportSecuritySettings
except ModuleNotFoundError as exc:  # an extra: the base install has no MCP SDK
    raise MissingExtraError("the gateway's /mcp endpoint", "mcp", exc.name or "mcp") from None
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from podium.engine.records import RunRecord
from podium.gateway.errors import ApiError, run_still_going, run_waiting
from podium.gateway.http_io import json_response, read_body
from podium.observe.tracing import submit_context

if TYPE_CHECKING:
    from podium.gateway.service import Gateway

__all__ = ("mcp_endpoint",)

_NAME = re.compile(r"[^A-Za-z0-9_-]")


class _Authenticated:
    """Refuses a request without a valid API key before the MCP transport reads it, and
    reads its body as every other route does (JSON only, ``server.max_body_bytes`` at
    most, within ``server.body_timeout_s``): the transport is given it whole."""

    def __init__(self, app: StreamableHTTPASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        server = self.gateway.config.server
        try:
            self.gateway.keys.authenticate(request.headers)
            body = await read_body(request, server.max_body_bytes, server.body_timeout_s)
        except ApiError as exc:
            await json_response(exc.body(), exc.status, exc.headers)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body already read, then what the client sends next
    (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def mcp_endpoint(gateway: Gateway) -> tuple[Route, Callable[[], AbstractAsyncContextManager[Any]]]:
    """The ``/mcp`` route and the context manager the app's lifespan runs it in."""
    server: SDKServer = SDKServer("podium")
    for name, served in gateway.agents.items():
        server.add_tool(
            _runner(gateway, name),
            name=_NAME.sub("_", name),
            description=served.agent.description or f"Ask the {name} agent.",
        )
    # The API key on every request is what guards this endpoint (a browser page cannot
    # send it cross-origin), so the SDK's localhost-only Host check would only refuse
    # real clients of a gateway listening on a public address.
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    manager = server.session_manager
    # POST only: stateless, with JSON answers, there is no session to stream on (GET) or
    # to end (DELETE); the MCP spec lets the server answer those 405.
    route = Route(
        "/mcp", endpoint=_Authenticated(StreamableHTTPASGIApp(manager), gateway), methods=["POST"]
    )
    return route, manager.run


def _not_completed(record: RunRecord, waited_s: float) -> str:
    """Why a call has no answer, and where its run stands (it said "waiting (None): ")."""
    run_id = record.run_id
    if record.status == "waiting":
        return run_waiting(run_id)
    if not record.done:
        return run_still_going(run_id, waited_s)
    why = ": ".join(part for part in (record.reason, record.error) if part)
    return f"run {run_id} {record.status}" + (f" ({why})" if why else "")


def _runner(gateway: Gateway, name: str) -> Callable[..., Awaitable[str]]:
    async def run(input: str, ctx: Context) -> str:
        """Run the agent on ``input`` and return its answer."""
        request = ctx.request_context.request
        if not isinstance(request, Request):
            raise ToolError("no HTTP request to authenticate")
        try:
            tenant = gateway.keys.authenticate(request.headers)
            # The call's own trace context (params._meta) is preferred to the request's.
            with submit_context(gateway.tracer, request.headers, {"via": "mcp"}, name,
                                "/mcp", ctx.request_context.meta) as metadata:
                record, _ = await gateway.submit(tenant, name, input, metadata)
            record = await gateway.wait(record.run_id, gateway.config.server.wait_timeout_s)
        except ApiError as exc:  # refused (rate, backlog): the client reads why
            raise ToolError(f"{exc.type}: {exc}") from exc
        if record.status != "completed":
            raise ToolError(_not_completed(record, gateway.config.server.wait_timeout_s))
        return record.output or ""

    return run
