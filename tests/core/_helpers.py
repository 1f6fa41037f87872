"""Small builders shared by the core tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from podium import FunctionModel, ModelRequest, ModelResponse, ToolContext, tool
from podium.messages import Message
from podium.tools import Tool

Reply = Callable[[Sequence[Message], ModelRequest], "ModelResponse | str"]


def ctx(call_index: int = 0, step: int = 0, run_id: str = "run_t") -> ToolContext:
    return ToolContext(run_id, step, call_index, f"call_{step}_{call_index}")


def args(t: Tool[Any, Any], raw: str = "{}") -> Any:
    return t.decode_arguments(raw)


def scripted(*replies: ModelResponse | str) -> FunctionModel:
    """A FunctionModel answering reply ``request.step`` (the last one thereafter)."""

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        return replies[min(request.step, len(replies) - 1)]

    return FunctionModel(reply, name="scripted")


def tool_messages(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.role == "tool"]


def journal_results(journal: Sequence[tuple[int, Any]]) -> list[Any]:
    """Every ToolResult in a journal, whether journaled alone or inside a whole-step entry."""
    found: list[Any] = []
    for _, entry in journal:
        result = getattr(entry, "result", None)
        if result is not None:
            found.append(result)
        found.extend(getattr(entry, "results", ()))
    return found


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"
