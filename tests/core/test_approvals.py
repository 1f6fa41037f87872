"""Human approval and interrupts, embedded: a run parks ``waiting``, a human decides, any
engine resumes it from its journal with no completed tool call repeated (memory and SQLite)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from podium import (
    Agent,
    DecisionError,
    Engine,
    FunctionModel,
    Interrupt,
    MemoryRunStore,
    ModelRequest,
    ModelResponse,
    RunStore,
    tool,
    tool_call_reply,
)
from podium.engine import approvals
from podium.engine.records import ApprovalDecided, ApprovalRequested, RunFinished
from podium.messages import Message
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio


class Refunds:
    """An agent whose reply calls ``lookup`` (no approval) and ``refund`` (approval over 100)."""

    def __init__(self, amount: int = 250, **agent_options: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.refunded: list[int] = []
        self.seen: list[str] = []  # what the model read back for each tool call

        @tool
        async def lookup(order_id: str) -> str:
            """Look up an order.

            Args:
                order_id: The order.
            """
            self.calls["lookup"] += 1
            return f"order {order_id}: paid 250"

        @tool(side_effects=True, requires_approval=lambda args, ctx: args.amount > 100)
        async def refund(order_id: str, amount: int) -> str:
            """Refund an order.

            Args:
                order_id: The order.
                amount: How much.
            """
            self.calls["refund"] += 1
            self.refunded.append(amount)
            return f"refunded {amount} on {order_id}"

        def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
            if request.step == 0:
                return tool_call_reply(
                    ("lookup", '{"order_id": "A-1"}'),
                    ("refund", msgspec.json.encode({"order_id": "A-1", "amount": amount}).decode()),
                )
            self.seen = [m.content for m in messages if m.role == "tool"]
            return "done: " + " | ".join(self.seen)

        self.agent = Agent(
            "refunds", FunctionModel(reply), tools=[lookup, refund], **agent_options
        )


class Asker:
    """An agent whose tool asks the human a question (raises Interrupt) before acting."""

    def __init__(self) -> None:
        self.calls = 0

        @tool
        def transfer(amount: int) -> str:
            """Transfer money.

            Args:
                amount: How much.
            """
            self.calls += 1
            raise Interrupt(f"From which account should {amount} go?")

        def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
            if request.step == 0:
                return tool_call_reply(("transfer", '{"amount": 5}'))
            return "the human said: " + messages[-1].content

        self.agent = Agent("asker", FunctionModel(reply), tools=[transfer])


StoreFactory = Callable[[], RunStore]


@pytest.fixture(params=["memory", "sqlite"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """A factory of stores that all see the same runs: a new engine on one is a new worker."""
    opened: list[RunStore] = []
    memory = MemoryRunStore()

    def make() -> RunStore:
        store: RunStore = (
            memory if request.param == "memory" else SQLiteRunStore(str(tmp_path / "runs.db"))
        )
        opened.append(store)
        return store

    yield make
    for store in {id(s): s for s in opened}.values():
        await store.aclose()


async def test_approve_runs_the_call_once_on_another_engine(stores: StoreFactory) -> None:
    refunds = Refunds()
    async with Engine(stores()) as first:
        record = await first.run(refunds.agent, "Refund A-1")
        assert record.status == "waiting"
        assert record.waiting is not None and record.waiting.reason == "deadline"
        pending = await first.pending_approvals()
        assert [(p.tool, p.call_id, p.kind) for p in pending] == [("refund", "call_1", "approval")]
        assert msgspec.json.decode(pending[0].arguments) == {"order_id": "A-1", "amount": 250}
        assert refunds.calls == {"lookup": 1}  # the call that needed no one ran before the wait
        decided = await first.decide(record.run_id, "call_1", approve=True, by="alice")
        assert decided.status == "queued"
    async with Engine(stores()) as second:  # any worker resumes it, from its journal
        done = await second.resume(refunds.agent, record.run_id)
        journal = [e for _, e in await second.store.journal(record.run_id)]
    assert done.status == "completed", done.error
    assert refunds.calls == {"lookup": 1, "refund": 1}
    assert refunds.seen == ["order A-1: paid 250", "refunded 250 on A-1"]
    decision = next(e for e in journal if isinstance(e, ApprovalDecided))
    assert (decision.call_id, decision.decision, decision.by) == ("call_1", "approve", "alice")
    assert decision.ts > 0


async def test_reject_gives_the_model_the_message(stores: StoreFactory) -> None:
    refunds = Refunds()
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
        await engine.decide(record.run_id, "call_1", approve=False, message="refunds are frozen")
        done = await engine.resume(refunds.agent, record.run_id)
    assert done.status == "completed"
    assert refunds.calls == {"lookup": 1}
    assert refunds.seen == ["order A-1: paid 250", "refunds are frozen"]


async def test_approve_with_edited_arguments(stores: StoreFactory) -> None:
    refunds = Refunds()
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
        with pytest.raises(DecisionError) as bad:
            await engine.decide(
                record.run_id, "call_1", approve=True, arguments={"amount": "lots"},
                agent=refunds.agent,
            )
        assert bad.value.status == 422 and "amount" in str(bad.value)
        await engine.decide(
            record.run_id, "call_1", approve=True,
            arguments={"order_id": "A-1", "amount": 99}, agent=refunds.agent,
        )
        done = await engine.resume(refunds.agent, record.run_id)
    assert done.status == "completed"
    assert refunds.refunded == [99]


async def test_second_decision_is_a_conflict(stores: StoreFactory) -> None:
    refunds = Refunds()
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
        with pytest.raises(DecisionError) as unknown:
            await engine.decide(record.run_id, "call_9", approve=True)
        assert unknown.value.status == 404
        with pytest.raises(DecisionError) as wrong_kind:
            await engine.decide(record.run_id, "call_1", answer="yes")
        assert wrong_kind.value.status == 422
        await engine.decide(record.run_id, "call_1", approve=True)
        with pytest.raises(DecisionError) as again:
            await engine.decide(record.run_id, "call_1", approve=False)
        assert again.value.status == 409
        with pytest.raises(DecisionError) as missing:
            await engine.decide("run_nope", "call_1", approve=True)
        assert missing.value.status == 404


async def test_a_call_the_policy_lets_through_never_waits(stores: StoreFactory) -> None:
    refunds = Refunds(amount=50)
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
    assert record.status == "completed"
    assert refunds.refunded == [50]


async def test_interrupt_answer_becomes_the_result(stores: StoreFactory) -> None:
    asker = Asker()
    async with Engine(stores()) as engine:
        record = await engine.run(asker.agent, "Move 5")
        assert record.status == "waiting"
        (pending,) = await engine.pending_approvals(record.run_id)
        assert pending.kind == "interrupt"
        assert pending.question == "From which account should 5 go?"
        with pytest.raises(DecisionError):
            await engine.decide(record.run_id, pending.call_id, approve=True)
        await engine.decide(record.run_id, pending.call_id, answer="savings")
    async with Engine(stores()) as other:
        done = await other.resume(asker.agent, record.run_id)
    assert done.status == "completed"
    assert done.output == "the human said: savings"
    assert asker.calls == 1  # the tool is not called again: its answer is the result


async def test_deadline_counts_while_waiting(stores: StoreFactory) -> None:
    refunds = Refunds(deadline_s=30.0)
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
        assert await engine.sweep_waiting() == []  # not yet
        ended = await engine.sweep_waiting(now=time.time() + 31)
        assert [r.run_id for r in ended] == [record.run_id]
        stored = await engine.store.get(record.run_id)
        assert stored is not None
        assert (stored.status, stored.reason) == ("failed", "deadline")
        entries = [e for _, e in await engine.store.journal(record.run_id)]
        assert isinstance(entries[-1], RunFinished)
        with pytest.raises(DecisionError) as late:
            await engine.decide(record.run_id, "call_1", approve=True)
        assert late.value.status == 409
    assert refunds.calls == {"lookup": 1}


async def test_paused_deadline_and_approval_timeout(stores: StoreFactory) -> None:
    refunds = Refunds(deadline_s=30.0, deadline_while_waiting="pause", approval_timeout_s=3600)
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
        assert record.waiting is not None
        assert record.waiting.reason == "approval_timeout" and record.waiting.pause
        assert await engine.sweep_waiting(now=time.time() + 600) == []  # the deadline paused
        decided = await engine.decide(record.run_id, "call_1", approve=True)
        assert decided.paused_s > 0 and decided.waiting is None
        done = await engine.resume(refunds.agent, record.run_id)
        assert done.status == "completed"
        other = await engine.run(refunds.agent, "Refund A-2")
        ended = await engine.sweep_waiting(now=time.time() + 3601)
        assert [(r.run_id, r.reason) for r in ended] == [(other.run_id, "approval_timeout")]


async def test_a_waiting_run_is_cancelled_in_the_store(stores: StoreFactory) -> None:
    refunds = Refunds()
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
        assert await engine.cancel_stored(record)
        stored = await engine.store.get(record.run_id)
        assert stored is not None and stored.status == "cancelled"
        with pytest.raises(DecisionError) as late:
            await engine.decide(record.run_id, "call_1", approve=True)
        assert late.value.status == 409
        assert await engine.pending_approvals() == []


async def test_resuming_an_undecided_run_keeps_it_waiting(stores: StoreFactory) -> None:
    refunds = Refunds()
    async with Engine(stores()) as engine:
        record = await engine.run(refunds.agent, "Refund A-1")
        again = await engine.resume(refunds.agent, record.run_id)
        assert again.status == "waiting"
        journal = [e for _, e in await engine.store.journal(record.run_id)]
    assert sum(isinstance(e, ApprovalRequested) for e in journal) == 1
    assert refunds.calls == {"lookup": 1}


async def test_agents_without_approval_never_reach_the_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pay only for what you use: the engine tests one attribute per step, nothing more."""

    @tool
    async def plain(x: int) -> str:
        """Echo.

        Args:
            x: A number.
        """
        return str(x)

    def boom(*args: object) -> Any:
        raise AssertionError("the approval gate ran for an agent that has none")

    monkeypatch.setattr(approvals, "gate", boom)
    monkeypatch.setattr(approvals, "requests_for", boom)

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("plain", '{"x": 1}'))
        if request.step == 1:
            return tool_call_reply(("plain", '{"x": 1}'), ("plain", '{"x": 2}'))
        return "ok"

    agent = Agent("plain", FunctionModel(reply), tools=[plain])
    assert agent.gated is False and plain.approval is None
    record = await agent.run("go")
    assert record.status == "completed"


