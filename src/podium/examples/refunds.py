"""A refund agent that asks a human before paying out more than 100.

    podium run refunds "Refund 250 on order A-1001" --store runs.sqlite
    podium run refunds --resume RUN_ID --store runs.sqlite --approve
    podium run refunds "Refund 40 on order A-1001" --quiet

``refund`` has ``requires_approval=lambda args, ctx: args.amount > 100``: a
larger refund parks the run ``waiting`` (no worker held) until a human
approves it, rejects it (the model reads why) or approves it with another
amount. ``lookup_order``, called in the same reply, needs no one: it runs
before the wait and is never repeated. ``ask_account`` shows the other way a
run waits: the tool raises :class:`~podium.errors.Interrupt` with a question,
and the human's answer becomes its result.

The model is the simulated one, driven by a policy function reading the
conversation, so the example runs anywhere with no backend.
"""

from __future__ import annotations

import re

from podium import Agent, Interrupt, ModelRequest, SimStep, SimToolCall, SimulatedModel, tool

__all__ = ("agent", "ask_account", "lookup_order", "refund")

#: Refunds above this many units need a human's approval.
APPROVAL_OVER = 100


@tool
async def lookup_order(order_id: str) -> str:
    """Look up an order's payment.

    Args:
        order_id: The order, e.g. "A-1001".
    """
    return f"order {order_id}: paid 320 by card, delivered"


@tool(side_effects=True, requires_approval=lambda args, ctx: args.amount > APPROVAL_OVER)
async def refund(order_id: str, amount: int) -> str:
    """Refund part or all of an order's payment.

    Args:
        order_id: The order to refund.
        amount: How much to refund.
    """
    return f"refunded {amount} on {order_id}"


@tool
async def ask_account(order_id: str) -> str:
    """Ask the customer which account a credit should go to.

    Args:
        order_id: The order concerned.
    """
    raise Interrupt(f"Which account should the credit for {order_id} go to?")


def _policy(request: ModelRequest) -> SimStep | str:
    messages = request.messages
    user = next((m.content for m in messages if m.role == "user"), "")
    results = [m.content for m in messages if m.role == "tool"]
    if not results:
        order = re.search(r"[A-Z]-\d{4}", user)
        order_id = order.group(0) if order else "A-1001"
        if "credit" in user.lower():
            return SimStep(tool_calls=(SimToolCall("ask_account", {"order_id": order_id}),))
        amount = re.search(r"\b(\d+)\b", user.replace(order_id, ""))
        return SimStep(
            tool_calls=(
                SimToolCall("lookup_order", {"order_id": order_id}),
                SimToolCall(
                    "refund",
                    {"order_id": order_id, "amount": int(amount.group(1)) if amount else 0},
                ),
            )
        )
    return "Done. " + " · ".join(results[1:] or results)


agent = Agent(
    "refunds",
    SimulatedModel(_policy),
    "You refund orders. Look the order up, then refund; large refunds need a human's approval.",
    [lookup_order, refund, ask_account],
    max_steps=4,
    deadline_while_waiting="pause",  # a human may take a while: the deadline waits too
    approval_timeout_s=24 * 3600.0,  # but not forever
)
