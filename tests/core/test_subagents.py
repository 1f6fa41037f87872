"""Sub-agents (``agent.as_tool()``): child runs, their fan-out limit, failures, cancels,
and a parent resumed after its driver stopped mid-child."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from podium import (
    Agent,
    ConfigError,
    Engine,
    Scenario,
    SimStep,
    SimToolCall,
    SimulatedModel,
    ToolContext,
    tool,
)
from podium.engine.children import child_run_id, child_runs
from podium.engine.profile import STEP_PHASES
from podium.engine.records import RunFinished, RunRecord
from podium.examples import research_team
from podium.store.memory import MemoryRunStore

pytestmark = pytest.mark.anyio


class Probe:
    """What the children's tool saw: calls per idempotency key, children in flight."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.running = 0
        self.peak = 0
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()


def team(probe: Probe, children: int, *, limit: int = 4, child_model: SimulatedModel | None = None,
         child_steps: int = 1) -> Agent:
    @tool(side_effects=True, timeout=None)
    async def work(item: str, ctx: ToolContext) -> str:
        """Work on an item.

        Args:
            item: The item.
        """
        probe.running += 1
        probe.peak = max(probe.peak, probe.running)
        probe.entered.set()
        try:
            if probe.gate is not None:
                await probe.gate.wait()
            else:
                await asyncio.sleep(0.01)
        finally:
            probe.running -= 1
        probe.calls[ctx.idempotency_key] += 1
        return f"worked on {item}"

    worker = Agent(
        "worker",
        child_model or SimulatedModel(
            Scenario.react("work", {"item": "x"}, tool_steps=child_steps, final="child done")
        ),
        "Work.",
        [work],
    )
    calls = tuple(SimToolCall("worker", {"input": f"task {i}"}) for i in range(children))
    lead = Agent(
        "lead",
        SimulatedModel(Scenario(steps=(SimStep(tool_calls=calls),), final="all done")),
        "Delegate.",
        [worker.as_tool(description="Do one task")],
        max_parallel_children=limit,
    )
    return lead


async def test_each_call_is_a_child_run_linked_to_its_parent() -> None:
    probe = Probe()
    async with Engine() as engine:
        record = await engine.run(team(probe, 3), "go")
        children = await child_runs(engine.store, record)
    assert record.status == "completed" and record.output == "all done"
    assert [c.run_id for c in children] == [child_run_id(record.run_id, 0, i) for i in range(3)]
    for i, child in enumerate(children):
        assert (child.agent, child.status, child.output) == ("worker", "completed", "child done")
        assert (child.parent_run_id, child.parent_call, child.input) == (
            record.run_id, f"0:{i}", f"task {i}")
        assert child.profile is not None and len(child.profile.steps) == 2  # its own profile
    assert sorted(probe.calls) == sorted(f"{c.run_id}:0:0" for c in children)
    assert record.profile is not None
    tools_ns = record.profile.steps[0].wall_ns[STEP_PHASES.index("tools")]  # the wait
    assert tools_ns >= max(sum(c.profile.steps[0].wall_ns) for c in children if c.profile)


async def test_fan_out_runs_at_most_the_limit_of_children_at_once() -> None:
    probe = Probe()
    async with Engine() as engine:
        record = await engine.run(team(probe, 6, limit=2), "go")
    assert record.status == "completed"
    assert sum(probe.calls.values()) == 6
    assert probe.peak == 2


async def test_a_failed_child_is_an_error_observation_for_its_parent() -> None:
    probe = Probe()
    looping = SimulatedModel(Scenario.react("work", {"item": "x"}, tool_steps=50))
    lead = team(probe, 1, child_model=looping)
    seen: list[str] = []

    def lead_policy(request: object) -> SimStep | str:
        messages = request.messages  # type: ignore[attr-defined]
        tool_results = [m.content for m in messages if m.role == "tool"]
        if not tool_results:
            return SimStep(tool_calls=(SimToolCall("worker", {"input": "loop"}),))
        seen.extend(tool_results)
        return "the worker failed; giving up"

    lead.model = SimulatedModel(lead_policy)
    async with Engine() as engine:
        record = await engine.run(lead, "go")
        (child,) = await child_runs(engine.store, record)
    assert record.status == "completed"
    assert (child.status, child.reason) == ("failed", "max_steps")
    (observation,) = seen
    assert observation.startswith("error: tool 'worker' failed: ChildRunError: sub-agent 'worker'")
    assert "max_steps" in observation


async def test_cancelling_the_parent_cancels_its_children() -> None:
    probe = Probe()
    probe.gate = asyncio.Event()
    async with Engine() as engine:
        record = await engine.create(team(probe, 2), "go")
        task = engine.start(team(probe, 2), record)
        await probe.entered.wait()
        assert engine.cancel(record.run_id)
        ended = await task
        children = await child_runs(engine.store, ended)
    assert ended.status == "cancelled"
    assert [c.status for c in children] == ["cancelled", "cancelled"]
    assert not probe.calls


