"""Who counts as a user of a SQLite store file: processes that drive runs, not viewers.

A restarted embedded server resumes the runs its predecessor left only as the file's
sole user. ``podium runs tail`` (or ``list``/``show``) left open on the file used to
count, and the server resumed nothing, for good. Real processes hold the file here.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from podium.engine.records import RunRecord
from podium.errors import StoreError, StoreUnavailableError
from podium.queue.local import LocalQueue
from podium.queue.stranded import requeue_left_behind
from podium.store.sqlite import SQLiteRunStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LINUX = os.path.exists("/proc/locks")  # where the system says who holds a lock

_DRIVER = """
import asyncio, sys
from podium.store.sqlite import SQLiteRunStore

async def main() -> None:
    async with SQLiteRunStore(sys.argv[1]) as store:
        await store.get("nothing")  # in use from its first operation
        print("following", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


@asynccontextmanager
async def holding(*argv: str) -> AsyncIterator[int]:
    """A process started with ``argv`` until it prints a line with "following" (it has
    the store open by then); yields its pid and kills it at the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODIUM_")}
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**env, "COLUMNS": "200"}
    )
    try:
        assert proc.stdout is not None
        seen = b""
        while b"following" not in seen:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, f"it ended before following: {seen.decode()}"
            seen += line
        yield proc.pid
    finally:
        proc.kill()
        await proc.wait()


async def _left_behind(path: Path) -> None:
    """A run a killed server left queued in the file."""
    async with SQLiteRunStore(path) as store:
        await store.create(RunRecord("run_left", "agent", "hi"))


async def test_a_server_starting_while_a_viewer_is_open_resumes_the_runs_left(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite"
    await _left_behind(path)
    tail = [sys.executable, "-m", "podium.cli.main", "runs", "tail", "run_left",
            "--store", str(path)]
    async with holding(*tail), SQLiteRunStore(path) as driver:
        assert driver.sole_user() is True
        assert driver.other_users() == []
        assert await requeue_left_behind(driver, LocalQueue()) == 1


async def test_a_driving_process_still_counts_and_is_named(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    await _left_behind(path)
    async with holding(sys.executable, "-c", _DRIVER, str(path)) as pid, \
            SQLiteRunStore(path) as driver:
        assert driver.sole_user() is False
        assert await requeue_left_behind(driver, LocalQueue()) == 0
        if LINUX:
            assert driver.other_users() == [pid]


async def test_a_read_only_store_looks_and_never_writes(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    await _left_behind(path)
    async with SQLiteRunStore(path, read_only=True) as viewer:
        found = await viewer.get("run_left")
        assert found is not None and found.status == "queued"
        assert viewer.sole_user() is None  # it drives no runs: it resumes nothing
        with pytest.raises(StoreError, match="opened read-only") as refused:
            await viewer.create(RunRecord("run_new", "agent", "hi"))
        assert not isinstance(refused.value, StoreUnavailableError)  # a bug, not an outage
        assert viewer.write_error is None
    missing = tmp_path / "missing.sqlite"
    async with SQLiteRunStore(missing, read_only=True) as viewer:
        with pytest.raises(StoreError, match="cannot open"):
            await viewer.get("run_left")
    assert not missing.exists()  # a viewer creates nothing
