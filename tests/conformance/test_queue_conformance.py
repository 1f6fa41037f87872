"""The RunQueue contract, one suite for every queue (local, Redis, PostgreSQL).

Leases are short here (a fraction of a second) so expiry can be seen; the
waits for a lease to run out are time passing, with nothing to await instead.
"""

from __future__ import annotations

import asyncio

import pytest

from podium.queue.base import QueueItem

from .conftest import QueueBackend

pytestmark = pytest.mark.anyio


async def test_submit_claim_ack_depth(queues: QueueBackend) -> None:
    q = queues.queue()
    for i in range(3):
        await q.submit(QueueItem(f"r{i}", "agent", pool="support"))
    assert await q.depth("support") == 3 and await q.outstanding("support") == 3
    claims = await q.claim("w1", pool="support", count=2, block_s=0)
    assert [c.item.run_id for c in claims] == ["r0", "r1"]
    assert all(c.deliveries == 1 and c.consumer == "w1" and c.claimed_at > 0 for c in claims)
    assert all(c.item.enqueued_at > 0 for c in claims)
    assert await q.depth("support") == 1 and await q.outstanding("support") == 3
    for c in claims:
        await q.ack(c)
    assert await q.outstanding("support") == 1
    assert await q.depth("other") == 0  # pools are separate
    assert await q.claim("w1", pool="other", block_s=0) == []
    (last,) = await q.claim("w2", pool="support", block_s=0)
    assert last.item.run_id == "r2"
    await q.ack(last)
    assert await q.outstanding("support") == 0 and await q.depth("support") == 0


async def test_a_versioned_submit_queues_the_run_once(queues: QueueBackend) -> None:
    """Items of one version (the gateway's submit and a sweep's, from any process) add one
    entry, an earlier version none, a later one (the run sent back to work) another. A
    run parked on a human keeps its last version; one that ended frees it."""
    a, b = queues.queue(), queues.queue()
    item = QueueItem("r1", "agent", version=2)
    assert await a.submit(item) is True
    assert await a.submit(item) is False
    assert await b.submit(item) is False  # every handle on the queue's data
    assert await b.submit(QueueItem("r1", "agent", version=1)) is False  # a stale read
    assert await a.depth() == 1
    (claim,) = await a.claim("w1", block_s=0)
    await a.ack(claim, ended=False)  # parked on a human: it comes back at a later version
    assert await a.submit(item) is False
    later = QueueItem("r1", "agent", version=4)
    assert await a.submit(later) is True
    (claim,) = await a.claim("w1", block_s=0)
    await a.ack(claim)  # it ended: its last version is forgotten
    assert await b.submit(later) is True
    assert await a.submit(QueueItem("r1", "agent")) is True  # unversioned: always added
    assert await a.submit(QueueItem("r2", "agent", version=0)) is True
    assert await a.depth() == 3
    first, _, _ = await a.claim("w1", count=3, block_s=0)
    await a.dead_letter(first, "test")  # a dead-lettered run ended too
    assert await a.submit(later) is True


async def test_claim_waits_for_a_submit(queues: QueueBackend) -> None:
    a, b = queues.queue(), queues.queue()
    await a.depth()
    waiting = asyncio.create_task(a.claim("w1", block_s=10))
    await asyncio.sleep(0.05)
    await b.submit(QueueItem("r1", "agent"))
    (claim,) = await waiting
    assert claim.item.run_id == "r1"
    # Claimed when it arrived, not when the wait began: its queue wait is never negative.
    assert claim.claimed_at >= claim.item.enqueued_at
    assert await a.claim("w1", block_s=0.05) == []  # nothing more: returns when the wait ends


async def test_an_expired_lease_is_reclaimed_and_counted(queues: QueueBackend) -> None:
    q = queues.queue(lease_s=0.2)
    await q.submit(QueueItem("r1", "agent"))
    (first,) = await q.claim("dead-worker", block_s=0)
    assert await q.claim("w2", block_s=0) == []  # the lease holds
    await asyncio.sleep(0.3)
    (second,) = await q.claim("w2", block_s=0)
    assert (second.item.run_id, second.deliveries, second.consumer) == ("r1", 2, "w2")
    # the old holder's heartbeat learns it lost the run, and does not take it back
    assert await q.heartbeat("dead-worker", [first]) == [first]
    assert await q.heartbeat("w2", [second]) == []
    await asyncio.sleep(0.3)
    (third,) = await q.claim("w3", block_s=0)
    assert third.deliveries == 3
    assert await q.outstanding() == 1


async def test_heartbeats_keep_the_lease(queues: QueueBackend) -> None:
    q = queues.queue(lease_s=0.3)
    await q.submit(QueueItem("r1", "agent"))
    claims = await q.claim("w1", block_s=0)
    for _ in range(4):
        await asyncio.sleep(0.15)
        assert await q.heartbeat("w1", claims) == []
        assert await q.claim("w2", block_s=0) == []
    await q.ack(claims[0])
    assert await q.outstanding() == 0


async def test_release_hands_the_run_over_uncounted(queues: QueueBackend) -> None:
    q = queues.queue(lease_s=0.2)
    await q.submit(QueueItem("r1", "agent"))
    (claim,) = await q.claim("w1", block_s=0)
    await q.release(claim)
    assert await q.depth() == 1
    (again,) = await q.claim("w2", block_s=0)
    assert again.item.run_id == "r1" and again.deliveries == 1
    assert await q.outstanding() == 1
    # a worker that lost the run cannot give it back (that would duplicate it)
    await asyncio.sleep(0.3)
    (taken,) = await q.claim("w3", block_s=0)
    assert taken.deliveries == 2
    await q.release(again)
    assert await q.outstanding() == 1 and await q.depth() == 0
    assert await q.heartbeat("w3", [taken]) == []


async def test_dead_letter(queues: QueueBackend) -> None:
    q = queues.queue()
    await q.submit(QueueItem("r1", "agent", pool="p"))
    await q.submit(QueueItem("r2", "agent", pool="p"))
    (claim,) = await q.claim("w1", pool="p", block_s=0)
    await q.dead_letter(claim, "crashed its worker 3 times")
    assert await q.outstanding("p") == 1
    (dead,) = await q.dead_letters("p")
    assert (dead.item.run_id, dead.reason, dead.deliveries) == (
        "r1", "crashed its worker 3 times", 1
    )
    assert dead.ts > 0
    assert q.statistics("p").dead_lettered == 1
    assert await q.dead_letters("elsewhere") == []
    assert [c.item.run_id for c in await q.claim("w1", pool="p", block_s=0)] == ["r2"]


async def test_queued_and_claimed_runs_survive_a_restart(
    queues: QueueBackend, request: pytest.FixtureRequest
) -> None:
    if not queues.restartable:
        pytest.skip(f"{queues.name}: no backing service (its runs live as long as it does)")
    queues.use_private_server(request)
    # A lease long enough that a loaded machine's pause between calls never expires it.
    q = queues.queue(lease_s=5.0)
    await q.submit(QueueItem("r1", "agent"))
    await q.submit(QueueItem("r2", "agent"))
    (held,) = await q.claim("w1", block_s=0)
    queues.restart()
    # the same queue object goes on: the waiting run is there, the claimed one still held
    assert await q.outstanding() == 2 and await q.depth() == 1
    assert await q.heartbeat("w1", [held]) == []
    (waiting,) = await q.claim("w2", block_s=0)
    assert waiting.item.run_id == "r2"
    await q.ack(held)
    await q.ack(waiting)
    assert await q.outstanding() == 0
