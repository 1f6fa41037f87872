"""Per-tenant tool allow-lists: a tenant may be limited to some of an agent's tools.

The gateway writes the tenant's list (``tools = [...]`` on its API key in
``podium.toml``) into the run's metadata under :data:`TOOLS_KEY` when the run is
submitted, replacing whatever the client sent there; whichever worker executes the run
enforces it. A call to a tool outside the list is refused before it runs and becomes an
error observation (``error="forbidden"``) the model can correct. The list only ever
narrows: a tool the agent does not have stays unknown.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from podium.tools.executor import ToolResult
from podium.tools.planned import PlannedCall

__all__ = ("TOOLS_KEY", "allowed_tools", "encode_allowed", "restrict_calls")

#: The run-metadata key holding the comma-separated tool names a run may call.
TOOLS_KEY = "podium.tools"


def encode_allowed(tools: Collection[str]) -> str:
    return ",".join(sorted(set(tools)))


def allowed_tools(metadata: Mapping[str, str]) -> frozenset[str] | None:
    """The tools a run may call, or ``None`` when it is not limited."""
    raw = metadata.get(TOOLS_KEY)
    if raw is None:
        return None
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


def restrict_calls(
    planned: list[PlannedCall],
    rejected: list[tuple[int, ToolResult]],
    allowed: frozenset[str],
    tenant: str,
) -> tuple[list[PlannedCall], list[tuple[int, ToolResult]]]:
    """Move the planned calls of tools outside ``allowed`` to the rejected ones."""
    if all(p.tool.name in allowed for p in planned):
        return planned, rejected
    keep: list[PlannedCall] = []
    refused = list(rejected)
    names = ", ".join(sorted(allowed)) or "none"
    for p in planned:
        if p.tool.name in allowed:
            keep.append(p)
            continue
        message = (
            f"error: tool {p.tool.name!r} is not allowed for tenant {tenant!r}; "
            f"the tools you may call are: {names}"
        )
        refused.append(
            (p.index, ToolResult(p.ctx.call_id, p.tool.name, message, False, "forbidden", 0))
        )
    return keep, refused
