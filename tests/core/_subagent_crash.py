"""A parent run with two child runs, SIGKILLed by a test while one child hangs, then resumed.

    python _subagent_crash.py DB LOG RUN_ID first|resume

``work`` appends ``work <idempotency key>`` to LOG per execution; ``block`` hangs in
``first`` mode (the test kills the process there). An observer logs ``ended <run id>``
when a run's end is journaled. The final record is printed as JSON.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import msgspec

from podium import Agent, Engine, Scenario, SimStep, SimToolCall, SimulatedModel, ToolContext, tool
from podium.engine.records import RunFinished
from podium.store.sqlite import SQLiteRunStore

DB, LOG, RUN_ID, MODE = sys.argv[1:5]


def log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@tool(side_effects=True)
def work(item: str, ctx: ToolContext) -> str:
    """Work on an item.

    Args:
        item: The item.
    """
    log(f"work {ctx.idempotency_key}")
    return f"worked on {item}"


@tool(timeout=None)
async def block(ctx: ToolContext) -> str:
    """Hang (in the first process) in child 1's second step."""
    log(f"block {MODE}")
    if MODE == "first":
        await asyncio.Event().wait()
    return "unblocked"


def work_on(item: str) -> SimToolCall:
    return SimToolCall("work", {"item": item})


quick = Agent("quick", SimulatedModel(Scenario.react("work", {"item": "q"}, tool_steps=2)),
              tools=[work])
slow = Agent(
    "slow",
    SimulatedModel(Scenario(steps=(SimStep(tool_calls=(work_on("s"),)),
                                   SimStep(tool_calls=(SimToolCall("block"),))))),
    tools=[work, block],
)
lead = Agent(
    "lead",
    SimulatedModel(Scenario(steps=(
        SimStep(tool_calls=(SimToolCall("quick", {"input": "a"}),
                            SimToolCall("slow", {"input": "b"}))),
        SimStep(tool_calls=(work_on("after"),)),
    ), final="all done")),
    tools=[quick.as_tool(), slow.as_tool(), work],
)


def observer(run_id: str, entry: Any) -> None:
    if isinstance(entry, RunFinished):
        log(f"ended {run_id}")


async def main() -> None:
    async with SQLiteRunStore(DB) as store, Engine(store, observers=[observer]) as engine:
        if MODE == "resume":
            final = await engine.resume(lead, RUN_ID)
        else:
            final = await engine.run(lead, "go", run_id=RUN_ID)
    print(msgspec.json.encode(final).decode())


if __name__ == "__main__":
    asyncio.run(main())
