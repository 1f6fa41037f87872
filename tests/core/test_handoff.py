"""Hand-offs: ``transfer_to_<name>`` switches the run's agent at the step's commit, and a
resumed run continues with the agent it was handed to."""

from __future__ import annotations

import asyncio

import pytest

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