async def test_a_parent_resumed_reuses_finished_children_and_resumes_the_others() -> None:
    """The driver stops (shutdown) while one child waits and another finished: a resume
    on a fresh engine reuses the finished child and resumes the waiting one, whose finished
    step is not redone."""
    store = MemoryRunStore()
    probe = Probe()
    lead = team(probe, 2, child_steps=2)
    gate = asyncio.Event()
    done_first = asyncio.Event()

    @tool(side_effects=True, timeout=None)
    async def work(item: str, ctx: ToolContext) -> str:
        """Work.

        Args:
            item: The item.
        """
        probe.calls[ctx.idempotency_key] += 1
        if ctx.run_id.endswith(".0.1") and ctx.step == 1 and not gate.is_set():
            done_first.set()
            await asyncio.Event().wait()  # hangs until the driver is stopped
        return f"worked on {item}"

    worker = lead.tools["worker"].agent  # type: ignore[attr-defined]
    worker.tools["work"] = work
    ended_first = asyncio.Event()

    def observe(run_id: str, entry: object) -> None:
        if run_id.endswith(".0.0") and isinstance(entry, RunFinished):
            ended_first.set()

    engine = Engine(store, observers=[observe])
    record = await engine.create(lead, "go")
    task = engine.start(lead, record)
    await done_first.wait()
    await ended_first.wait()
    first_child = child_run_id(record.run_id, 0, 0)
    task.cancel()  # a shutdown, not a cancel: the runs stay `running`
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await store.get(record.run_id)
    assert stored is not None and stored.status == "running"
    gate.set()
    async with Engine(store) as again:
        ended = await again.resume(lead, record.run_id)
        children = await child_runs(store, ended)
    await engine.aclose()
    assert ended.status == "completed"
    assert [c.status for c in children] == ["completed", "completed"]
    # Every call ran once, except the one in flight when the driver stopped (run again).
    second = child_run_id(record.run_id, 0, 1)
    assert probe.calls == Counter({
        f"{first_child}:0:0": 1, f"{first_child}:1:0": 1,
        f"{second}:0:0": 1, f"{second}:1:0": 2,
    })


async def test_calling_an_agent_tool_outside_a_run_is_a_clear_error() -> None:
    from podium.engine.children import run_child
    from podium.tools.tool import ToolContext as Ctx

    with pytest.raises(RuntimeError, match="can only be called by an agent's run"):
        await run_child(research_team.agent, "x", Ctx("run_x", 0, 0, "c"))


def test_parallel_children_limit_is_checked() -> None:
    with pytest.raises(ConfigError, match="max_parallel_children"):
        Agent("a", SimulatedModel(), max_parallel_children=0)


async def test_the_research_team_example_fans_out_then_summarizes() -> None:
    async with Engine() as engine:
        record = await engine.run(research_team.agent, "durability, security and hand-offs?")
        children = await child_runs(engine.store, record)
    assert record.status == "completed"
    assert [c.input for c in children] == ["durability", "security", "hand-offs"]
    assert all(c.status == "completed" for c in children)
    assert record.output is not None and record.output.startswith("Summary of 3 researchers")
    assert all(isinstance(c, RunRecord) for c in children)


@pytest.mark.slow
def test_sigkilled_process_resumes_parent_and_children_on_sqlite(tmp_path: Path) -> None:
    """Embedded: the process dies while child 1 runs and child 0 has finished; the
    restarted process resumes the parent, reuses child 0 and resumes child 1 from its own
    journal: no finished call runs twice."""
    db, log, run_id = tmp_path / "runs.sqlite", tmp_path / "calls.log", "run_team_1"
    script = Path(__file__).with_name("_subagent_crash.py")

    def start(mode: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(script), str(db), str(log), run_id, mode],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    proc = start("first")
    try:
        deadline = time.monotonic() + 60
        while True:  # a subprocess can only be polled
            lines = log.read_text().splitlines() if log.exists() else []
            if "block first" in lines and f"ended {run_id}.0.0" in lines:
                break
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, lines
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    again = start("resume")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    final = msgspec.json.decode(out.strip().splitlines()[-1], type=RunRecord)
    assert (final.status, final.output) == ("completed", "all done")
    work = Counter(line.split()[1] for line in log.read_text().splitlines()
                   if line.startswith("work "))
    assert work == Counter({
        f"{run_id}.0.0:0:0": 1, f"{run_id}.0.0:1:0": 1,  # child 0: finished, reused
        f"{run_id}.0.1:0:0": 1,  # child 1: its finished step not redone
        f"{run_id}:1:0": 1,
    })
    lines = log.read_text().splitlines()
    assert lines.count(f"ended {run_id}.0.0") == 1  # never started again
    assert "block resume" in lines


