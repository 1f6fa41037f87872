"""RedisRunStore against the machine's Redis: records, journals, fencing, listing, TTL."""

from __future__ import annotations

import asyncio

import pytest

from podium.engine.records import ModelTurn, RunFinished, RunRecord, StepCommitted
from podium.errors import RunNotFoundError, StaleRunError, StoreError
from podium.messages import Message
from podium.store.redis import RedisRunStore
from podium.store.redis_tail import RunTail

pytestmark = pytest.mark.anyio


def turn(step: int) -> ModelTurn:
    return ModelTurn(step, 1.0, Message("assistant", f"step {step}"))


async def test_create_get_update_versions(shared_redis_url: str, prefix: str) -> None:
    async with RedisRunStore(shared_redis_url, prefix=prefix) as store:
        record = RunRecord("r1", "agent", "hi", tenant="acme")
        await store.create(record)
        with pytest.raises(StoreError):
            await store.create(RunRecord("r1", "agent", "again"))
        got = await store.get("r1")
        assert got is not None and got.input == "hi" and got.version == 0
        record.status = "running"
        await store.update(record)
        assert record.version == 1
        got = await store.get("r1")
        assert got is not None and got.status == "running" and got.version == 1
        assert await store.get("nope") is None
        with pytest.raises(RunNotFoundError):
            await store.update(RunRecord("nope", "agent", "x"))


async def test_journal_seq_and_after(shared_redis_url: str, prefix: str) -> None:
    async with RedisRunStore(shared_redis_url, prefix=prefix) as store:
        record = RunRecord("r2", "agent", "hi")
        await store.create(record)
        assert await store.journal("r2") == []
        await store.append("r2", [turn(0), StepCommitted(0, 1.0)])
        record.steps = 1
        await store.append("r2", [turn(1)], record=record)
        items = await store.journal("r2")
        assert [seq for seq, _ in items] == [0, 1, 2]
        assert items[2][1] == turn(1)
        assert [seq for seq, _ in await store.journal("r2", after=1)] == [2]
        got = await store.get("r2")
        assert got is not None and got.steps == 1
        with pytest.raises(RunNotFoundError):
            await store.journal("missing")


async def test_stale_writer_is_refused(shared_redis_url: str, prefix: str) -> None:
    """Two workers hold the same version; the second to write loses, for records and journals."""
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as a,
        RedisRunStore(shared_redis_url, prefix=prefix) as b,
    ):
        await a.create(RunRecord("r3", "agent", "hi"))
        mine, theirs = await a.get("r3"), await b.get("r3")
        assert mine is not None and theirs is not None
        mine.status = theirs.status = "running"
        await a.update(mine)
        await a.append("r3", [turn(0)])
        with pytest.raises(StaleRunError):
            await b.update(theirs)
        # b takes the run over properly (re-reads), then a's journal-only append is fenced off.
        fresh = await b.get("r3")
        assert fresh is not None
        await b.update(fresh)
        with pytest.raises(StaleRunError):
            await a.append("r3", [turn(1)])
        with pytest.raises(StaleRunError):
            await a.append("r3", [turn(1)], record=mine)
        assert mine.version == 1  # a refused write leaves the caller's version alone
        assert [e for _, e in await b.journal("r3")] == [turn(0)]


async def test_list_by_tenant_and_status(shared_redis_url: str, prefix: str) -> None:
    async with RedisRunStore(shared_redis_url, prefix=prefix) as store:
        for i in range(6):
            r = RunRecord(f"l{i}", "a" if i % 2 else "b", "x", tenant="t1" if i < 4 else "t2",
                          created_at=1000.0 + i)
            await store.create(r)
            if i % 3 == 0:
                r.status = "completed"
                await store.update(r)
        assert [r.run_id for r in await store.list()] == [f"l{i}" for i in range(5, -1, -1)]
        assert [r.run_id for r in await store.list(tenant="t1")] == ["l3", "l2", "l1", "l0"]
        assert [r.run_id for r in await store.list(status="completed")] == ["l3", "l0"]
        assert [r.run_id for r in await store.list(tenant="t2", status="queued")] == ["l5", "l4"]
        assert [r.run_id for r in await store.list(agent="a", limit=2)] == ["l5", "l3"]


async def test_finished_runs_expire(shared_redis_url: str, prefix: str) -> None:
    async with RedisRunStore(shared_redis_url, prefix=prefix, finished_ttl_s=0.2) as store:
        record = RunRecord("t1", "agent", "x")
        await store.create(record)
        record.status = "completed"
        await store.append("t1", [RunFinished(1.0, "completed", "ok")], record=record)
        ttl = await store.client.pttl(f"{prefix}:{{t1}}:journal")
        assert 0 < ttl <= 200
        await asyncio.sleep(0.3)
        assert await store.get("t1") is None
        assert await store.list() == []


async def test_wait_journal_follows_live(shared_redis_url: str, prefix: str) -> None:
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as writer,
        RedisRunStore(shared_redis_url, prefix=prefix) as reader,
    ):
        await writer.create(RunRecord("w1", "agent", "x"))
        waiting = asyncio.create_task(reader.wait_journal("w1", -1, 5.0))
        await asyncio.sleep(0.05)
        await writer.append("w1", [turn(0)])
        assert [seq for seq, _ in await waiting] == [0]
        assert await reader.wait_journal("w1", 0, 0.05) == []


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
