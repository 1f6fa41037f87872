"""A supervisor of worker processes answers ``/readyz`` for the stores its workers use:
with runs kept in PostgreSQL (or archived there) it asks PostgreSQL, not only Redis."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import httpx
import pytest

from .harness import WorkerProcess, wait_until
from .postgres_server import PostgresServer
from .redis_server import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = "tests.distributed.app:effects"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _answer(client: httpx.AsyncClient, url: str) -> tuple[int, dict[str, str]]:
    got = await client.get(url)
    checks: dict[str, str] = got.json()["checks"]
    return got.status_code, checks


@pytest.mark.parametrize("option", ["--store", "--archive"])
async def test_the_supervisor_is_not_ready_while_postgres_is_down(
    shared_redis_url: str, private_postgres: PostgresServer, tmp_path: Path, option: str
) -> None:
    port = free_port()
    supervised = WorkerProcess(tmp_path, "supervised", shared_redis_url,
                               f"ready-{uuid.uuid4().hex[:8]}", AGENT, tmp_path / "effects.log",
                               option, private_postgres.url, "--procs", "1",
                               "--metrics-port", str(port))
    ready = f"http://127.0.0.1:{port}/readyz"
    name = "store" if option == "--store" else "archive"
    try:
        await supervised.wait_ready()
        async with httpx.AsyncClient(timeout=30) as client:

            async def answers(code: int, ok: bool) -> bool:
                got, checks = await _answer(client, ready)
                return got == code and (checks.get(name) == "ok") == ok

            await wait_until(lambda: answers(200, True), 30, "ready")
            await asyncio.to_thread(private_postgres.kill)
            await wait_until(lambda: answers(503, False), 30, "not ready")
            _, checks = await _answer(client, ready)
            assert str(private_postgres.port) in checks[name], checks  # says which server
            assert checks["workers"] == "ok", checks  # its children run on
            assert checks["queue" if name == "store" else "store"] == "ok", checks  # Redis
            assert (await client.get(f"http://127.0.0.1:{port}/livez")).status_code == 200
            await asyncio.to_thread(private_postgres.start)
            await wait_until(lambda: answers(200, True), 30, "ready again")
    finally:
        supervised.signal(signal.SIGTERM)
        await supervised.wait_exit(30)
