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


async def test_followers_share_one_read_and_leave_nothing_blocked(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """Many followers of a queued run (no worker: its journal never moves) wait on its
    journal through the gateway's one shared read, not a blocked connection each (the
    pool has 100: followers past it spun on "too many connections"); their clients hang
    up together, and no read is left blocked in Redis (the bound here is generous; the
    target, 2 s, is what the measurement in the report shows)."""
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
            await wait_until(lambda: _blocked_reads(admin) >= 1, 30,
                             "the followers to wait on Redis")
            # Until every follower has waited its first heartbeat out (a keep-alive each):
            # the blocked reads seen meanwhile, at most.
            most = 0

            pending = list(socks)

            def all_kept_alive() -> bool:
                nonlocal most, pending
                most = max(most, _blocked_reads(admin))
                pending = [s for s in pending if not _got_frame(s)]
                return not pending

            await wait_until(all_kept_alive, 60, "a keep-alive on every stream")
            assert most <= 2, f"{most} reads blocked for {FOLLOWERS} followers"
            for sock in socks:
                sock.close()
            await wait_until(lambda: _blocked_reads(admin) == 0, 6,
                             "the abandoned followers' read to end")
    finally:
        admin.close()


def _got_frame(sock: socket.socket) -> bool:
    """Whether the stream has sent something since its head (without waiting for it)."""
    sock.setblocking(False)
    try:
        return bool(sock.recv(4096))
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)
