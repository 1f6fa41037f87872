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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from podium.engine.records import (
    JournalEntry,
    ModelTurn,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.tools.executor import ToolResult

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.engine.replay import RunState

__all__ = ("adopt", "find_agent", "handed_off", "reachable", "restore", "switch")


def _target(agent: Agent, results: Sequence[ToolResult]) -> Agent | None:
    """The agent the first successful transfer among ``results`` hands to."""
    handoffs = agent.handoffs
    for result in results:
        tool = handoffs.get(result.name)
        if tool is not None and result.ok and result.content == tool.text:
            return tool.target
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
    """After a replay: switch to the agent the run's committed hand-offs left it with."""
    if not agent.handoffs and state.record.active_agent is None:
        return
    current = agent
    pending: dict[int, ToolResult] = {}
    for entry in entries:
        target = None
        if isinstance(entry, StepRecord):
            target = _target(current, entry.results)
        elif isinstance(entry, ModelTurn):
            pending = {}
        elif isinstance(entry, ToolOutcome):
            pending[entry.index] = entry.result
        elif isinstance(entry, StepCommitted):
            target = _target(current, [pending[i] for i in sorted(pending)])
            pending = {}
        if target is not None:
            current = target
    if current is not agent:
        switch(state, current)


def handed_off(agent: Agent, state: RunState) -> Agent:
    """The agent for the next step: ``agent``, or the one the step just committed handed
    the run to (read from that step's tool messages, the last ones in the context)."""
    messages = state.ctx.messages
    handoffs = agent.handoffs
    i = len(messages) - 1
    target = None
    while i > 0 and messages[i].role == "tool":
        message = messages[i]
        tool = handoffs.get(message.name or "")
        if tool is not None and message.content == tool.text:
            target = tool.target  # scanning backwards: the last one found is the first called
        i -= 1
    return agent if target is None else switch(state, target)
