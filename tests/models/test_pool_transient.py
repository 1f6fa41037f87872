"""A pool against backends that fail for a moment, hang, or answer in an odd shape.

What ``podium.toml`` users get: every ``[[models]]`` entry is a :class:`BackendPool`,
of one backend when the name has one endpoint. The servers are real ones on loopback
(scripted replies, a closed port, a backend that answers its health path but never a
call); nothing of Podium is mocked.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

import pytest
from backend_servers import HELLO_EVENTS, OK_BODY, ReplayServer, Reply

from distributed.harness import wait_until
from podium.errors import ModelHTTPError, ModelTimeoutError, ModelUnavailableError
from podium.messages import Message
from podium.models import (
    Backend,
    BackendPool,
    ModelRequest,
    OpenAIChatModel,
    RetryPolicy,
    Timeouts,
)

pytestmark = pytest.mark.anyio
Make = Callable[[], Any]

BODY, EVENTS = OK_BODY, HELLO_EVENTS
FAST_RETRY = RetryPolicy(attempts=3, backoff_s=0.01)


def req(run: str = "r") -> ModelRequest:
    return ModelRequest(messages=[Message("user", "hi")], run_id=run)


def lone(server: ReplayServer, **options: Any) -> BackendPool:
    """A pool of one backend: what a ``[[models]]`` entry with one endpoint becomes."""
    model = OpenAIChatModel(server.base_url, "m", **options)
    return BackendPool([Backend(model)], health_interval_s=3600)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- a lone backend's transient failures are retried, not fatal ---------------------


async def test_a_lone_backends_503_is_retried_after_its_retry_after(
    replay: ReplayServer,
) -> None:
    replay.script(Reply(status=503, body=b"busy", headers={"Retry-After": "0"}), Reply(body=BODY))
    async with lone(replay) as pool:
        reply = await pool.request(req())
    assert reply.content == "ok" and len(replay.requests) == 2


async def test_a_lone_backends_dropped_stream_is_retried(replay: ReplayServer) -> None:
    replay.script(Reply(chunks=EVENTS, kill_after=1), Reply(chunks=EVENTS))
    async with lone(replay, stream=True) as pool:
        reply = await pool.request(req())
    assert reply.content == "hello" and len(replay.requests) == 2


async def test_a_lone_backend_that_keeps_failing_is_tried_as_its_policy_says(
    replay: ReplayServer,
) -> None:
    replay.default = Reply(status=503, body=b"still loading")
    async with lone(replay, retry=FAST_RETRY) as pool:
        with pytest.raises(ModelHTTPError) as info:
            await pool.request(req())
    assert len(replay.requests) == FAST_RETRY.attempts
    assert info.value.status == 503 and str(info.value).startswith(f"m@127.0.0.1:{replay.port}: ")


async def test_two_backends_both_failing_for_a_moment_are_tried_again(
    replay_factory: Make,
) -> None:
    a, b = await replay_factory(), await replay_factory()
    a.script(Reply(status=503, body=b"a busy", headers={"Retry-After": "0"}), Reply(body=BODY))
    b.script(Reply(status=503, body=b"b busy", headers={"Retry-After": "0"}), Reply(body=BODY))
    backends = [Backend(OpenAIChatModel(s.base_url, "m", name=n)) for s, n in ((a, "a"), (b, "b"))]
    async with BackendPool(backends, health_interval_s=3600) as pool:
        reply = await pool.request(req())
    assert reply.content == "ok"
    assert len(a.requests) + len(b.requests) == 3  # one each, then one again


# --- timeout_s bounds the call, waits for a backend included --------------------------


async def test_timeout_s_bounds_the_wait_for_a_backend_that_is_down() -> None:
    model = OpenAIChatModel(
        f"http://127.0.0.1:{closed_port()}/v1", "m", timeouts=Timeouts(total_s=0.5)
    )
    pool = BackendPool([Backend(model)], health_interval_s=3600)  # healthy_wait_s: 30
    async with pool:
        async with asyncio.timeout(10):  # 30 s, the pool's own wait, before the fix
            with pytest.raises(ModelUnavailableError, match="no healthy backend") as info:
                await pool.request(req())
    assert "Cannot connect" in str(info.value) or "Connect call failed" in str(info.value)


async def test_a_backend_whose_health_check_hangs_says_so() -> None:
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # never answers, not even its health path

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "m")
    pool = BackendPool(
        [Backend(model)], health_interval_s=3600, health_timeout_s=0.2, healthy_wait_s=0.5
    )
    try:
        async with pool:
            with pytest.raises(ModelUnavailableError) as info:
                await pool.request(req())
    finally:
        for writer in held:
            writer.transport.abort()
        server.close()
    assert f"no answer from http://127.0.0.1:{port}/health within 0.2s" in str(info.value)


# --- a backend that answers its health path but never a call is left out ----------------


async def test_a_backend_whose_calls_time_out_is_left_out_while_another_serves(
    replay_factory: Make, caplog: pytest.LogCaptureFixture
) -> None:
    wedged, fine = await replay_factory(), await replay_factory()
    never = asyncio.Event()
    wedged.default = Reply(body=BODY, hold=never)  # /health answers, a call never does
    fine.default = Reply(body=BODY)
    quick = Timeouts(total_s=0.3)
    backends = [
        Backend(OpenAIChatModel(s.base_url, "m", name=n, timeouts=quick))
        for s, n in ((wedged, "wedged"), (fine, "fine"))
    ]
    pool = BackendPool(backends, health_interval_s=0.05, unhealthy_after=2, eject_s=60)
    caplog.set_level(logging.INFO, logger="podium.models.pool")
    try:
        async with pool:
            for i in range(2):  # both first go to the wedged one (listed first, both idle)
                with pytest.raises(ModelTimeoutError):
                    await pool.request(req(f"r{i}"))
            health_checks = wedged.health_calls
            for i in range(6):
                assert (await pool.request(req(f"s{i}"))).content == "ok"
            # it passes its health checks meanwhile, and stays out
            await wait_until(lambda: wedged.health_calls >= health_checks + 3, 10, "checks")
            stats = {b.name: b for b in pool.statistics().backends}
    finally:
        never.set()
    assert len(wedged.requests) == 2 and len(fine.requests) == 6
    assert stats["wedged"].state == "drained" and stats["fine"].served == 6
    assert "backend wedged timed out 2 calls in a row" in caplog.text


async def test_a_timeout_names_the_limit_that_fired(replay: ReplayServer) -> None:
    never = asyncio.Event()
    replay.default = Reply(body=BODY, hold=never)
    model = OpenAIChatModel(replay.base_url, "m", timeouts=Timeouts(total_s=0.2))
    try:
        with pytest.raises(ModelTimeoutError, match=r"the call's total of 0\.2s") as info:
            await model.request(req())
    finally:
        never.set()
        await model.aclose()
    assert "300" not in str(info.value)  # first_byte_s, which did not fire


# --- drains and re-admissions are logged ------------------------------------------------


async def test_a_drain_and_a_readmission_are_logged(
    replay: ReplayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="podium.models.pool")
    model = OpenAIChatModel(replay.base_url, "m", name="gpu-a")
    pool = BackendPool([Backend(model)], health_interval_s=0.02, unhealthy_after=1)
    async with pool:
        await pool.start()
        replay.healthy = False
        await wait_until(lambda: pool.statistics().backends[0].state == "drained", 10, "drain")
        replay.healthy = True
        await wait_until(lambda: pool.statistics().backends[0].state == "healthy", 10, "back")
    assert "backend gpu-a drained (ModelUnavailableError: GET http" in caplog.text
    assert "HTTP 503" in caplog.text
    assert "backend gpu-a passed its health check: it takes calls again" in caplog.text
