"""Hand-off input filters: ``Handoff(agent, input_filter=...)`` gives the receiving agent
the history the filter keeps, journaled with the hand-off so a resumed run neither calls
the filter again nor sees another history; a filter that fails fails the run, saying so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from podium import (
    Agent,
    ConfigError,
    Engine,
    Handoff,
    HandoffFilter,
    Message,
    ModelRequest,
    SimStep,
    SimToolCall,
    SimulatedModel,
    ToolCall,
    last_turns,
    remove_tool_calls,
    tool,
)
from podium.engine.records import HandedOff, StepRecord
from podium.store.sqlite import SQLiteRunStore
from podium.tools.agent_tool import transfer_text
from podium.tools.executor import ToolResult

pytestmark = pytest.mark.anyio

Seen = list[tuple[str, tuple[tuple[str, str], ...]]]  # (agent, (role, content) after system)


@tool
def lookup(order: str) -> str:
    """Look an order up.

    Args:
        order: The order id.
    """
    return f"{order}: paid twice"


def build(
    seen: Seen,
    input_filter: HandoffFilter | None,
    gate: asyncio.Event | None = None,
    entered: asyncio.Event | None = None,
) -> Agent:
    """``triage`` looks the order up, then hands off to ``billing``, which answers (after
    waiting on ``gate``, when given, in a tool of its own)."""

    @tool(timeout=None)
    async def hold() -> str:
        """Wait for the ledger."""
        if entered is not None:
            entered.set()
        if gate is not None:
            await gate.wait()
        return "ledger ready"

    def policy(name: str):  # type: ignore[no-untyped-def]
        def decide(request: ModelRequest) -> SimStep | str:
            history = tuple((m.role, m.content) for m in request.messages[1:])
            seen.append((name, history))
            done = {m.name for m in request.messages if m.role == "tool"}
            if name == "triage":
                if "lookup" not in done:
                    return SimStep(tool_calls=(SimToolCall("lookup", {"order": "A-1"}),))
                return SimStep((SimToolCall("transfer_to_billing"),), "Passing you to billing.")
            if gate is not None and "hold" not in done:
                return SimStep(tool_calls=(SimToolCall("hold"),))
            return "Refund for A-1 issued."

        return decide

    billing = Agent("billing", SimulatedModel(policy("billing")), "You handle billing.", [hold])
    target: Agent | Handoff = billing if input_filter is None else Handoff(billing, input_filter)
    return Agent(
        "triage", SimulatedModel(policy("triage")), "You route requests.", [lookup],
        handoffs=[target],
    )


def counting(inner: HandoffFilter, calls: list[int]) -> HandoffFilter:
    def input_filter(messages: Sequence[Message]) -> Sequence[Message]:
        calls.append(len(messages))
        return inner(messages)

    return input_filter


async def test_the_receiving_agent_reads_the_filtered_history() -> None:
    seen: Seen = []
    calls: list[int] = []
    triage = build(seen, counting(remove_tool_calls, calls))
    async with Engine() as engine:
        record = await engine.run(triage, "Refund A-1, I paid twice")
        journal = [entry for _, entry in await engine.store.journal(record.run_id)]
    assert (record.status, record.active_agent) == ("completed", "billing")
    assert record.output == "Refund for A-1 issued."
    assert [s[0] for s in seen] == ["triage", "triage", "billing"]
    # No lookup call, no lookup result, no transfer: what triage said stays.
    assert seen[2][1] == (
        ("user", "Refund A-1, I paid twice"),
        ("assistant", "Passing you to billing."),
    )
    assert calls == [5]  # once: input, lookup call, its result, transfer call, its result
    (handed,) = [e for e in journal if isinstance(e, HandedOff)]
    assert (handed.agent, handed.step) == ("billing", 2)
    assert [(m.role, m.content) for m in handed.messages] == list(seen[2][1])


async def test_without_a_filter_the_whole_history_passes_and_nothing_is_journaled() -> None:
    seen: Seen = []
    async with Engine() as engine:
        record = await engine.run(build(seen, None), "Refund A-1")
        journal = [entry for _, entry in await engine.store.journal(record.run_id)]
    assert record.status == "completed"
    assert [role for role, _ in seen[2][1]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert not any(isinstance(e, HandedOff) for e in journal)


async def test_a_resumed_run_keeps_the_journaled_history_without_filtering_again(
    tmp_path: Path,
) -> None:
    seen: Seen = []
    calls: list[int] = []
    gate, entered = asyncio.Event(), asyncio.Event()
    triage = build(seen, counting(remove_tool_calls, calls), gate, entered)
    db = str(tmp_path / "runs.sqlite")
    first = Engine(SQLiteRunStore(db))
    record = await first.create(triage, "Refund A-1")
    task = first.start(triage, record)
    waiter = asyncio.ensure_future(entered.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    assert entered.is_set(), task  # billing waits in its tool: the hand-off is journaled
    task.cancel()  # the worker goes away; the run stays `running`
    with pytest.raises(asyncio.CancelledError):
        await task
    await first.aclose()
    gate.set()
    seen.clear()
    async with Engine(SQLiteRunStore(db)) as second:
        done = await second.resume(triage, record.run_id)
    assert (done.status, done.active_agent) == ("completed", "billing")
    assert calls == [5]  # the filter ran once, before the crash
    # Billing's step that was cut is asked again, from the journaled filtered history.
    assert [s[0] for s in seen] == ["billing", "billing"]
    assert seen[0][1] == (("user", "Refund A-1"), ("assistant", "Passing you to billing."))


async def test_a_hand_off_committed_but_not_yet_filtered_is_filtered_on_resume() -> None:
    """The process stopped between the transfer's commit and the filter's entry: the
    resumed run applies the filter then (nothing had been sent to billing yet)."""
    seen: Seen = []
    calls: list[int] = []
    triage = build(seen, counting(last_turns(1), calls))
    async with Engine() as engine:
        record = await engine.create(triage, "Refund A-1")
        record.status = "running"  # as a run whose process stopped there
        await engine.store.update(record)
        transfer = ToolCall("c1", "transfer_to_billing", "{}")
        done = ToolResult("c1", "transfer_to_billing", transfer_text(triage.handoffs[
            "transfer_to_billing"].target))
        await engine.store.append(record.run_id, [
            StepRecord(0, time.time(), Message("assistant", "To billing.", (transfer,)), (done,)),
        ])
        ended = await engine.resume(triage, record.run_id)
        journal = [entry for _, entry in await engine.store.journal(record.run_id)]
    assert (ended.status, ended.active_agent) == ("completed", "billing")
    assert calls == [3] and [s[0] for s in seen] == ["billing"]
    assert [role for role, _ in seen[0][1]] == ["user", "assistant", "tool"]
    assert sum(isinstance(e, HandedOff) for e in journal) == 1


@pytest.mark.parametrize(
    ("input_filter", "said"),
    [
        (lambda messages: 1 / 0, "raised ZeroDivisionError"),
        (lambda messages: [], "returned no message"),
        (lambda messages: ["hello"], "something other than Message objects"),
    ],
)
async def test_a_failing_filter_fails_the_run_with_its_reason(
    input_filter: HandoffFilter, said: str
) -> None:
    seen: Seen = []
    async with Engine() as engine:
        record = await engine.run(build(seen, input_filter), "Refund A-1")
    assert (record.status, record.reason) == ("failed", "handoff_filter")
    assert said in (record.error or "") and "transfer_to_billing" in (record.error or "")
    assert [s[0] for s in seen] == ["triage", "triage"]  # billing was never asked


def _history() -> list[Message]:
    call = ToolCall("c1", "lookup", '{"order": "A-1"}')
    return [
        Message("user", "first question"),
        Message("assistant", "first answer"),
        Message("user", "[Summary of earlier steps]\nsomething"),
        Message("user", "refund A-1"),
        Message("assistant", "", (call,)),
        Message("tool", "A-1: paid", tool_call_id="c1", name="lookup"),
        Message("assistant", "Looking into it.", (ToolCall("c2", "transfer_to_b", "{}"),)),
        Message("tool", "Transferred to b.", tool_call_id="c2", name="transfer_to_b"),
    ]


def test_remove_tool_calls_keeps_what_was_said_and_changes_nothing_given() -> None:
    history = _history()
    kept = remove_tool_calls(history)
    assert [(m.role, m.content, m.tool_calls) for m in kept] == [
        ("user", "first question", ()),
        ("assistant", "first answer", ()),
        ("user", "[Summary of earlier steps]\nsomething", ()),
        ("user", "refund A-1", ()),
        ("assistant", "Looking into it.", ()),
    ]
    assert history[6].tool_calls  # the given message was not changed


def test_last_turns_starts_at_a_user_message_that_is_not_a_summary() -> None:
    history = _history()
    assert last_turns(1)(history) == history[3:]
    assert last_turns(2)(history) == history  # the summary does not start a turn
    assert last_turns(5)(history) == history
    for wrong in (0, -1, True, 1.5):
        with pytest.raises(ConfigError, match="last_turns"):
            last_turns(wrong)  # type: ignore[arg-type]


def test_a_filter_that_is_not_callable_is_refused_at_declaration() -> None:
    billing = Agent("billing", SimulatedModel())
    with pytest.raises(ConfigError, match="input_filter takes a function"):
        Handoff(billing, input_filter="last_turns")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="handoffs takes a list"):
        Agent("triage", SimulatedModel(), handoffs=Handoff(billing))  # type: ignore[arg-type]
    triage = Agent("triage", SimulatedModel(), handoffs=[Handoff(billing, last_turns(2))])
    assert triage.handoffs["transfer_to_billing"].target is billing


async def test_on_a_thread_the_filter_sees_earlier_turns_and_the_thread_goes_on_filtered() -> None:
    seen: Seen = []

    def triage_policy(request: ModelRequest) -> SimStep | str:
        seen.append(("triage", tuple((m.role, m.content) for m in request.messages[1:])))
        if "refund" not in request.messages[-1].content:
            return "Hello."
        return SimStep(tool_calls=(SimToolCall("transfer_to_billing"),))

    def billing_policy(request: ModelRequest) -> str:
        seen.append(("billing", tuple((m.role, m.content) for m in request.messages[1:])))
        return "Refund issued."

    billing = Agent("billing", SimulatedModel(billing_policy), "You handle billing.")
    triage = Agent("triage", SimulatedModel(triage_policy), "You route requests.",
                   handoffs=[Handoff(billing, last_turns(1))])
    async with Engine() as engine:
        await engine.run(triage, "hi", thread_id="t")
        second = await engine.run(triage, "a refund please", thread_id="t")
        thread = await engine.threads.read("t", "default")
    assert second.output == "Refund issued."
    assert seen[1][1][:2] == (("user", "hi"), ("assistant", "Hello."))  # triage had it all
    assert [role for role, _ in seen[2][1]] == ["user", "assistant", "tool"]  # billing: 1 turn
    assert seen[2][1][0] == ("user", "a refund please")
    contents = [m.content for m in thread.history]
    assert (contents[0], contents[-1]) == ("a refund please", "Refund issued.")


async def test_a_secret_result_in_the_filtered_history_is_journaled_withheld() -> None:
    """The receiver reads the secret (its live context keeps it); the journal does not."""

    @tool(secret_result=True)
    def vault(order: str) -> str:
        """Read the order's card number.

        Args:
            order: The order id.
        """
        return "4111-1111-1111-1111"

    seen: Seen = []

    def triage_policy(request: ModelRequest) -> SimStep | str:
        if not any(m.role == "tool" for m in request.messages):
            return SimStep(tool_calls=(SimToolCall("vault", {"order": "A-1"}),))
        return SimStep(tool_calls=(SimToolCall("transfer_to_billing"),))

    def billing_policy(request: ModelRequest) -> str:
        seen.append(("billing", tuple((m.role, m.content) for m in request.messages[1:])))
        return "Done."

    billing = Agent("billing", SimulatedModel(billing_policy), "You handle billing.")
    triage = Agent("triage", SimulatedModel(triage_policy), "You route requests.", [vault],
                   handoffs=[Handoff(billing, last_turns(1))])
    async with Engine() as engine:
        record = await engine.run(triage, "Refund A-1")
        journal = [entry for _, entry in await engine.store.journal(record.run_id)]
    assert record.status == "completed"
    assert ("tool", "4111-1111-1111-1111") in seen[0][1]
    (handed,) = [e for e in journal if isinstance(e, HandedOff)]
    contents = [m.content for m in handed.messages]
    assert "4111-1111-1111-1111" not in str(contents) and any("secret" in c for c in contents)