def _asking_team(kind: str, seen: list[str], paid: Counter[str]) -> Agent:
    """``lead`` asks ``clerk`` (a sub-agent) to pay; clerk's ``pay`` needs a human's
    approval (``kind="approval"``) or asks a question (``"interrupt"``), which no parent
    can give. ``seen`` gets what lead's model read; ``paid`` counts pay's executions."""
    from podium import FunctionModel, Interrupt, tool_call_reply

    @tool(side_effects=True, requires_approval=kind == "approval")
    async def pay(amount: int, ctx: ToolContext) -> str:
        """Pay.

        Args:
            amount: How much.
        """
        paid[ctx.idempotency_key] += 1
        if kind == "interrupt":
            raise Interrupt("from which account?")
        return f"paid {amount}"

    def clerk_reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("pay", '{"amount": 500}'))
        return "clerk done"

    def lead_reply(messages, request):  # type: ignore[no-untyped-def]
        if request.step == 0:
            return tool_call_reply(("clerk", '{"input": "pay 500"}'))
        seen.extend(m.content for m in messages if m.role == "tool")
        return "lead done"

    clerk = Agent("clerk", FunctionModel(clerk_reply), "Pay.", [pay])
    return Agent("lead", FunctionModel(lead_reply), "Delegate.", [clerk.as_tool()])


@pytest.mark.parametrize("kind", ["approval", "interrupt"])
async def test_a_child_that_would_wait_for_a_human_fails_with_subagent_waiting(
    kind: str, tmp_path: Path
) -> None:
    """A parent cannot answer its child's approval or question, and no one else is asked
    (the child would wait with the parent gone on): the child ends ``failed``, reason
    ``subagent_waiting``, and the parent's model reads why. Nothing is left waiting, and a
    resumed parent reuses the failed child."""
    from podium.store.sqlite import SQLiteRunStore

    seen: list[str] = []
    paid: Counter[str] = Counter()
    lead = _asking_team(kind, seen, paid)
    async with SQLiteRunStore(str(tmp_path / "runs.sqlite")) as store, Engine(store) as engine:
        record = await asyncio.wait_for(engine.run(lead, "go"), 10)
        (child,) = await child_runs(store, record)
        assert await engine.pending_approvals() == []
        again = await engine.resume(lead, record.run_id)  # ended: nothing to redo
    assert (record.status, record.output) == ("completed", "lead done")
    assert (child.status, child.reason) == ("failed", "subagent_waiting")
    assert child.error is not None and "pay" in child.error
    (observation,) = seen
    assert "ChildRunError" in observation and "subagent_waiting" in observation
    assert paid == ({} if kind == "approval" else {f"{child.run_id}:0:0": 1})
    assert again.status == "completed"


async def test_a_child_left_waiting_by_an_older_version_fails_when_its_parent_resumes() -> None:
    """A child stored ``waiting`` (parked before children refused to wait) is ended
    ``failed``, ``subagent_waiting``, when its resumed parent reaches it."""
    import time as _time

    from podium.engine.records import ApprovalRequested, ModelTurn, Waiting
    from podium.messages import Message, ToolCall

    seen: list[str] = []
    paid: Counter[str] = Counter()
    lead = _asking_team("approval", seen, paid)
    store = MemoryRunStore()
    now = _time.time()
    parent = RunRecord("run_old", "lead", "go", status="running", started_at=now)
    await store.create(parent)
    await store.append(parent.run_id, [ModelTurn(0, now, Message(
        "assistant", "", (ToolCall("call_0", "clerk", '{"input": "pay 500"}'),)))])
    child = RunRecord(child_run_id("run_old", 0, 0), "clerk", "pay 500", status="waiting",
                      started_at=now, parent_run_id="run_old", parent_call="0:0",
                      waiting=Waiting(now, None, "deadline", False))
    await store.create(child)
    call = ToolCall("call_0", "pay", '{"amount": 500}')
    await store.append(child.run_id, [
        ModelTurn(0, now, Message("assistant", "", (call,))),
        ApprovalRequested(0, now, 0, "call_0", "pay", '{"amount": 500}'),
    ])
    async with Engine(store) as engine:
        ended = await asyncio.wait_for(engine.resume(lead, "run_old"), 10)
        stored = await store.get(child.run_id)
        assert await engine.pending_approvals() == []
    assert ended.status == "completed"
    assert stored is not None and (stored.status, stored.reason) == ("failed", "subagent_waiting")
    assert "subagent_waiting" in seen[0]
    assert not paid
