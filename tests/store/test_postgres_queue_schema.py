"""The PostgreSQL queue's tables from the command line and from a queue: ``podium db
upgrade --queue`` creates them beside the store's, ``db status`` reports both, and a queue
that meets another version of them refuses with one line naming what to run."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.test_mistakes import podium
from podium.queue.postgres import PostgresQueue
from podium.queue.postgres_schema import SCHEMA_VERSION, TABLES
from podium.store.postgres_schema import SchemaMismatchError
from postgres_fixtures import count_sql, postgres_skip_reason, run_sql

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


def test_db_upgrade_creates_the_queue_tables_when_asked(
    fresh_postgres: str, tmp_path: Path
) -> None:
    plain = podium("db", "upgrade", "--store", fresh_postgres, cwd=tmp_path)
    assert plain.returncode == 0 and "queue" not in plain.stdout, plain.stdout
    assert count_sql(fresh_postgres, "SELECT count(*) FROM pg_tables WHERE tablename = "
                     "'podium_queue'") == 0  # a Redis-queued deployment never gets them
    done = podium("db", "upgrade", "--queue", "--store", fresh_postgres, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"queue tables upgraded from version 0 to {SCHEMA_VERSION}" in done.stdout
    names = ",".join(f"'{t}'" for t in TABLES)
    assert count_sql(fresh_postgres, "SELECT count(*) FROM pg_tables WHERE tablename IN "
                     f"({names})") == len(TABLES)
    again = podium("db", "upgrade", "--store", fresh_postgres, cwd=tmp_path)  # found: kept up
    assert f"queue tables at version {SCHEMA_VERSION}, nothing to do" in again.stdout
    status = podium("db", "status", "--store", fresh_postgres, cwd=tmp_path)
    assert f"queue tables version {SCHEMA_VERSION}, this Podium's {SCHEMA_VERSION} " \
        "(up to date)" in status.stdout, status.stdout


@pytest.mark.anyio
async def test_a_queue_refuses_tables_of_another_version(fresh_postgres: str) -> None:
    async with PostgresQueue(fresh_postgres) as queue:
        assert await queue.depth() == 0  # made them
    run_sql(fresh_postgres, f"INSERT INTO podium_queue_schema VALUES ({SCHEMA_VERSION + 1})")
    async with PostgresQueue(fresh_postgres) as queue:
        with pytest.raises(SchemaMismatchError, match="newer than this Podium's"):
            await queue.depth()


def test_a_worker_on_a_queue_of_another_version_says_so(
    fresh_postgres: str, tmp_path: Path
) -> None:
    assert podium("db", "upgrade", "--queue", "--store", fresh_postgres,
                  cwd=tmp_path).returncode == 0
    run_sql(fresh_postgres, f"INSERT INTO podium_queue_schema VALUES ({SCHEMA_VERSION + 1})")
    out = podium("worker", "--queue", fresh_postgres, "--agent", "react", "--burst",
                 "--burst-patience", "5", cwd=tmp_path)
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode != 0
    assert "queue tables are version" in out.stderr, out.stderr
