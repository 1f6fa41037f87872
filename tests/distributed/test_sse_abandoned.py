"""Event streams whose clients went away give their Redis connection back at once.

A follower of a run that does not move waits on the run's journal with a blocking
read; a client that hangs up must not leave that read holding a connection of the
gateway's pool (and a client slot of Redis) for the rest of its block: a crowd of
clients that vanish (a load balancer's restart, a mobile network) would otherwise keep
Redis's connections blocked for tens of seconds after them.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
import redis

from .harness import redis_config, serving, wait_until
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_sse_abandoned"
AGENT = "tests.distributed.app:effects"
FOLLOWERS = 150


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _blocked_reads(admin: redis.Redis) -> int:
    """Redis's clients blocked in an XREAD now (the followers' waits)."""
    return sum(1 for c in admin.client_list() if c["cmd"] == "xread" and "b" in c["flags"])


def _follow(port: int, run_id: str) -> socket.socket:
    """An SSE client of ``run_id``'s events, its response head read (it follows now)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: podium\r\n"
        f"Authorization: Bearer {KEY}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


async def test_abandoned_streams_free_their_redis_connections(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """Many followers of a queued run (no worker: its journal never moves), each in a
    blocking read on Redis; their clients hang up together, and Redis's blocked
    clients go with them (the bound here is generous; the target, 2 s, is measured by
    bench/bench_sse_abandon.py)."""
    admin = redis.Redis.from_url(private_redis.url)
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    try:
        with serving(config, tmp_path / "serve.log") as url:
            port = int(url.rsplit(":", 1)[1])
            async with httpx.AsyncClient(
                base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30
            ) as client:
                created = await client.post("/v1/runs", json={"agent": "effects", "input": "x"})
                assert created.status_code in (200, 201, 202), created.text
                run_id = created.json()["id"]
            socks = await asyncio.gather(
                *(asyncio.to_thread(_follow, port, run_id) for _ in range(FOLLOWERS))
            )
            await wait_until(lambda: _blocked_reads(admin) >= FOLLOWERS // 2, 30,
                             "the followers to wait on Redis")
            for sock in socks:
                sock.close()
            await wait_until(lambda: _blocked_reads(admin) == 0, 6,
                             "the abandoned followers' reads to end")
    finally:
        admin.close()
