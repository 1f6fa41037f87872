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
from podium.context.tokenizers import MESSAGE_OVERHEAD_TOKENS, EstimateTokenizer, Tokenizer
from podium.messages import Message, ToolCall
from podium.tools.executor import ToolResult
from podium.tools.planned import PlannedCall
from podium.tools.tool import Tool, ToolContext

__all__ = (
    "PlannedCall",
    "plan_one_call",
    "plan_tool_calls",
    "result_message",
    "tool_message",
    "truncate_result",
)


#: Longest tool name or call id kept from a rejected call; real ones are far shorter.
MAX_NAME_CHARS = 128


def plan_one_call(
    agent: Agent, run_id: str, step: int, calls: Sequence[ToolCall]
) -> PlannedCall | None:
    """The reply's call, decoded, when it makes one valid call to a listed tool (the
    common case: the step loop's fast lane asks this first, with no lists to build);
    else None, and :func:`plan_tool_calls` says what is wrong."""
    if len(calls) != 1 or not agent.max_tool_calls:
        return None
    call = calls[0]
    tool = agent.tools.get(call.name)
    if tool is None or len(call.id) > MAX_NAME_CHARS:
        return None
    try:
        args = tool.decoder.decode(call.arguments or "{}")  # (decode_arguments, no frame)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return PlannedCall(0, tool, args, ToolContext(run_id, step, 0, call.id))


def plan_tool_calls(
    agent: Agent, run_id: str, step: int, calls: Sequence[ToolCall]
) -> tuple[list[PlannedCall], list[tuple[int, ToolResult]], tuple[ToolCall, ...] | None]:
    """Split a reply's tool calls into valid ones and error observations.

    A call to a tool the agent does not list, with arguments that fail
    validation, or past the agent's ``max_tool_calls`` becomes a
    ``ToolResult(ok=False)`` the model will read, so it can correct itself.
    The third item is the calls to keep in the context and journal when some
    rejected call had an oversized name, id or arguments (cut to the budget),
    else None: hostile text never goes verbatim into either.
    """
    one = plan_one_call(agent, run_id, step, calls)
    if one is not None:
        return [one], [], None
    tools = agent.tools
    cap = agent.max_tool_calls
    planned: list[PlannedCall] = []
    rejected: list[tuple[int, ToolResult]] = []
    cut: list[ToolCall] | None = None
    for index, call in enumerate(calls):
        if index >= cap:
            call = _cut_call(agent, call)
            rejected.append((index, _over_cap(agent, call, len(calls))))
        else:
            tool = tools.get(call.name)
            if tool is not None:
                try:
                    args = tool.decode_arguments(call.arguments)
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    error = f"{exc}"
                else:
                    if len(call.id) > MAX_NAME_CHARS:  # ids are echoed back: keep them short
                        call = ToolCall(_cut(call.id), call.name, call.arguments)
                    planned.append(
                        PlannedCall(index, tool, args, ToolContext(run_id, step, index, call.id))
                    )
                    if call is not calls[index]:
                        if cut is None:
                            cut = list(calls)
                        cut[index] = call
                    continue
                call = _cut_call(agent, call)
                rejected.append(
                    (
                        index,
                        _rejected(
                            agent,
                            call,
                            f"error: invalid arguments for {call.name!r}: {error}. Expected JSON "
                            f"matching: {msgspec.json.encode(tool.parameters).decode()}",
                            "invalid_arguments",
                        ),
                    )
                )
            else:
                call = _cut_call(agent, call)
                allowed = ", ".join(sorted(tools)) or "none"
                message = (
                    f"error: unknown tool {call.name!r}; the tools you may call are: {allowed}"
                )
                rejected.append((index, _rejected(agent, call, message, "unknown_tool")))
        if call is not calls[index]:
            if cut is None:
                cut = list(calls)
            cut[index] = call
    return planned, rejected, None if cut is None else tuple(cut)


def over_cap(agent: Agent, calls: Sequence[ToolCall]) -> int:
    """How many of a reply's calls pass the agent's ``max_tool_calls`` (not run, not invalid)."""
    return max(0, len(calls) - agent.max_tool_calls)


