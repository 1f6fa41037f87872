"""Finished runs (and threads) leave every Redis index with their keys: nothing is left
behind for good, a listing reads no dead run, and no live run is ever removed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pytest
import redis

from podium.engine.records import RunRecord
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore
from podium.store.redis_expiry import expiry_key
from podium.threads.record import ThreadRecord

from .harness import wait_until
from .redis_server import RedisServer

pytestmark = pytest.mark.anyio

ENDINGS = ("completed", "failed", "cancelled")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # thousands of runs: once is enough (the store's code is the same)


@contextmanager
def admin_client(url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(url)
    try:
        yield client
    finally:
        client.close()


async def finished(
    store: RedisRunStore, run_id: str, *, tenant: str = "t", status: str = "completed"
) -> RunRecord:
    record = RunRecord(run_id, "agent", "x", tenant=tenant)
    await store.create(record)
    record.status = "running"
    await store.update(record)
    record.status = status  # type: ignore[assignment]
    await store.update(record)
    return record


async def started(store: RedisRunStore, run_id: str, *, tenant: str = "t") -> RunRecord:
    record = RunRecord(run_id, "agent", "x", tenant=tenant)
    await store.create(record)
    record.status = "running"
    await store.update(record)
    return record


# Thousands of runs made at once on the suite's shared Redis, beside three other busy
# workers on 2 cores, once waited past the store's 1.5 s "unavailable" bound (the setup,
# not what these tests check; tests/distributed/test_redis_misbehaving.py checks the bound).
BULK_UNAVAILABLE_S = 10.0

async def finish_many(store: RedisRunStore, ids: list[str], tenants: Iterable[str]) -> None:
    """Runs that end, the endings and tenants taken in turn, in waves of 500."""
    tenant_list = list(tenants)
    jobs = [
        (run_id, tenant_list[i % len(tenant_list)], ENDINGS[i % len(ENDINGS)])
        for i, run_id in enumerate(ids)
    ]
    for wave in range(0, len(jobs), 500):
        await asyncio.gather(*(
            finished(store, run_id, tenant=tenant, status=status)
            for run_id, tenant, status in jobs[wave : wave + 500]
        ))


def run_keys(store: RedisRunStore, ids: Iterable[str]) -> list[str]:
    return [store._run_key(run_id) for run_id in ids]


async def all_gone(admin: redis.Redis, keys: list[str]) -> bool:
    """Whether every key has expired (EXISTS of an expired key deletes it; the indexes
    are left as they are)."""
    counts = [admin.exists(*keys[i : i + 1000]) for i in range(0, len(keys), 1000)]
    return sum(counts) == 0


def members(admin: redis.Redis, key: str) -> set[str]:
    return {m.decode() for m in admin.zrange(key, 0, -1)}


def keys_under(admin: redis.Redis, prefix: str) -> set[str]:
    return {k.decode() for k in admin.scan_iter(match=f"{prefix}:*", count=1000)}


async def reap_until(store: RedisRunStore, n: int, within: float = 60.0) -> int:
    """Reap until ``n`` runs or threads have left the indexes (their expiry is Redis's
    clock passing, so this polls)."""
    removed = 0

    async def enough() -> bool:
        nonlocal removed
        removed += await store.reap_expired()
        return removed >= n

    await wait_until(enough, within, f"{n} expired runs reaped")
    return removed


async def test_thousands_of_expired_runs_leave_no_index_entry_and_no_key(
    shared_redis_url: str, prefix: str
) -> None:
    n = 3000
    dead = [f"d{i}" for i in range(n)]
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix, finished_ttl_s=1.0, reap_every_s=0,
                      unavailable_s=BULK_UNAVAILABLE_S)
        as store,
        RedisRunStore(shared_redis_url, prefix=prefix, finished_ttl_s=3600,
                      unavailable_s=BULK_UNAVAILABLE_S) as keeper,
    ):
        await finish_many(store, dead, ["t", "u"])
        running = await started(store, "live-running")
        kept = await finished(keeper, "live-kept", status="failed")
        assert await reap_until(store, n) == n
        assert await store.reap_expired() == 0  # nothing more, and nothing twice

        with admin_client(shared_redis_url) as admin:
            idx = store._idx
            assert members(admin, f"{idx}all") == {"live-running", "live-kept"}
            assert members(admin, f"{idx}t:t") == {"live-running", "live-kept"}
            assert members(admin, f"{idx}s:active") == {"live-running"}
            assert members(admin, f"{idx}ts:t:failed") == {"live-kept"}
            assert admin.zcard(expiry_key(idx)) == 1  # the kept run's expiry, a day away
            expected = {
                store._run_key(r.run_id) for r in (running, kept)
            } | {store._journal_key(r.run_id) for r in (running, kept)} | {
                f"{idx}all", f"{idx}t:t", f"{idx}s:active", f"{idx}ts:t:active",
                f"{idx}s:failed", f"{idx}ts:t:failed", expiry_key(idx),
            }
            assert keys_under(admin, prefix) == expected  # tenant u, every ending: all gone
        assert {r.run_id for r in await store.list(limit=10)} == {"live-running", "live-kept"}


async def test_a_listing_after_mass_expiry_reads_no_dead_run(
    private_redis: RedisServer,
) -> None:
    n = 2000
    dead = [f"d{i}" for i in range(n)]
    async with RedisRunStore(
        private_redis.url, finished_ttl_s=0.5, reap_every_s=0, unavailable_s=BULK_UNAVAILABLE_S
    ) as store:
        await finish_many(store, dead, ["t"])
        live = [await started(store, f"live{i}") for i in range(3)]
        with admin_client(private_redis.url) as admin:
            keys = run_keys(store, dead)
            await wait_until(lambda: all_gone(admin, keys), 60, "the finished runs to expire")
            assert admin.zcard(f"{store._idx}all") == n + 3  # nothing has tidied them yet
            admin.config_resetstat()
            listed = await store.list(tenant="t", limit=100)
            stats = admin.info("commandstats")
            assert [r.run_id for r in listed] == [r.run_id for r in reversed(live)]
            # one read per live run; none per dead one
            assert stats["cmdstat_hget"]["calls"] == len(live)
            assert "cmdstat_zrem" in stats  # the dead ones were removed, not skipped
            # ... from every index, not only the one this listing walked
            assert admin.zcard(f"{store._idx}all") == 3
            assert admin.zcard(f"{store._idx}s:completed") == 0


async def test_two_reapers_at_once_remove_each_run_once(
    shared_redis_url: str, prefix: str
) -> None:
    n = 2000
    dead = [f"d{i}" for i in range(n)]
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix, finished_ttl_s=0.5, reap_every_s=0,
                      unavailable_s=BULK_UNAVAILABLE_S)
        as a,
        RedisRunStore(shared_redis_url, prefix=prefix, finished_ttl_s=0.5, reap_every_s=0,
                      unavailable_s=BULK_UNAVAILABLE_S)
        as b,
    ):
        await finish_many(a, dead[: n // 2], ["t", "u"])
        await finish_many(b, dead[n // 2 :], ["t", "u"])
        live = await started(a, "live")
        with admin_client(shared_redis_url) as admin:
            keys = run_keys(a, dead)
            await wait_until(lambda: all_gone(admin, keys), 60, "the finished runs to expire")
            removed = await asyncio.gather(
                a.reap_expired(), b.reap_expired(), a.reap_expired(rounds=1),
                b.reap_expired(rounds=2),
            )
            assert sum(removed) == n  # each once, whichever reaper took it
            assert await b.list(tenant="u") == [] and await a.list(status="failed") == []
            assert members(admin, f"{a._idx}all") == {live.run_id}
            assert admin.zcard(expiry_key(a._idx)) == 0
            assert keys_under(admin, prefix) == {
                a._run_key("live"), a._journal_key("live"), f"{a._idx}all", f"{a._idx}t:t",
                f"{a._idx}s:active", f"{a._idx}ts:t:active",
            }


# Short expiries the setup must beat (a run ended, then amended or extended before its
# key expires). On a starved host Redis itself can stall past the shortest one, so a setup
# that lost the race (a key already gone where the test needs it alive) is built again
# under a fresh prefix with a longer expiry: a bounded retry, never a timing assertion.
HORIZONS_S = (0.3, 1.5, 6.0)


def alive_after_setup(admin: redis.Redis, keys: list[str]) -> bool:
    return int(admin.exists(*keys)) == len(keys)


async def test_a_run_that_still_lives_is_never_removed(
    shared_redis_url: str, prefix: str
) -> None:
    alive = {"moved", "changed", "extended", "persisted", "running", "waiting"}
    with admin_client(shared_redis_url) as admin:
        for attempt, ttl in enumerate(HORIZONS_S):
            async with (
                RedisRunStore(shared_redis_url, prefix=f"{prefix}:try{attempt}",
                              finished_ttl_s=ttl, reap_every_s=0,
                              unavailable_s=BULK_UNAVAILABLE_S) as short,
                RedisRunStore(shared_redis_url, prefix=f"{prefix}:try{attempt}",
                              finished_ttl_s=3600, reap_every_s=0,
                              unavailable_s=BULK_UNAVAILABLE_S) as long,
            ):
                # ended with a short TTL, then written again (its end amended) by a long-TTL
                # holder
                moved = await finished(short, "moved")
                moved.output = "amended"
                await long.update(moved)
                # ended, then written again with another ending: only the last one counts
                changed = await finished(short, "changed")
                changed.status = "failed"
                await long.update(changed)
                # its expiry moved, or removed, by hand (an operator, another tool)
                await finished(short, "extended")
                await finished(short, "persisted")
                admin.pexpire(short._run_key("extended"), 3_600_000)
                admin.persist(short._run_key("persisted"))
                running = await started(short, "running")
                waiting = await started(short, "waiting")
                waiting.status = "waiting"
                await short.update(waiting)
                if not alive_after_setup(admin, run_keys(short, sorted(alive))):
                    continue  # a key expired before the setup reached it: longer expiry
                # ends last: once it is due, every run above is due too
                await finished(short, "canary")
                assert await reap_until(short, 1) == 1  # the canary only
                idx = short._idx
                assert members(admin, f"{idx}all") == alive
                assert members(admin, f"{idx}s:failed") == {"changed"}
                assert members(admin, f"{idx}s:completed") == {"moved", "extended", "persisted"}
                for run_id in alive:
                    assert await short.get(run_id) is not None, run_id
                # the hand-extended run is due when its key is, the persisted one never
                due = {m.decode(): s for m, s in admin.zrange(expiry_key(idx), 0, -1,
                                                              withscores=True)}
                assert len(due) == 3 and all(s > time.time() * 1000 + 3_000_000
                                             for s in due.values())
                assert running.version == 1
                assert {r.run_id for r in await short.list(limit=20)} == alive
                return
    pytest.fail(f"the setup never beat a {HORIZONS_S[-1]} s expiry")


async def test_expired_threads_leave_their_indexes(
    shared_redis_url: str, prefix: str
) -> None:
    with admin_client(shared_redis_url) as admin:
        for attempt, ttl in enumerate(HORIZONS_S):
            async with RedisRunStore(
                shared_redis_url, prefix=f"{prefix}:try{attempt}", reap_every_s=0,
                unavailable_s=BULK_UNAVAILABLE_S,
            ) as store:
                soon = time.time() + ttl
                saved = ThreadRecord("saved", tenant="t", expires_at=soon)
                await store.create_thread(saved)
                saved.expires_at = None  # made permanent before its expiry
                await store.update_thread(saved)
                if await store.get_thread("saved") is None:
                    continue  # it expired before it was made permanent: longer expiry
                await store.create_thread(ThreadRecord("gone", tenant="t", expires_at=soon))
                await store.create_thread(ThreadRecord("kept", tenant="t", ttl_s=None))
                await store.create_thread(
                    ThreadRecord("deleted", tenant="t", expires_at=soon + 3600)
                )
                assert await store.delete_thread("deleted")
                assert admin.zcard(expiry_key(store._idx)) == 1  # "gone" only
                assert await reap_until(store, 1) == 1
                assert members(admin, f"{store._idx}thall") == {"kept", "saved"}
                assert members(admin, f"{store._idx}th:t") == {"kept", "saved"}
                assert admin.zcard(expiry_key(store._idx)) == 0
                return
    pytest.fail(f"the setup never beat a {HORIZONS_S[-1]} s expiry")


async def test_every_process_reaps_in_the_background(
    shared_redis_url: str, prefix: str
) -> None:
    """A store that writes runs that end tidies the indexes on its own, and stops doing so
    when closed."""
    store = RedisRunStore(
        shared_redis_url, prefix=prefix, finished_ttl_s=0.3, reap_every_s=0.05,
        unavailable_s=BULK_UNAVAILABLE_S,
    )
    try:
        await finish_many(store, [f"d{i}" for i in range(200)], ["t"])
        await started(store, "live")
        with admin_client(shared_redis_url) as admin:
            await wait_until(
                lambda: admin.zcard(f"{store._idx}all") == 1, 60, "the index to hold one run"
            )
            assert admin.zcard(expiry_key(store._idx)) == 0
    finally:
        await store.aclose()
    task = store._reaper._task
    assert task is None  # stopped with the store


async def test_dead_letters_are_bounded(shared_redis_url: str, prefix: str) -> None:
    """One dead letter per run that died, the oldest trimmed: the stream does not grow with
    every run ever served."""
    async with RedisQueue(shared_redis_url, prefix=prefix, dead_letters_kept=20) as queue:
        for i in range(300):
            await queue.submit(QueueItem(f"r{i}", "agent"))
            (claim,) = await queue.claim("w", block_s=0)
            await queue.dead_letter(claim, "crashed")
        with admin_client(shared_redis_url) as admin:
            kept = admin.xlen(queue.dead_key("default"))
        assert 20 <= kept < 150  # trimmed by whole stream nodes (100 entries each)
        newest = (await queue.dead_letters(limit=200))[-1]
        assert newest.item.run_id == "r299"


async def test_a_listing_works_where_redis_takes_no_writes(private_redis: RedisServer) -> None:
    """A server that answers but refuses writes (here: no replica to write to; a read-only
    replica, a full one): the listing's tidying is skipped, the listing is not."""
    async with RedisRunStore(private_redis.url, finished_ttl_s=0.3, reap_every_s=0) as store:
        await finished(store, "done")
        await started(store, "live")
        with admin_client(private_redis.url) as admin:
            gone = run_keys(store, ["done"])
            await wait_until(lambda: all_gone(admin, gone), 30, "the finished run to expire")
            admin.config_set("min-replicas-to-write", 1)
            try:
                assert [r.run_id for r in await store.list()] == ["live"]
                assert [r.run_id for r in await store.list(status="completed")] == []
            finally:
                admin.config_set("min-replicas-to-write", 0)
            assert admin.zcard(f"{store._idx}all") == 2  # nothing could be tidied
        assert await store.reap_expired() == 1  # once Redis takes writes again