async def test_interrupt_among_several_calls(stores: StoreFactory) -> None:
    """The other call of the reply runs once (journaled as it finishes); the question waits."""
    ran: Counter[str] = Counter()

    @tool
    async def note(x: int) -> str:
        """Note.

        Args:
            x: A number.
        """
        ran["note"] += 1
        return f"noted {x}"

    @tool
    async def confirm(x: int) -> str:
        """Confirm with the user.

        Args:
            x: A number.
        """
        ran["confirm"] += 1
        raise Interrupt(f"Really {x}?")

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("note", '{"x": 1}'), ("confirm", '{"x": 2}'))
        return " | ".join(m.content for m in messages if m.role == "tool")

    agent = Agent("both", FunctionModel(reply), tools=[note, confirm])
    async with Engine(stores()) as engine:
        record = await engine.run(agent, "go")
        assert record.status == "waiting"
        (pending,) = await engine.pending_approvals(record.run_id)
        assert (pending.tool, pending.question) == ("confirm", "Really 2?")
        await engine.decide(record.run_id, pending.call_id, answer="yes")
    async with Engine(stores()) as other:
        done = await other.resume(agent, record.run_id)
    assert done.output == "noted 1 | yes"
    assert ran == {"note": 1, "confirm": 1}


async def test_a_question_journaled_before_a_crash_parks_the_run_on_resume(
    stores: StoreFactory,
) -> None:
    """The worker died after the asking call's outcome was journaled but before the run was
    parked: the resume parks it (asking again) without running anything."""
    from podium.engine.records import ModelTurn, RunRecord, ToolOutcome
    from podium.messages import ToolCall
    from podium.tools.executor import ToolResult

    asker = Asker()
    store = stores()
    record = RunRecord("run_crashed", "asker", "Move 5", status="running", started_at=time.time())
    await store.create(record)
    call = ToolCall("call_0", "transfer", '{"amount": 5}')
    interrupted = ToolResult("call_0", "transfer", "Which account?", ok=False, error="interrupted")
    await store.append(
        record.run_id,
        [
            ModelTurn(0, time.time(), Message("assistant", "", (call,))),
            ToolOutcome(0, time.time(), 0, interrupted),
        ],
    )
    async with Engine(store) as engine:
        parked = await engine.resume(asker.agent, record.run_id)
        assert parked.status == "waiting"
        (pending,) = await engine.pending_approvals(record.run_id)
        assert (pending.kind, pending.question) == ("interrupt", "Which account?")
        await engine.decide(record.run_id, "call_0", answer="checking")
        done = await engine.resume(asker.agent, record.run_id)
    assert done.output == "the human said: checking"
    assert asker.calls == 0


