"""Agents as tools of other agents: a sub-agent call, and a hand-off.

- :class:`AgentTool` (``agent.as_tool()``): calling it runs the agent as a *child run*
  of the caller's run, with its own journal, record and profile; its answer is the
  tool's result. The engine's side (child ids, resume, fan-out limit, cancel) is
  :mod:`podium.engine.children`.
- :class:`HandoffTool` (``Agent(..., handoffs=[other])``): ``transfer_to_<other>``;
  once a step that called it is committed the run continues with ``other``'s
  instructions and tools and the history so far, or what its input filter keeps of it
  (:mod:`podium.engine.handoff`, :mod:`podium.handoffs`).

Both are ordinary tools to the executor, the journal and the allow-lists.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from podium.tools.policy import ToolPolicy
from podium.tools.tool import Tool, ToolContext

if TYPE_CHECKING:
    from podium.agent import Agent
    from podium.handoffs import HandoffFilter

__all__ = ("AgentTool", "HandoffTool", "agent_tools", "transfer_text")

#: A child run bounds itself (its deadline, its steps); its caller does not time it out.
#: ``side_effects``: the parent's reply is journaled before the child starts, so a resumed
#: parent makes the same call again (and finds the same child) instead of asking anew.
_CHILD_POLICY = ToolPolicy(timeout_s=None, side_effects=True)
_HANDOFF_POLICY = ToolPolicy(timeout_s=None)


def _tool_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


class AgentTool(Tool[..., Any]):
    """``agent`` as a tool: its one argument, ``input``, is the child run's input.

    Made by :meth:`Agent.as_tool <podium.agent.Agent.as_tool>`.
    """

    def __init__(self, agent: Agent, name: str | None = None, description: str | None = None):
        async def call(input: str, ctx: ToolContext) -> str:
            """Run the sub-agent.

            Args:
                input: The task or question for this agent, with everything it needs to know.
            """
            from podium.engine.children import run_child  # the engine's side

            return await run_child(agent, input, ctx)

        super().__init__(
            call,
            name=name or _tool_name(agent.name),
            description=description or agent.description or f"Ask the {agent.name} agent.",
            policy=_CHILD_POLICY,
        )
        self.agent = agent

    def __repr__(self) -> str:
        return f"AgentTool({self.name!r}, agent={self.agent.name!r})"


def transfer_text(target: Agent) -> str:
    """What a successful hand-off returns (and how a replay recognises one)."""
    return f"Transferred to {target.name}."


class HandoffTool(Tool[[], Any]):
    """``transfer_to_<target>``: hands the conversation to ``target``."""

    def __init__(self, target: Agent, input_filter: HandoffFilter | None = None) -> None:
        text = transfer_text(target)

        async def transfer() -> str:
            return text

        what = target.description or f"the {target.name} agent"
        passes = "everything said so far" if input_filter is None else "the conversation"
        super().__init__(
            transfer,
            name=f"transfer_to_{_tool_name(target.name)}",
            description=f"Hand the conversation over to {target.name} ({what}); it "
            f"continues with {passes}.",
            policy=_HANDOFF_POLICY,
        )
        self.target = target
        self.text = text
        #: What the target reads of the history (None: all of it; see podium.handoffs).
        self.input_filter = input_filter

    def __repr__(self) -> str:
        return f"HandoffTool({self.name!r})"


def agent_tools(tools: dict[str, Tool[Any, Any]]) -> bool:
    """Whether any of ``tools`` runs an agent (then its runs set up child runs at load)."""
    return any(isinstance(t, AgentTool) for t in tools.values())
