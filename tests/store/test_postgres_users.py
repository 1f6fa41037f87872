"""``sole_user`` on PostgreSQL: an embedded server resumes left-behind runs only when no
other process drives runs on the database; another one (not a viewer) is seen by its pid."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import pytest

from podium.store.postgres import PostgresRunStore
from postgres_fixtures import count_sql, postgres_skip_reason

pytestmark = pytest.mark.skipif(
    postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""
)

CHILD = """
import asyncio, sys
from podium.store.postgres import PostgresRunStore
async def main():
    async with PostgresRunStore(sys.argv[1], schema=sys.argv[2]) as store:
        await store.list(limit=1)
        print("open", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
asyncio.run(main())
"""


def _users(url: str, schema: str, **options: bool) -> tuple[bool | None, bool | None, list[int]]:
    """(sole_user before the first call, after it, other_users) of a new store."""

    async def look() -> tuple[bool | None, bool | None, list[int]]:
        async with PostgresRunStore(url, schema=schema, **options) as store:
            before = store.sole_user()
            await store.list(limit=1)
            return before, store.sole_user(), store.other_users()

    return asyncio.run(look())


def test_a_store_knows_when_another_process_drives_runs(postgres_url: str) -> None:
    schema = f"users_{uuid.uuid4().hex[:10]}"
    child = subprocess.Popen([sys.executable, "-c", CHILD, postgres_url, schema],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "open\n"
        before, alone, others = _users(postgres_url, schema)
        assert before is None  # not opened yet: it cannot tell
        assert alone is False and child.pid in others
        assert _users(postgres_url, schema, create_schema=False)[1] is None  # a viewer
    finally:
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    # Its backends end a moment after it closed them: wait until they have.
    deadline = time.monotonic() + 30
    while count_sql(postgres_url, "SELECT count(*) FROM pg_stat_activity WHERE "
                    f"application_name LIKE 'podium:%:{child.pid}'"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _users(postgres_url, schema)[1:] == (True, [])
