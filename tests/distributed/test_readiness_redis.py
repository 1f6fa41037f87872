"""Readiness tells the truth about Redis: a gateway and a worker on a Redis that refuses
writes (full, a read-only replica) or deletes keys (an evicting policy set while they
run) say "not ready" with the reason, a refused request's 503 says which, liveness
never depends on Redis, and a run that vanished from Redis is counted and logged."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.queue.redis import RedisQueue
from podium.queue.stranded import queue_item
from podium.store.redis import RedisRunStore
from podium.worker.worker import Worker

from .app import effects
from .harness import WorkerProcess, redis_config, serving, wait_until
from .redis_server import RedisServer, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_readiness"
AGENT = "tests.distributed.app:effects"
HEADERS = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _not_ready_saying(client: httpx.AsyncClient, url: str, words: str) -> bool:
    got = await client.get(url)
    return got.status_code == 503 and words in got.text


async def _ready(client: httpx.AsyncClient, url: str) -> bool:
    return (await client.get(url)).status_code == 200


async def test_readiness_follows_what_redis_refuses_and_liveness_does_not(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    admin = redis.Redis.from_url(private_redis.url)
    config = redis_config(tmp_path, private_redis.url, [AGENT], {KEY: "t1"})
    port = free_port()
    worker = WorkerProcess(tmp_path, "worker", private_redis.url, "podium", AGENT,
                           tmp_path / "effects.log", "--metrics-port", str(port))
    probes = f"http://127.0.0.1:{port}"
    # --procs: the supervisor answers for its children
    supervised_port = free_port()
    supervised = WorkerProcess(tmp_path, "supervised", private_redis.url, "podium", AGENT,
                               tmp_path / "effects.log", "--procs", "1",
                               "--metrics-port", str(supervised_port))
    supervisor = f"http://127.0.0.1:{supervised_port}"
    try:
        with serving(config, tmp_path / "serve.log") as url:
            await worker.wait_ready()
            await supervised.wait_ready()
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
                for ready in (f"{url}/readyz", f"{probes}/readyz", f"{supervisor}/readyz"):
                    await wait_until(lambda u=ready: _ready(client, u), 20, f"{ready} ready")
                conditions: list[tuple[str, Any, Any]] = [
                    ("out of memory",
                     lambda: admin.config_set("maxmemory", 1),
                     lambda: admin.config_set("maxmemory", 0)),
                    ("read-only replica",  # a replica of a master that is not there
                     lambda: admin.replicaof("127.0.0.1", free_port()),
                     lambda: admin.replicaof("NO", "ONE")),
                    ("maxmemory-policy is allkeys-lru",  # set while they run
                     lambda: admin.config_set("maxmemory-policy", "allkeys-lru"),
                     lambda: admin.config_set("maxmemory-policy", "noeviction")),
                ]
                for words, cause, cure in conditions:
                    cause()
                    for ready in (f"{url}/readyz", f"{probes}/readyz", f"{supervisor}/readyz"):
                        await wait_until(lambda u=ready, w=words: _not_ready_saying(client, u, w),
                                         20, f"{ready} to say {words!r}")
                    # Alive all the while: an orchestrator must not restart them for it.
                    assert (await client.get(f"{probes}/livez")).status_code == 200
                    assert (await client.get(f"{supervisor}/livez")).status_code == 200
                    assert (await client.get("/healthz")).status_code == 200
                    if words != "maxmemory-policy is allkeys-lru":  # writes are refused
                        refused = await client.post("/v1/runs",
                                                    json={"agent": "effects", "input": "x"})
                        assert refused.status_code == 503, refused.text
                        error = refused.json()["error"]
                        assert error["type"] == "unavailable"
                        assert "refuses writes" in error["message"], error
                        assert words in error["message"], error
                        assert "unreachable" not in error["message"], error
                    cure()
                    for ready in (f"{url}/readyz", f"{probes}/readyz", f"{supervisor}/readyz"):
                        await wait_until(lambda u=ready: _ready(client, u), 20, f"{ready} again")
                created = await client.post("/v1/runs", json={"agent": "effects", "input": "x"})
                assert created.status_code in (200, 201, 202), created.text
                # lost runs are a counter beside the worker's others (none lost here)
                scraped = (await client.get(f"{probes}/metrics")).text
                assert "podium_runs_lost_total 0.0" in scraped, scraped[-2000:]
        log = (tmp_path / "serve.log").read_text()
        assert "Traceback" not in log, log[-3000:]
        # the worker said when writes stopped and when they resumed
        assert "the store is not ready: " in worker.text(), worker.text()[-3000:]
        assert "the store is ready again" in worker.text()
    finally:
        worker.stop()
        supervised.signal(signal.SIGTERM)  # its child drains and exits with it
        await supervised.wait_exit(30)
        admin.replicaof("NO", "ONE")
        admin.config_set("maxmemory", 0)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.close()


async def test_runs_that_vanish_from_redis_are_counted_and_logged(
    shared_redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What eviction does, made deterministic: a queued run's keys deleted. A worker that
    claims it, a listing of queued runs and the stranded sweep's index each report it
    lost (a count the metrics export, an error line), instead of a silent 404."""
    caplog.set_level(logging.ERROR, "podium.store")
    async with (
        RedisRunStore(shared_redis_url, prefix=prefix) as store,
        RedisQueue(shared_redis_url, prefix=prefix) as queue,
    ):
        submitted = RunRecord("submitted", "effects", "go")
        await store.create(submitted)
        assert await queue.submit(queue_item(submitted, time.time()))
        await store.create(RunRecord("listed", "effects", "go"))
        await store.create(RunRecord("stranded", "effects", "go", updated_at=1.0))
        await store.client.delete(*(f"{prefix}:{{{r}}}:run" for r in
                                    ("submitted", "listed", "stranded")))
        worker = Worker(queue, Engine(store), {"effects": effects}, claim_block_s=0.05)
        await worker.run(burst=True)  # claims "submitted": not in the store, dead-lettered
        (dead,) = await queue.dead_letters()
        assert dead.item.run_id == "submitted"
        assert await store.list(status="queued") == []
        assert await store.unsubmitted(time.time(), 10) == []
        # each counted once, wherever it was met (a run met again is not counted again)
        assert store.statistics().lost == 3
        lost = [r.getMessage() for r in caplog.records if "is lost" in r.getMessage()]
        assert len(lost) == 3 and all("evicted" in line for line in lost), lost
        assert any("run submitted is lost: a queue entry" in line for line in lost), lost
