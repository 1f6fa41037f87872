"""BackendPool over loopback replay servers: health, affinity, LAS, routing, fail-over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from backend_servers import ReplayServer, Reply, fixture_bytes, sse_events

from podium.errors import ModelTimeoutError, ModelUnavailableError
from podium.messages import Message
from podium.models import (
    Backend,
    BackendPool,
    ModelRequest,
    OpenAIChatModel,
    RetryPolicy,
    RoutingRule,
)
from podium.models.pool_sched import LASQueue, service_level

pytestmark = pytest.mark.anyio
BODY = fixture_bytes("llamacpp_chat.json")


def call(run: str, text: str = "q", **hints: Any) -> ModelRequest:
    return ModelRequest(messages=[Message("user", text)], run_id=run, **hints)


async def servers(factory: Callable[[], Any], n: int) -> list[ReplayServer]:
    out = [await factory() for _ in range(n)]
    for s in out:
        s.default = Reply(body=BODY)
    return out


def backend(s: ReplayServer, name: str, **kw: Any) -> Backend:
    m = OpenAIChatModel(s.base_url, "m", name=name, retry=RetryPolicy(attempts=1))
    return Backend(m, **kw)


async def settle(pool: BackendPool, waiting: int) -> None:
    """Yield to the loop until ``waiting`` calls are queued in the pool."""
    for _ in range(1000):
        if pool.statistics().waiting >= waiting:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never saw {waiting} waiting calls")


async def settle_outstanding(pool: BackendPool, n: int) -> None:
    for _ in range(1000):
        if pool.statistics().backends[0].outstanding >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never saw {n} outstanding calls")


async def test_session_affinity_and_least_outstanding(replay_factory: Any) -> None:
    a, b = await servers(replay_factory, 2)
    hold = asyncio.Event()
    a.script(Reply(body=BODY, hold=hold))
    async with BackendPool([backend(a, "a", capacity=4), backend(b, "b", capacity=4)]) as pool:
        first = asyncio.ensure_future(pool.request(call("r1")))
        await a.arrived.wait()  # r1 holds a slot on a
        r2 = await pool.request(call("r2"))
        assert r2.backend == "b"  # fewest outstanding
        hold.set()
        assert (await first).backend == "a"
        # both idle now: each run sticks to the backend that has its prefix cached
        for _ in range(3):
            assert (await pool.request(call("r2"))).backend == "b"
            assert (await pool.request(call("r1"))).backend == "a"


async def test_unhealthy_backend_takes_no_traffic_then_is_readmitted(replay_factory: Any) -> None:
    a, b = await servers(replay_factory, 2)
    a.healthy = False
    pool = BackendPool(
        [backend(a, "a"), backend(b, "b")], health_interval_s=3600, unhealthy_after=1
    )
    async with pool:
        for i in range(3):
            assert (await pool.request(call(f"r{i}"))).backend == "b"
        assert a.requests == [] and pool.statistics().backends[0].state == "drained"
        a.healthy = True
        await pool.check_health()
        assert pool.statistics().backends[0].state == "healthy"
        assert (await pool.request(call("new"))).backend == "a"  # tie goes to the first
        # drain again: affinity to a is broken while it is down, restored after
        a.healthy = False
        await pool.check_health()
        assert (await pool.request(call("new"))).backend == "b"
        a.healthy = True
        await pool.check_health()
        assert (await pool.request(call("fresh"))).backend == "a"


async def test_backend_killed_mid_stream_fails_over(replay_factory: Any) -> None:
    a, b = await servers(replay_factory, 2)
    a.default = Reply(chunks=sse_events("vllm_stream_tool_call.sse"), kill_after=2)
    b.default = Reply(chunks=sse_events("vllm_stream_tool_call.sse"))
    models = [
        Backend(OpenAIChatModel(s.base_url, "m", name=n, stream=True))
        for s, n in ((a, "a"), (b, "b"))
    ]
    async with BackendPool(models, health_interval_s=3600) as pool:
        await pool.start()
        a.healthy = False  # it died: its health check now fails too
        r = await pool.request(call("r1"))
        stats = pool.statistics()
    assert r.backend == "b" and r.tool_calls[0].name == "get_weather"
    assert stats.failovers == 1 and stats.backends[0].state == "drained"
    assert stats.backends[0].failures == 1


async def test_no_healthy_backend_fails_fast(replay: ReplayServer) -> None:
    replay.healthy = False
    async with BackendPool([backend(replay, "a")], healthy_wait_s=0) as pool:
        with pytest.raises(ModelUnavailableError, match="no healthy backend"):
            await pool.request(call("r"))


async def test_least_attained_service_goes_first(replay: ReplayServer) -> None:
    hold = asyncio.Event()
    replay.default = Reply(body=BODY)
    replay.script(Reply(body=BODY, hold=hold))
    async with BackendPool([backend(replay, "a", capacity=1)], las_quantum_s=1.0) as pool:
        busy = asyncio.ensure_future(pool.request(call("busy", "busy", attained_service_s=9.0)))
        await replay.arrived.wait()
        queued = []
        for run, service in (("long", 40.0), ("mid", 3.0), ("long2", 35.0), ("short", 0.0)):
            queued.append(
                asyncio.ensure_future(pool.request(call(run, run, attained_service_s=service)))
            )
            await settle(pool, len(queued))
        hold.set()
        await asyncio.gather(busy, *queued)
    order = [r["messages"][0]["content"] for r in replay.requests]
    assert order == ["busy", "short", "mid", "long", "long2"]


async def test_pool_tracks_service_itself_when_not_told(replay: ReplayServer) -> None:
    replay.default = Reply(body=BODY)
    async with BackendPool([backend(replay, "a")], las_quantum_s=1e-9) as pool:
        await pool.request(call("veteran"))
        assert pool._service["veteran"] > 0


async def test_queue_timeout_is_typed(replay: ReplayServer) -> None:
    hold = asyncio.Event()
    replay.script(Reply(body=BODY, hold=hold))
    async with BackendPool([backend(replay, "a", capacity=1)], queue_timeout_s=0.05) as pool:
        busy = asyncio.ensure_future(pool.request(call("a")))
        await replay.arrived.wait()
        with pytest.raises(ModelTimeoutError, match="no backend slot"):
            await pool.request(call("b"))
        hold.set()
        await busy
        assert pool.statistics().backends[0].outstanding == 0


async def test_waiters_fail_when_every_backend_is_drained(replay: ReplayServer) -> None:
    hold = asyncio.Event()
    replay.script(Reply(body=BODY, hold=hold))
    pool = BackendPool([backend(replay, "a", capacity=1)], unhealthy_after=1, healthy_wait_s=0)
    async with pool:
        busy = asyncio.ensure_future(pool.request(call("a")))
        await replay.arrived.wait()
        waiting = [asyncio.ensure_future(pool.request(call(f"b{i}"))) for i in range(3)]
        await settle(pool, 3)
        replay.healthy = False
        await pool.check_health()
        for w in waiting:
            with pytest.raises(ModelUnavailableError):
                await w
        hold.set()
        await busy  # in-flight calls on a drained backend finish
        # the pool keeps working after the drain (its queue length once went negative
        # here and every later dispatch, statistics() and aclose() raised ValueError)
        assert pool.statistics().waiting == 0
        replay.healthy = True
        await pool.check_health()
        hold2 = asyncio.Event()
        replay.default = Reply(body=BODY)
        replay.script(Reply(body=BODY, hold=hold2))
        first = asyncio.ensure_future(pool.request(call("c")))
        await settle_outstanding(pool, 1)
        queued = asyncio.ensure_future(pool.request(call("d")))
        await settle(pool, 1)
        hold2.set()
        assert (await first).backend == "a" and (await queued).backend == "a"
        assert pool.statistics().waiting == 0


async def test_hybrid_routing_and_fallback(replay_factory: Any) -> None:
    gpu, cpu = await servers(replay_factory, 2)
    pool = BackendPool(
        [backend(gpu, "gpu-0", group="gpu"), backend(cpu, "cpu-0", group="cpu")],
        rules=[RoutingRule("cpu", max_prompt_tokens=500), RoutingRule("cpu", tags=("small",))],
        default_group="gpu",
        unhealthy_after=1,
    )
    async with pool:
        assert (await pool.request(call("a", prompt_tokens=100))).backend == "cpu-0"
        assert (await pool.request(call("b", prompt_tokens=9000))).backend == "gpu-0"
        assert (
            await pool.request(call("c", prompt_tokens=9000, tags=("small",)))
        ).backend == "cpu-0"
        cpu.healthy = False
        await pool.check_health()
        assert (await pool.request(call("d", prompt_tokens=100))).backend == "gpu-0"  # fallback


def test_las_queue_levels_affinity_and_removal() -> None:
    q: LASQueue[str] = LASQueue(affinity_lookahead=4)
    assert [service_level(s, 1.0) for s in (0.0, 0.9, 1.0, 3.9, 4.0, 100.0)] == [0, 0, 1, 2, 3, 7]
    q.push("old-l1", 1)
    w = q.push("gone", 0)
    q.push("l0-first", 0, affinity="x")
    q.push("l0-on-b", 0, affinity="b")
    q.remove(w)
    assert len(q) == 3
    assert q.pop("b", lambda p: True) == "l0-on-b"  # affinity wins within a level
    assert q.pop("b", lambda p: True) == "l0-first"
    assert q.pop("b", lambda p: p != "old-l1") is None  # nothing eligible
    assert q.pop("b", lambda p: True) == "old-l1" and len(q) == 0
