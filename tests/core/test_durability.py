"""Durability on the SQLite store: a SIGKILLed run resumes without repeating completed calls;
checkpoints cost the same at step 200 as at step 1; a store survives its process."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from podium import Agent, Engine, RunRecord, Scenario, SimulatedModel, tool

pytest.importorskip("podium.store.sqlite")
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("_crash_agent.py")


def agent_process(db: Path, log: Path, run_id: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(db), str(log), run_id, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> RunRecord:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return msgspec.json.decode(out.strip().splitlines()[-1], type=RunRecord)


def test_sigkill_at_step_3_then_resume(tmp_path: Path) -> None:
    db, log, run_id = tmp_path / "runs.sqlite", tmp_path / "calls.log", "run_crash_1"
    proc = agent_process(db, log, run_id, "first")
    try:
        deadline = time.monotonic() + 60
        while True:  # a subprocess can only be polled: wait for step 3 to be underway
            lines = log.read_text().splitlines() if log.exists() else []
            if "block first" in lines and "journaled recorded s3" in lines:
                break
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, lines
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL

    final = finish(agent_process(db, log, run_id, "resume"))
    assert (final.status, final.output, final.steps) == ("completed", "all recorded", 6)
    # Every step's profile, once: the ones journaled before the kill, the step that was cut
    # off (carried on from its journaled turn) and the ones after.
    assert final.profile is not None
    assert [s.step for s in final.profile.steps] == list(range(6))
    assert all(len(s.wall_ns) == 6 and min(s.wall_ns) >= 0 for s in final.profile.steps)

    lines = log.read_text().splitlines()
    executions = Counter(line.split()[1] for line in lines if line.startswith("record "))
    assert executions == Counter({"s0": 1, "s1a": 1, "s1b": 1, "s2": 1, "s3": 1, "s4": 1})
    assert [line for line in lines if line.startswith("block")] == ["block first", "block resume"]
    keys = [line.split()[2] for line in lines if line.startswith("record ")]
    assert len(set(keys)) == len(keys)
    assert f"{run_id}:3:0" in keys

    with sqlite3.connect(db) as conn:
        status = conn.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
    conn.close()
    assert status == "completed"


def test_store_survives_its_process(tmp_path: Path) -> None:
    db, log, run_id = tmp_path / "runs.sqlite", tmp_path / "calls.log", "run_full_1"
    final = finish(agent_process(db, log, run_id, "full"))
    assert final.status == "completed"

    import asyncio

    async def read() -> tuple[RunRecord | None, int]:
        async with SQLiteRunStore(db) as store:
            return await store.get(run_id), len(await store.journal(run_id))

    record, entries = asyncio.run(read())
    assert record is not None
    assert (record.status, record.output, record.steps) == ("completed", "all recorded", 6)
    assert record.usage == final.usage
    assert entries >= 6


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"Result for {query}: 42 items found."


STEPS = 200


@pytest.mark.anyio
async def test_checkpoint_bytes_per_step_stay_flat(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite"
    agent = Agent(
        "long",
        SimulatedModel(Scenario.react("lookup", {"query": "podium"}, tool_steps=STEPS - 1)),
        tools=[lookup],
        max_steps=STEPS + 1,
    )
    async with SQLiteRunStore(db) as store, Engine(store) as engine:
        record = await engine.run(agent, "go")
    assert (record.status, record.steps) == ("completed", STEPS)
    with sqlite3.connect(db) as conn:
        per_step = dict(
            conn.execute(
                "SELECT step, SUM(length(data)) FROM journal WHERE run_id = ? AND step >= 0 "
                "GROUP BY step ORDER BY step",
                (record.run_id,),
            ).fetchall()
        )
    conn.close()
    tool_steps = sorted(s for s in per_step if s < STEPS - 1)
    first = sum(per_step[s] for s in tool_steps[:10]) / 10
    last = sum(per_step[s] for s in tool_steps[-10:]) / 10
    assert last <= 1.5 * first, (first, last)
