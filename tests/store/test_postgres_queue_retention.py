"""A month of uptime on the PostgreSQL queue: nothing it keeps grows with the runs served.
A run's queue row and its last submitted version leave with its ack or dead letter, and
the dead letters kept per pool are capped."""

from __future__ import annotations

import pytest

from podium.queue.base import Claim, QueueItem
from podium.queue.postgres import PostgresQueue
from postgres_fixtures import count_sql, postgres_skip_reason

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]

RUNS = 120


async def _claim_all(queue: PostgresQueue, runs: int) -> list[Claim]:
    claims: list[Claim] = []
    while len(claims) < runs:  # bounded: every run was submitted, so each claim finds some
        got = await queue.claim("w1", count=50, block_s=5.0)
        assert got, f"claimed {len(claims)} of {runs}"
        claims.extend(got)
    return claims


async def test_runs_served_leave_no_row_behind(fresh_postgres: str) -> None:
    queue = PostgresQueue(fresh_postgres)
    try:
        for i in range(RUNS):
            assert await queue.submit(QueueItem(f"run_{i}", "support", version=1))
        assert count_sql(fresh_postgres, "SELECT count(*) FROM podium_queue_versions") == RUNS
        claims = await _claim_all(queue, RUNS)
        assert len({c.item.run_id for c in claims}) == RUNS
        for claim in claims:
            await queue.ack(claim)
    finally:
        await queue.aclose()
    assert count_sql(fresh_postgres, "SELECT count(*) FROM podium_queue") == 0
    assert count_sql(fresh_postgres, "SELECT count(*) FROM podium_queue_versions") == 0


async def test_dead_letters_kept_are_capped_per_pool(fresh_postgres: str) -> None:
    queue = PostgresQueue(fresh_postgres, dead_letters_kept=5)
    try:
        for i in range(12):
            assert await queue.submit(QueueItem(f"run_{i}", "support", version=1))
        claims = await _claim_all(queue, 12)
        for claim in claims:
            await queue.dead_letter(claim, "tool kept failing")
        kept = await queue.dead_letters(limit=100)
    finally:
        await queue.aclose()
    # The newest five, oldest first.
    assert [d.item.run_id for d in kept] == [c.item.run_id for c in claims[-5:]]
    assert count_sql(fresh_postgres, "SELECT count(*) FROM podium_queue") == 0
    assert count_sql(fresh_postgres, "SELECT count(*) FROM podium_queue_versions") == 0
