"""Serve Podium agents as MCP tools, so any MCP client can call a durable agent.

Each agent becomes a tool named after it, taking ``input`` (the user's request) and
returning the run's final answer; the run goes through a Podium :class:`Engine` (and its
store, so it is journaled and resumable like any other). Over stdio::

    python -m podium.tools.mcp_serve react order-support

or in Python, as an ASGI app for streamable HTTP (``server.streamable_http_app()``)::

    server = agents_mcp_server([agent], store=SQLiteRunStore("runs.sqlite"))

A run continues the W3C trace context its ``tools/call`` carries in ``params._meta``
(the OpenTelemetry conventions for MCP; over HTTP, else the request's ``traceparent``
header): with a ``tracer`` (``python -m`` uses :func:`~podium.observe.tracing.tracer_from_env`,
so the ``OTEL_*`` variables turn it on) its spans join the caller's trace.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from podium.errors import MissingExtraError

try:
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver import MCPServer as SDKServer
    from mcp.server.mcpserver.exceptions import ToolError
except ModuleNotFoundError as exc:  # an extra: the base install has no MCP SDK
    error = MissingExtraError("podium.tools.mcp_serve", "mcp", exc.name or "mcp")
    if __name__ == "__main__":  # `python -m podium.tools.mcp_serve`: one line, no traceback
        raise SystemExit(f"error: {error}") from None
    raise error from None

from podium.agent import Agent
from podium.engine.driver import Engine
from podium.observe.tracing import TRACE_KEYS, meta_carrier
from podium.store.base import RunStore

if TYPE_CHECKING:
    from podium.observe.tracing import RunTracer

__all__ = ("agents_mcp_server", "main")

_NAME = re.compile(r"[^A-Za-z0-9_-]")


def agents_mcp_server(
    agents: Sequence[Agent],
    *,
    store: RunStore | None = None,
    name: str = "podium",
    tracer: RunTracer | None = None,
) -> SDKServer:
    """An MCP server (the SDK's) with one tool per agent; with ``tracer`` its runs are
    traced, continuing their callers' trace context."""
    server: SDKServer = SDKServer(name)
    engines: list[Engine] = []

    def engine() -> Engine:
        # Made on first use, inside the server's event loop.
        if not engines:
            made = Engine(store)
            made.hook = tracer
            engines.append(made)
        return engines[0]

    for agent in agents:
        server.add_tool(
            _runner(agent, engine),
            name=_NAME.sub("_", agent.name),
            description=agent.description or f"Ask the {agent.name} agent.",
        )
    return server


def _runner(agent: Agent, engine: Callable[[], Engine]) -> Callable[..., Awaitable[str]]:
    async def run(input: str, ctx: Context) -> str:
        """Run the agent on ``input`` and return its answer."""
        # The caller's trace context, kept with the run (a traced engine continues it).
        carrier = meta_carrier(ctx.request_context.meta, ctx.headers or {})
        metadata = {key: carrier[key] for key in TRACE_KEYS if carrier.get(key)}
        record = await engine().run(agent, input, metadata=metadata or None)
        if record.status != "completed":
            raise ToolError(
                f"run {record.run_id} {record.status} ({record.reason}): {record.error or ''}"
            )
        return record.output or ""

    return run


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m podium.tools.mcp_serve AGENT...``: serve agents over stdio."""
    from podium.cli.resolve import resolve_agent

    specs = list(sys.argv[1:] if argv is None else argv)
    if not specs:
        raise SystemExit("usage: python -m podium.tools.mcp_serve AGENT [AGENT...]")
    from podium.observe.tracing import tracer_from_env

    tracer = tracer_from_env()
    agents_mcp_server([resolve_agent(s) for s in specs], tracer=tracer).run("stdio")


if __name__ == "__main__":
    main()
