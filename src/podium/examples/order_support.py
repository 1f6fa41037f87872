"""An order-support agent answering from a SQLite database of orders.

    podium run order-support "Where is my order A-1002?"
    podium run order-support "What did alice@example.com order?"
    podium run order-support "Please refund order A-1001, it arrived broken."

The tools are real: they query (and, for refunds, write) a small SQLite
database the module creates and seeds on first use, under
``$PODIUM_DATA_DIR`` (default: the system temp dir). ``refund`` has side
effects, so it uses the run's idempotency key (``run_id:step:call``): a step
re-run after a crash finds its own refund instead of paying twice.

The model is the simulated one driven by a policy function that reads the
conversation (the user's input and the tool results so far), picks the next
tool call, and writes the final answer from the data the tools returned.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from podium import (
    Agent,
    LatencyModel,
    Message,
    ModelRequest,
    SimStep,
    SimToolCall,
    SimulatedModel,
    ToolContext,
    tool,
)

__all__ = ("agent", "build_agent", "default_db_path", "seed")

_ORDERS = [
    # order_id, email, status, placed, carrier, tracking, eta
    ("A-1001", "alice@example.com", "delivered", "2025-05-02", "DHL", "JD0140025", "2025-05-06"),
    ("A-1002", "alice@example.com", "shipped", "2025-06-08", "UPS", "1Z999AA10", "2025-06-12"),
    ("B-2001", "bob@example.com", "processing", "2025-06-10", None, None, "2025-06-16"),
]
_ITEMS = [
    ("A-1001", "Ceramic mug", 2, 1295),
    ("A-1001", "Pour-over coffee filter", 1, 3400),
    ("A-1002", "Mechanical keyboard", 1, 8900),
    ("B-2001", "Hiking boots", 1, 12900),
    ("B-2001", "Wool socks", 3, 900),
]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    order_id TEXT PRIMARY KEY, email TEXT NOT NULL, status TEXT NOT NULL, placed TEXT NOT NULL,
    carrier TEXT, tracking TEXT, eta TEXT);
CREATE TABLE IF NOT EXISTS items (
    order_id TEXT NOT NULL, name TEXT NOT NULL, quantity INTEGER NOT NULL,
    unit_cents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (
    idempotency_key TEXT PRIMARY KEY, order_id TEXT NOT NULL UNIQUE, amount_cents INTEGER NOT NULL,
    reason TEXT NOT NULL, created_at REAL NOT NULL);
"""


def default_db_path() -> Path:
    base = Path(os.environ.get("PODIUM_DATA_DIR", tempfile.gettempdir()))
    return base / "podium-examples" / "orders.sqlite"


def seed(path: Path) -> None:
    """Create the database and its sample orders if they are not there yet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executescript(_SCHEMA)
        if conn.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 0:
            conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?)", _ORDERS)
            conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", _ITEMS)


def _money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def build_agent(db_path: str | Path | None = None) -> Agent:
    """The order-support agent over the database at ``db_path`` (seeded on first use)."""
    path = Path(db_path) if db_path is not None else default_db_path()
    seeded = False

    @contextmanager
    def connect() -> Iterator[sqlite3.Connection]:
        nonlocal seeded
        if not seeded:
            seed(path)
            seeded = True
        with closing(sqlite3.connect(path, timeout=5.0)) as conn, conn:
            conn.row_factory = sqlite3.Row
            yield conn

    def total_cents(conn: sqlite3.Connection, order_id: str) -> int:
        row = conn.execute(
            "SELECT COALESCE(SUM(quantity * unit_cents), 0) FROM items WHERE order_id = ?",
            (order_id,),
        ).fetchone()
        return int(row[0])

    @tool(timeout=5.0)
    def find_orders(customer_email: str) -> list[dict[str, Any]]:
        """List a customer's orders, newest first.

        Args:
            customer_email: The customer's email address.
        """
        with connect() as conn:
            rows = conn.execute(
                "SELECT order_id, status, placed FROM orders WHERE lower(email) = lower(?) "
                "ORDER BY placed DESC",
                (customer_email.strip(),),
            ).fetchall()
            return [{**dict(r), "total": _money(total_cents(conn, r["order_id"]))} for r in rows]

    @tool(timeout=5.0)
    def get_order(order_id: str) -> dict[str, Any]:
        """Everything about one order: status, items, total, shipping.

        Args:
            order_id: The order's id, e.g. "A-1001".
        """
        with connect() as conn:
            row = conn.execute(
                "SELECT * FROM orders WHERE order_id = ?", (order_id.strip().upper(),)
            ).fetchone()
            if row is None:
                raise LookupError(f"no order {order_id!r}")
            items = conn.execute(
                "SELECT name, quantity, unit_cents FROM items WHERE order_id = ?",
                (row["order_id"],),
            ).fetchall()
            order = {k: v for k, v in dict(row).items() if v is not None and k != "email"}
            order["items"] = [
                {"name": i["name"], "quantity": i["quantity"], "price": _money(i["unit_cents"])}
                for i in items
            ]
            order["total"] = _money(total_cents(conn, row["order_id"]))
            return order

    @tool(timeout=5.0, side_effects=True)
    def refund(order_id: str, reason: str, ctx: ToolContext) -> dict[str, Any]:
        """Refund an order in full.

        Args:
            order_id: The order to refund.
            reason: Why the customer wants a refund.
        """
        order_id = order_id.strip().upper()
        key = ctx.idempotency_key
        with connect() as conn:
            done = conn.execute(
                "SELECT * FROM refunds WHERE idempotency_key = ? OR order_id = ?", (key, order_id)
            ).fetchone()
            if done is not None:  # this very call ran before (a resumed step), or an earlier one
                same = done["idempotency_key"] == key
                return {
                    "order_id": order_id,
                    "status": "refunded" if same else "already_refunded",
                    "amount": _money(done["amount_cents"]),
                }
            row = conn.execute(
                "SELECT status FROM orders WHERE order_id = ?", (order_id,)
            ).fetchone()
            if row is None:
                raise LookupError(f"no order {order_id!r}")
            if row["status"] == "processing":
                return {
                    "order_id": order_id,
                    "status": "not_refundable",
                    "detail": "the order has not shipped yet; cancel it instead",
                }
            amount = total_cents(conn, order_id)
            conn.execute(
                "INSERT INTO refunds VALUES (?, ?, ?, ?, ?)",
                (key, order_id, amount, reason, time.time()),
            )
            conn.execute("UPDATE orders SET status = 'refunded' WHERE order_id = ?", (order_id,))
            return {"order_id": order_id, "status": "refunded", "amount": _money(amount)}

    return Agent(
        "order-support",
        SimulatedModel(decide, latency=LatencyModel(ttft_s=0.01, per_token_s=0.0005), seed=0),
        "You help customers with their orders. Look orders up before answering; refund only "
        "when asked.",
        [find_orders, get_order, refund],
        max_steps=8,
    )


# -- the simulated model's policy -------------------------------------------------------------

_ORDER_ID = re.compile(r"\b([A-Z]-\d{4})\b", re.IGNORECASE)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def _observations(messages: list[Message] | Any) -> list[tuple[str, dict[str, Any], str]]:
    """(tool name, arguments, result text) for every tool call answered so far."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    seen: list[tuple[str, dict[str, Any], str]] = []
    for m in messages:
        for c in m.tool_calls:
            calls[c.id] = (c.name, json.loads(c.arguments or "{}"))
        if m.role == "tool" and m.tool_call_id in calls:
            name, args = calls[m.tool_call_id]
            seen.append((name, args, m.content))
    return seen


def _data(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def decide(request: ModelRequest) -> SimStep | str:
    """Next tool call, or the final answer, from the conversation so far."""
    messages = request.messages
    question = messages[1].content
    wants_refund = "refund" in question.lower()
    seen = _observations(messages)
    results = {name: (args, text) for name, args, text in seen}  # the latest of each tool

    match = _ORDER_ID.search(question)
    order_id = match.group(1).upper() if match else None
    email = _EMAIL.search(question)

    if order_id is None and email is not None:
        if "find_orders" not in results:
            return SimStep(
                tool_calls=(SimToolCall("find_orders", {"customer_email": email.group(0)}),)
            )
        orders = _data(results["find_orders"][1]) or []
        if not orders:
            return f"I found no orders for {email.group(0)}."
        if not wants_refund:
            listing = "; ".join(
                f"{o['order_id']} ({o['status']}, {o['total']}, placed {o['placed']})"
                for o in orders
            )
            return f"{email.group(0)} has {len(orders)} order(s): {listing}."
        order_id = orders[0]["order_id"]
    if order_id is None:
        return "Please tell me your order id (like A-1001) or the email address you ordered with."

    if "get_order" not in results:
        return SimStep(tool_calls=(SimToolCall("get_order", {"order_id": order_id}),))
    order = _data(results["get_order"][1])
    if not isinstance(order, dict):
        return f"I couldn't find order {order_id}: {results['get_order'][1]}"

    if wants_refund:
        if "refund" not in results:
            return SimStep(
                tool_calls=(
                    SimToolCall("refund", {"order_id": order_id, "reason": question[:200]}),
                )
            )
        outcome = _data(results["refund"][1])
        if not isinstance(outcome, dict):
            return f"The refund of order {order_id} failed: {results['refund'][1]}"
        if outcome["status"] == "refunded":
            return f"Done: order {order_id} is refunded, {outcome['amount']} back to your card."
        if outcome["status"] == "already_refunded":
            return f"Order {order_id} was already refunded ({outcome['amount']})."
        return f"Order {order_id} can't be refunded: {outcome.get('detail', outcome['status'])}."

    items = ", ".join(f"{i['quantity']} × {i['name']}" for i in order["items"])
    answer = f"Order {order_id} is {order['status']}: {items}; total {order['total']}."
    if order.get("carrier") and order["status"] == "shipped":
        answer += (
            f" It is on its way with {order['carrier']} (tracking {order['tracking']}), "
            f"expected {order['eta']}."
        )
    elif order["status"] == "processing":
        answer += f" It should ship soon; expected delivery {order['eta']}."
    elif order["status"] == "delivered":
        answer += " It was delivered."
    return answer


agent = build_agent()
