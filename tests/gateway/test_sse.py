"""The SSE framing: keep-alives while a run is quiet, a final event for runs without one."""

from __future__ import annotations

import pytest

from podium.engine.records import RunRecord
from podium.gateway.sse import KEEPALIVE, follow_journal, parse_last_event_id
from podium.store.memory import MemoryRunStore

pytestmark = pytest.mark.anyio


async def test_a_quiet_run_gets_keep_alives() -> None:
    store = MemoryRunStore()
    await store.create(RunRecord("r1", "a", "q", status="running"))
    frames = follow_journal(store, "r1", heartbeat_s=0.01)
    assert await anext(frames) == KEEPALIVE
    await frames.aclose()


async def test_a_run_ended_without_a_final_entry_still_gets_a_final_event() -> None:
    store = MemoryRunStore()
    await store.create(
        RunRecord("r2", "a", "q", status="failed", reason="dead_letter", error="delivered 4 times")
    )
    frames = [f async for f in follow_journal(store, "r2")]
    assert len(frames) == 1 and frames[0].startswith(b"event: final\n")
    assert b'"reason":"dead_letter"' in frames[0]


@pytest.mark.parametrize(
    ("value", "after"), [(None, -1), ("7", 7), (" 3 ", 3), ("x", -1), ("-5", -1)]
)
def test_last_event_id_parsing(value: str | None, after: int) -> None:
    assert parse_last_event_id(value) == after
