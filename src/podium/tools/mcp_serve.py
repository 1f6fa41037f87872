"""Serve Podium agents as MCP tools, so any MCP client can call a durable agent.

Each agent becomes a tool named after it, taking ``input`` (the user's request) and
returning the run's final answer; the run goes through a Podium :class:`Engine` (and its
store, so it is journaled and resumable like any other). Over stdio::

    python -m podium.tools.mcp_serve react order-support

or in Python, as an ASGI app for streamable HTTP (``server.streamable_http_app()``)::

    server = agents_mcp_server([agent], store=SQLiteRunStore("runs.sqlite"))
"""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable, Sequence

from mcp.server.mcpserver import MCPServer as SDKServer
from mcp.server.mcpserver.exceptions import ToolError

from podium.agent import Agent
from podium.engine.driver import Engine
from podium.store.base import RunStore

__all__ = ("agents_mcp_server", "main")

_NAME = re.compile(r"[^A-Za-z0-9_-]")


def agents_mcp_server(
    agents: Sequence[Agent], *, store: RunStore | None = None, name: str = "podium"
) -> SDKServer:
    """An MCP server (the SDK's) with one tool per agent."""
    server: SDKServer = SDKServer(name)
    engines: list[Engine] = []

    def engine() -> Engine:
        # Made on first use, inside the server's event loop.
        if not engines:
            engines.append(Engine(store))
        return engines[0]

    for agent in agents:
        server.add_tool(
            _runner(agent, engine),
            name=_NAME.sub("_", agent.name),
            description=agent.description or f"Ask the {agent.name} agent.",
        )
    return server


def _runner(agent: Agent, engine: Callable[[], Engine]) -> Callable[[str], Awaitable[str]]:
    async def run(input: str) -> str:
        """Run the agent on ``input`` and return its answer."""
        record = await engine().run(agent, input)
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
    agents_mcp_server([resolve_agent(s) for s in specs]).run("stdio")


if __name__ == "__main__":
    main()
