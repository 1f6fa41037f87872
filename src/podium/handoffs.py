"""Hand-off declarations with input filters, and ready-made filters.

``Agent(..., handoffs=[billing])`` passes the whole history to ``billing``.
``handoffs=[Handoff(billing, input_filter=remove_tool_calls)]`` passes what the filter
returns instead: it is called once, when the hand-off takes effect, with the run's
messages after the system prompt, and returns the messages the receiving agent
continues with (the system prompt is then the receiver's, as in any hand-off)::

    from podium import Agent, Handoff, last_turns, remove_tool_calls

    triage = Agent(
        "triage", model, "Route the customer.",
        handoffs=[
            Handoff(billing, input_filter=remove_tool_calls),
            Handoff(support, input_filter=last_turns(2)),
            refunds,  # the whole history
        ],
    )

A filter is a plain synchronous function ``(messages) -> messages`` run on the event
loop: keep it quick, and do not change the messages it is given (return new ones:
``msgspec.structs.replace(message, content=...)``). What it returns is journaled with
the hand-off, so a run resumed after a crash continues from the same filtered history
without calling the filter again. A filter that raises, or returns no message or
something other than messages, fails the run with reason ``handoff_filter``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from podium.context.buffer import SUMMARY_MARKER
from podium.errors import ConfigError
from podium.messages import Message

if TYPE_CHECKING:
    from podium.agent import Agent

__all__ = ("Handoff", "HandoffFilter", "last_turns", "remove_tool_calls")

#: What the receiving agent of a hand-off reads: the history after the system prompt in,
#: the history it continues with out.
HandoffFilter = Callable[[Sequence[Message]], Sequence[Message]]


@dataclass(frozen=True, slots=True)
class Handoff:
    """A hand-off to ``agent`` whose history passes ``input_filter`` first (None: all of it)."""

    agent: Agent[Any]
    input_filter: HandoffFilter | None = None

    def __post_init__(self) -> None:
        if self.input_filter is not None and not callable(self.input_filter):
            raise ConfigError(
                f"Handoff({getattr(self.agent, 'name', self.agent)!r}): input_filter takes "
                f"a function (messages) -> messages, not {self.input_filter!r:.60}"
            )


def remove_tool_calls(messages: Sequence[Message]) -> list[Message]:
    """The history without tool calls and their results (the hand-off's own call too):
    an assistant message that only called tools goes, one that also said something
    keeps what it said."""
    kept: list[Message] = []
    for message in messages:
        if message.role == "tool":
            continue
        if message.tool_calls:
            if not message.content:
                continue
            message = msgspec.structs.replace(message, tool_calls=(), tokens=0)
        kept.append(message)
    return kept


def last_turns(n: int) -> HandoffFilter:
    """A filter keeping the last ``n`` turns: a turn starts at a user message (a summary
    of compacted turns does not start one) and holds the replies and tool calls that
    follow it. A run with fewer turns passes whole. ``last_turns(1)`` is the request
    being handled and what was done about it."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"last_turns takes a whole number of at least 1, not {n!r}")

    def keep_last(messages: Sequence[Message]) -> list[Message]:
        starts = [
            i
            for i, m in enumerate(messages)
            if m.role == "user" and not m.content.startswith(SUMMARY_MARKER)
        ]
        first = starts[-n] if len(starts) >= n else 0
        return list(messages[first:])

    keep_last.__name__ = keep_last.__qualname__ = f"last_turns({n})"
    return keep_last


def reachable(root: Agent) -> list[Agent]:
    """``root`` and the agents its hand-offs reach, directly or through one another."""
    found = [root]
    seen = {id(root)}
    for agent in found:  # (grows as it goes)
        for tool in agent.handoffs.values():
            if id(tool.target) not in seen:
                seen.add(id(tool.target))
                found.append(tool.target)
    return found
