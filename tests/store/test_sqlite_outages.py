"""The SQLite store's medium failing under it: a full disk, a file deleted or replaced.

A full disk is an outage, not a bug: the write is refused with StoreUnavailableError
(a 503 with Retry-After at the gateway, a wait in the workers), and ``write_error`` says
so until a write succeeds again. SQLite's ``PRAGMA max_page_count`` makes the file
"full" exactly where the test says: SQLite answers SQLITE_FULL, as on a full disk.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from podium.engine.records import RunRecord
from podium.errors import StoreError, StoreUnavailableError
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio


async def _cap_pages(store: SQLiteRunStore, extra: int) -> None:
    """Let the store's own connection grow the file by ``extra`` pages at most (the limit
    is per connection, so it is set through the store's database thread)."""

    def cap(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + extra}")

    await store._submit(cap)


async def test_a_full_disk_is_an_outage_said_until_a_write_succeeds(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(path) as store:
        await store.create(RunRecord("run_small", "agent", "hi"))
        assert store.write_error is None
        await _cap_pages(store, 0)
        with pytest.raises(StoreUnavailableError) as refused:
            await store.create(RunRecord("run_big", "agent", "x" * 100_000))
        message = str(refused.value)
        assert str(path) in message and "the disk is full" in message, message
        assert isinstance(refused.value, StoreError)  # what callers of a store catch
        assert await store.get("run_big") is None  # nothing of the refused write
        assert store.write_error == message
        assert await store.get("run_small") is not None
        assert store.write_error == message  # a read proves nothing about the room left
        await _cap_pages(store, 1000)  # space freed
        await store.create(RunRecord("run_big", "agent", "x" * 100_000))
        assert store.write_error is None
        found = await store.get("run_big")
        assert found is not None and found.input == "x" * 100_000


async def test_other_sqlite_errors_stay_plain_store_errors(tmp_path: Path) -> None:
    """Only the medium's failures are outages: a bug (here a missing table) is not."""
    async with SQLiteRunStore(tmp_path / "runs.sqlite") as store:

        def broken(conn: sqlite3.Connection) -> None:
            conn.execute("SELECT * FROM no_such_table")

        with pytest.raises(StoreError) as failed:
            await store._submit(broken)
        assert not isinstance(failed.value, StoreUnavailableError)
        assert "no such table" in str(failed.value)
        assert store.write_error is None


async def test_file_problem_tells_a_file_deleted_or_replaced_under_the_store(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite"
    store = SQLiteRunStore(path)
    assert store.file_problem() is None  # not opened yet: nothing to compare
    async with store:
        await store.create(RunRecord("run_a", "agent", "hi"))
        assert store.file_problem() is None
        copy = tmp_path / "copy.sqlite"
        shutil.copyfile(path, copy)
        os.unlink(path)
        problem = store.file_problem()
        assert problem is not None and str(path) in problem and "deleted" in problem
        await store.create(RunRecord("run_b", "agent", "hi"))  # the store goes on…
        assert "deleted" in (store.file_problem() or "")  # …and keeps saying it
        os.replace(copy, path)  # a restore: another file at the same path
        problem = store.file_problem()
        assert problem is not None and str(path) in problem and "replaced" in problem
    async with SQLiteRunStore(path) as fresh:  # a restart opens the file that is there
        await fresh.get("run_a")
        assert fresh.file_problem() is None
    assert SQLiteRunStore(":memory:").file_problem() is None


class Recording(SQLiteRunStore):
    """The real store, remembering the CPU each journal write says it spent."""

    spent: list[int]

    async def append(self, run_id, entries, *, record=None):  # type: ignore[no-untyped-def]
        off_loop = await super().append(run_id, entries, record=record)
        self.spent.append(off_loop or 0)
        return off_loop


async def test_the_database_threads_cpu_is_the_checkpoints_not_a_wait(tmp_path: Path) -> None:
    """The store's writes run on its own thread: their CPU (statements, the commit) was
    counted as the checkpoint's waiting (60 µs a step: more than the engine's own CPU).
    Each write now says its share, and the run's checkpoint phase counts it as CPU."""
    from podium import Engine
    from podium.examples import react

    store = Recording(tmp_path / "runs.sqlite")
    store.spent = []
    async with store, Engine(store) as engine:
        record = await engine.run(react.agent, "Find podium")
    assert record.status == "completed" and record.profile is not None
    assert store.spent and all(ns > 0 for ns in store.spent), store.spent
    checkpoint_cpu = sum(step.cpu_ns[5] for step in record.profile.steps)
    assert checkpoint_cpu >= sum(store.spent[1:])  # (the first write creates the run)
