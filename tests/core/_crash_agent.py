"""A run that a test kills with SIGKILL at step 3, then resumes.

    python _crash_agent.py DB LOG RUN_ID first|resume|full

``record`` is side-effecting and appends one line per execution to LOG;
``block`` hangs forever in ``first`` mode (the test kills the process
there) and returns at once otherwise. An observer writes ``journaled …``
lines once step 3's ``record`` outcome is durable, so the test knows when
killing can no longer lose it. The final record is printed as JSON.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import msgspec

from podium import Agent, Engine, Scenario, SimStep, SimToolCall, SimulatedModel, ToolContext, tool
from podium.store.sqlite import SQLiteRunStore

DB, LOG, RUN_ID, MODE = sys.argv[1:5]


def log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@tool(side_effects=True)
def record(label: str, ctx: ToolContext) -> str:
    """Record one execution.

    Args:
        label: What to record.
    """
    log(f"record {label} {ctx.idempotency_key}")
    return f"recorded {label}"


@tool(timeout=None)
async def block() -> str:
    """Hang at step 3 on the first run."""
    log(f"block {MODE}")
    if MODE == "first":
        await asyncio.Event().wait()
    return "unblocked"


def rec(label: str) -> SimToolCall:
    return SimToolCall("record", {"label": label})


SCENARIO = Scenario(
    steps=(
        SimStep(tool_calls=(rec("s0"),)),
        SimStep(tool_calls=(rec("s1a"), rec("s1b"))),
        SimStep(tool_calls=(rec("s2"),)),
        SimStep(tool_calls=(rec("s3"), SimToolCall("block"))),
        SimStep(tool_calls=(rec("s4"),)),
    ),
    final="all recorded",
)

agent = Agent("crash", SimulatedModel(SCENARIO), tools=[record, block], max_steps=10)


def observer(run_id: str, entry: Any) -> None:
    results = [getattr(entry, "result", None), *getattr(entry, "results", ())]
    for r in results:
        if r is not None and r.name == "record":
            log(f"journaled {r.content}")


async def main() -> None:
    async with SQLiteRunStore(DB) as store, Engine(store, observers=[observer]) as engine:
        if MODE == "resume":
            final = await engine.resume(agent, RUN_ID)
        else:
            final = await engine.run(agent, "record everything", run_id=RUN_ID)
    print(msgspec.json.encode(final).decode())


if __name__ == "__main__":
    asyncio.run(main())
