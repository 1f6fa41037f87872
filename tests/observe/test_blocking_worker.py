"""A `podium worker` process runs the blocking-call detector by default."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from podium.engine.records import RunRecord
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore, connect

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio


async def _submit(redis_url: str, prefix: str, agent: str, run_id: str) -> None:
    client = connect(redis_url)
    store = RedisRunStore(client, prefix=prefix)
    queue = RedisQueue(client, prefix=prefix)
    await store.create(RunRecord(run_id, agent, "where is my invoice?"))
    await queue.submit(QueueItem(run_id, agent))
    await queue.aclose()
    await store.aclose()
    await client.aclose()


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_worker_names_the_tool_that_blocks_its_loop(redis_url: str, prefix: str) -> None:
    await _submit(redis_url, prefix, "blocky", "run_blocky_1")
    cmd = [sys.executable, "-m", "podium.cli.main", "worker", "--burst", "--redis", redis_url,
           "--prefix", prefix, "--agent", "observe_agents:blocky", "--log-level", "WARNING"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "event loop blocked" in text, text
    assert "fetch_invoice_synchronously" in text, text
    assert "stall #1" in text, text
