"""The reported race: runs cancelled over HTTP right after submission, on SQLite and memory.

Each cancel comes a different number of loop turns after its submission, so
across the runs it lands in every moment of a starting run: queued, claimed,
loading, its first update, its first step. Every one must answer ``cancelled``
(it used to answer ``running`` after 10 s, the run left with no driver).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from conftest import KEY_A, KEYS_ENV, default_agents
from podium.config import load_config
from podium.gateway.app import create_app
from podium.gateway.runtime import build_gateway
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio

RUNS = 120


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_cancel_right_after_submission(kind: str, tmp_path: Path) -> None:
    store: RunStore = SQLiteRunStore(tmp_path / "runs.db") if kind == "sqlite" else MemoryRunStore()
    config = load_config(None, {"PODIUM_KEYS": KEYS_ENV, "PODIUM_SERVER__DRAIN_GRACE_S": "0.2"})
    gw = build_gateway(config, default_agents(), store=store)
    await gw.start()
    try:
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://podium.test",
            headers={"Authorization": f"Bearer {KEY_A}"},
        ) as client:

            async def submit_and_cancel(i: int) -> tuple[int, str]:
                # half take 30 s (cancelled, whenever the cancel lands), half finish at once
                agent = "sleepy" if i % 2 else "react"
                run = (await client.post("/v1/runs", json={"agent": agent, "input": "q"})).json()
                for _ in range(i % 40):
                    await asyncio.sleep(0)  # land the cancel a different moment each time
                r = await client.post(f"/v1/runs/{run['id']}/cancel")
                if r.status_code == 409:  # an instant run may finish first: it keeps its end
                    stored = await store.get(run["id"])
                    assert stored is not None
                    return 409, stored.status
                return r.status_code, r.json()["status"]

            answers = Counter(await asyncio.gather(*(submit_and_cancel(i) for i in range(RUNS))))
        assert set(answers) <= {(200, "cancelled"), (409, "completed")}
        assert answers[200, "cancelled"] >= RUNS // 2  # every sleepy run, at least
        assert await store.list(status="running") == []
    finally:
        await gw.stop()