def _over_cap(agent: Agent, call: ToolCall, count: int) -> ToolResult:
    return _rejected(
        agent,
        call,
        f"error: not run: this reply made {count} tool calls and at most "
        f"{agent.max_tool_calls} run per reply; make this call again in a later step if "
        "it is still needed",
        "too_many_calls",
    )


def _rejected(agent: Agent, call: ToolCall, message: str, kind: str) -> ToolResult:
    result = ToolResult(call.id, call.name, message, ok=False, error=kind, attempts=0)
    return truncate_result(agent, None, result)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_NAME_CHARS else f"{text[:MAX_NAME_CHARS]}…"


def _cut_call(agent: Agent, call: ToolCall) -> ToolCall:
    """``call`` with its name, id and arguments cut to the budget (itself if within it)."""
    name, call_id = _cut(call.name), _cut(call.id)
    # Counted, not bounded by its length: a byte-level tokenizer counts several tokens a
    # character for emoji or CJK (only a rejected call's arguments come here).
    arguments = truncate_text(
        call.arguments, agent.context.max_tool_result_tokens, agent.context.tokenizer
    )
    if name is call.name and call_id is call.id and arguments is call.arguments:
        return call
    return ToolCall(call_id, name, arguments)


def truncate_result(agent: Agent, tool: Tool[Any, Any] | None, result: ToolResult) -> ToolResult:
    """The result cut to the tool's (or the agent's) result budget."""
    limit = agent.context.max_tool_result_tokens
    if tool is not None and tool.policy.max_result_tokens is not None:
        limit = tool.policy.max_result_tokens
    tokenizer = agent.context.tokenizer
    if tokenizer.count(result.content) > limit:
        result.content = truncate_text(result.content, limit, tokenizer)
    return result


#: Per tokenizer class: whether its count of a message without tool calls is its count of
#: the message's text plus the template's overhead (see :func:`_by_parts`).
_BY_PARTS: dict[type[Tokenizer], bool] = {}


def _by_parts(kind: type[Tokenizer]) -> bool:
    """True for the base class's count_message (text + overhead), and for
    EstimateTokenizer's (lengths) where ``count`` is EstimateTokenizer's own too."""
    if kind.count_message is Tokenizer.count_message:
        return True
    return (
        issubclass(kind, EstimateTokenizer)
        and kind.count_message is EstimateTokenizer.count_message
        and kind.count is EstimateTokenizer.count
    )


def result_message(
    agent: Agent, tool: Tool[Any, Any] | None, result: ToolResult, counter: Tokenizer
) -> Message:
    """The message the model reads for ``result``, which is first cut to its budget (as
    :func:`truncate_result`). ``counter`` is the tokenizer of the context it goes into:
    when it is the one that counted the text for the budget, and counts a message by its
    parts, the message's tokens are that count (the text is counted once)."""
    context = agent.context
    limit = context.max_tool_result_tokens
    if tool is not None:
        own = tool.policy.max_result_tokens
        if own is not None:
            limit = own
    tokenizer = context.tokenizer
    content = result.content
    n = tokenizer.count(content)
    if n > limit:
        content = result.content = truncate_text(content, limit, tokenizer)
        n = -MESSAGE_OVERHEAD_TOKENS  # (the cut text is counted as it enters the context)
    elif tokenizer is not counter:  # (a hand-off to an agent with another tokenizer)
        n = -MESSAGE_OVERHEAD_TOKENS
    else:
        kind = type(tokenizer)
        by_parts = _BY_PARTS.get(kind)
        if by_parts is None:
            by_parts = _BY_PARTS[kind] = _by_parts(kind)
        if not by_parts:  # it counts messages its own way: let it
            n = -MESSAGE_OVERHEAD_TOKENS
    # (positional: role, content, tool_calls, tool_call_id, name, tokens; no keywords to match)
    return Message(
        "tool", content, (), result.call_id, result.name, MESSAGE_OVERHEAD_TOKENS + n
    )


def tool_message(result: ToolResult) -> Message:
    """The message the model reads for one tool result."""
    return Message("tool", result.content, tool_call_id=result.call_id, name=result.name)
