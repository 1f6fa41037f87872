"""The agent ``bench_chaos.py`` serves: every step makes parallel side-effecting tool calls.

Each executed call appends ``<idempotency key> <pid> <start> <end>`` (wall-clock
seconds) to the file named by ``PODIUM_CHAOS_EFFECTS`` in one ``write`` — the
external system whose effects the chaos run counts. The line is written when
the call's effect happens, so a worker SIGKILLed after it still leaves it.
"""

from __future__ import annotations

import asyncio
import os
import time

from podium import Agent, Scenario, SimulatedModel, ToolContext, tool

TOOL_STEPS = int(os.environ.get("PODIUM_CHAOS_TOOL_STEPS", "4"))
PARALLEL = int(os.environ.get("PODIUM_CHAOS_PARALLEL", "4"))
TOOL_DELAY_S = float(os.environ.get("PODIUM_CHAOS_TOOL_DELAY", "0.05"))


@tool(side_effects=True)
async def charge(item: str, ctx: ToolContext) -> str:
    """Charge for an item (an external, counted side effect).

    Args:
        item: What to charge for.
    """
    start = time.time()
    await asyncio.sleep(TOOL_DELAY_S)
    path = os.environ.get("PODIUM_CHAOS_EFFECTS")
    if path:
        line = f"{ctx.idempotency_key} {os.getpid()} {start:.6f} {time.time():.6f}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one write: lines never interleave
        finally:
            os.close(fd)
    return f"charged {item}"


agent = Agent(
    "chaos",
    SimulatedModel(Scenario.react("charge", {"item": "x"}, tool_steps=TOOL_STEPS,
                                  parallel=PARALLEL)),
    "Charge for the item.",
    [charge],
    max_steps=TOOL_STEPS + 2,
)
