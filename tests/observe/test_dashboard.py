"""The gateway's live /dashboard, in real headless Chromium against a real `podium serve`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from chromium import SVG_STATS, open_page

from .conftest import serving

pytestmark = pytest.mark.anyio

KEY = "pk_dashboard_test"
TENANT_KEY = "pk_dashboard_tenant"
CONFIG = f"""
[server]
store = "memory"
drain_grace_s = 1

[[agents]]
path = "observe_agents:support"

[[keys]]
key = "{KEY}"
tenant = "ops"
admin = true

[[keys]]
key = "{TENANT_KEY}"
tenant = "acme"
"""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[str]:
    async with serving(CONFIG, tmp_path) as url:
        yield url


async def _submit(url: str, n: int) -> list[str]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=30) as client:
        ids = []
        for _ in range(n):
            resp = await client.post("/v1/runs", json={"agent": "support", "input": "A-1?",
                                                       "wait": True})
            assert resp.json()["status"] == "completed", resp.text
            ids.append(resp.json()["id"])
        return ids


WAIT_FOR_COMPLETED = """
new Promise((resolve, reject) => {
  const deadline = Date.now() + 30000;
  (function poll() {
    const card = document.querySelector('#status-completed b');
    if (card && card.textContent === '%d') return resolve(true);
    if (Date.now() > deadline) return reject(new Error('still ' + (card && card.textContent)));
    setTimeout(poll, 50);
  })();
})
"""


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_the_dashboard_draws_and_updates_as_runs_are_submitted(server: str) -> None:
    async with open_page(f"{server}/dashboard#key={KEY}") as page:
        assert await page.evaluate(WAIT_FOR_COMPLETED % 0)
        ids = await _submit(server, 3)
        assert await page.evaluate(WAIT_FOR_COMPLETED % 3)  # it updated by itself
        svgs = await page.evaluate(SVG_STATS.replace("rect.bar", "rect.mark, polyline.mark"))
        visible = [s for s in svgs if s["width"] > 0]  # the run view's timeline is hidden
        assert len(visible) == 2 and all(s["marks"] > 0 for s in visible), svgs
        backends = await page.evaluate("document.getElementById('backends').innerText")
        assert "no backend pool" in backends  # the simulated model has none
        # Read without hovering: the throughput's axes, each phase bar's value.
        labels = await page.evaluate(
            "[...document.querySelectorAll('#throughput text, #phases text')]"
            ".map(t => t.textContent)")
        assert {"now", "-60 s", "-120 s", "0.00/s"} <= set(labels), labels
        assert sum(label.endswith(" ms") for label in labels) == 6, labels
        await page.screenshot("dashboard")
        await page.evaluate(f"location.hash = 'run={ids[0]}'")
        text = await page.evaluate(
            "new Promise(r => { const t = () => { const m = document.getElementById('messages');"
            " if (m.rows.length > 2) r(m.innerText); else setTimeout(t, 50); }; t(); })"
        )
        assert "lookup" in text and "It shipped." in text
        timeline = await page.evaluate(
            "document.querySelectorAll('#timeline rect.mark').length")
        assert timeline >= 2 * 6
        await page.screenshot("dashboard-run")
        errors = list(page.errors)
    assert errors == [], errors


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_dashboard_data_needs_an_operator_key(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        assert (await client.get("/dashboard/data")).status_code == 401
        tenant = await client.get("/dashboard/data",
                                  headers={"Authorization": f"Bearer {TENANT_KEY}"})
        assert tenant.status_code == 403 and "operator key" in tenant.text
        page = await client.get("/dashboard")
        assert page.status_code == 200 and "<svg" in page.text
        assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")
        ok = await client.get("/dashboard/data", headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200, ok.text
        overview = json.loads(ok.text)
        assert overview["tenant"] is None and overview["backends"] == []  # all tenants
        # An unknown run: the API's error body, as every other 404 (a client reads one shape).
        missing = await client.get("/dashboard/data?run=run_nope",
                                   headers={"Authorization": f"Bearer {KEY}"})
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "not_found"
        assert "run_nope" in missing.json()["error"]["message"]


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_dashboard_data_in_redis_worker_mode(redis_url: str, prefix: str) -> None:
    """A gateway that drives nothing (workers do, around Redis) shows the same runs, phases
    and queues, read from the shared store and queue; backend occupancy is the workers'."""
    from podium.config import load_config
    from podium.engine.driver import Engine
    from podium.gateway.app import create_app
    from podium.gateway.auth import KeyRing
    from podium.gateway.service import Gateway, ServedAgent
    from podium.queue.redis import RedisQueue
    from podium.store.redis import RedisRunStore
    from podium.worker.worker import Worker

    from .observe_agents import support

    config = load_config(None, {"PODIUM_KEYS": f"{KEY}=ops:admin,{TENANT_KEY}=acme"})
    gw = Gateway(config, [ServedAgent(support())], RedisRunStore(redis_url, prefix=prefix),
                 RedisQueue(redis_url, prefix=prefix), KeyRing(config.keys))
    await gw.start()
    try:
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://podium.test") as http:
            for key in (TENANT_KEY, KEY):  # runs of two tenants
                resp = await http.post("/v1/runs", json={"agent": "support", "input": "A-1?"},
                                       headers={"Authorization": f"Bearer {key}"})
                assert resp.status_code == 202, resp.text
            admin = {"Authorization": f"Bearer {KEY}"}
            before = (await http.get("/dashboard/data", headers=admin)).json()
            assert before["statuses"] == {"queued": 2} and before["queues"]["default"] == 2
            store, queue = RedisRunStore(redis_url, prefix=prefix), RedisQueue(redis_url,
                                                                              prefix=prefix)
            async with store, queue, Engine(store) as engine:
                await Worker(queue, engine, {"support": support()}, consumer="w1").run(burst=True)
            after = (await http.get("/dashboard/data", headers=admin)).json()
            acme = (await http.get("/dashboard/data?tenant=acme", headers=admin)).json()
            run = (await http.get(f"/dashboard/data?run={resp.json()['id']}",
                                  headers=admin)).json()
    finally:
        await gw.stop()
    assert after["statuses"] == {"completed": 2} and after["queues"]["default"] == 0
    assert after["steps"] == 4 and sum(p["cpu_ms"] for p in after["phases"]) > 0
    assert after["backends"] is None  # the workers make the model calls
    assert acme["runs"] == 1 and acme["tenant"] == "acme"
    assert len(run["timeline"]) == 2 and "It shipped." in str(run["messages"])


