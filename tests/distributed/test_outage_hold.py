"""A tool call that completes while Redis is away runs once: killed, stopped or partitioned.

The outage is longer than the old give-up (the store's patience, 0.5 s here) and than
the lease (2 s here), so that before the fix the holder gave up its write and drove the
run again from a journal without the call's outcome, and an idle worker found every
lease expired and took the run. Now the holder keeps the outcome and writes it when
Redis answers (fenced), and nobody takes a run from a holder that is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

import pytest

from podium import Agent, Scenario, SimulatedModel, ToolContext, tool
from podium.engine.driver import Engine
from podium.engine.records import ModelTurn, RunRecord
from podium.errors import StaleRunError
from podium.messages import Message
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

from .blackhole_proxy import BlackholeProxy
from .harness import check_completed_once, submit_runs, wait_until
from .redis_server import RedisServer

pytestmark = pytest.mark.anyio

#: How long each outage lasts: past the old give-up (PATIENCE_S) and past the lease, so
#: that every lease looks expired when Redis is back.
OUTAGE_S = 4.0
PATIENCE_S = 0.5
LEASE_S = 2.0
CALLS = 2  # parallel calls per step
HOLD_S = 60.0  # how long a worker holds a write for Redis (0: the old give-up)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class GatedTool:
    """The external system: counts each call by idempotency key, and holds every call until
    ``release`` (so the test knows a call is in flight, and ends it during the outage)."""

    started: list[str] = field(default_factory=list)
    effects: Counter[str] = field(default_factory=Counter)
    in_flight: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def agent(self, deadline_s: float | None = None) -> Agent:
        @tool(side_effects=True)
        async def charge(item: str, ctx: ToolContext) -> str:
            """Charge for an item.

            Args:
                item: What to charge for.
            """
            self.started.append(ctx.idempotency_key)
            if len(self.started) >= CALLS:
                self.in_flight.set()
            await self.release.wait()
            self.effects[ctx.idempotency_key] += 1  # the effect happens here, once per call
            return f"charged {item}"

        scenario = Scenario.react("charge", {"item": "x"}, tool_steps=2, parallel=CALLS)
        return Agent("gated", SimulatedModel(scenario), "Charge.", [charge], max_steps=4,
                     deadline_s=deadline_s)


@contextlib.asynccontextmanager
async def worker_on(url: str, consumer: str, agent: Agent) -> AsyncIterator[Worker]:
    """A worker in this process with its own connections, running until the block ends."""
    async with (
        RedisRunStore(url, unavailable_s=PATIENCE_S, outage_hold_s=HOLD_S) as store,
        RedisQueue(url, lease_s=LEASE_S, unavailable_s=PATIENCE_S) as queue,
    ):
        worker = Worker(queue, Engine(store), {agent.name: agent}, consumer=consumer,
                        heartbeat_s=LEASE_S / 3, claim_block_s=0.1)
        task = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            await worker.drain(grace_s=5)
            await asyncio.wait_for(task, 30)


@contextlib.contextmanager
def proxied(redis: RedisServer, kind: str) -> Iterator[BlackholeProxy | None]:
    if kind != "partition":
        yield None
        return
    with BlackholeProxy(redis.port) as proxy:
        yield proxy


def outage(redis: RedisServer, proxy: BlackholeProxy | None, kind: str) -> Callable[[], None]:
    """Begin the outage; returns what ends it."""
    if kind == "kill":  # SIGKILL; started again on its AOF (fsync always: nothing lost)
        redis.kill()
        return redis.start
    if kind == "stop":  # SIGSTOP: connections accepted by the kernel, never answered
        redis.pause()
        return redis.resume
    assert proxy is not None  # a partition: the proxy accepts and forwards nothing
    proxy.cut()
    return proxy.heal


@pytest.mark.parametrize("kind", ["kill", "stop", "partition"])
async def test_a_call_completed_during_an_outage_runs_once(
    private_redis: RedisServer, kind: str
) -> None:
    gated = GatedTool()
    agent = gated.agent()
    with proxied(private_redis, kind) as proxy:
        url = private_redis.url if proxy is None else proxy.url
        async with RedisRunStore(private_redis.url) as store, RedisQueue(private_redis.url) as q:
            async with worker_on(url, "holder", agent) as holder:
                await submit_runs(store, q, "gated", ["held"])
                await asyncio.wait_for(gated.in_flight.wait(), 20)
                # an idle worker, ready to take any run whose lease looks expired
                async with worker_on(url, "idle", agent) as idle:
                    end = outage(private_redis, proxy, kind)
                    gated.release.set()  # the calls complete while Redis is away
                    await asyncio.sleep(OUTAGE_S)
                    await asyncio.to_thread(end)
                    await wait_until(lambda: done(store, "held"), 60, "the run's end")
            stats = holder.statistics()
            await check_completed_once(store, ["held"])
    expected = {f"held:{step}:{call}" for step in range(2) for call in range(CALLS)}
    assert set(gated.effects) == expected
    repeated = {key: n for key, n in gated.effects.items() if n > 1}
    assert not repeated, f"calls run again after the outage: {repeated}"
    assert stats.completed == 1 and stats.lost == 0, stats
    assert idle.statistics().completed == 0


async def test_a_deadline_passing_during_an_outage_ends_the_run_once_redis_answers(
    private_redis: RedisServer,
) -> None:
    """The run's deadline passes while its worker holds its writes: it ends `failed` at
    its deadline when Redis is back; no call runs again, none runs after the deadline."""
    gated = GatedTool()
    agent = gated.agent(deadline_s=OUTAGE_S / 2)
    async with RedisRunStore(private_redis.url) as store, RedisQueue(private_redis.url) as q:
        async with worker_on(private_redis.url, "holder", agent) as holder:
            await submit_runs(store, q, "gated", ["late"])
            await asyncio.wait_for(gated.in_flight.wait(), 20)
            private_redis.kill()
            gated.release.set()
            await asyncio.sleep(OUTAGE_S)  # the deadline passes meanwhile
            await asyncio.to_thread(private_redis.start)
            await wait_until(lambda: done(store, "late"), 60, "the run's end")
        record = await store.get("late")
        assert record is not None and (record.status, record.reason) == ("failed", "deadline")
        assert holder.statistics().completed == 1
    assert set(gated.effects) == {f"late:0:{call}" for call in range(CALLS)}
    assert all(n == 1 for n in gated.effects.values()), gated.effects


async def done(store: RedisRunStore, run_id: str) -> bool:
    record = await store.get(run_id)
    return record is not None and record.done


def turn(step: int) -> ModelTurn:
    return ModelTurn(step, 1.0, Message("assistant", f"step {step}"))


async def test_a_held_write_lands_once_when_redis_answers(private_redis: RedisServer) -> None:
    """Held through a partition: sent again and again, applied once."""
    with BlackholeProxy(private_redis.port) as proxy:
        async with (
            RedisRunStore(proxy.url, unavailable_s=PATIENCE_S, outage_hold_s=HOLD_S) as holder,
            RedisRunStore(private_redis.url) as reader,
        ):
            record = RunRecord("h1", "agent", "x")
            await holder.create(record)
            record.status = "running"
            await holder.append("h1", [turn(0)], record=record)
            proxy.cut()
            write = asyncio.create_task(holder.append("h1", [turn(1)]))
            await asyncio.sleep(OUTAGE_S)  # sent, resent, never answered
            assert not write.done()
            proxy.heal()
            await asyncio.wait_for(write, 20)
            assert [seq for seq, _ in await reader.journal("h1")] == [0, 1]


async def test_a_held_write_of_a_run_taken_over_changes_nothing(
    private_redis: RedisServer,
) -> None:
    """The holder was cut off, another worker took the run over: when the partition heals,
    the old holder's held write is refused (fenced) and the journal is the new holder's."""
    with BlackholeProxy(private_redis.port) as proxy:
        async with (
            RedisRunStore(proxy.url, unavailable_s=PATIENCE_S, outage_hold_s=HOLD_S) as old,
            RedisRunStore(private_redis.url) as new,
        ):
            record = RunRecord("f1", "agent", "x")
            await old.create(record)
            record.status = "running"
            await old.append("f1", [turn(0)], record=record)
            proxy.cut()
            write = asyncio.create_task(old.append("f1", [turn(1)]))
            taken = await new.get("f1")
            assert taken is not None
            taken.restarts += 1
            await new.append("f1", [turn(1)], record=taken)  # the new holder's step 1
            proxy.heal()
            with pytest.raises(StaleRunError):
                await asyncio.wait_for(write, 20)
            journal = await new.journal("f1")
            assert [seq for seq, _ in journal] == [0, 1]


@pytest.mark.parametrize("kind", ["stop", "partition"])
async def test_no_run_is_taken_from_its_holder_right_after_an_outage(
    private_redis: RedisServer, kind: str
) -> None:
    """A claimer's reclaim that reaches Redis as it comes back finds every lease expired
    (Redis counted the outage in their idle time), and the claimer's own connection was
    never lost: only Redis's clock says there was an outage. Nothing is taken until the
    holder has had time to heartbeat; then its lease is fresh and stays its own."""
    with proxied(private_redis, kind) as proxy:
        url = private_redis.url if proxy is None else proxy.url
        async with (
            RedisRunStore(private_redis.url) as store,
            RedisQueue(private_redis.url, lease_s=LEASE_S) as holder,
            RedisQueue(url, lease_s=LEASE_S, reclaim_every_s=0) as claimer,
        ):
            await submit_runs(store, holder, "gated", ["leased"])
            (claim,) = await holder.claim("holder", block_s=0)
            assert await claimer.claim("claimer", block_s=0) == []  # (its clock touched)
            end = outage(private_redis, proxy, kind)
            await asyncio.sleep(OUTAGE_S)  # longer than the lease: it looks expired
            sent = claimer._pipe.commands
            reclaim = asyncio.create_task(claimer.claim("claimer", block_s=0))
            await wait_until(lambda: claimer._pipe.commands > sent, 10, "the reclaim sent")
            await asyncio.to_thread(end)
            assert await reclaim == [], "a live holder's run was taken"
            assert await holder.heartbeat("holder", [claim]) == []  # still its own
            assert await claimer.claim("claimer", block_s=0) == []
