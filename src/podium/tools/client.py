"""Client-side tools: tools a gateway client sends with its request and runs itself.

The model sees them beside the agent's own tools. A call to one is not run here: the
tool raises :class:`~podium.errors.Interrupt`, so the run parks ``waiting`` with the call
journaled and no worker holding it, exactly as for a tool's question to a human (see
:mod:`podium.engine.approvals`). The gateway hands the call to the client; the client's
output, sent back, is journaled as the call's answer and the run goes on from its journal
on any worker. The wait is as durable as an approval's: a worker restart loses nothing.

The run's record carries the client's definitions in its metadata under
:data:`CLIENT_TOOLS_KEY` (JSON), so whichever worker drives the run offers its model the
same tools (:func:`with_client_tools`). Example::

    specs = [ClientToolSpec("get_weather", "The weather in a city.", schema)]
    metadata[CLIENT_TOOLS_KEY] = encode_client_tools(specs)
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import msgspec

from podium.errors import ConfigError, Interrupt
from podium.models.base import ToolDefinition
from podium.output import FINAL_TOOL
from podium.tools.policy import ToolPolicy
from podium.tools.tool import Tool

if TYPE_CHECKING:
    from podium.agent import Agent

__all__ = (
    "CLIENT_QUESTION",
    "CLIENT_TOOLS_KEY",
    "ClientTool",
    "ClientToolSpec",
    "client_tool_names",
    "decode_client_tools",
    "encode_client_tools",
    "with_client_tools",
)

#: The run-metadata key holding the client's tool definitions (a JSON list).
CLIENT_TOOLS_KEY = "podium.client_tools"
#: The "question" of a parked client-tool call, as ``/v1/approvals`` shows it.
CLIENT_QUESTION = "client tool: the client that sent this tool runs it and returns its output"
#: Agents with client tools made recently, by (agent, definitions): a client sends the same
#: tools with each request, so the prompt prefix is rendered and counted once, not per run.
_CACHE_SIZE = 64
#: Nothing runs here: the call parks at once, so no timeout applies.
_POLICY = ToolPolicy(timeout_s=None)


class ClientToolSpec(msgspec.Struct, frozen=True, gc=False):
    """One client tool: a function tool of OpenAI's API (its JSON Schema as the client sent it)."""

    name: str
    description: str
    parameters: dict[str, Any]


class _AnyObject(msgspec.Struct):
    """The arguments of a client tool: any JSON object (the client checks its own schema)."""


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(list[ClientToolSpec]).decode


def encode_client_tools(specs: list[ClientToolSpec]) -> str:
    return _encode(specs).decode()


def decode_client_tools(raw: str) -> list[ClientToolSpec]:
    return _decode(raw)


def client_tool_names(metadata: dict[str, str]) -> frozenset[str]:
    """The names of the run's client tools (empty: it has none)."""
    raw = metadata.get(CLIENT_TOOLS_KEY)
    if not raw:
        return frozenset()
    return frozenset(s.name for s in decode_client_tools(raw))


class ClientTool(Tool[[], Any]):
    """A tool the client runs: calling it parks the run until the client's output comes."""

    def __init__(self, spec: ClientToolSpec) -> None:
        async def call() -> str:
            raise Interrupt(CLIENT_QUESTION)

        super().__init__(
            call, name=spec.name, description=spec.description or spec.name, policy=_POLICY
        )
        # The model reads the client's own schema; any JSON object is taken as arguments.
        self.parameters = spec.parameters
        self.definition = ToolDefinition(self.name, self.description, spec.parameters)
        self.decoder = msgspec.json.Decoder(_AnyObject)

    def __repr__(self) -> str:
        return f"ClientTool({self.name!r})"


_made: OrderedDict[tuple[int, str], tuple[Agent, Agent]] = OrderedDict()
_lock = threading.Lock()


def with_client_tools(agent: Agent, raw: str) -> Agent:
    """``agent`` with the client tools ``raw`` (:data:`CLIENT_TOOLS_KEY`'s value) added.

    A copy: the agent itself, and the runs without client tools, are unchanged. Raises
    :class:`~podium.errors.ConfigError` if a name is one of the agent's tools, or if the
    prompt prefix with them cannot fit the agent's context budget.
    """
    key = (id(agent), raw)
    with _lock:
        hit = _made.get(key)
        if hit is not None and hit[0] is agent:
            _made.move_to_end(key)
            return hit[1]
    specs = decode_client_tools(raw)
    tools = dict(agent.tools)
    for spec in specs:
        if spec.name in tools or (agent.output is not None and spec.name == FINAL_TOOL):
            raise ConfigError(
                f"client tool {spec.name!r}: agent {agent.name!r} has a tool of that name"
            )
        tools[spec.name] = ClientTool(spec)
    # As factory.with_model does: a shallow copy shares the model, the policies and the
    # hand-offs; only the tool table and the prompt prefix are its own.
    clone = copy.copy(agent)
    clone.tools = tools
    clone._tool_definitions = tuple(t.definition for t in tools.values())
    clone._render_prefix()
    clone._check_context_fits()
    with _lock:
        _made[key] = (agent, clone)
        while len(_made) > _CACHE_SIZE:
            _made.popitem(last=False)
    return clone