def test_the_throughput_series_counts_recent_runs_per_second() -> None:
    from podium.engine.records import RunRecord
    from podium.gateway.dashboard import _throughput

    def done(ago: float) -> RunRecord:
        record = RunRecord(f"run_{ago}", "support", "x")
        record.finished_at = 1_000.0 - ago
        return record

    runs = [done(1), done(2), done(7), done(500)]
    series = _throughput(runs, 1_000.0, full=False)
    assert len(series) == 24 and series[-1] == 2 / 5 and series[-2] == 1 / 5
    assert round(sum(series) * 5) == 3  # the run of 500 s ago is outside the two minutes
    # The newest 500 runs reach back only 8 s: the series starts there, not at zero.
    assert len(_throughput(runs[:3], 1_000.0, full=True)) == 2


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_stuck_run_stays_at_the_top_however_many_runs_came_after_it() -> None:
    """The longest-running table answers "is anything stuck?": a run running for an hour
    is listed even when far more than the newest 500 runs have been created since."""
    import time

    from podium.config import load_config
    from podium.engine.records import RunRecord, StepRecord
    from podium.gateway.app import create_app
    from podium.gateway.runtime import build_gateway
    from podium.gateway.service import ServedAgent
    from podium.messages import Message, Usage
    from podium.store.memory import MemoryRunStore

    from .observe_agents import support

    store = MemoryRunStore()
    now = time.time()
    stuck = RunRecord("run_stuck", "support", "A-1?", status="running", created_at=now - 3600,
                      started_at=now - 3600)
    await store.create(stuck)
    # One step journaled: its record says 0 until its end (the table reads the journal).
    await store.append("run_stuck", (StepRecord(0, now, Message("assistant", "looking"), (),
                                                Usage(5, 1, 0, 1), None),))
    for i in range(600):  # newer runs, finished
        await store.create(RunRecord(f"run_done_{i}", "support", "A-1?", status="completed",
                                     created_at=now - 60 + i / 100, finished_at=now))
    config = load_config(None, {"PODIUM_KEYS": f"{KEY}=ops:admin"})
    gw = build_gateway(config, [ServedAgent(support())], store=store)
    await gw.start()
    try:
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://podium.test") as http:
            data = (await http.get("/dashboard/data",
                                   headers={"Authorization": f"Bearer {KEY}"})).json()
    finally:
        await gw.stop()
    assert data["statuses"] == {"completed": 500}  # the newest 500 runs, as documented
    assert [r["run_id"] for r in data["running"]] == ["run_stuck"]
    assert data["running"][0]["elapsed_s"] >= 3600
    assert data["running"][0]["steps"] == 1
