"""Agents the gateway tests serve (importable by a `podium serve` subprocess)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from podium import (
    Agent,
    FunctionModel,
    LatencyModel,
    Scenario,
    SimStep,
    SimToolCall,
    SimulatedModel,
    tool,
    tool_call_reply,
)
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"Result for {query}: 42 items found."


@tool
async def burn(query: str) -> str:
    """Burn CPU on the event loop for 20 ms (a badly written tool, on purpose).

    Args:
        query: Ignored.
    """
    end = time.perf_counter() + 0.02
    while time.perf_counter() < end:
        pass
    return "burnt"


def react() -> Agent:
    """Two instant tool steps, then the answer."""
    return Agent(
        "react",
        SimulatedModel(Scenario.react("lookup", {"query": "podium"}, tool_steps=2, final="42.")),
        "You look things up.",
        [lookup],
        max_steps=6,
    )


def slow() -> Agent:
    """Three steps of 30 ms simulated model latency each (about 0.1 s a run)."""
    return Agent(
        "slow",
        SimulatedModel(
            Scenario.react("lookup", {"query": "slow"}, tool_steps=2, final="slow answer"),
            latency=LatencyModel(ttft_s=0.03),
        ),
        "You are slow.",
        [lookup],
        max_steps=6,
    )


def sleepy() -> Agent:
    """One step that takes 30 s: stays running until cancelled."""
    return Agent(
        "sleepy",
        SimulatedModel(Scenario(final="never"), latency=LatencyModel(ttft_s=30.0)),
        "You take your time.",
        max_steps=2,
    )


def burner() -> Agent:
    """Each run burns 4 × 20 ms of CPU on the loop."""
    return Agent(
        "burner",
        SimulatedModel(Scenario.react("burn", {"query": "x"}, tool_steps=4)),
        "You burn CPU.",
        [burn],
        max_steps=6,
    )


#: What ``talky`` and ``chatty`` answer: many tokens, streamed at about 100 a second.
TALKY_ANSWER = (
    "Your order A-1 left our warehouse in Lyon on Monday morning and the carrier "
    "expects to deliver it on Thursday before noon."
)


def talky(say: str = "") -> Agent:
    """Two tool steps (saying ``say``), then a long answer, token by token (about 0.4 s)."""
    return Agent(
        "chatty" if say else "talky",
        SimulatedModel(
            Scenario(
                steps=(SimStep((SimToolCall("lookup", {"query": "A-1"}),), say),) * 2,
                final=TALKY_ANSWER,
            ),
            latency=LatencyModel(ttft_s=0.02, per_token_s=0.01),
        ),
        "You track orders.",
        [lookup],
        max_steps=6,
    )


def chatty() -> Agent:
    """``talky``, whose tool steps say something too."""
    return talky("Let me check.")


@tool
def effect(query: str) -> str:
    """Record a side effect in ``$PODIUM_TEST_EFFECTS``; the second call holds while
    ``$PODIUM_TEST_HOLD`` exists (so a test can kill the server in the middle of it).
    A plain function: the executor runs it on its thread pool, off the loop.

    Args:
        query: Ignored.
    """
    import os
    from pathlib import Path

    log = Path(os.environ["PODIUM_TEST_EFFECTS"])
    n = log.read_text().count("end") if log.exists() else 0
    with log.open("a") as out:
        out.write(f"start {n}\n")
    hold = Path(os.environ["PODIUM_TEST_HOLD"])
    while n == 1 and hold.exists():
        time.sleep(0.02)
    with log.open("a") as out:
        out.write(f"end {n}\n")
    return f"effect {n}"


@tool
def die(query: str) -> str:
    """Record a call in ``$PODIUM_TEST_EFFECTS``, then end the process at once, as an
    out-of-memory kill would (nothing is cleaned up, nothing is journaled).

    Args:
        query: Ignored.
    """
    import os
    from pathlib import Path

    with Path(os.environ["PODIUM_TEST_EFFECTS"]).open("a") as out:
        out.write("start\n")
    os._exit(3)


def dies() -> Agent:
    """A run whose one tool call ends the process driving it (see :func:`die`)."""
    return Agent(
        "dies",
        SimulatedModel(Scenario.react("die", {"query": "q"}, tool_steps=1, final="never")),
        "You end things.",
        [die],
        max_steps=3,
    )


def verbose() -> Agent:
    """An answer of 5 MB: its events fill any socket's buffers."""
    return Agent(
        "verbose",
        SimulatedModel(Scenario(final="word " * 1_000_000)),
        "You say a lot.",
        max_steps=2,
    )


def effects() -> Agent:
    """Two tool steps with side effects (see :func:`effect`), then the answer."""
    return Agent(
        "effects",
        SimulatedModel(Scenario.react("effect", {"query": "q"}, tool_steps=2, final="done")),
        "You make effects.",
        [effect],
        max_steps=4,
    )


def _asks_the_client(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    """Calls the client's ``get_weather`` (offered beside ``lookup``) for the user's city,
    with ``lookup`` in the same reply; answers with what the client's tool returned."""
    offered = {t.name for t in request.tools}
    last = messages[-1]
    if last.role == "tool":
        said = [m.content for m in messages if m.role == "tool" and m.name == "get_weather"]
        return f"The client says: {said[-1] if said else last.content}"
    if "get_weather" not in offered:
        return f"no client tool offered; tools: {sorted(offered)}"
    city = last.content.rsplit(" ", 1)[-1].strip("?") or "Paris"
    return tool_call_reply(("get_weather", {"city": city}), ("lookup", {"query": city}),
                           content="Let me check.")


def weatherman() -> Agent:
    """Calls the client's ``get_weather`` tool and its own ``lookup`` in one step, then
    answers with the client's output."""
    return Agent("weatherman", FunctionModel(_asks_the_client), "You report the weather.",
                 [lookup], max_steps=4)


def _heard(messages: Sequence[Message], request: ModelRequest) -> str:
    """Says every user message of its context: what the conversation holds."""
    return "heard: " + " | ".join(m.content for m in messages if m.role == "user")


def memory() -> Agent:
    """Answers with every user message it has in context (one step)."""
    return Agent("memory", FunctionModel(_heard), "You remember.")
