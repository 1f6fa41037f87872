"""An agent as the gateway serves it (a leaf, so the gateway's parts name it without
importing the gateway)."""

from __future__ import annotations

from podium.agent import Agent

__all__ = ("ServedAgent",)


class ServedAgent:
    """An agent as the gateway serves it: under a name, in a pool."""

    __slots__ = ("agent", "name", "pool")

    def __init__(self, agent: Agent, name: str | None = None, pool: str = "default") -> None:
        self.agent = agent
        self.name = name or agent.name
        self.pool = pool
