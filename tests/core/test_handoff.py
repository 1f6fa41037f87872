"""Hand-offs: ``transfer_to_<name>`` switches the run's agent at the step's commit, and a
resumed run continues with the agent it was handed to."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from handoff_agents import approval_desk
from podium import (
    Agent,
    ConfigError,
    Engine,
    ModelRequest,
    SimStep,
    SimToolCall,
    SimulatedModel,
    ToolContext,
    tool,
)
from podium.store.memory import MemoryRunStore

pytestmark = pytest.mark.anyio

ENTERED: list[asyncio.Event] = [asyncio.Event()]  # set when a refund starts (the last build's)


def build(seen: list[tuple[str, str, tuple[str, ...]]], gate: asyncio.Event | None = None,
          calls: list[str] | None = None) -> tuple[Agent, Agent]:
    """``triage`` hands off at once; ``billing`` calls ``refund`` then answers."""
    entered = ENTERED[0] = asyncio.Event()

    @tool(side_effects=True, timeout=None)
    async def refund(order: str, ctx: ToolContext) -> str:
        """Refund an order.

        Args:
            order: The order id.
        """
        if calls is not None:
            calls.append(ctx.idempotency_key)
        entered.set()
        if gate is not None:
            await gate.wait()
        return f"refunded {order}"

    def policy(name: str):  # type: ignore[no-untyped-def]
        def decide(request: ModelRequest) -> SimStep | str:
            tools = tuple(t.name for t in request.tools)
            seen.append((name, request.messages[0].content, tools))
            if name == "triage":
                return SimStep(tool_calls=(SimToolCall("transfer_to_billing"),))
            if not any(m.role == "tool" and m.name == "refund" for m in request.messages):
                return SimStep(tool_calls=(SimToolCall("refund", {"order": "A-1"}),))
            return "Your refund for A-1 is on its way."

        return decide

    billing = Agent("billing", SimulatedModel(policy("billing")), "You handle billing.", [refund],
                    description="refunds and invoices")
    triage = Agent("triage", SimulatedModel(policy("triage")), "You route requests.",
                   handoffs=[billing])
    return triage, billing


async def test_a_hand_off_continues_with_the_other_agents_prompt_tools_and_history() -> None:
    seen: list[tuple[str, str, tuple[str, ...]]] = []
    triage, _ = build(seen)
    assert "transfer_to_billing" in triage.tools and triage.multi_agent
    async with Engine() as engine:
        record = await engine.run(triage, "I want a refund for A-1")
    assert record.status == "completed"
    assert record.output == "Your refund for A-1 is on its way."
    assert (record.agent, record.active_agent) == ("triage", "billing")
    assert [s[0] for s in seen] == ["triage", "billing", "billing"]
    assert seen[1][1:] == ("You handle billing.", ("refund",))


async def test_a_resumed_run_continues_with_the_agent_it_was_handed_to() -> None:
    seen: list[tuple[str, str, tuple[str, ...]]] = []
    gate = asyncio.Event()
    calls: list[str] = []
    triage, _ = build(seen, gate, calls)
    store = MemoryRunStore()
    engine = Engine(store)
    record = await engine.create(triage, "refund A-1")
    task = engine.start(triage, record)
    await ENTERED[0].wait()  # billing's refund is under way: the hand-off was committed
    task.cancel()  # the worker goes away; the run stays `running`
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()
    seen.clear()
    async with Engine(store) as again:
        ended = await again.resume(triage, record.run_id)
    await engine.aclose()
    assert ended.status == "completed" and ended.active_agent == "billing"
    assert [s[0] for s in seen] == ["billing"]  # triage was not asked again
    assert seen[0][1] == "You handle billing."
    assert calls == [f"{record.run_id}:1:0"] * 2  # the call in flight ran again, nothing else


def test_hand_offs_both_ways_and_not_to_itself() -> None:
    a = Agent("a", SimulatedModel())
    b = Agent("b", SimulatedModel(), handoffs=[a])
    a.add_handoffs(b)
    assert set(a.tools) == {"transfer_to_b"} and set(b.tools) == {"transfer_to_a"}
    assert [d.name for d in a.prefix.tools] == ["transfer_to_b"]
    with pytest.raises(ConfigError, match="itself"):
        a.add_handoffs(a)


async def test_edited_arguments_after_a_hand_off_are_checked_against_the_current_agent(
    tmp_path: Path,
) -> None:
    """The run handed off to ``payments`` waits on its ``refund``: an approval with edited
    arguments is checked against payments' tool (not the run's first agent's), and the
    resumed run (on another engine, from the root agent) pays with them."""
    from podium import DecisionError
    from podium.store.sqlite import SQLiteRunStore

    paid: list[str] = []
    front, _ = approval_desk(paid)
    db = str(tmp_path / "runs.sqlite")
    async with Engine(SQLiteRunStore(db)) as first:
        record = await first.run(front, "refund A-1")
        assert (record.status, record.active_agent) == ("waiting", "payments")
        (pending,) = await first.pending_approvals(record.run_id)
        assert (pending.tool, pending.step) == ("refund", 1)
        with pytest.raises(DecisionError) as wrong:  # front's refund schema: not payments'
            await first.decide(record.run_id, pending.call_id, approve=True,
                               arguments={"order_id": "A-1"}, agent=front)
        assert wrong.value.status == 422 and "amount" in str(wrong.value)
        decided = await first.decide(record.run_id, pending.call_id, approve=True,
                                     arguments={"order": "A-1", "amount": 40}, agent=front)
        assert decided.status == "queued"
    async with Engine(SQLiteRunStore(db)) as second:
        done = await second.resume(front, record.run_id)
    assert done.status == "completed", done.error
    assert (done.output, done.active_agent) == ("payments: refunded 40 on A-1", "payments")
    assert paid == ["A-1:40"]


def test_find_agent_walks_the_hand_offs() -> None:
    from podium.engine.handoff import find_agent

    a = Agent("a", SimulatedModel())
    c = Agent("c", SimulatedModel())
    b = Agent("b", SimulatedModel(), handoffs=[c])
    a.add_handoffs(b)
    c.add_handoffs(a)  # a cycle: walked once
    assert find_agent(a, "a") is a
    assert find_agent(a, None) is a
    assert find_agent(a, "c") is c
    assert find_agent(b, "a") is a
    assert find_agent(a, "nobody") is None
