"""A run waiting for a human, decided, then SIGKILLed by a test while the approved call
runs, then resumed.

    python _approval_crash.py DB LOG RUN_ID first|decide|hang|resume

The model's first reply calls ``refund`` three times: once with arguments its schema
refuses (rejected before any human sees it), twice with amounts over 100 (each waits for
a human). ``first`` runs until the run waits; ``decide`` approves call 1 with the amount
edited to 99 and rejects call 2; ``hang`` resumes it, and the approved call hangs there
(the test kills the process); ``resume`` resumes it to its end. ``refund`` appends
``start KEY AMOUNT`` to LOG when it starts and ``done KEY AMOUNT`` when it returns. The
final answer lists the tool messages the model read; the final record is printed as JSON.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

import msgspec

from podium import (
    Agent,
    Engine,
    FunctionModel,
    ModelRequest,
    ModelResponse,
    ToolContext,
    tool,
    tool_call_reply,
)
from podium.messages import Message
from podium.store.sqlite import SQLiteRunStore

DB, LOG, RUN_ID, MODE = sys.argv[1:5]


def log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@tool(side_effects=True, timeout=None, requires_approval=lambda args, ctx: args.amount > 100)
async def refund(order_id: str, amount: int, ctx: ToolContext) -> str:
    """Refund an order.

    Args:
        order_id: The order.
        amount: How much.
    """
    log(f"start {ctx.idempotency_key} {amount}")
    if MODE == "hang":
        await asyncio.Event().wait()
    log(f"done {ctx.idempotency_key} {amount}")
    return f"refunded {amount} on {order_id}"


def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
    if request.step == 0:
        return tool_call_reply(
            ("refund", '{"order_id": "A-0"}'),
            ("refund", '{"order_id": "A-1", "amount": 250}'),
            ("refund", '{"order_id": "A-2", "amount": 300}'),
        )
    return "done: " + " | ".join(m.content for m in messages if m.role == "tool")


agent = Agent("refunds", FunctionModel(reply), tools=[refund], max_invalid_tool_calls=5)


async def main() -> None:
    async with SQLiteRunStore(DB) as store, Engine(store) as engine:
        if MODE == "first":
            final = await engine.run(agent, "Refund A-0, A-1 and A-2", run_id=RUN_ID)
        elif MODE == "decide":
            await engine.decide(
                RUN_ID, "call_1", approve=True, arguments={"order_id": "A-1", "amount": 99},
                agent=agent, by="alice",
            )
            final = await engine.decide(RUN_ID, "call_2", approve=False, message="frozen")
        else:
            final = await engine.resume(agent, RUN_ID)
    print(msgspec.json.encode(final).decode())


if __name__ == "__main__":
    asyncio.run(main())
