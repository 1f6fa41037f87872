"""Agents for the distributed tests, importable by worker subprocesses.

``effects`` calls a side-effecting tool ``TOOL_STEPS`` times; each call appends
``<idempotency key> <pid>`` to the file named by ``PODIUM_TEST_EFFECTS`` after
``PODIUM_TEST_TOOL_DELAY`` seconds (the external system whose effects we count), and
the same line when it starts to ``PODIUM_TEST_STARTS``, if set.
``crasher``'s tool logs its attempt then kills its own worker with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence

from podium import (
    Agent,
    FunctionModel,
    Scenario,
    SimStep,
    SimToolCall,
    SimulatedModel,
    ToolContext,
    tool,
    tool_call_reply,
)
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse

TOOL_STEPS = 4
PARALLEL_CALLS = 4


def _log(line: str, to: str = "PODIUM_TEST_EFFECTS") -> None:
    path = os.environ.get(to)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())  # one write: lines never interleave
        finally:
            os.close(fd)


@tool(side_effects=True)
async def effect(item: str, ctx: ToolContext) -> str:
    """Do something with an external effect.

    Args:
        item: What to act on.
    """
    _log(f"{ctx.idempotency_key} {os.getpid()}", to="PODIUM_TEST_STARTS")
    await asyncio.sleep(float(os.environ.get("PODIUM_TEST_TOOL_DELAY", "0.02")))
    _log(f"{ctx.idempotency_key} {os.getpid()}")
    return f"did {item}"


@tool(side_effects=True)
async def crash(item: str, ctx: ToolContext) -> str:
    """Crash the worker.

    Args:
        item: Ignored.
    """
    _log(f"{ctx.idempotency_key} {os.getpid()}")
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


effects = Agent(
    "effects",
    SimulatedModel(Scenario.react("effect", {"item": "x"}, tool_steps=TOOL_STEPS)),
    "Act on the item.",
    [effect],
    max_steps=TOOL_STEPS + 2,
)

#: Every step makes PARALLEL_CALLS calls at once; with one delay they finish together.
parallel_effects = Agent(
    "parallel_effects",
    SimulatedModel(
        Scenario.react("effect", {"item": "x"}, tool_steps=TOOL_STEPS, parallel=PARALLEL_CALLS)
    ),
    "Act on the item, several times at once.",
    [effect],
    max_steps=TOOL_STEPS + 2,
)

crasher = Agent(
    "crasher",
    SimulatedModel(Scenario.react("crash", {"item": "x"}, tool_steps=1)),
    "Crash.",
    [crash],
    max_steps=3,
)

#: Sub-agents: ``team`` asks ``one_step`` (one effect) and ``effects`` (TOOL_STEPS effects)
#: at once, then makes one effect of its own.
one_step = Agent(
    "one_step",
    SimulatedModel(Scenario.react("effect", {"item": "y"}, tool_steps=1)),
    "Act once.",
    [effect],
)
team = Agent(
    "team",
    SimulatedModel(Scenario(
        steps=(
            SimStep(tool_calls=(SimToolCall("one_step", {"input": "a"}),
                                SimToolCall("effects", {"input": "b"}))),
            SimStep(tool_calls=(SimToolCall("effect", {"item": "z"}),)),
        ),
        final="team done",
    )),
    "Delegate, then act.",
    [one_step.as_tool(), effects.as_tool(), effect],
    max_steps=4,
)


@tool(side_effects=True, requires_approval=True)
async def payout(item: str, ctx: ToolContext) -> str:
    """Pay out (needs a human's approval).

    Args:
        item: What to pay.
    """
    _log(f"{ctx.idempotency_key} {os.getpid()}")
    return f"paid {item}"


def _approval_scenario() -> Scenario:
    both = (SimToolCall("effect", {"item": "a"}), SimToolCall("payout", {"item": "b"}))
    return Scenario(steps=(SimStep(tool_calls=both),), final="paid")


#: One reply calls ``effect`` (runs at once) and ``payout`` (waits for a human).
approvals = Agent(
    "approvals", SimulatedModel(_approval_scenario()), "Pay.", [effect, payout], max_steps=3
)

#: The same, with a deadline that keeps counting while it waits (2 s).
approvals_short = Agent(
    "approvals_short",
    SimulatedModel(_approval_scenario()),
    "Pay.",
    [effect, payout],
    max_steps=3,
    deadline_s=2.0,
)


#: What ``talky`` answers, token by token.
TALKY_ANSWER = (
    "Your order A-1 left our warehouse in Lyon on Monday morning and the carrier "
    "expects to deliver it on Thursday before noon."
)


def talky() -> Agent:
    """One tool step, then a long answer streamed at about 100 tokens a second."""
    from podium import LatencyModel

    return Agent(
        "talky",
        SimulatedModel(
            Scenario.react("effect", {"item": "A-1"}, tool_steps=1, final=TALKY_ANSWER),
            latency=LatencyModel(ttft_s=0.02, per_token_s=0.01),
        ),
        "You track orders.",
        [effect],
    )


#: What ``long_talky`` answers, one token a word (about 100 of them).
LONG_ANSWER = " ".join(
    f"Parcel {i} of your order left the Lyon warehouse and reaches you on day {i % 7}."
    for i in range(7)
)


def long_talky() -> Agent:
    """One tool step, then ``LONG_ANSWER`` streamed for about eight seconds: long enough
    for a test to start a second worker while the first one is still talking."""
    from podium import LatencyModel

    return Agent(
        "long_talky",
        SimulatedModel(
            Scenario.react("effect", {"item": "A-1"}, tool_steps=1, final=LONG_ANSWER),
            latency=LatencyModel(ttft_s=0.02, per_token_s=0.08),
        ),
        "You track orders.",
        [effect],
    )


#: A parent whose child run (``crasher``) kills its worker: a crash loop the queue ends by
#: dead-lettering the parent.
crash_team = Agent(
    "crash_team",
    SimulatedModel(Scenario(
        steps=(SimStep(tool_calls=(SimToolCall("crasher", {"input": "go"}),)),),
        final="never",
    )),
    "Delegate.",
    [crasher.as_tool()],
    max_steps=3,
)


#: ``approvals``, then a step that calls ``effect`` again: it runs on after the decision for
#: ``PODIUM_TEST_TOOL_DELAY`` (a run to cancel once a human has approved its call).
approvals_then_more = Agent(
    "approvals_then_more",
    SimulatedModel(Scenario(
        steps=(
            SimStep(tool_calls=(SimToolCall("effect", {"item": "a"}),
                                SimToolCall("payout", {"item": "b"}))),
            SimStep(tool_calls=(SimToolCall("effect", {"item": "c"}),)),
        ),
        final="paid and more",
    )),
    "Pay, then more.",
    [effect, payout],
    max_steps=4,
)



def _asks_the_client(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    """Calls the client's ``get_weather`` (and ``effect``, its own); then says what the
    client's tool returned."""
    if messages[-1].role == "tool":
        said = [m.content for m in messages if m.role == "tool" and m.name == "get_weather"]
        return f"The client says: {said[-1]}"
    return tool_call_reply(("get_weather", {"city": "Oslo"}), ("effect", {"item": "w"}))


#: Calls a client tool (``get_weather``, which the request brings) and its own ``effect``.
client_weather = Agent(
    "client_weather", FunctionModel(_asks_the_client), "You report.", [effect], max_steps=4
)
