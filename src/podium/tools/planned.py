"""A tool call validated and ready to run: made by the engine's step logic
(:mod:`podium.engine.step`), read by the policies that may withhold it (the screen, the
tenant's allow-list) and run by the executor. A tools-layer type, so those policies need
not import the engine."""

from __future__ import annotations

from typing import Any

import msgspec

from podium.tools.tool import Tool, ToolContext

__all__ = ("PlannedCall",)


class PlannedCall(msgspec.Struct, gc=False):
    """A validated tool call, ready to execute."""

    index: int
    tool: Tool[Any, Any]
    args: msgspec.Struct
    ctx: ToolContext
