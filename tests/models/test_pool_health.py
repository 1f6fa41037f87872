"""BackendPool health and fail-over against real sim-servers on loopback.

The servers behave like the ones that broke the pool: no ``/health`` and a
``/v1/models`` that waits behind generation (llama-cpp-python), 503 "Loading
model" while a llama.cpp server restarts, a backend killed mid-call.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from backend_servers import ReplayServer, Reply, SimServerProcess, fixture_bytes, sse_events

from podium.errors import ModelUnavailableError
from podium.messages import Message
from podium.models import Backend, BackendPool, ModelRequest, OpenAIChatModel, RetryPolicy

pytestmark = pytest.mark.anyio
Factory = Callable[..., SimServerProcess]
NO_RETRY = RetryPolicy(attempts=1)


def call(run: str, **sim: object) -> ModelRequest:
    from podium.models import ModelSettings

    settings = ModelSettings(extra_body={"sim": sim}) if sim else ModelSettings()
    return ModelRequest(messages=[Message("user", run)], run_id=run, settings=settings)


async def running(server: SimServerProcess, n: int = 1) -> None:
    """Wait until the server is generating ``n`` sequences (polls its /metrics)."""
    async with aiohttp.ClientSession() as s:
        for _ in range(2000):
            async with s.get(server.root + "/metrics?format=json") as r:
                if (await r.json())["running"] >= n:
                    return
            await asyncio.sleep(0.005)
    raise AssertionError("the server never started generating")


async def test_busy_backend_whose_probe_waits_behind_generation_stays_in(
    sim_server_factory: Factory,
) -> None:
    server = sim_server_factory(
        "--step-ms", "5", "--no-health", "--models-waits-for-generation", "--capacity", "1"
    )
    # streamed, so the server stops generating when the long call is cancelled; probed
    # at /v1/models, the path that waits behind the generation (no default probes it first)
    model = OpenAIChatModel(server.base_url, "podium-sim", retry=NO_RETRY, stream=True,
                            health_paths=("/health", "/v1/models"))
    pool = BackendPool(
        [Backend(model, capacity=1)],
        health_interval_s=3600,
        health_timeout_s=0.05,
        unhealthy_after=1,
        healthy_wait_s=0,
    )
    async with pool:
        long = asyncio.ensure_future(pool.request(call("long", output_tokens=4000)))
        await running(server)
        queued = asyncio.ensure_future(pool.request(call("queued", output_tokens=2)))
        # /v1/models now waits behind the generation: the probe times out...
        assert await pool.backends[0].probe(0.05) == "timeout"
        for _ in range(3):
            await pool.check_health()
        # ...which is no evidence against a backend that is serving calls
        assert pool.statistics().backends[0].state == "healthy"
        long.cancel()  # no need to wait for the rest of it
        assert (await queued).content
        await pool.check_health()  # idle again: /v1/models answers at once
        assert pool.statistics().backends[0].state == "healthy"


async def test_probe_path_that_does_not_queue(sim_server_factory: Factory) -> None:
    server = sim_server_factory(
        "--step-ms", "5", "--no-health", "--models-waits-for-generation", "--capacity", "1"
    )
    # a server-specific probe path answered outside the model lock (here /metrics)
    model = OpenAIChatModel(server.base_url, "podium-sim", health_paths=("/metrics",))
    async with model:
        job = asyncio.ensure_future(model.request(call("long", output_tokens=4000)))
        await running(server)
        assert await model.health(30)  # answered at once, or a busy machine is slow
        job.cancel()


async def test_refused_probe_still_drains_a_busy_backend(replay_factory: Any) -> None:
    a: ReplayServer = await replay_factory()
    b: ReplayServer = await replay_factory()
    body = fixture_bytes("llamacpp_chat.json")
    hold = asyncio.Event()
    a.script(Reply(body=body, hold=hold))
    b.default = Reply(body=body)
    backends = [
        Backend(OpenAIChatModel(s.base_url, "m", name=n, retry=NO_RETRY))
        for s, n in ((a, "a"), (b, "b"))
    ]
    async with BackendPool(backends, unhealthy_after=1, health_interval_s=3600) as pool:
        busy = asyncio.ensure_future(pool.request(call("r1")))
        await a.arrived.wait()
        a.healthy = False  # an explicit 503 from /health is a verdict, busy or not
        await pool.check_health()
        assert pool.statistics().backends[0].state == "drained"
        hold.set()
        await busy


async def test_loading_model_503_fails_over_to_a_healthy_backend(replay_factory: Any) -> None:
    a: ReplayServer = await replay_factory()
    b: ReplayServer = await replay_factory()
    b.default = Reply(body=fixture_bytes("llamacpp_chat.json"))
    backends = [
        Backend(OpenAIChatModel(s.base_url, "m", name=n, retry=RetryPolicy(attempts=4)))
        for s, n in ((a, "a"), (b, "b"))
    ]
    async with BackendPool(backends, health_interval_s=3600) as pool:
        await pool.start()  # both admitted
        # a restarts: every path answers llama.cpp's 503 "Loading model"
        a.healthy = False
        a.default = Reply(status=503, body=fixture_bytes("llamacpp_loading_503.json"))
        r = await pool.request(call("r1"))
        stats = pool.statistics()
    assert r.backend == "b" and stats.failovers == 1
    # sent elsewhere at once, not retried on the restarting server first
    assert stats.backends[0].state == "drained" and len(a.requests) == 1


async def test_request_waits_for_a_backend_to_come_up(sim_server_factory: Factory) -> None:
    server = sim_server_factory("--step-ms", "1", "--loading-s", "0.6")
    model = OpenAIChatModel(server.base_url, "podium-sim", retry=NO_RETRY)
    async with BackendPool([Backend(model)], health_interval_s=3600, healthy_wait_s=60) as pool:
        assert not await pool.health()  # still loading
        r = await pool.request(call("patient"))  # waits through the "restart"
        assert r.content and await pool.health()


async def test_no_wait_fails_at_once_with_the_reason(sim_server_factory: Factory) -> None:
    server = sim_server_factory("--step-ms", "1", "--loading-s", "600")
    model = OpenAIChatModel(server.base_url, "podium-sim", retry=NO_RETRY)
    async with BackendPool([Backend(model)], healthy_wait_s=0) as pool:
        with pytest.raises(ModelUnavailableError, match="no healthy backend") as info:
            await pool.request(call("r"))
    # where it looked and what it got: the health URL and the server's "loading" 503
    assert f"GET {server.base_url.removesuffix('/v1')}/health: HTTP 503" in str(info.value)


async def test_a_backend_nobody_listens_on_is_named_with_its_url() -> None:
    with socket.socket() as sock:  # a port with nothing behind it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "m", retry=NO_RETRY)
    async with BackendPool([Backend(model)], healthy_wait_s=0) as pool:
        with pytest.raises(ModelUnavailableError) as info:
            await pool.request(call("r"))
    assert f"GET http://127.0.0.1:{port}/health" in str(info.value), info.value


async def test_in_flight_call_on_a_killed_backend_keeps_the_cause(
    sim_server_factory: Factory,
) -> None:
    server = sim_server_factory("--step-ms", "5", "--capacity", "2")
    model = OpenAIChatModel(server.base_url, "podium-sim", retry=NO_RETRY, stream=True)
    async with BackendPool([Backend(model)], health_interval_s=3600, healthy_wait_s=0) as pool:
        job = asyncio.ensure_future(pool.request(call("doomed", output_tokens=2000)))
        await running(server)
        server.kill()
        with pytest.raises(ModelUnavailableError) as info:
            await job
    err = info.value
    assert "no healthy backend" in str(err) and "connection lost" in str(err)
    assert err.__cause__ is not None and "connection lost" in str(err.__cause__)


async def test_one_of_two_killed_the_busy_survivor_serves_every_call(
    sim_server_factory: Factory,
) -> None:
    """The run that broke the pool: llama-cpp-python-like servers (no /health, /v1/models
    behind the model lock), one killed under load; probes of the busy survivor time out."""
    args = ("--step-ms", "2", "--no-health", "--models-waits-for-generation", "--capacity", "1")
    a, b = sim_server_factory(*args), sim_server_factory(*args)
    backends = [
        Backend(OpenAIChatModel(s.base_url, "podium-sim", name=n, retry=NO_RETRY), capacity=1)
        for s, n in ((a, "a"), (b, "b"))
    ]
    pool = BackendPool(backends, health_interval_s=0.02, health_timeout_s=0.02, unhealthy_after=1)
    async with pool:
        await pool.start()
        calls = [
            asyncio.ensure_future(pool.request(call(f"r{i}", output_tokens=20))) for i in range(12)
        ]
        await running(a)
        await running(b)
        a.kill()
        replies = await asyncio.gather(*calls)
        stats = pool.statistics()
    assert all(r.content for r in replies)
    assert stats.backends[1].state == "healthy" and stats.backends[1].served >= 6
    assert stats.backends[0].state == "drained"


async def test_stream_fails_over_before_its_first_delta(replay_factory: Any) -> None:
    a: ReplayServer = await replay_factory()
    b: ReplayServer = await replay_factory()
    b.default = Reply(chunks=sse_events("vllm_stream_tool_call.sse"))
    backends = [Backend(OpenAIChatModel(s.base_url, "m", name=n)) for s, n in ((a, "a"), (b, "b"))]
    async with BackendPool(backends, health_interval_s=3600) as pool:
        await pool.start()
        a.healthy = False
        a.default = Reply(status=503, body=fixture_bytes("llamacpp_loading_503.json"))
        deltas = [d async for d in pool.stream(call("r1"))]
        stats = pool.statistics()
    final = deltas[-1].response
    assert final is not None and final.backend == "b" and final.tool_calls
    assert stats.failovers == 1 and len(a.requests) == 1


async def test_close_ends_the_wait_for_a_healthy_backend(replay: ReplayServer) -> None:
    replay.healthy = False
    pool = BackendPool(
        [Backend(OpenAIChatModel(replay.base_url, "m"))], healthy_wait_s=600, health_interval_s=3600
    )
    await pool.start()
    waiting = asyncio.ensure_future(pool.request(call("r")))
    for _ in range(100):
        if pool._awaiting:
            break
        await asyncio.sleep(0)
    assert pool._awaiting == 1
    await pool.aclose()
    with pytest.raises(ModelUnavailableError, match="closed"):
        await waiting


async def test_cancelling_the_caller_of_the_first_health_round_spares_the_others(
    replay: ReplayServer,
) -> None:
    # every call awaits the pool's first health round; the one that started it used to
    # run it in its own task, so cancelling that call cancelled all the others with it
    replay.default = Reply(body=fixture_bytes("vllm_chat_tool_call.json"))
    model = OpenAIChatModel(replay.base_url, "m")
    probing = asyncio.Event()
    answer = asyncio.Event()

    async def health(timeout_s: float) -> bool:
        probing.set()
        await answer.wait()
        return await model.health(timeout_s)

    pool = BackendPool([Backend(model, health=health)])
    try:
        first = asyncio.create_task(pool.request(call("r")))
        await probing.wait()
        second = asyncio.create_task(pool.request(call("r")))
        await asyncio.sleep(0)
        first.cancel()
        answer.set()
        assert (await second).tool_calls
        with pytest.raises(asyncio.CancelledError):
            await first
        stats = pool.statistics().backends[0]
        assert (stats.state, stats.outstanding, stats.served) == ("healthy", 0, 1)
    finally:
        await pool.aclose()
