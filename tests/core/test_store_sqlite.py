"""The SQLite store keeps the RunStore contract, and a new store on the same file sees it all."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from podium import (
    Agent,
    Engine,
    MemoryRunStore,
    RunRecord,
    RunStore,
    Scenario,
    SimulatedModel,
    tool,
)
from podium.engine.records import RunFinished, StepCommitted
from podium.errors import RunNotFoundError, StoreError

sqlite_store = pytest.importorskip("podium.store.sqlite")
SQLiteRunStore = sqlite_store.SQLiteRunStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    s: RunStore = (
        MemoryRunStore() if request.param == "memory" else SQLiteRunStore(tmp_path / "runs.sqlite")
    )
    async with s:
        yield s


async def test_create_get_update(store: RunStore) -> None:
    record = RunRecord("r1", "agent", "hello", tenant="t1", metadata={"k": "v"})
    await store.create(record)
    got = await store.get("r1")
    assert got is not None
    assert (got.run_id, got.agent, got.input, got.status, got.metadata) == (
        "r1",
        "agent",
        "hello",
        "queued",
        {"k": "v"},
    )
    record.status = "running"
    await store.update(record)
    got = await store.get("r1")
    assert got is not None and got.status == "running" and got.version == record.version >= 1
    assert await store.get("nope") is None
    with pytest.raises(StoreError):
        await store.create(RunRecord("r1", "agent", "again"))
    with pytest.raises(RunNotFoundError):
        await store.update(RunRecord("nope", "a", ""))


async def test_append_and_journal_in_order(store: RunStore) -> None:
    await store.create(RunRecord("r1", "agent", "hello"))
    await store.create(RunRecord("r2", "agent", "other"))
    await store.append("r1", [StepCommitted(0, 1.0), StepCommitted(1, 2.0)])
    await store.append("r2", [StepCommitted(7, 1.5)])
    record = RunRecord("r1", "agent", "hello", status="completed", output="x")
    await store.append("r1", [RunFinished(3.0, "completed", output="x")], record=record)
    items = await store.journal("r1")
    assert [seq for seq, _ in items] == [0, 1, 2]
    assert items[0][1] == StepCommitted(0, 1.0)
    assert items[2][1] == RunFinished(3.0, "completed", output="x")
    assert [seq for seq, _ in await store.journal("r1", after=1)] == [2]
    assert [e for _, e in await store.journal("r2")] == [StepCommitted(7, 1.5)]
    got = await store.get("r1")
    assert got is not None and (got.status, got.output) == ("completed", "x")
    assert await store.journal("r1", after=2) == []
    with pytest.raises(RunNotFoundError):
        await store.journal("nope")


async def test_append_to_an_unknown_run_is_refused(store: RunStore) -> None:
    with pytest.raises(RunNotFoundError):
        await store.append("nope", [StepCommitted(0, 1.0)])


async def test_list_filters_newest_first(store: RunStore) -> None:
    await store.create(RunRecord("a", "x", "1", tenant="t1", created_at=1.0))
    await store.create(RunRecord("b", "y", "2", tenant="t2", created_at=2.0))
    await store.create(RunRecord("c", "x", "3", tenant="t1", created_at=3.0, status="completed"))
    assert [r.run_id for r in await store.list()] == ["c", "b", "a"]
    assert [r.run_id for r in await store.list(tenant="t1")] == ["c", "a"]
    assert [r.run_id for r in await store.list(agent="y")] == ["b"]
    assert [r.run_id for r in await store.list(status="completed")] == ["c"]
    assert [r.run_id for r in await store.list(tenant="t1", status="queued")] == ["a"]
    assert [r.run_id for r in await store.list(limit=2)] == ["c", "b"]


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"


def react(steps: int = 3) -> Agent:
    return Agent(
        "react",
        SimulatedModel(Scenario.react("lookup", {"query": "q"}, tool_steps=steps)),
        tools=[lookup],
        max_steps=steps + 2,
    )


async def test_reopened_store_sees_the_same_runs(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(path) as store, Engine(store) as engine:
        done = await engine.run(react(), "go")
        queued = await engine.create(react(), "later")
        journal = await store.journal(done.run_id)
    async with SQLiteRunStore(path) as store:
        got = await store.get(done.run_id)
        assert got is not None
        assert (got.status, got.output, got.steps) == ("completed", "Done.", 4)
        assert got.profile is not None and len(got.profile.steps) == 4
        assert await store.journal(done.run_id) == journal
        assert {r.run_id for r in await store.list()} == {done.run_id, queued.run_id}
        # Appending continues the sequence where the first store left it.
        await store.append(done.run_id, [StepCommitted(99, 1.0)])
        seqs = [seq for seq, _ in await store.journal(done.run_id)]
        assert seqs == list(range(len(journal) + 1))
        # And a queued run can be driven by a new engine.
        async with Engine(store) as engine:
            finished = await engine.execute(react(), queued)
        assert finished.status == "completed"


async def test_journal_table_layout(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(path) as store, Engine(store) as engine:
        record = await engine.run(react(2), "go")
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT seq, step, kind, length(data) FROM journal WHERE run_id = ? ORDER BY seq",
            (record.run_id,),
        ).fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    conn.close()
    assert mode == "wal"
    assert [r[0] for r in rows] == list(range(len(rows)))
    assert all(r[3] > 0 for r in rows)
    assert rows[-1][2] == "RunFinished"


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    await store.create(RunRecord("r1", "a", "x"))
    await store.aclose()
    with pytest.raises(StoreError):
        await store.get("r1")
