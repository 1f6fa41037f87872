"""The example agents do real work with real local tools, on the simulated model."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import args, ctx, journal_results

from podium import Agent, Engine, ToolContext
from podium.cli.resolve import BUILTIN_AGENTS, resolve_agent
from podium.examples import order_support, react, research

pytestmark = pytest.mark.anyio


# -- react ------------------------------------------------------------------------------------


async def test_react_agent_runs_six_lookups_then_answers() -> None:
    async with Engine() as engine:
        record = await engine.run(react.agent, "What is Podium?")
        journal = await engine.store.journal(record.run_id)
    assert record.status == "completed"
    assert record.steps == react.TOOL_STEPS + 1
    assert "42" in (record.output or "")
    results = journal_results(journal)
    assert len(results) == react.TOOL_STEPS
    assert all(r.content == "Result for podium: 42 items found." for r in results)


# -- order support ------------------------------------------------------------------------------


@pytest.fixture
def orders_db(tmp_path: Path) -> Path:
    return tmp_path / "orders.sqlite"


@pytest.fixture
def support(orders_db: Path) -> Agent:
    return order_support.build_agent(orders_db)


async def test_order_status_comes_from_the_database(support: Agent) -> None:
    record = await support.run("Where is my order A-1002?")
    assert record.status == "completed"
    out = record.output or ""
    assert "A-1002" in out and "shipped" in out
    assert "Mechanical keyboard" in out and "$89.00" in out
    assert "UPS" in out and "1Z999AA10" in out and "2025-06-12" in out


async def test_orders_of_a_customer(support: Agent) -> None:
    record = await support.run("What did alice@example.com order?")
    out = record.output or ""
    assert "2 order(s)" in out
    assert "A-1001 (delivered, $59.90" in out and "A-1002 (shipped, $89.00" in out
    assert "B-2001" not in out


async def test_answer_changes_with_the_data(support: Agent, orders_db: Path) -> None:
    await support.run("Where is my order A-1002?")  # seeds the database
    with sqlite3.connect(orders_db) as conn:
        conn.execute("UPDATE orders SET status = 'delivered' WHERE order_id = 'A-1002'")
    conn.close()
    record = await support.run("Where is my order A-1002?")
    assert "A-1002 is delivered" in (record.output or "")


async def test_refund_writes_once_under_its_idempotency_key(
    support: Agent, orders_db: Path
) -> None:
    async with Engine() as engine:
        record = await engine.run(support, "Please refund order A-1001, it arrived broken.")
    assert record.status == "completed"
    assert "refunded, $59.90" in (record.output or "")
    with sqlite3.connect(orders_db) as conn:
        rows = conn.execute(
            "SELECT idempotency_key, order_id, amount_cents FROM refunds"
        ).fetchall()
        status = conn.execute("SELECT status FROM orders WHERE order_id = 'A-1001'").fetchone()[0]
    conn.close()
    assert rows == [(f"{record.run_id}:1:0", "A-1001", 5990)]
    assert status == "refunded"

    again = await support.run("Refund A-1001 please")
    assert "already refunded ($59.90)" in (again.output or "")


async def test_refund_tool_is_idempotent(support: Agent, orders_db: Path) -> None:
    refund = support.tools["refund"]
    call = args(refund, '{"order_id": "A-1002", "reason": "late"}')
    key = ToolContext("run_x", 4, 0, "call_4_0")
    support.tools["get_order"].fn(order_id="A-1002")  # seed
    first = refund.fn(**refund.kwargs(call, key))
    second = refund.fn(**refund.kwargs(call, key))  # the same call, re-run after a crash
    assert first == second == {"order_id": "A-1002", "status": "refunded", "amount": "$89.00"}
    with sqlite3.connect(orders_db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM refunds").fetchone()[0] == 1
    conn.close()


async def test_refund_rules_and_unknown_orders(support: Agent) -> None:
    not_shipped = await support.run("Refund B-2001")
    assert "can't be refunded" in (not_shipped.output or "")
    missing = await support.run("Where is order Z-9999?")
    assert "couldn't find order Z-9999" in (missing.output or "")
    vague = await support.run("hello")
    assert "order id" in (vague.output or "")


# -- research -----------------------------------------------------------------------------------


@pytest.fixture
def pages() -> Iterator[research.PageServer]:
    with research.serve_pages() as server:
        yield server


async def test_research_fetches_linked_pages_and_summarizes(pages: research.PageServer) -> None:
    agent = research.build_agent(f"{pages.url}/index.html", loopback_ports=[pages.port])
    async with Engine() as engine:
        record = await engine.run(agent, "Summarize the Podium field notes")
        journal = await engine.store.journal(record.run_id)
    assert record.status == "completed", record.error
    out = record.output or ""
    assert out.startswith("Summary of 3 page(s):")
    assert "model inference is only 20 to 40 percent of a task's time" in out
    assert "Every step is checkpointed before its effects are acknowledged" in out
    assert "idempotency key" not in out  # third sentence: extractive summary keeps two
    fetched = [r for r in journal_results(journal) if r.ok]
    assert len(fetched) == 3


async def test_research_starts_from_urls_in_the_input(pages: research.PageServer) -> None:
    agent = research.build_agent(loopback_ports=[pages.port])
    record = await agent.run(f"What does {pages.url}/cpu.html say?")
    out = record.output or ""
    assert out.startswith("Summary of 1 page(s):")
    assert "Where the time goes in an agent step" in out


async def test_fetch_refuses_other_hosts_unless_allowed() -> None:
    # Loopback is closed unless a port is opened, and then only that port (and never a
    # well-known service's).
    assert not research.is_allowed("http://127.0.0.1:8000/x")
    assert not research.is_allowed("http://localhost/x")
    assert research.is_allowed("http://127.0.0.1:8000/x", loopback_ports=[8000])
    assert research.is_allowed("http://localhost:8000/x", loopback_ports=[8000])
    assert research.is_allowed("http://[::1]:8000/", loopback_ports=[8000])
    assert not research.is_allowed("http://127.0.0.1:8001/x", loopback_ports=[8000])
    assert not research.is_allowed("http://127.0.0.1:6379/", loopback_ports=[8000, 6379])
    assert not research.is_allowed("http://10.0.0.1/")
    assert not research.is_allowed("http://example.com/")
    assert not research.is_allowed("file:///etc/passwd")
    assert research.is_allowed("https://example.com/", ["example.com"])

    agent = research.build_agent()
    record = await agent.run("Summarize http://192.168.1.1/admin")
    assert record.status == "completed"
    assert "refusing to fetch" in (record.output or "")


async def test_fetch_tool_directly(pages: research.PageServer) -> None:
    from podium.tools import ToolExecutor

    fetch = research.make_fetch(loopback_ports=[pages.port])
    executor = ToolExecutor(max_threads=2)
    try:
        index = args(fetch, f'{{"url": "{pages.url}/index.html"}}')
        result = await executor.execute(fetch, index, ctx())
        missing = await executor.execute(
            fetch, args(fetch, f'{{"url": "{pages.url}/nope.html"}}'), ctx()
        )
    finally:
        executor.close()
    assert result.ok
    assert '"title":"Podium field notes"' in result.content
    assert f"{pages.url}/cpu.html" in result.content
    assert not missing.ok and "404" in missing.content


# -- the CLI's names --------------------------------------------------------------------------


def test_builtin_names_resolve() -> None:
    assert set(BUILTIN_AGENTS) == {
        "react", "order-support", "research", "research-team", "refunds"
    }
    assert resolve_agent("react") is react.agent
    assert resolve_agent("order-support").name == "order-support"
    assert set(resolve_agent("podium.examples.order_support:agent").tools) == {
        "find_orders",
        "get_order",
        "refund",
    }
    try:
        assert resolve_agent("research").name == "research"
    finally:
        if research._server is not None:
            research._server.close()
            research._server = None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "question", "expected"),
    [
        ("react", "What is Podium?", "42 items"),
        ("order-support", "Where is my order A-1002?", "1Z999AA10"),
        ("research", "Summarize the Podium field notes", "Summary of 3 page(s)"),
    ],
)
def test_podium_run_cli(name: str, question: str, expected: str, tmp_path: Path) -> None:
    env = {**os.environ, "PODIUM_DATA_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "run", name, question, "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout
