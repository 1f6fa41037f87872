"""A run stored ``queued`` whose submitter died before submitting it is not lost.

The gateway stores a run (or a decision that sends a waiting run back to work) and
then submits it to the queue; a gateway killed in between leaves the run ``queued``
in Redis with nothing to deliver it. Workers sweep for such runs and submit them.
Every submit carries the run's stored version and a queue adds only a version above
the run's last, so a run the gateway did submit is not queued a second time by a
sweep, however many workers sweep: no run is driven twice.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.errors import StoreUnavailableError
from podium.queue.redis import RedisQueue
from podium.queue.stranded import StrandedSweep, queue_item
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

from .app import TOOL_STEPS, effects
from .harness import check_completed_once, effect_lines, wait_until
from .redis_server import RedisServer

pytestmark = pytest.mark.anyio


async def test_a_stranded_run_is_submitted_by_a_sweep_and_driven_once(
    shared_redis_url: str, prefix: str, effects_log: Path
) -> None:
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
        RedisQueue(shared_redis_url, prefix=prefix) as other_queue,
    ):
        # "stranded": stored, never submitted (its gateway died). "submitted": stored and
        # submitted as the gateway does, under its name.
        stranded = RunRecord("stranded", "effects", "go")
        submitted = RunRecord("submitted", "effects", "go")
        for record in (stranded, submitted):
            await store.create(record)
        assert await queue.submit(queue_item(submitted, time.time()))
        workers = [
            Worker(q, Engine(store), {"effects": effects}, concurrency=4, claim_block_s=0.05,
                   waiting_sweep_s=0.05, stranded_after_s=0.3)
            for q in (queue, other_queue)  # two sweeping workers, two processes' queues
        ]
        tasks = [asyncio.create_task(w.run()) for w in workers]

        async def both_done() -> bool:
            records = [await store.get(i) for i in ("stranded", "submitted")]
            return all(r is not None and r.status == "completed" for r in records)

        await wait_until(both_done, 30, "both runs to complete")
        for worker in workers:
            await worker.drain(5)
        await asyncio.gather(*tasks)
        await check_completed_once(store, ["stranded", "submitted"])
        # Each call was made once: neither run was driven twice.
        keys = [key for key, _ in effect_lines(effects_log)]
        assert len(keys) == len(set(keys)) == 2 * TOOL_STEPS
        # Queued once each: the gateway's submit, and one sweep's of the stranded run.
        submits = queue.statistics().submitted + other_queue.statistics().submitted
        assert submits == 2
        # The runs ended: their last versions are forgotten (Redis keeps no key for them).
        assert await queue.client.keys(f"{prefix}:submitted:*") == []


async def test_a_run_queued_again_just_now_is_left_to_its_submitter(
    shared_redis_url: str, prefix: str
) -> None:
    """A sweep leaves a run alone until it has been ``queued`` for the grace period (its
    submitter may be about to submit it), even if the run was created long ago; and it
    passes once a second at most."""
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        record = RunRecord("old", "effects", "go", created_at=1.0)
        await store.create(record)  # its first write: updated just now
        sweep = StrandedSweep(store, queue, after_s=60)
        assert await sweep.run_once() == []
        await store.create(RunRecord("stale", "effects", "go", created_at=1.0, updated_at=2.0))
        assert await sweep.run_once() == []  # the next pass is a second away
        assert await StrandedSweep(store, queue, after_s=60).run_once() == ["stale"]
        assert await StrandedSweep(store, queue, after_s=0).run_once() == ["old"]
        assert await StrandedSweep(store, queue, after_s=0).run_once() == []  # queued once
        assert await queue.depth() == 2


async def test_a_decision_whose_submit_never_came_is_picked_up(
    shared_redis_url: str, prefix: str, effects_log: Path
) -> None:
    """The approval is journaled and the run stored ``queued`` again, then its gateway
    dies before the submit: a sweep submits it at its new version (above the one of its
    first submit, kept while it waited) and the run ends, each call made once."""
    from podium.engine import decisions

    from .app import approvals

    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        record = RunRecord("paid", "approvals", "go")
        await store.create(record)
        assert await queue.submit(queue_item(record, time.time()))
        worker = Worker(queue, Engine(store), {"approvals": approvals}, claim_block_s=0.05,
                        waiting_sweep_s=0.05, stranded_after_s=0.3)
        task = asyncio.create_task(worker.run())

        async def status_is(status: str) -> bool:
            stored = await store.get("paid")
            return stored is not None and stored.status == status

        await wait_until(lambda: status_is("waiting"), 30, "the run to wait for a human")
        waiting = await store.get("paid")
        assert waiting is not None
        (pending,) = await decisions.run_pending(store, waiting)
        _, ready = await decisions.decide(store, "paid", pending.call_id, "approve")
        assert ready  # queued again in the store; the gateway would submit it now, and dies
        await wait_until(lambda: status_is("completed"), 30, "a sweep to resume the run")
        await worker.drain(5)
        await task
        keys = [key for key, _ in effect_lines(effects_log)]
        assert len(keys) == len(set(keys)) == 2  # effect and payout, once each
        assert await queue.client.keys(f"{prefix}:submitted:*") == []


async def test_a_child_run_is_left_to_its_parent(shared_redis_url: str, prefix: str) -> None:
    """A child run (an agent called as a tool) is resumed by its parent, which makes the
    same call again: a sweep that submitted it on its own had it driven twice (found from
    the outside, on the embedded server's start-up requeue)."""
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        await store.create(RunRecord("parent", "team", "go", created_at=1.0, updated_at=2.0))
        await store.create(RunRecord("parent.0.0", "worker", "sub", created_at=1.0,
                                     updated_at=2.0, parent_run_id="parent", parent_call="0:0"))
        assert await StrandedSweep(store, queue, after_s=0).run_once() == ["parent"]


async def test_lost_enqueues_of_a_create_and_two_decisions_are_queued_once_each(
    shared_redis_url: str, prefix: str, effects_log: Path
) -> None:
    """A gateway that dies between its store write and its submit, three times: a run
    created, a run approved, a run rejected (each resumed by its decision), none
    submitted. Two workers on their default settings (the sweep looks every second for
    runs left 2 s) find each and queue it once between them; nothing is left in the
    store's index of runs waiting for their submit."""
    from podium.engine import decisions
    from podium.store.redis import unsubmitted_key

    from .app import approvals

    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
        RedisQueue(shared_redis_url, prefix=prefix) as other_queue,
    ):
        agents = {"effects": effects, "approvals": approvals}
        workers = [
            Worker(q, Engine(store), agents, claim_block_s=0.05) for q in (queue, other_queue)
        ]
        tasks = [asyncio.create_task(w.run()) for w in workers]

        async def status_is(run_id: str, *statuses: str) -> bool:
            stored = await store.get(run_id)
            return stored is not None and stored.status in statuses

        # Two runs parked on a human, submitted as the gateway does.
        for run_id in ("approved", "rejected"):
            record = RunRecord(run_id, "approvals", "go")
            await store.create(record)
            assert await queue.submit(queue_item(record, time.time()))
        for run_id in ("approved", "rejected"):
            await wait_until(lambda r=run_id: status_is(r, "waiting"), 30, f"{run_id} to wait")
        # The lost enqueues: stored, never submitted.
        await store.create(RunRecord("created", "effects", "go"))
        for run_id, decision in (("approved", "approve"), ("rejected", "reject")):
            waiting = await store.get(run_id)
            assert waiting is not None
            (pending,) = await decisions.run_pending(store, waiting)
            _, ready = await decisions.decide(store, run_id, pending.call_id, decision)
            assert ready
        ids = ["created", "approved", "rejected"]
        for run_id in ids:
            await wait_until(lambda r=run_id: status_is(r, "completed", "failed"), 30,
                             f"a sweep to queue {run_id}")
        for worker in workers:
            await worker.drain(5)
        await asyncio.gather(*tasks)
        for run_id in ids:
            assert await status_is(run_id, "completed"), await store.get(run_id)
        # Queued once each: the two first submits above, then one sweep's of each lost one.
        submits = queue.statistics().submitted + other_queue.statistics().submitted
        assert submits == 2 + len(ids)
        keys = [key for key, _ in effect_lines(effects_log)]
        assert len(keys) == len(set(keys))  # no call made twice
        assert await store.client.zcard(unsubmitted_key(prefix)) == 0


async def test_after_an_outage_the_sweep_leaves_gateways_time_to_settle(
    private_redis: RedisServer,
) -> None:
    """A gateway whose submit failed in an outage settles its run when Redis is back (a
    run created without an idempotency key is failed: its client, told 503, sends it
    again as a new run). A sweep that queued it first would have it run twice: after a
    pass that failed (or waited) on Redis, the sweep rests a while."""
    async with (
        RedisRunStore(private_redis.url, unavailable_s=0.3) as store,
        RedisQueue(private_redis.url, unavailable_s=0.3) as queue,
    ):
        await store.create(RunRecord("unsettled", "effects", "go", updated_at=1.0))
        sweep = StrandedSweep(store, queue, after_s=2.0, holdoff_s=3600)
        private_redis.pause()  # hung: every command waits, then fails
        try:
            with pytest.raises(StoreUnavailableError):
                await sweep.run_once()
        finally:
            private_redis.resume()
        assert await sweep.run_once() == []  # resting: the gateway settles it meanwhile
        assert await queue.depth() == 0
        assert await StrandedSweep(store, queue, after_s=2.0).run_once() == ["unsettled"]
