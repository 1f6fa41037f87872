"""A PostgreSQL store's followers: woken by LISTEN/NOTIFY from another store (another
process's appends), and still served by polling once their listener is cut."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from podium.engine.records import ModelTurn, RunRecord
from podium.messages import Message
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason, run_sql

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


def turn(step: int) -> ModelTurn:
    return ModelTurn(step, 1.0, Message("assistant", f"step {step}"))


class _NeverPolls(PostgresRunStore):
    """A reader that never polls within a test's time: only a notification can wake it."""

    _notify_poll_s = 3600.0


async def test_a_reader_is_woken_by_another_stores_append(postgres_url: str) -> None:
    schema = f"listen_{uuid.uuid4().hex[:10]}"
    async with PostgresRunStore(postgres_url, schema=schema) as writer, \
            _NeverPolls(postgres_url, schema=schema) as reader:
        record = RunRecord("l1", "agent", "hi")
        await writer.create(record)
        assert await reader.wait_journal("l1", -1, 0.01) == []  # (the listener is up now)
        assert reader._listener.listening
        waiting = asyncio.create_task(reader.wait_journal("l1", -1, 60.0))
        await writer.append("l1", [turn(0)])
        assert [seq for seq, _ in await asyncio.wait_for(waiting, 30)] == [0]


async def test_a_cut_listener_leaves_readers_polling_then_listens_again(
    postgres_url: str,
) -> None:
    schema = f"listen_{uuid.uuid4().hex[:10]}"
    async with PostgresRunStore(postgres_url, schema=schema) as writer, \
            PostgresRunStore(postgres_url, schema=schema) as reader:
        await writer.create(RunRecord("l2", "agent", "hi"))
        assert await reader.wait_journal("l2", -1, 0.01) == []
        assert reader._listener.listening
        # The listener is the only connection without the store's application_name.
        listener_pid = reader._listener._conn.get_server_pid()  # type: ignore[union-attr]
        run_sql(postgres_url, f"SELECT pg_terminate_backend({listener_pid})")
        waiting = asyncio.create_task(reader.wait_journal("l2", -1, 60.0))
        await writer.append("l2", [turn(0)])
        assert [seq for seq, _ in await asyncio.wait_for(waiting, 30)] == [0]
        # A later wait opens a new listener (at most once a second), which hears again.
        while not reader._listener.listening:
            await reader.wait_journal("l2", 0, 0.2)
        assert reader._listener._conn.get_server_pid() != listener_pid  # type: ignore[union-attr]

