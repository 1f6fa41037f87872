"""Hand-offs: the run continues with another agent (sans-I/O).

A hand-off is the outcome of a ``transfer_to_<name>`` call
(:class:`~podium.tools.agent_tool.HandoffTool`) and takes effect when the step that made
it is committed: from the next step on, the run's system prompt and tools are the
target's, its history is kept. The journal needs no entry of its own: the tool's
outcome, journaled with its step like any other, is the record of the hand-off, so a
resumed run finds its agent by replaying those outcomes (:func:`restore`) and the
switch is as durable as the step. If one reply calls several transfers, the first in
call order wins. The run's deadline stays the one it started with; ``max_steps`` is the
current agent's, counted over the whole run.

A hand-off with an input filter (:class:`~podium.handoffs.Handoff`) also rewrites the
history: the filter runs once, as the hand-off takes effect, and its result is journaled
(:class:`~podium.engine.records.HandedOff`) before the target's first step, so a replay
puts back the same history. A run that stopped between the transfer's commit and that
entry (nothing was sent to the target yet) runs the filter again when it resumes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from podium.engine.records import (
    HandedOff,
    JournalEntry,
    ModelTurn,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.handoffs import reachable
from podium.messages import Message
from podium.tools.agent_tool import HandoffTool
from podium.tools.executor import ToolResult

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.replay import RunState

__all__ = (
    "HandoffFilterError",
    "adopt",
    "filtered",
    "find_agent",
    "handoff_made",
    "reachable",
    "restore",
    "switch",
)


class HandoffFilterError(Exception):
    """A hand-off's input filter raised or returned something that is not a history."""


def _transfer(agent: Agent, results: Sequence[ToolResult]) -> HandoffTool | None:
    """The first successful transfer among ``results``."""
    handoffs = agent.handoffs
    for result in results:
        tool = handoffs.get(result.name)
        if tool is not None and result.ok and result.content == tool.text:
            return tool
    return None


def find_agent(root: Agent, name: str | None) -> Agent | None:
    """The agent named ``name`` among ``root`` and the agents its hand-offs reach (directly
    or through one another): where a run of ``root`` whose ``record.active_agent`` is
    ``name`` stands now. ``None`` names ``root``; an agent no hand-off reaches is None."""
    if name is None or root.name == name:
        return root
    for agent in reachable(root):
        if agent.name == name:
            return agent
    return None


def switch(state: RunState, target: Agent) -> Agent:
    """Continue the run with ``target``: its system prompt and tools, the same history
    (counted as before); its screening sends every step down the general path. (The
    run's redactor covers the secrets of every agent its hand-offs reach from the start:
    see redactor_for.)"""
    ctx = state.ctx
    ctx.prefix = target.prefix
    ctx.messages[0] = target.prefix.system
    state.agent = target
    state.record.active_agent = target.name
    adopt(state, target)
    return target


def adopt(state: RunState, agent: Agent) -> None:
    """What the run's steps take from the agent driving them: whether they go down the
    general path (its screening, or a tenant's allow-list)."""
    state.general = state.allowed_tools is not None or agent.screening is not None


def restore(agent: Agent, state: RunState, entries: Sequence[JournalEntry]) -> None:
    """After a replay: switch to the agent the run's committed hand-offs left it with.

    A last hand-off whose input filter's result is not journaled yet is left for the
    driver to make again (:func:`handoff_made` finds it at the end of the history)."""
    if not agent.handoffs and state.record.active_agent is None:
        return
    current = agent
    unfiltered: Agent | None = None  # the agent before a filtered hand-off not journaled
    pending: dict[int, ToolResult] = {}
    for entry in entries:
        tool = None
        if isinstance(entry, StepRecord):
            tool = _transfer(current, entry.results)
        elif isinstance(entry, ModelTurn):
            pending = {}
        elif isinstance(entry, ToolOutcome):
            pending[entry.index] = entry.result
        elif isinstance(entry, StepCommitted):
            tool = _transfer(current, [pending[i] for i in sorted(pending)])
            pending = {}
        elif isinstance(entry, HandedOff):
            unfiltered = None
        if tool is not None:
            unfiltered = current if tool.input_filter is not None else None
            current = tool.target
    if unfiltered is not None:
        current = unfiltered
    if current is not agent:
        switch(state, current)


def handoff_made(agent: Agent, state: RunState) -> HandoffTool | None:
    """The transfer the step just committed made (read from that step's tool messages,
    the last ones in the context), or None: ``agent`` goes on."""
    messages = state.ctx.messages
    handoffs = agent.handoffs
    i = len(messages) - 1
    found = None
    while i > 0 and messages[i].role == "tool":
        message = messages[i]
        tool = handoffs.get(message.name or "")
        if tool is not None and message.content == tool.text:
            found = tool  # scanning backwards: the last one found is the first called
        i -= 1
    return found


def filtered(state: RunState, tool: HandoffTool) -> HandedOff:
    """Give the run's history to ``tool``'s input filter and continue with what it returns;
    the entry to journal (before the target's first step). Raises
    :class:`HandoffFilterError` for a filter that fails or returns no history."""
    ctx = state.ctx
    given = tuple(ctx.messages[1:])
    name = getattr(tool.input_filter, "__name__", "input_filter")
    try:
        kept = tuple(tool.input_filter(given))  # type: ignore[misc]  # set: not None here
    except Exception as exc:  # the user's code: the run fails saying so
        raise HandoffFilterError(
            f"the input filter {name} of {tool.name} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not kept or not all(isinstance(m, Message) for m in kept):
        what = "no message" if not kept else "something other than Message objects"
        raise HandoffFilterError(f"the input filter {name} of {tool.name} returned {what}")
    first = kept[0]
    record = state.record
    ctx.restart(kept, first.role == "user" and first.content == record.input)
    return HandedOff(state.step, time.time(), tool.target.name, kept)