def _outcomes_by_call(journal: Sequence[object]) -> Counter[str]:
    """How many times the journal records an outcome of each call (a ToolOutcome, a result
    in a StepRecord, or a reject/answer decision, which is that call's outcome)."""
    from podium.engine.records import StepRecord, ToolOutcome

    counted: Counter[str] = Counter()
    for entry in journal:
        if isinstance(entry, ToolOutcome):
            counted[entry.result.call_id] += 1
        elif isinstance(entry, StepRecord):
            counted.update(r.call_id for r in entry.results)
        elif isinstance(entry, ApprovalDecided) and entry.decision != "approve":
            counted[entry.call_id] += 1
    return counted


@pytest.mark.parametrize("decision", ["approve", "edit", "reject"])
async def test_a_resumed_decided_step_records_each_outcome_once(
    stores: StoreFactory, decision: str
) -> None:
    """A step with an invalid call beside one waiting for a human: once decided and
    resumed (by another engine, as after a worker restart), every call of the step has
    exactly one outcome in the journal and one tool message in the model's context, in
    call order — whatever the decision."""
    refunds = Refunds()
    bad = '{"order_id": "A-0"}'  # no amount: rejected by its schema, before the wait
    good = '{"order_id": "A-1", "amount": 250}'

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("refund", bad), ("refund", good))
        refunds.seen = [f"{m.tool_call_id}={m.content}" for m in messages if m.role == "tool"]
        return "done"

    agent = Agent("refunds", FunctionModel(reply), tools=list(refunds.agent.tools.values()))
    async with Engine(stores()) as first:
        record = await first.run(agent, "Refund")
        assert record.status == "waiting"
        if decision == "reject":
            await first.decide(record.run_id, "call_1", approve=False, message="refunds frozen")
        else:
            edited = {"order_id": "A-1", "amount": 99} if decision == "edit" else None
            await first.decide(record.run_id, "call_1", approve=True, arguments=edited,
                               agent=agent)
    async with Engine(stores()) as second:
        done = await second.resume(agent, record.run_id)
        journal = [e for _, e in await second.store.journal(record.run_id)]
    assert done.status == "completed", done.error
    outcome = {
        "approve": "refunded 250 on A-1", "edit": "refunded 99 on A-1", "reject": "refunds frozen"
    }[decision]
    assert len(refunds.seen) == 2, refunds.seen
    assert refunds.seen[0].startswith("call_0=error: invalid arguments for 'refund'")
    assert refunds.seen[1] == f"call_1={outcome}"
    assert _outcomes_by_call(journal) == {"call_0": 1, "call_1": 1}
    assert refunds.refunded == ([] if decision == "reject" else [99 if decision == "edit" else 250])


