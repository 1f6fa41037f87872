"""``podium runs … --json`` carries every field of a run, those at their defaults too.

The records leave their default-valued fields out when encoded (smaller checkpoints), and
the CLI printed them as they were: a queued run had no ``"status"``, and a script reading
``run["status"]`` got a KeyError. The real command runs against a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from cli.test_mistakes import Forked
from podium.engine.profile import ProfileSummary
from podium.engine.records import RunFinished, RunRecord
from podium.messages import Usage
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.slow

RUN_FIELDS = set(RunRecord.__struct_fields__)


def runs_json(forked: Forked, *args: str) -> Any:
    out = forked("runs", *args, "--json", cwd=Path.cwd())
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store with a queued run and a finished one (its final entry at its defaults)."""
    path = tmp_path / "runs.sqlite"

    async def fill() -> None:
        async with SQLiteRunStore(path) as runs:
            await runs.create(RunRecord("run_queued", "agent", "hi", created_at=1.0))
            done = RunRecord("run_done", "agent", "hi", created_at=2.0)
            await runs.create(done)
            done.status = "completed"
            await runs.append("run_done", [RunFinished(time.time(), "completed")], record=done)

    asyncio.run(fill())
    return str(path)


def test_list_carries_every_field_of_a_queued_run(store: str, forked: Forked) -> None:
    [listed] = runs_json(forked, "list", "--store", store)
    by_id = {run["run_id"]: run for run in listed}
    queued = by_id["run_queued"]
    assert set(queued) == RUN_FIELDS
    assert queued["status"] == "queued" and queued["steps"] == 0 and queued["output"] is None
    assert set(queued["usage"]) == set(Usage.__struct_fields__)  # nested structs too
    assert by_id["run_done"]["status"] == "completed"


def test_show_and_tail_carry_every_field_too(store: str, forked: Forked) -> None:
    [shown] = runs_json(forked, "show", "run_queued", "--store", store)
    assert set(shown["record"]) == RUN_FIELDS and shown["record"]["status"] == "queued"
    [shown] = runs_json(forked, "show", "run_done", "--store", store)
    [(_, final)] = [(item["seq"], item["entry"]) for item in shown["journal"]]
    assert final == {"type": "final", "ts": final["ts"], "status": "completed", "output": None,
                     "error": None, "reason": None, "structured": False}
    tailed = runs_json(forked, "tail", "run_done", "--store", store)
    assert [item["entry"] for item in tailed] == [final]


def test_profile_carries_every_field(store: str, forked: Forked) -> None:
    [summary] = runs_json(forked, "profile", "--store", store)
    assert set(summary) == set(ProfileSummary.__struct_fields__)
