"""A `podium serve --redis` gateway's /metrics: the queue's waiting and in-flight runs are
read at the scrape. They were as of the gateway's last admission: after a burst the
gauge said 7 runs in flight for minutes while Redis held none (an outside probe)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .harness import WorkerProcess, serving, wait_until
from .redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY, ADMIN = "pk_metrics_test", "pk_metrics_admin"
AGENT = "tests.distributed.app:one_step"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _gauge(text: str, name: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and s.labels.get("pool") == "default")


async def test_the_queue_gauges_are_read_at_the_scrape(
    tmp_path: Path, private_redis: RedisServer
) -> None:
    config = tmp_path / "podium.toml"
    config.write_text(
        f'[server]\nredis = "{private_redis.url}"\n\n[[agents]]\npath = "{AGENT}"\n'
        f'\n[[keys]]\nkey = "{KEY}"\ntenant = "t1"\n'
        f'\n[[keys]]\nkey = "{ADMIN}"\ntenant = "ops"\nadmin = true\n'
    )
    worker = WorkerProcess(tmp_path, "w1", private_redis.url, "podium", AGENT,
                           tmp_path / "effects.log", tool_delay=0.3)
    try:
        with serving(config, tmp_path / "serve.log") as url:
            await worker.wait_ready()
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                user = {"Authorization": f"Bearer {KEY}"}
                ids = [
                    (await client.post("/v1/runs", headers=user,
                                       json={"agent": "one_step", "input": str(i)})).json()["id"]
                    for i in range(6)
                ]  # the later admissions see the earlier runs in flight

                async def all_done() -> bool:
                    runs = [(await client.get(f"/v1/runs/{i}", headers=user)).json() for i in ids]
                    return all(r["status"] == "completed" for r in runs)

                await wait_until(all_done, 30, "the runs to complete")
                scraped = (await client.get(
                    "/metrics", headers={"Authorization": f"Bearer {ADMIN}"})).text
        assert _gauge(scraped, "podium_queue_in_flight") == 0
        assert _gauge(scraped, "podium_queue_waiting") == 0
    finally:
        worker.stop()