async def test_a_resumed_step_gives_the_model_its_outcomes_in_call_order(
    stores: StoreFactory,
) -> None:
    """The human approves the first of two waiting calls and rejects the second: the
    resumed step's tool messages follow the calls' order (as a replay of it would), not
    the order in which their outcomes became known (the rejection first)."""
    refunds = Refunds()
    call = '{"order_id": "A-%d", "amount": 250}'

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("refund", call % 1), ("refund", call % 2))
        refunds.seen = [f"{m.tool_call_id}={m.content}" for m in messages if m.role == "tool"]
        return "done"

    agent = Agent("refunds", FunctionModel(reply), tools=list(refunds.agent.tools.values()))
    async with Engine(stores()) as engine:
        record = await engine.run(agent, "Refund")
        await engine.decide(record.run_id, "call_1", approve=False, message="no")
        await engine.decide(record.run_id, "call_0", approve=True)
        done = await engine.resume(agent, record.run_id)
        journal = [e for _, e in await engine.store.journal(record.run_id)]
    assert done.status == "completed"
    assert refunds.seen == ["call_0=refunded 250 on A-1", "call_1=no"]
    assert _outcomes_by_call(journal) == {"call_0": 1, "call_1": 1}


@pytest.mark.slow
def test_sigkill_while_an_approved_call_runs_then_resume_records_each_outcome_once(
    tmp_path: Path,
) -> None:
    """Real processes on SQLite: the run waits, a human approves one call (with edited
    arguments) and rejects another, the process that resumes it is SIGKILLed while the
    approved call runs, and a new process resumes it. The approved call completes once,
    with the edited arguments; no call's outcome is journaled or read by the model twice."""
    import asyncio
    import os
    import signal
    import subprocess
    import sys

    from podium.engine.records import RunRecord

    script = Path(__file__).with_name("_approval_crash.py")
    db, log, run_id = tmp_path / "runs.sqlite", tmp_path / "calls.log", "run_approval_crash"

    def start(mode: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(script), str(db), str(log), run_id, mode],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def finish(mode: str) -> RunRecord:
        proc = start(mode)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return msgspec.json.decode(out.strip().splitlines()[-1], type=RunRecord)

    assert finish("first").status == "waiting"
    assert finish("decide").status == "queued"
    proc = start("hang")
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and f"start {run_id}:0:1 99" in log.read_text()):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the approved call never started"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    final = finish("resume")
    assert final.status == "completed", final.error
    assert log.read_text().splitlines() == [
        f"start {run_id}:0:1 99",  # the killed attempt
        f"start {run_id}:0:1 99",
        f"done {run_id}:0:1 99",
    ]
    assert final.output is not None
    read = final.output.removeprefix("done: ").split(" | ")
    assert len(read) == 3, read
    assert read[0].startswith("error: invalid arguments for 'refund'")
    assert read[1:] == ["refunded 99 on A-1", "frozen"]

    async def journal() -> list[object]:
        async with SQLiteRunStore(str(db)) as store:
            return [e for _, e in await store.journal(run_id)]

    assert _outcomes_by_call(asyncio.run(journal())) == {"call_0": 1, "call_1": 1, "call_2": 1}


