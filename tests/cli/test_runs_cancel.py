"""``podium runs cancel``: the way out of a run no server can be started for (one whose
tool ends every server that takes it up), or one a dead server left behind. The real
command, on a real SQLite file; "another process" is a real subprocess holding it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.test_mistakes import podium
from podium.engine.records import RunFinished, RunRecord, StepRecord
from podium.messages import Message, Usage
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.slow


def podium_runs(*args: str, path: Path) -> subprocess.CompletedProcess[str]:
    return podium("runs", *args, "--store", str(path), cwd=path.parent)


def fill(path: Path) -> None:
    """``run_left``: running, one step journaled (its record has no counts: a dead server
    left it); ``run_queued``; ``run_done``: completed."""

    async def write() -> None:
        async with SQLiteRunStore(path) as store:
            left = RunRecord("run_left", "agent", "hi", status="running", started_at=1.0)
            await store.create(left)
            step = StepRecord(0, time.time(), Message("assistant", "hm"), usage=Usage(7, 3, 0, 1))
            await store.append("run_left", [step])
            await store.create(RunRecord("run_queued", "agent", "hi"))
            done = RunRecord("run_done", "agent", "hi")
            await store.create(done)
            done.status = "completed"
            await store.append("run_done", [RunFinished(time.time(), "completed")], record=done)

    asyncio.run(write())


def stored(path: Path, run_id: str) -> RunRecord:
    async def read() -> RunRecord:
        async with SQLiteRunStore(path, read_only=True) as store:
            record = await store.get(run_id)
            assert record is not None
            return record

    return asyncio.run(read())


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """Another process driving runs on the file (a podium serve, say)."""
    path = tmp_path / "runs.sqlite"
    fill(path)
    code = (
        "import asyncio, sys\n"
        "from podium.store.sqlite import SQLiteRunStore\n"
        "async def main():\n"
        "    async with SQLiteRunStore(sys.argv[1]) as store:\n"
        "        store.sole_user()\n"
        "        print('holding', flush=True)\n"
        "        sys.stdin.readline()\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    try:
        yield path, proc
    finally:
        proc.communicate("\n", timeout=30)


def test_a_run_nobody_drives_ends_at_once_with_its_counts(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    fill(path)
    out = podium_runs("cancel", "run_left", "--json", path=path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"run_id": "run_left", "status": "cancelled",
                                      "cancel": "cancelled"}
    record = stored(path, "run_left")
    assert (record.status, record.reason, record.steps) == ("cancelled", "cancelled", 1)
    assert record.usage.input_tokens == 7


def test_a_running_run_another_process_may_drive_gets_a_request(
    holder: tuple[Path, subprocess.Popen[str]],
) -> None:
    path, proc = holder
    out = podium_runs("cancel", "run_left", path=path)
    assert out.returncode == 0, out.stderr
    assert "cancel requested: another process" in out.stdout
    if Path("/proc/locks").exists():
        assert f"(pid {proc.pid})" in out.stdout
    assert stored(path, "run_left").status == "running"  # its driver ends it

    async def requested() -> set[str]:
        async with SQLiteRunStore(path, read_only=True) as store:
            return await store.cancel_requests(["run_left"])

    assert asyncio.run(requested()) == {"run_left"}


def test_a_queued_run_ends_even_with_a_server_on_the_file(
    holder: tuple[Path, subprocess.Popen[str]],
) -> None:
    path, _ = holder
    out = podium_runs("cancel", "run_queued", path=path)
    assert out.returncode == 0, out.stderr
    assert stored(path, "run_queued").status == "cancelled"


@pytest.mark.parametrize(("run_id", "said"), [("run_done", "already completed"),
                                              ("run_nope", "no run 'run_nope'")])
def test_what_cannot_be_cancelled_is_one_line(tmp_path: Path, run_id: str, said: str) -> None:
    path = tmp_path / "runs.sqlite"
    fill(path)
    out = podium_runs("cancel", run_id, path=path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
