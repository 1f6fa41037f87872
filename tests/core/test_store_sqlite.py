"""The SQLite store keeps the RunStore contract, and a new store on the same file sees it all."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from _helpers import lookup

from podium import (
    Agent,
    Engine,
    RunRecord,
    Scenario,
    SimulatedModel,
)
from podium.engine.records import StepCommitted
from podium.errors import StoreError

sqlite_store = pytest.importorskip("podium.store.sqlite")
SQLiteRunStore = sqlite_store.SQLiteRunStore

pytestmark = pytest.mark.anyio


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


async def test_a_file_from_before_expiry_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE runs (run_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, agent TEXT NOT NULL,"
            " status TEXT NOT NULL, created_at REAL NOT NULL, version INTEGER NOT NULL,"
            " record BLOB NOT NULL) WITHOUT ROWID;"
        )
    conn.close()
    async with SQLiteRunStore(path, finished_ttl_s=60) as store:
        record = RunRecord("r1", "agent", "x")
        await store.create(record)
        record.status = "completed"
        await store.update(record)
        assert [r.run_id for r in await store.list(status="completed")] == ["r1"]


async def test_a_file_that_is_not_sqlite_fails_every_call_at_once(tmp_path: Path) -> None:
    # Before: the database thread died with a traceback and every call waited forever.
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not a database\n" * 100)
    store = SQLiteRunStore(path)
    try:
        with pytest.raises(StoreError, match="cannot open as a SQLite database"):
            await store.get("run_x")
        with pytest.raises(StoreError, match="cannot open as a SQLite database"):
            await store.create(RunRecord("run_x", "a", "hi"))
    finally:
        await store.aclose()
    assert path.read_bytes().startswith(b"this is not a database")  # left as it was


async def test_handles_opening_a_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """A server and a CLI, or two workers, starting on a new file at the same moment race
    to switch it to WAL; SQLite answers the loser "database is locked" at once. (Before:
    about one new file in ten failed one of three handles.) Forty new files, four handles
    each, opened together: every handle opens, and they all see one run written."""
    for i in range(40):
        path = tmp_path / f"runs-{i}.sqlite"
        stores = [SQLiteRunStore(path) for _ in range(4)]
        try:
            await asyncio.gather(*(store.get("run_x") for store in stores))
            await stores[0].create(RunRecord("run_x", "a", "hi"))
            found = await asyncio.gather(*(store.get("run_x") for store in stores))
            assert all(r is not None and r.run_id == "run_x" for r in found)
        finally:
            for store in stores:
                await store.aclose()


_HOLDER = """
import asyncio, sys
from podium.store.sqlite import SQLiteRunStore

async def main() -> None:
    store = SQLiteRunStore(sys.argv[1])
    await store.get("nothing")  # in use from its first operation
    print("ready", flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_sole_user_tells_whether_another_process_has_the_file(tmp_path: Path) -> None:
    """Each process using a file counts until it closes the store or dies (SIGKILL too):
    an embedded server resumes what an earlier one left only when it is alone."""
    import sys

    path = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(path) as store:
        assert store.sole_user()
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _HOLDER, str(path), stdout=asyncio.subprocess.PIPE
        )
        try:
            assert holder.stdout is not None
            assert await holder.stdout.readline() == b"ready\n"
            assert not store.sole_user()
            assert not store.sole_user()  # asking does not lose this process's own place
        finally:
            holder.kill()
            await holder.wait()
        assert store.sole_user()  # the kernel let go of the killed process's lock
        async with SQLiteRunStore(path) as other:
            await other.get("nothing")
            assert not store.sole_user() and not other.sole_user()
        assert store.sole_user()
    assert SQLiteRunStore(":memory:").sole_user()


async def test_a_restarted_server_requeues_no_child_run(tmp_path: Path) -> None:
    """An embedded server's start-up requeue leaves child runs to their parents: a child
    queued on its own was driven as a top-level run (dead-lettered when its agent is not
    served at the top, driven twice when it is; found from the outside)."""
    from podium.engine.records import RunRecord
    from podium.queue.local import LocalQueue
    from podium.queue.stranded import requeue_left_behind

    async with SQLiteRunStore(tmp_path / "runs.sqlite") as store:
        await store.create(RunRecord("parent", "team", "go", status="running"))
        await store.create(RunRecord("parent.0.0", "worker", "sub", status="running",
                                     parent_run_id="parent", parent_call="0:0"))
        queue = LocalQueue()
        assert await requeue_left_behind(store, queue) == 1
        claims = await queue.claim("c", count=10, block_s=0)
        assert [c.item.run_id for c in claims] == ["parent"]
