"""The gateway through a Redis outage: a real ``podium serve --redis`` on loopback, a
``podium worker``, and a private redis-server killed and restarted (AOF) under them.

While Redis is away a request that needs it is a ``503`` with ``Retry-After`` on a
connection that stays usable; a client that retries with its ``Idempotency-Key`` gets
one run, not two; SSE followers and ``wait`` requests started before the outage still
get their run's final event.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import httpx
import pytest

from .harness import WorkerProcess
from .redis_server import RedisServer
from .test_gateway_on_redis import KEY, SLOW, gateway  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HEADERS = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _assert_quiet_log(tmp_path: Path) -> None:
    """The gateway logged the outage as warnings: no tracebacks, no stray futures."""
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert "Traceback" not in log and "never retrieved" not in log, log[-3000:]


def _request(sock: socket.socket, method: str, path: str, body: bytes = b"", **extra: str) -> None:
    head = [f"{method} {path} HTTP/1.1", "Host: podium", f"Authorization: Bearer {KEY}"]
    head += [f"{k.replace('_', '-')}: {v}" for k, v in extra.items()]
    if body:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)


def _response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One whole response (Content-Length framed) off a keep-alive socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    return int(lines[0].split()[1]), headers, rest[:length]


def _outage_round_trip(url: str, body: bytes) -> tuple[int, dict[str, str], bytes, int]:
    """POST a run while Redis is down, then ask /healthz on the same connection."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        _request(sock, "POST", "/v1/runs", body, Idempotency_Key="retry-me-1")
        status, headers, payload = _response(sock)
        _request(sock, "GET", "/healthz")
        health, _, _ = _response(sock)
    return status, headers, payload, health


async def test_outage_is_a_503_and_an_idempotent_retry_makes_one_run(
    gateway: str,  # noqa: F811
    private_redis: RedisServer,
    tmp_path: Path,
) -> None:
    worker = WorkerProcess(
        tmp_path, "worker", private_redis.url, "podium", SLOW, tmp_path / "effects.log"
    )
    try:
        await worker.wait_ready()
        body = json.dumps({"agent": "effects", "input": "once"}).encode()
        private_redis.kill()
        status, headers, payload, health = await asyncio.to_thread(
            _outage_round_trip, gateway, body
        )
        assert status == 503, payload
        assert int(headers["retry-after"]) >= 1
        assert headers.get("connection", "").lower() != "close"
        error = json.loads(payload)["error"]
        assert error["type"] == "unavailable" and error["retry_after"] > 0
        assert health == 200  # the same connection still serves

        private_redis.start()
        async with httpx.AsyncClient(base_url=gateway, headers=HEADERS, timeout=60) as client:
            key = {"Idempotency-Key": "retry-me-1"}
            first = await client.post(
                "/v1/runs", content=body, headers={**key, "Content-Type": "application/json"}
            )
            while first.status_code == 503:  # the gateway's clients reconnect with backoff
                await asyncio.sleep(float(first.headers["retry-after"]) / 10)
                first = await client.post(
                    "/v1/runs", content=body, headers={**key, "Content-Type": "application/json"}
                )
            assert first.status_code in (200, 202), first.text
            run_id = first.json()["id"]
            again = await client.post(
                "/v1/runs", json={"agent": "effects", "input": "once", "wait": True}, headers=key
            )
            assert again.status_code == 200, again.text
            assert again.json()["id"] == run_id and again.json()["status"] == "completed"
            assert again.headers["idempotent-replayed"] == "true"
            other = await client.post(
                "/v1/runs", json={"agent": "effects", "input": "something else"}, headers=key
            )
            assert other.status_code == 422
            assert other.json()["error"]["type"] == "idempotency_mismatch"
            runs = (await client.get("/v1/runs")).json()["data"]
            assert [r["id"] for r in runs] == [run_id]  # one run, not one per attempt
        _assert_quiet_log(tmp_path)
    finally:
        worker.stop()


