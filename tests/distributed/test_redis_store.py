"""RedisRunStore specifics (the contract every store keeps is in tests/conformance)."""

from __future__ import annotations

import asyncio

import pytest

from podium.engine.records import ModelTurn, RunRecord
from podium.errors import StaleRunError
from podium.messages import Message
from podium.store.redis import RedisRunStore
from podium.store.redis_tail import RunTail

pytestmark = pytest.mark.anyio


def turn(step: int) -> ModelTurn:
    return ModelTurn(step, 1.0, Message("assistant", f"step {step}"))


async def test_retried_writes_apply_once(shared_redis_url: str, prefix: str) -> None:
    """A write whose reply was lost and is sent again is not applied twice."""
    async with RedisRunStore(shared_redis_url, prefix=prefix) as store:
        record = RunRecord("i1", "agent", "x")
        await store.create(record)
        keys = (store._run_key("i1"), store._journal_key("i1"))

        async def record_write(counter: int, expected: int) -> list[int]:
            reply: list[int] = await store._pipe.execute(
                "EVALSHA", store._write, 2, *keys, "update", expected, f"w:{counter}",
                store._enc.encode(record), "running", "default", "1.0", 0, store._idx, "0",
                "i1", store._enc.encode([turn(0)]), 1,
            )
            return reply

        assert await record_write(5, 0) == [1, 1]
        assert await record_write(5, 0) == [1, 1]  # sent again: already applied
        assert await record_write(4, 0) == [1, 1]  # an older write of the same writer
        assert len(await store.journal("i1")) == 1
        # a journal-only append retried after a lost reply: the store is put back to where it
        # stood before the append, as after a reconnect that resends the XADD
        tail = store._tails["i1"] = RunTail()
        tail.version, tail.length = 1, 1
        await store.append("i1", [turn(1)])
        tail.length = 1
        await store.append("i1", [turn(1)])
        assert [seq for seq, _ in await store.journal("i1")] == [0, 1]
        tail.length = 1
        with pytest.raises(StaleRunError):  # a different write at that place: overtaken
            await store.append("i1", [turn(7)])


async def test_concurrent_appends_of_one_holder_all_land(
    shared_redis_url: str, prefix: str
) -> None:
    """Appends issued together (parallel tool calls) take turns: none is refused as stale."""
    async with RedisRunStore(shared_redis_url, prefix=prefix) as store:
        record = RunRecord("c1", "agent", "x")
        await store.create(record)
        record.status = "running"
        await store.update(record)
        await asyncio.gather(*(store.append("c1", [turn(i)]) for i in range(20)))
        record.steps = 1
        await asyncio.gather(
            store.append("c1", [turn(20)]), store.update(record), store.append("c1", [turn(21)])
        )
        items = await store.journal("c1")
        assert [seq for seq, _ in items] == list(range(22))
        assert sorted(e.step for _, e in items) == list(range(22))  # type: ignore[union-attr]
        got = await store.get("c1")
        assert got is not None and got.version == record.version == 2


async def test_interrupted_record_write_does_not_fence_its_own_holder(
    shared_redis_url: str, prefix: str
) -> None:
    """A record write cancelled in flight may have landed; the holder's next write finds out
    and goes on at the right version instead of being refused as stale."""
    async with RedisRunStore(shared_redis_url, prefix=prefix) as store:
        record = RunRecord("x1", "agent", "x")
        await store.create(record)
        for _ in range(2):
            record.status = "running"
            writing = asyncio.create_task(store.update(record))
            await asyncio.sleep(0)  # submitted: it goes out with this loop turn
            await asyncio.sleep(0)
            writing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await writing
            await store.append("x1", [turn(0)], record=record)
            await store.append("x1", [turn(1)])
        got = await store.get("x1")
        assert got is not None and got.version == record.version
        assert len(await store.journal("x1")) == 4


async def test_positions_of_unfinished_runs_are_bounded(
    shared_redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs released or lost here never finish here: what the store remembers of them is
    bounded, and a forgotten run is read again on its next write."""
    from podium.store import redis as redis_store

    monkeypatch.setattr(redis_store, "_MAX_TAILS", 4)
    async with RedisRunStore(shared_redis_url, prefix=prefix) as store:
        records = [RunRecord(f"b{i}", "agent", "x") for i in range(10)]
        for record in records:
            await store.create(record)
            record.status = "running"
            await store.update(record)
            await store.append(record.run_id, [turn(0)])
        assert len(store._tails) <= 4
        for record in records:
            await store.append(record.run_id, [turn(1)], record=record)
            await store.append(record.run_id, [turn(2)])
            assert [seq for seq, _ in await store.journal(record.run_id)] == [0, 1, 2]
