"""The benchmark's ReAct agent: six ``lookup`` steps, then an answer.

    podium run react "What is Podium?"

It runs on the simulated model with a small, jittered latency, so it shows
the shape of a step (and its profile) without any backend.
"""

from __future__ import annotations

from podium import Agent, LatencyModel, Scenario, SimulatedModel, tool

__all__ = ("TOOL_STEPS", "agent", "lookup")

TOOL_STEPS = 6


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"Result for {query}: 42 items found."


agent = Agent(
    "react",
    SimulatedModel(
        Scenario.react(
            "lookup",
            {"query": "podium"},
            tool_steps=TOOL_STEPS,
            final="Podium: 42 items found in each of 6 lookups.",
        ),
        latency=LatencyModel(ttft_s=0.02, per_token_s=0.001, jitter="lognormal"),
        seed=0,
    ),
    "You are a helpful research agent. Use the lookup tool.",
    [lookup],
    max_steps=TOOL_STEPS + 2,
)
