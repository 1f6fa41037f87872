"""`podium runs list|show|tail|profile`, run as a real command against SQLite and Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from observe_agents import support
from runs_fixture import fill

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.observe.inspect import RunFilter, find_runs
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.redis import RedisRunStore
from podium.store.sqlite import SQLiteRunStore

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio


def podium(*args: str, columns: str = "200") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "runs", *args],
        capture_output=True, text=True, env=subprocess_env(COLUMNS=columns), timeout=60,
    )


def as_json(*args: str) -> Any:
    out = podium(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(params=["sqlite", "redis"])
async def store_args(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[list[str], RunStore, list[Any]]]:
    if request.param == "sqlite":
        path = tmp_path / "runs.sqlite"
        args = ["--store", f"sqlite:{path}"]
        store: RunStore = SQLiteRunStore(path)
    else:
        redis_url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("prefix")
        args = ["--redis", redis_url, "--prefix", prefix]
        store = RedisRunStore(redis_url, prefix=prefix)
    async with store:
        records = await fill(store)
        yield args, store, records


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_list_filters_by_status_tenant_agent_and_time(
    store_args: tuple[list[str], RunStore, list[Any]],
) -> None:
    args, _, records = store_args
    everything = as_json("list", *args)
    assert {r["run_id"] for r in everything} == {r.run_id for r in records}
    completed = as_json("list", *args, "--status", "completed")
    assert len(completed) == 3 and all(r["status"] == "completed" for r in completed)
    globex = as_json("list", *args, "--tenant", "globex")
    assert [r["run_id"] for r in globex] == [records[2].run_id]
    assert as_json("list", *args, "--agent", "nobody") == []
    assert len(as_json("list", *args, "--since", "1h")) == 4
    assert as_json("list", *args, "--until", "1h") == []
    assert len(as_json("list", *args, "--limit", "2")) == 2
    table = podium("list", *args, "--status", "queued")
    assert table.returncode == 0, table.stderr
    assert records[3].run_id in table.stdout and "queued" in table.stdout
    # Piped output on an 80-column default: whole rows, each a run id and its figures.
    narrow = podium("list", *args, columns="80")
    assert narrow.returncode == 0, narrow.stderr
    for r in records:
        row = next(line for line in narrow.stdout.splitlines() if r.run_id in line)
        assert r.status in row and r.tenant in row, row


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_show_prints_the_messages_and_the_step_timeline(
    store_args: tuple[list[str], RunStore, list[Any]],
) -> None:
    args, _, records = store_args
    run_id = records[0].run_id
    out = podium("show", run_id, *args)
    assert out.returncode == 0, out.stderr
    for text in ("where is order A-0?", "→ lookup", "order A-1: shipped", "It shipped.",
                 "step timeline", "completed"):
        assert text in out.stdout, (text, out.stdout)
    shown = as_json("show", run_id, *args)
    assert shown["record"]["status"] == "completed"
    assert [t["step"] for t in shown["timeline"]] == [0, 1]
    starts = [t["start_ms"] for t in shown["timeline"]]
    assert starts[1] >= starts[0]
    for verb in ("show", "tail"):
        missing = podium(verb, "run_nope", *args)
        assert missing.returncode == 2, missing
        assert "error: no run 'run_nope' in this store" in missing.stderr, missing.stderr


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_profile_sums_the_runs_and_writes_a_report(
    store_args: tuple[list[str], RunStore, list[Any]], tmp_path: Path
) -> None:
    args, _, _ = store_args
    summary = as_json("profile", *args, "--tenant", "acme")
    assert summary["runs"] == 2 and summary["steps"] == 4
    report = tmp_path / "profile.html"
    out = podium("profile", *args, "--report", str(report))
    assert out.returncode == 0, out.stderr
    assert "tools" in out.stdout and "checkpoint" in out.stdout
    page = report.read_text()
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 5
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_tail_follows_a_live_run_to_its_end(
    store_args: tuple[list[str], RunStore, list[Any]],
) -> None:
    args, store, _ = store_args
    agent = support()
    async with Engine(store) as engine:
        record = await engine.create(agent, "follow me")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podium.cli.main", "runs", "tail", record.run_id, *args,
            "--timeout", "60", env=subprocess_env(COLUMNS="200"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        first = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert record.run_id.encode() in first  # following, before the run has started
        await engine.execute(agent, record)
        rest, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    text = rest.decode()
    assert "→ lookup" in text and "It shipped." in text
    assert text.rstrip().endswith(f"{record.run_id} completed")


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_the_time_window_reaches_past_the_newest_ten_thousand_runs() -> None:
    store = MemoryRunStore()
    for i in range(10_050):
        await store.create(RunRecord(f"r{i}", "a", "x", created_at=1000.0 + i))
    oldest = await find_runs(store, RunFilter(until=1002.0))
    assert [r.run_id for r in oldest] == ["r2", "r1", "r0"]
    window = await find_runs(store, RunFilter(since=1010.0, until=1020.0, limit=3))
    assert [r.run_id for r in window] == ["r20", "r19", "r18"]


def test_a_missing_store_is_an_error_not_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "typo.sqlite"
    out = podium("list", "--store", str(path))
    assert out.returncode == 2 and "no such SQLite store" in out.stderr
    assert not path.exists()
    assert podium("list").returncode == 2


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("list", "--redis", "localhost:6379"), "Redis URL 'localhost:6379' is malformed"),
        (("show", "run_x", "--store", "redis://h:port6379/0"), "is malformed"),
        (("list", "--store", "x.sqlite", "--since", "last week"), "is not a time"),
        (("list", "--store", "x.sqlite", "--limit", "0"), "--limit: must be at least 1"),
    ],
    ids=["redis-url", "store-url", "since", "limit"],
)
def test_clumsy_input_is_one_line_not_a_traceback(
    args: tuple[str, ...], said: str, tmp_path: Path
) -> None:
    (tmp_path / "x.sqlite").write_bytes(b"")
    out = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "runs", *args], cwd=tmp_path,
        capture_output=True, text=True, env=subprocess_env(COLUMNS="200"), timeout=60,
    )
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and said in out.stderr, out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("redis", "error: redis unavailable: "),
        ("missing", "no such SQLite store"),
        ("directory", "is a directory, not a SQLite store"),
        ("not-sqlite", "cannot open as a SQLite database: file is not a database"),
        # A read-only verb gave these Podium's tables and WAL mode (found from the outside).
        ("foreign", "not a Podium run store (a SQLite database without Podium's runs"),
        ("empty", "not a Podium run store (an empty file)"),
    ],
    ids=["redis-down", "missing", "directory", "not-sqlite", "foreign", "empty"],
)
@pytest.mark.parametrize(
    "verb", [("list",), ("show", "run_x"), ("tail", "run_x"), ("profile",)],
    ids=["list", "show", "tail", "profile"],
)
def test_a_store_that_cannot_be_reached_is_one_line(
    verb: tuple[str, ...], store: str, said: str, tmp_path: Path
) -> None:
    (tmp_path / "not.sqlite").write_text("this is not a database\n")
    foreign = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(foreign)) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
        db.commit()
    before = foreign.read_bytes()
    (tmp_path / "empty.db").write_bytes(b"")
    spec = {
        "redis": f"redis://127.0.0.1:{_free_port()}/0",  # nothing listens there
        "missing": f"sqlite:{tmp_path / 'typo.sqlite'}",
        "directory": str(tmp_path),
        "not-sqlite": str(tmp_path / "not.sqlite"),
        "foreign": str(foreign),
        "empty": str(tmp_path / "empty.db"),
    }[store]
    # 80 columns: a long message is still one line, never wrapped into two.
    out = podium(*verb, "--store", spec, columns="80")
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr
    assert len(lines) == 1, out.stderr
    assert said in lines[0] and lines[0].count("unavailable") <= 1, lines[0]
    # Looked at, never written: no byte changed, no WAL, shared-memory or lock file beside.
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("app", "empty"))) \
        == ["app.db", "empty.db"]
    assert (tmp_path / "empty.db").read_bytes() == b""


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_running_run_shows_its_steps_and_tokens_so_far(
    store_args: tuple[list[str], RunStore, list[Any]],
) -> None:
    """Its record is written with them at its end: read as stored, a running run said
    0 steps, 0 ms and 0 tokens in `runs list`, `runs show` and GET /v1/runs/{id} (found
    from the outside); only the journal had them."""
    from podium import Agent, FunctionModel, tool, tool_call_reply

    args, store, _ = store_args
    parked, second, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

    @tool
    async def wait_here(query: str) -> str:
        """Wait.

        Args:
            query: Ignored.
        """
        if parked.is_set():  # the second call (step 0 is journaled): park the run here
            second.set()
            await release.wait()
        parked.set()
        return "ok"

    agent = Agent("stepper", FunctionModel(
        lambda m, r: tool_call_reply(("wait_here", {"query": "x"})) if r.step < 2 else "done"),
        tools=[wait_here])
    async with Engine(store) as engine:
        record = await engine.create(agent, "go")
        run = asyncio.create_task(engine.execute(agent, record))
        await asyncio.wait_for(second.wait(), 30)
        listed = [r for r in await asyncio.to_thread(as_json, "list", *args)
                  if r["run_id"] == record.run_id]
        shown = (await asyncio.to_thread(as_json, "show", record.run_id, *args))["record"]
        release.set()
        await run
    for seen in (listed[0], shown):
        assert seen["status"] == "running" and seen["steps"] == 1, seen
        assert seen["usage"]["requests"] == 1, seen  # step 0's model call
    assert shown["profile"] is not None
