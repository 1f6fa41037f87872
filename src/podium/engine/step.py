"""Sans-I/O step logic: what a model reply means, and what goes back into the context.

Nothing here awaits or touches a clock: given a reply, it decides which tool
calls are valid (and turns the others into error observations); given tool
results, it builds the messages the model reads next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from podium.agent import Agent
from podium.context.buffer import truncate_text
from podium.messages import Message, ToolCall
from podium.tools.executor import ToolResult
from podium.tools.tool import Tool, ToolContext

__all__ = ("PlannedCall", "plan_tool_calls", "tool_message", "truncate_result")


class PlannedCall(msgspec.Struct, gc=False):
    """A validated tool call, ready to execute."""

    index: int
    tool: Tool[Any, Any]
    args: msgspec.Struct
    ctx: ToolContext


def plan_tool_calls(
    agent: Agent, run_id: str, step: int, calls: Sequence[ToolCall]
) -> tuple[list[PlannedCall], list[tuple[int, ToolResult]]]:
    """Split a reply's tool calls into valid ones and error observations.

    A call to a tool the agent does not list, or with arguments that fail
    validation, becomes a ``ToolResult(ok=False)`` the model will read, so it
    can correct itself.
    """
    planned: list[PlannedCall] = []
    rejected: list[tuple[int, ToolResult]] = []
    tools = agent.tools
    for index, call in enumerate(calls):
        tool = tools.get(call.name)
        if tool is None:
            allowed = ", ".join(sorted(tools)) or "none"
            rejected.append(
                (
                    index,
                    ToolResult(
                        call.id,
                        call.name,
                        f"error: unknown tool {call.name!r}; the tools you may call are: {allowed}",
                        ok=False,
                        error="unknown_tool",
                        attempts=0,
                    ),
                )
            )
            continue
        try:
            args = tool.decode_arguments(call.arguments)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            rejected.append(
                (
                    index,
                    ToolResult(
                        call.id,
                        call.name,
                        f"error: invalid arguments for {call.name!r}: {exc}. "
                        f"Expected JSON matching: {msgspec.json.encode(tool.parameters).decode()}",
                        ok=False,
                        error="invalid_arguments",
                        attempts=0,
                    ),
                )
            )
            continue
        planned.append(PlannedCall(index, tool, args, ToolContext(run_id, step, index, call.id)))
    return planned, rejected


def truncate_result(agent: Agent, tool: Tool[Any, Any] | None, result: ToolResult) -> ToolResult:
    """The result cut to the tool's (or the agent's) result budget."""
    limit = agent.context.max_tool_result_tokens
    if tool is not None and tool.policy.max_result_tokens is not None:
        limit = tool.policy.max_result_tokens
    text = truncate_text(result.content, limit, agent.context.tokenizer)
    if text is not result.content:
        result.content = text
    return result


def tool_message(result: ToolResult) -> Message:
    """The message the model reads for one tool result."""
    return Message("tool", result.content, tool_call_id=result.call_id, name=result.name)
