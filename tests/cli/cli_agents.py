"""Agents the CLI tests run through the real ``podium`` command."""

from __future__ import annotations

import msgspec

from podium import Agent, LatencyModel, Scenario, SimulatedModel, tool


@tool(timeout=5.0)
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"{query}: found"


def slow() -> Agent:
    """A run that takes minutes: long enough to be interrupted with Ctrl-C."""
    model = SimulatedModel(
        Scenario.react("lookup", {"query": "podium"}, tool_steps=500),
        latency=LatencyModel(ttft_s=0.2, per_token_s=0.0),
    )
    return Agent("slow", model, "You look things up.", [lookup], max_steps=600)


def plain_lookup(query: str) -> str:
    return query


def undecorated() -> Agent:
    """A common mistake: a plain function in ``tools``."""
    model = SimulatedModel(Scenario.react("plain_lookup", {"query": "x"}))
    return Agent("undecorated", model, "", [plain_lookup])  # type: ignore[list-item]


class Ticket(msgspec.Struct):
    """A support ticket, the answer of the declared structured agents in the CLI tests."""

    title: str
    priority: int
    urgent: bool


def broken() -> Agent:
    """A factory that fails: its error is one line, not the factory's traceback."""
    raise RuntimeError("no model configured")


def not_an_agent() -> str:
    return "an agent, honest"


NOT_AN_AGENT = 42


async def async_factory() -> Agent:
    """An ``async def`` factory: refused with the fix, no "never awaited" warning after it."""
    raise AssertionError("never awaited")
