"""/readyz and the requests that write, on a SQLite store whose medium fails: a full disk
(SQLite's ``max_page_count`` makes the file "full" where the test says: SQLITE_FULL, as
on a full disk) and a file deleted under the server. A read alone said ready on both;
POST /v1/runs answered 500 "internal" with tracebacks for a full disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import gateway_client
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio


async def _cap_pages(store: SQLiteRunStore, extra: int) -> None:
    def cap(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + extra}")

    await store._submit(cap)


async def test_a_full_disk_is_a_503_and_not_ready_until_there_is_room(tmp_path: Path) -> None:
    store = SQLiteRunStore(tmp_path / "runs.sqlite")
    async with gateway_client(store=store) as (_, client):
        assert (await client.get("/readyz")).status_code == 200
        await _cap_pages(store, 0)
        r = await client.post("/v1/runs", json={"agent": "react", "input": "x" * 200_000})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["type"] == "unavailable" and "Retry-After" in r.headers
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert "the disk is full" in ready.json()["checks"]["store"]
        await _cap_pages(store, 10_000)  # room again
        r = await client.post("/v1/runs", json={"agent": "react", "input": "x" * 200_000})
        assert r.status_code == 202, r.text
        assert (await client.get("/readyz")).status_code == 200


async def test_a_store_file_deleted_under_the_server_is_not_ready(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    async with gateway_client(store=SQLiteRunStore(path)) as (_, client):
        assert (await client.get("/readyz")).status_code == 200
        for leftover in ("runs.sqlite", "runs.sqlite-wal", "runs.sqlite-shm"):
            (tmp_path / leftover).unlink(missing_ok=True)  # a clean-up script's rm
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert "was deleted while the store had it open" in ready.json()["checks"]["store"]