MODEL_S = 0.05


@pytest.mark.parametrize("lone", [False, True], ids=["turn-before-tools", "turn-at-park"])
async def test_a_step_resumed_after_a_decision_keeps_its_model_time(lone: bool) -> None:
    """The model's time of a step that waited for a human was lost: the resumed step's
    profile held only its tools, merge and checkpoint (a 104 ms call counted as 0). The
    turn journaled before the wait carries the step's timings so far into its commit."""
    refunds = Refunds()
    reply = refunds.agent.model.fn  # type: ignore[attr-defined]

    async def slow(messages: Sequence[Message], request: ModelRequest) -> Any:
        await asyncio.sleep(MODEL_S)  # the model time the step's profile must keep
        if lone and request.step == 0:  # one gated call: its turn is written as it parks
            return tool_call_reply(("refund", '{"order_id": "A-1", "amount": 250}'))
        return reply(messages, request)

    agent = Agent("refunds", FunctionModel(slow), tools=list(refunds.agent.tools.values()))
    async with Engine() as engine:
        record = await engine.run(agent, "refund A-1")
        assert record.status == "waiting"
        (pending,) = await engine.pending_approvals(record.run_id)
        await engine.decide(record.run_id, pending.call_id, approve=True)
        record = await engine.resume(agent, record.run_id)
    assert record.status == "completed" and record.profile is not None
    first = record.profile.steps[0]
    # the model's phase of the parked step (uvloop's timers may fire a little early: 80 %)
    assert first.wall_ns[1] >= MODEL_S * 0.8e9, first
    assert first.wall_ns[0] > 0 and first.wall_ns[2] > 0  # assemble and parse too


async def test_a_cancel_left_as_a_decision_lands_ends_the_run_before_its_calls() -> None:
    """A cancel and an approval at the same moment: the cancel read the run `waiting`, its
    store write lost to the decision's (stale), so it left a request for the driver. The
    worker checked requests only for `running` runs, the decided one was `queued`: the
    approved side-effecting call ran and the run completed (1 of 11 races, probed)."""
    from podium.queue.base import QueueItem
    from podium.queue.local import LocalQueue
    from podium.worker.worker import Worker

    refunds = Refunds()
    queue = LocalQueue()
    async with Engine() as engine:
        record = await engine.run(refunds.agent, "refund A-1")
        assert record.status == "waiting"
        await engine.store.request_cancel(record.run_id)  # the cancel that lost the race
        (pending,) = await engine.pending_approvals(record.run_id)
        await engine.decide(record.run_id, pending.call_id, approve=True)
        decided = await engine.store.get(record.run_id)
        assert decided is not None and decided.status == "queued"
        await queue.submit(QueueItem(record.run_id, refunds.agent.name))
        worker = Worker(queue, engine, {refunds.agent.name: refunds.agent}, claim_block_s=0.05)
        running = asyncio.create_task(worker.run(burst=True))
        await asyncio.wait_for(running, 10)
        ended = await engine.store.get(record.run_id)
    assert ended is not None and ended.status == "cancelled", ended
    assert refunds.calls["refund"] == 0  # the approved call never started
