"""A run cut off mid-step resumes on a fresh engine without re-running completed tool calls."""

from __future__ import annotations

import asyncio
import pathlib
from collections import Counter
from typing import Any

import pytest

from podium import (
    Agent,
    Engine,
    MemoryRunStore,
    Scenario,
    SimStep,
    SimToolCall,
    SimulatedModel,
    ToolContext,
    tool,
)

pytestmark = pytest.mark.anyio


class Crashable:
    """Tools whose ``gate`` blocks on its first call, so a test can cut the run off there."""

    def __init__(self) -> None:
        self.executions: Counter[str] = Counter()
        self.keys: list[str] = []
        self.gate_started = asyncio.Event()
        self.first_gate = True

        @tool
        async def fetch(n: int) -> str:
            """Fetch item n.

            Args:
                n: Which item.
            """
            self.executions[f"fetch {n}"] += 1
            return f"item {n}"

        @tool(timeout=None, side_effects=True)
        async def gate(ctx: ToolContext) -> str:
            """Blocks forever the first time."""
            self.executions["gate"] += 1
            self.keys.append(ctx.idempotency_key)
            if self.first_gate:
                self.first_gate = False
                self.gate_started.set()
                await asyncio.Event().wait()
            return "gate open"

        self.tools = [fetch, gate]


async def crash_and_resume(scenario: Scenario, journaled: Any) -> tuple[Crashable, Any, Any]:
    """Run until ``gate`` blocks and ``journaled(entry)`` was seen, kill the task, resume."""
    tools = Crashable()
    agent = Agent("t", SimulatedModel(scenario), tools=tools.tools, max_steps=10)
    store = MemoryRunStore()
    seen = asyncio.Event()

    def observer(run_id: str, entry: Any) -> None:
        if journaled(entry):
            seen.set()

    async with Engine(store, observers=[observer]) as first:
        record = await first.create(agent, "go")
        task = first.start(agent, record)
        await tools.gate_started.wait()
        await seen.wait()
        task.cancel()  # not engine.cancel: a crash, the run stays `running`
        with pytest.raises(asyncio.CancelledError):
            await task
    crashed = await store.get(record.run_id)
    assert crashed is not None and crashed.status == "running"
    async with Engine(store) as second:
        resumed = await second.resume(agent, record.run_id)
    return tools, resumed, await store.journal(record.run_id)


def is_result(name: str, step: int) -> Any:
    def check(entry: Any) -> bool:
        results = [getattr(entry, "result", None), *getattr(entry, "results", ())]
        return getattr(entry, "step", None) == step and any(
            r is not None and r.name == name for r in results
        )

    return check


async def test_resume_after_crash_in_a_parallel_step() -> None:
    scenario = Scenario(
        steps=(
            SimStep(tool_calls=(SimToolCall("fetch", {"n": 1}),)),
            SimStep(tool_calls=(SimToolCall("fetch", {"n": 2}), SimToolCall("gate"))),
            SimStep(tool_calls=(SimToolCall("fetch", {"n": 3}),)),
        ),
        final="finished",
    )
    tools, record, _ = await crash_and_resume(scenario, is_result("fetch", 1))
    assert (record.status, record.output, record.steps) == ("completed", "finished", 4)
    assert tools.executions == Counter({"fetch 1": 1, "fetch 2": 1, "fetch 3": 1, "gate": 2})
    # The re-run call keeps its idempotency key.
    assert tools.keys == [f"{record.run_id}:1:1"] * 2
    assert record.profile is not None
    assert [s.step for s in record.profile.steps] == [0, 1, 2, 3]


async def test_resume_after_crash_in_a_side_effecting_step() -> None:
    scenario = Scenario(
        steps=(
            SimStep(tool_calls=(SimToolCall("fetch", {"n": 1}),)),
            SimStep(tool_calls=(SimToolCall("gate"),)),
        ),
        final="finished",
    )
    # A side-effecting call's model turn is durable before the call runs.
    tools, record, _ = await crash_and_resume(scenario, lambda e: getattr(e, "step", None) == 1)
    assert (record.status, record.output) == ("completed", "finished")
    assert tools.executions == Counter({"fetch 1": 1, "gate": 2})
    assert tools.keys == [f"{record.run_id}:1:0"] * 2


async def test_resuming_a_finished_run_does_nothing() -> None:
    tools = Crashable()
    tools.first_gate = False
    agent = Agent(
        "t", SimulatedModel(Scenario.react("fetch", {"n": 1}, tool_steps=2)), tools=tools.tools
    )
    store = MemoryRunStore()
    async with Engine(store) as engine:
        record = await engine.run(agent, "go")
        again = await engine.resume(agent, record.run_id)
    assert again.status == "completed"
    assert tools.executions == Counter({"fetch 1": 2})


async def test_resume_refuses_a_run_of_another_agent(tmp_path: pathlib.Path) -> None:
    """Driven by another agent, the run's journaled calls were unknown tools (a human's
    approval thrown away) and it ended completed with that agent's answer (found from the
    outside with `podium run research-team --resume` on a refunds run)."""
    from podium.errors import ConfigError
    from podium.examples import refunds, research_team
    from podium.store.sqlite import SQLiteRunStore

    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    async with store, Engine(store) as engine:
        record = await engine.run(refunds.agent, "Refund 250 on order A-1001")
        assert record.status == "waiting"
        with pytest.raises(ConfigError, match="belongs to agent 'refunds', not 'research-team'"):
            await engine.resume(research_team.agent, record.run_id)
        after = await store.get(record.run_id)
    assert after is not None and after.status == "waiting" and after.version == record.version
