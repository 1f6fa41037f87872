"""The gateway's live /dashboard, in real headless Chromium against a real `podium serve`."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from chromium import SVG_STATS, open_page

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio

KEY = "pk_dashboard_test"
CONFIG = f"""
[server]
store = "memory"
drain_grace_s = 1

[[agents]]
path = "observe_agents:support"

[[keys]]
key = "{KEY}"
tenant = "ops"
"""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[str]:
    config = tmp_path / "podium.toml"
    config.write_text(CONFIG)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "serve", "--config", str(config),
        "--host", "127.0.0.1", "--port", "0", "--log-level", "info",
        env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    url = None
    seen = []
    while url is None:
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        seen.append(line)
        assert line, "".join(seen)
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found and "Uvicorn running" in line:
            url = found[1]
    drain = asyncio.create_task(proc.stderr.read())
    try:
        yield url
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        await drain


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
async def test_dashboard_data_needs_a_key(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        assert (await client.get("/dashboard/data")).status_code == 401
        page = await client.get("/dashboard")
        assert page.status_code == 200 and "<svg" in page.text
        assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")
        ok = await client.get("/dashboard/data", headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200 and json.loads(ok.text)["tenant"] == "ops"
