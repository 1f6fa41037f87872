"""Health from behaviour: a backend whose calls stop making progress (its process
SIGSTOPped: it still accepts connections, it answers nothing) is drained, its calls move
to the other backend, it is re-admitted once it answers again; with none left, calls
fail within their bounded wait with the backends' errors."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator

import pytest
from backend_servers import SimServerProcess
from prometheus_client import CollectorRegistry, generate_latest

from podium.errors import ModelError
from podium.messages import Message
from podium.models import ModelRequest, ModelResponse, OpenAIChatModel, RetryPolicy, Timeouts
from podium.models.pool import Backend, BackendPool
from podium.observe.metrics import RunMetrics

pytestmark = pytest.mark.anyio

SIM = ("--capacity", "8", "--step-ms", "5", "--output-tokens", "20", "--tool-steps", "0")


@pytest.fixture
def pair(sim_server_factory: Callable[..., SimServerProcess]) -> Iterator[list[SimServerProcess]]:
    servers = [sim_server_factory(*SIM), sim_server_factory(*SIM)]
    try:
        yield servers
    finally:
        for s in servers:  # a stopped process takes no SIGTERM: let it go on first
            os.kill(s.proc.pid, signal.SIGCONT)


def _pool(servers: list[SimServerProcess], **kw: float) -> BackendPool:
    timeouts = Timeouts(first_token_s=1.0, token_idle_s=1.0, total_s=60)
    return BackendPool(
        [
            Backend(
                OpenAIChatModel(s.base_url, "podium-sim", timeouts=timeouts, stream=True,
                                retry=RetryPolicy(attempts=2, backoff_s=0.01)),
                name=f"b{i}",
            )
            for i, s in enumerate(servers)
        ],
        health_interval_s=0.2,
        health_timeout_s=0.3,
        eject_s=0.5,  # the cooldown of a backend whose calls stalled, before its probe counts
        **kw,
    )


def _request(i: int) -> ModelRequest:
    return ModelRequest([Message("user", f"question {i}")], run_id=f"run-{i}")


async def test_a_stopped_backend_is_drained_its_calls_move_and_it_comes_back(
    pair: list[SimServerProcess],
) -> None:
    async with _pool(pair) as pool:
        await pool.start()
        assert [b.state for b in pool.backends] == ["healthy", "healthy"]
        os.kill(pair[0].proc.pid, signal.SIGSTOP)

        async def streamed(i: int) -> ModelResponse:
            final = None
            async for delta in pool.stream(_request(i)):
                final = delta.response or final
            assert final is not None
            return final

        replied = await asyncio.gather(*(streamed(i) for i in range(8)))
        # every call ended on the live backend, the stuck ones moved there
        assert {r.backend for r in replied} == {pool.backends[1].model.name}
        assert pool.backends[0].state == "drained"
        assert pool.failovers >= 1
        # the attempts that stalled count in their call's usage (a request each)
        moved = [r for r in replied if r.usage.requests > 1]
        assert moved and all(r.usage_estimated for r in moved)
        registry = CollectorRegistry()
        RunMetrics(registry)._sample_backends(pool)
        exported = generate_latest(registry).decode()
        stuck = 'backend="default/b0"'
        for line in (f"podium_backend_up{{{stuck}}} 0.0",
                     f"podium_backend_drains_total{{{stuck}}} 1.0"):
            assert line in exported, exported
        b0 = pool.statistics().backends[0]
        assert b0.failovers >= 1 and b0.timeouts >= 1
        # calls through request() go to the live one while b0 is out
        replies = await asyncio.gather(*(pool.request(_request(10 + i)) for i in range(4)))
        assert {r.backend for r in replies} == {pool.backends[1].model.name}

        came_up = pool._came_up  # set when a backend is admitted (b1 is in already)
        os.kill(pair[0].proc.pid, signal.SIGCONT)
        async with asyncio.timeout(30):
            await came_up.wait()
        assert pool.backends[0].state == "healthy"


async def test_with_every_backend_stopped_calls_fail_after_the_bounded_wait(
    pair: list[SimServerProcess],
) -> None:
    async with _pool(pair, healthy_wait_s=0.5) as pool:
        await pool.start()
        for s in pair:
            os.kill(s.proc.pid, signal.SIGSTOP)
        results = await asyncio.gather(
            *(pool.request(_request(i)) for i in range(4)), return_exceptions=True
        )
        for r in results:
            assert isinstance(r, ModelError), r
        # the calls said why: no progress, or no healthy backend with the last errors
        assert any("no first token" in str(r) or "no healthy backend" in str(r)
                   for r in results)
        assert all(b.state == "drained" for b in pool.backends)
        late = await asyncio.gather(pool.request(_request(9)), return_exceptions=True)
        assert isinstance(late[0], ModelError) and "no healthy backend" in str(late[0])
