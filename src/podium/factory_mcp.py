"""``[[mcp_servers]]`` of ``podium.toml``: the servers, and their tools listed once when
the agents are built (see :mod:`podium.factory`)."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any

from podium.config import Config, MCPServerConfig
from podium.errors import ConfigError
from podium.tools.tool import Tool

if TYPE_CHECKING:
    from podium.tools.mcp import MCPServer


__all__ = ("MCPTools", "build_mcp_servers")

log = logging.getLogger("podium.factory")


def build_mcp_servers(config: Config) -> dict[str, MCPServer]:
    """One :class:`~podium.tools.mcp.MCPServer` per ``[[mcp_servers]]`` entry (not started)."""
    if not config.mcp_servers:
        return {}
    from podium.security.egress import EgressDenied, EgressPolicy
    from podium.tools.mcp import MCPServer

    def make(cfg: MCPServerConfig) -> MCPServer:
        options: dict[str, Any] = {
            "name": cfg.name, "prefix": cfg.prefix, "timeout": cfg.timeout, "retries": cfg.retries
        }
        if cfg.transport == "http":
            assert cfg.url is not None  # load_config checked
            policy = EgressPolicy(
                allow_ports=None,
                allow_private=cfg.allow_private,
                allow_networks=tuple(cfg.allow_networks),
                label=f"MCP server {cfg.name!r}",
            )
            try:
                return MCPServer.http(cfg.url, headers=cfg.headers, policy=policy, **options)
            except EgressDenied as exc:
                raise ConfigError(f"mcp_servers: {cfg.name!r}: {exc}") from None
        assert cfg.command is not None
        return MCPServer.stdio(cfg.command, cfg.args, env=cfg.env or None, cwd=cfg.cwd, **options)

    return {cfg.name: make(cfg) for cfg in config.mcp_servers}


class MCPTools:
    """The ``[[mcp_servers]]`` of a config and their tools, each server listed once (on a
    loop of its own: the agents are built before, or inside, the caller's loop)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.servers = build_mcp_servers(config)
        self._listed: dict[str, list[Tool[..., Any]]] = {}

    def tools(self, server: str, agent: str) -> list[Tool[..., Any]]:
        if server not in self.servers:
            known = ", ".join(sorted(self.servers)) or "none"
            raise ConfigError(
                f"agents: {agent!r} uses MCP server {server!r}, which no [[mcp_servers]] "
                f"entry names (known: {known})"
            )
        if server not in self._listed:
            self._listed[server] = self._list(server)
        return self._listed[server]

    def server_of(self, t: Tool[..., Any]) -> str | None:
        """The server whose listing holds ``t`` (None: not one of theirs)."""
        for name, listed in self._listed.items():
            if any(t is x for x in listed):
                return name
        return None

    def _list(self, name: str) -> list[Tool[..., Any]]:
        server = self.servers[name]
        cfg = next(c for c in self.config.mcp_servers if c.name == name)
        parts = [cfg.url or ""] if cfg.transport == "http" else [cfg.command or "", *cfg.args]
        where = " ".join(parts)

        async def listed() -> list[Tool[..., Any]]:
            try:
                return await asyncio.wait_for(server.list_tools(), cfg.timeout)
            finally:
                await server.aclose()  # calls open their own session, on the run's loop

        out: list[list[Tool[..., Any]]] = []
        errors: list[BaseException] = []

        def target() -> None:
            try:
                out.append(asyncio.run(listed()))
            except BaseException as exc:  # reported below, in the caller's thread
                errors.append(exc)

        thread = threading.Thread(target=target, name=f"mcp-list:{name}", daemon=True)
        thread.start()
        thread.join()
        if errors:
            exc = errors[0]
            why = "no answer" if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
            raise ConfigError(
                f"mcp_servers: {name!r} ({cfg.transport}: {where.strip()}) could not be "
                f"started or listed: {why}"
            ) from exc
        return out[0]

    def select(self, spec: str, agent: str) -> list[Tool[..., Any]]:
        """``SERVER:*`` (all its tools) or ``SERVER:TOOL`` (by the server's tool name)."""
        server, _, wanted = spec.partition(":")
        tools = self.tools(server, agent)
        if wanted == "*":
            return tools
        prefix = self.servers[server].prefix
        found = [t for t in tools if t.name in (wanted, prefix + wanted)]
        if not found:
            names = ", ".join(sorted(t.name for t in tools)) or "none"
            raise ConfigError(
                f"agents: {agent!r} uses tool {wanted!r} of MCP server {server!r}, "
                f"which has no such tool (it has: {names})"
            )
        return found
