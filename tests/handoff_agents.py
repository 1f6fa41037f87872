"""Agents the core and gateway tests share (importable from both: this folder is on the
path, as for :mod:`redis_fixtures`)."""

from __future__ import annotations

from collections.abc import Sequence

from podium import Agent, FunctionModel, tool, tool_call_reply
from podium.messages import Message
from podium.models.base import ModelRequest, ModelResponse


def approval_desk(paid: list[str]) -> tuple[Agent, Agent]:
    """``front`` hands off to ``payments``, whose ``refund(order, amount)`` needs a
    human's approval; ``front`` has a ``refund(order_id)`` of its own. Paid refunds are
    appended to ``paid`` as ``ORDER:AMOUNT``."""
    @tool(side_effects=True, requires_approval=True)
    async def refund(order: str, amount: int) -> str:
        """Refund an amount on an order.

        Args:
            order: The order id.
            amount: How much.
        """
        paid.append(f"{order}:{amount}")
        return f"refunded {amount} on {order}"

    @tool(name="refund")
    async def front_refund(order_id: str) -> str:
        """Ask for a refund (front desk).

        Args:
            order_id: The order id.
        """
        return "front desk refund"

    def pay(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if not any(m.role == "tool" and m.name == "refund" for m in messages):
            return tool_call_reply(("refund", '{"order": "A-1", "amount": 500}'))
        return "payments: " + messages[-1].content

    def route(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        return tool_call_reply(("transfer_to_payments", "{}"))

    payments = Agent("payments", FunctionModel(pay), "You pay.", [refund])
    front = Agent("front", FunctionModel(route), "You route.", [front_refund], handoffs=[payments])
    return front, payments