async def test_followers_and_waits_ride_out_an_outage(
    gateway: str,  # noqa: F811
    private_redis: RedisServer,
    tmp_path: Path,
) -> None:
    effects = tmp_path / "effects.log"
    worker = WorkerProcess(
        tmp_path, "worker", private_redis.url, "podium", SLOW, effects, tool_delay=0.3
    )
    try:
        await worker.wait_ready()
        async with httpx.AsyncClient(base_url=gateway, headers=HEADERS, timeout=120) as client:
            run = (await client.post("/v1/runs", json={"agent": "effects", "input": "go"})).json()
            first_event = asyncio.Event()
            names: list[str] = []
            final: dict[str, object] = {}

            async def follow() -> None:
                async with client.stream("GET", f"/v1/runs/{run['id']}/events") as r:
                    assert r.status_code == 200
                    event = ""
                    async for line in r.aiter_lines():
                        if line.startswith("event: "):
                            event = line[7:]
                            names.append(event)
                            first_event.set()
                        elif line.startswith("data: ") and event == "final":
                            final.update(json.loads(line[6:]))

            async def wait() -> httpx.Response:
                return await client.post(
                    "/v1/runs",
                    json={"agent": "effects", "input": "go too", "wait": True},
                )

            follower = asyncio.create_task(follow())
            waiter = asyncio.create_task(wait())
            await asyncio.wait_for(first_event.wait(), 30)
            private_redis.kill()
            await asyncio.sleep(1.0)  # the outage: followers see errors, not the end
            private_redis.start()
            await asyncio.wait_for(follower, 90)
            waited = await asyncio.wait_for(waiter, 90)
        assert names[-1] == "final" and final["status"] == "completed", (names, final)
        assert waited.status_code == 200, waited.text
        assert waited.json()["status"] == "completed"
        _assert_quiet_log(tmp_path)
    finally:
        worker.stop()


async def test_a_hung_redis_is_a_503_on_time_for_every_request(
    gateway: str,  # noqa: F811
    private_redis: RedisServer,
    tmp_path: Path,
) -> None:
    """SIGSTOP: Redis still accepts connections (the kernel does) and never answers, as a
    hung server or a link that drops packets. Each request waits about ``unavailable_s``
    (1.5 s) and answers 503, instead of its client's 10 s read timeout times its retries
    (18 s to read or create a run, as long as the hang to list runs)."""
    # 8 s: well past the 1.5 s promised and a scheduling hiccup, well short of the old waits
    async with httpx.AsyncClient(base_url=gateway, headers=HEADERS, timeout=8) as client:
        made = await client.post("/v1/runs", json={"agent": "react", "input": "before"})
        run_id = made.json()["id"]
        private_redis.pause()
        try:
            requests = [
                client.get(f"/v1/runs/{run_id}"),
                client.get("/v1/runs"),
                client.get("/v1/threads"),
                client.post("/v1/runs", json={"agent": "react", "input": "during"}),
                client.post(f"/v1/runs/{run_id}/cancel"),
            ]
            answers = await asyncio.gather(*requests)
            for answer in answers:
                assert answer.status_code == 503, (answer.request.url, answer.text)
                assert answer.json()["error"]["type"] == "unavailable"
                assert int(answer.headers["retry-after"]) >= 1
            # a second wave, on connections whose first commands are still unanswered
            again = await client.get(f"/v1/runs/{run_id}")
            assert again.status_code == 503, again.text
            ready = await client.get("/readyz")
            assert ready.status_code == 503
        finally:
            private_redis.resume()
        # Redis answers again: so does the gateway, without a restart.
        for _ in range(100):
            back = await client.get(f"/v1/runs/{run_id}")
            if back.status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert back.status_code == 200, back.text
        listed = await client.get("/v1/runs")
        assert listed.status_code == 200 and run_id in [r["id"] for r in listed.json()["data"]]
    _assert_quiet_log(tmp_path)
