"""``--archive`` / ``server.archive`` mistakes are one line each, before anything starts;
``podium runs --archive`` finds a run that is in PostgreSQL only."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from cli.test_mistakes import assert_one_line_error, podium
from podium.engine.records import RunRecord
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason

pytestmark = pytest.mark.slow

REDIS = "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(("args", "needle"), [
    (["worker", "--redis", REDIS, "--agent", "react", "--archive", "redis://x:1/0"],
     "--archive: a postgresql:// URL"),
    (["worker", "--redis", REDIS, "--agent", "react", "--archive", "postgresql://a@h:x/db"],
     "--archive: "),
    (["serve", "--archive", "postgresql://postgres@127.0.0.1:5432/postgres"],
     "it needs server.redis"),
    (["runs", "list", "--store", "runs.sqlite", "--archive",
      "postgresql://postgres@127.0.0.1:5432/postgres"], "goes with a Redis store"),
])
def test_a_wrong_archive_is_one_line(args: list[str], needle: str, tmp_path: Path) -> None:
    (tmp_path / "runs.sqlite").write_bytes(b"")
    assert_one_line_error(podium(*args, cwd=tmp_path), needle)


@pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or "")
def test_runs_show_reads_an_archived_run(fresh_postgres: str, tmp_path: Path) -> None:
    async def archived() -> None:
        async with PostgresRunStore(fresh_postgres) as store:
            record = RunRecord("run-archived", "react", "hello", status="completed")
            await store.create(record)

    asyncio.run(archived())
    prefix = f"arch-{uuid.uuid4().hex[:8]}"  # an empty Redis: the run is in PostgreSQL only
    out = podium("runs", "show", "run-archived", "--redis", REDIS, "--prefix", prefix,
                 "--archive", fresh_postgres, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["record"]["status"] == "completed", out.stdout
