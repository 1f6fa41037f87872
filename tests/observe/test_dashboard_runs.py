"""The dashboard finds any run: its runs view (filters, paging) and a run's page, in real
headless Chromium against a real `podium serve` holding runs of every ending, waiting
runs and a parent with its child run. Screenshots go to ``chromium.ARTIFACTS``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from chromium import ARTIFACTS, Page, open_page
from dashboard_agents import INJECTION

from .conftest import serving

pytestmark = pytest.mark.anyio

KEY = "pk_runs_view_ops"
ACME = "pk_runs_view_acme"
GLOBEX = "pk_runs_view_globex"
CONFIG = f"""
[server]
store = "memory"
drain_grace_s = 1

[[agents]]
path = "dashboard_agents:support"

[[agents]]
path = "dashboard_agents:looper"

[[agents]]
path = "dashboard_agents:refunds"

[[agents]]
path = "dashboard_agents:screened"

[[agents]]
path = "dashboard_agents:desk"

[[keys]]
key = "{KEY}"
tenant = "ops"
admin = true

[[keys]]
key = "{ACME}"
tenant = "acme"

[[keys]]
key = "{GLOBEX}"
tenant = "globex"
"""

#: Resolves with the expression's value once it is truthy (the page polls and redraws).
UNTIL = """new Promise((resolve, reject) => {
  const deadline = Date.now() + 30000;
  (function poll() {
    let found = null;
    try { found = (%s); } catch (e) { found = null; }
    if (found) return resolve(found);
    if (Date.now() > deadline) return reject(new Error('timed out: ' + %s + ' (' + (%s) + ')'));
    setTimeout(poll, 25);
  })();
})"""

LISTED = ("[...document.querySelectorAll('#runs-table tr[data-run]')].map(r => r.dataset.run)"
          ".join(',')")


async def until(page: Page, expression: str, shown: str = "''") -> Any:
    """``expression``'s value once truthy; ``shown`` is reported when it never is."""
    return await page.evaluate(UNTIL % (expression, json.dumps(expression), shown))


async def listed(page: Page, expected: list[str]) -> None:
    """Wait until the runs table shows exactly ``expected``, in that order."""
    await until(page, f"{LISTED} === {json.dumps(','.join(expected))}", LISTED)


async def submit_runs(url: str) -> dict[str, str]:
    """A run of each kind, oldest first; returns their ids by kind."""
    ids: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:

        async def run(key: str, agent: str, text: str, status: str) -> str:
            resp = await http.post("/v1/runs", json={"agent": agent, "input": text, "wait": True},
                                   headers={"Authorization": f"Bearer {key}"})
            assert resp.json()["status"] == status, resp.text
            return str(resp.json()["id"])

        ids["completed"] = await run(ACME, "support", "A-1?", "completed")
        ids["failed"] = await run(ACME, "looper", "A-1?", "failed")
        ids["waiting"] = await run(GLOBEX, "refunds", "refund A-1", "waiting")
        ids["cancelled"] = await run(GLOBEX, "refunds", "refund A-2", "waiting")
        resp = await http.post(f"/v1/runs/{ids['cancelled']}/cancel",
                               headers={"Authorization": f"Bearer {GLOBEX}"})
        assert resp.json()["status"] == "cancelled", resp.text
        ids["screened"] = await run(ACME, "screened", f"Review? {INJECTION}", "completed")
        ids["parent"] = await run(ACME, "desk", "A-1?", "completed")
        children = await http.get(f"/v1/runs/{ids['parent']}/children",
                                  headers={"Authorization": f"Bearer {ACME}"})
        [child] = children.json()["data"]
        ids["child"] = child["id"]
    return ids


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, str]]]:
    async with serving(CONFIG, tmp_path) as url:
        yield url, await submit_runs(url)


NEWEST_FIRST = ["child", "parent", "screened", "cancelled", "waiting", "failed", "completed"]


async def apply_filters(page: Page, **values: str) -> None:
    """Type into the filter form (time bounds as epoch seconds) and press apply."""
    script = ["document.getElementById('f-clear').click();"]
    for name, value in values.items():
        # The time inputs take local time, to the second: the page's own toInput converts.
        value_js = f"toInput({value})" if name in ("since", "until") else json.dumps(value)
        script.append(f"document.getElementById('f-{name}').value = {value_js};")
    script.append("document.getElementById('f-apply').click(); true")
    await page.evaluate("\n".join(script))


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_the_runs_view_lists_filters_and_pages_every_run(
    served: tuple[str, dict[str, str]],
) -> None:
    url, ids = served
    order = [ids[k] for k in NEWEST_FIRST]
    async with open_page(f"{url}/dashboard#key={KEY}") as page:
        # From the overview: a status card leads to that status's runs.
        await until(page, "document.querySelector('#status-failed a')")
        await page.evaluate("document.querySelector('#status-failed a').click()")
        await listed(page, [ids["failed"]])
        await page.evaluate("document.getElementById('nav-runs').click()")
        await page.evaluate("document.getElementById('f-clear').click()")
        await listed(page, order)  # every tenant's runs, every status, newest first
        text = await page.evaluate("document.getElementById('runs-table').innerText")
        for status in ("completed", "failed (max_steps)", "waiting", "cancelled"):
            assert status in text, text
        assert "acme" in text and "globex" in text
        await page.screenshot("dashboard-runs")

        await apply_filters(page, status="waiting")
        await listed(page, [ids["waiting"]])
        assert await page.evaluate("location.hash") == "#view=runs&status=waiting"
        await apply_filters(page, agent="support")  # the child run and the direct one
        await listed(page, [ids["child"], ids["completed"]])
        await apply_filters(page, tenant="globex")
        await listed(page, [ids["cancelled"], ids["waiting"]])
        await apply_filters(page, tenant="acme", status="completed", agent="desk")
        await listed(page, [ids["parent"]])
        await page.screenshot("dashboard-runs-filtered")
        # Time: a window that ends before the first run holds none; one from an hour ago
        # holds all; the form shows the bounds it was given.
        created = await _created(url, ids["completed"])
        await apply_filters(page, until=str(int(created) - 60))
        await until(page, "document.getElementById('runs-table').innerText"
                          ".includes('no run matches')")
        await apply_filters(page, since=str(int(created) - 3600))
        await listed(page, order)
        assert await page.evaluate("document.getElementById('f-since').value")
        # Exact bounds from a link: runs created from the screened run's instant on.
        since = await _created(url, ids["screened"])
        await page.evaluate(f"location.hash = 'view=runs&since={since!r}'")
        await listed(page, order[:3])

        # Paging, three at a time: older, older (the last page), then back.
        await page.evaluate("location.hash = 'view=runs&limit=3'")
        # The view before showed these three runs too: wait for this query's answer (it
        # has an older page) before paging, or the click goes to the answer before it.
        await until(page, "!document.getElementById('older').disabled")
        await listed(page, order[:3])
        assert await page.evaluate("document.getElementById('newer').disabled")
        await page.evaluate("document.getElementById('older').click()")
        await listed(page, order[3:6])
        await page.evaluate("document.getElementById('older').click()")
        await listed(page, order[6:])
        assert await page.evaluate("document.getElementById('older').disabled")
        await page.evaluate("document.getElementById('newer').click()")
        await listed(page, order[3:6])
        await page.evaluate("document.getElementById('newer').click()")
        await listed(page, order[:3])
        errors = list(page.errors)
    assert errors == [], errors


async def _created(url: str, run_id: str) -> float:
    async with httpx.AsyncClient(base_url=url) as http:
        resp = await http.get(f"/dashboard/data?run={run_id}",
                              headers={"Authorization": f"Bearer {KEY}"})
        return float(resp.json()["created_at"])


FIELD = "document.querySelector('#run-fields tr[data-field=\"%s\"] td:last-child').innerText"


async def open_run(page: Page, run_id: str) -> None:
    """Click the run's link in the runs view, and wait for its page."""
    await page.evaluate("location.hash = 'view=runs'")
    await until(page, f"document.querySelector('#runs-table tr[data-run=\"{run_id}\"] a')")
    await page.evaluate(
        f"document.querySelector('#runs-table tr[data-run=\"{run_id}\"] a').click()")
    await until(page, f"document.getElementById('run-title').textContent.startsWith('{run_id}')")


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_run_page_shows_its_steps_on_a_time_axis_and_everything_about_it(
    served: tuple[str, dict[str, str]],
) -> None:
    url, ids = served
    async with open_page(f"{url}/dashboard#key={KEY}&view=runs") as page:
        await open_run(page, ids["screened"])
        # A finished run's header says how it ended (not "connecting…").
        meta = await until(page, "document.getElementById('meta').textContent.includes("
                                 "'finished') && document.getElementById('meta').textContent")
        assert meta.startswith("run completed · finished 20") and "tenant acme" in meta
        assert await page.evaluate(FIELD % "tenant") == "acme"
        assert await page.evaluate(FIELD % "model") == "scripted-read_review"
        assert await page.evaluate(FIELD % "status") == "completed"
        tokens = await page.evaluate(FIELD % "tokens in / out")
        assert tokens.split(" / ")[0].isdigit() and int(tokens.split(" / ")[0]) > 0, tokens
        for name in ("created", "started", "finished"):
            assert (await page.evaluate(FIELD % name)).startswith("20")  # a timestamp
        # The time axis: ticks labelled in time, a labelled row per step (with its start
        # time), each phase a coloured segment titled with its name and duration.
        ticks = await page.evaluate(
            "[...document.querySelectorAll('#timeline text.tick')].map(t => t.textContent)")
        assert len(ticks) >= 3 and ticks[0] == "0.00 ms" and all(
            t.endswith((" ms", " s")) for t in ticks), ticks
        labels = await page.evaluate(
            "[...document.querySelectorAll('#timeline text.step-label')].map(t => t.textContent)")
        assert [label.split(" · ")[0] for label in labels] == ["step 0", "step 1"], labels
        assert all(len(label.split(" · ")[1]) == len("14:03:22.123") for label in labels)
        titles = await page.evaluate(
            "[...document.querySelectorAll('#timeline rect.mark title')]"
            ".map(t => t.textContent)")
        for phase in ("assemble", "model", "parse", "tools", "merge", "checkpoint"):
            assert any(t.startswith(f"step 0 {phase} ") for t in titles), titles
        legend = await page.evaluate("document.getElementById('legend').innerText")
        assert "model" in legend and "tools" in legend
        steps = await page.evaluate("document.getElementById('steps').innerText")
        assert "read_review" in steps and "tokens in / out" in steps
        # The screening verdicts: on the input and on the tool's result, flagged.
        screening = await page.evaluate(
            "[...document.querySelectorAll('#screening tr')].slice(1).map(r => r.innerText)")
        assert len(screening) == 2 and all("flag" in row for row in screening), screening
        assert any("tool read_review" in row for row in screening), screening
        messages = await page.evaluate("document.getElementById('messages').innerText")
        assert "Summary:" in messages
        await page.screenshot("dashboard-run-screened")

        # Parent and child link to each other.
        await open_run(page, ids["parent"])
        await until(page, "document.querySelector('#run-fields tr[data-field=\"child runs\"] a')")
        await page.evaluate(
            "document.querySelector('#run-fields tr[data-field=\"child runs\"] a').click()")
        await until(page, f"document.getElementById('run-title').textContent"
                          f".startsWith('{ids['child']}')")
        parent = await until(page, FIELD % "parent run")
        assert parent.startswith(ids["parent"]) and "(call 0:0)" in parent
        await page.screenshot("dashboard-run-child")
        await page.evaluate(
            "document.querySelector('#run-fields tr[data-field=\"parent run\"] a').click()")
        await until(page, f"document.getElementById('run-title').textContent"
                          f".startsWith('{ids['parent']}')")

        # A failed run, a waiting one, a cancelled one: each header says where it stands.
        await open_run(page, ids["failed"])
        await until(page, "document.getElementById('meta').textContent"
                          ".startsWith('run failed · finished')")
        assert "max_steps" in await page.evaluate(FIELD % "status")
        assert "no final answer" in await page.evaluate(FIELD % "error")
        await page.screenshot("dashboard-run-failed")
        await open_run(page, ids["waiting"])
        await until(page, "document.getElementById('meta').textContent"
                          ".startsWith('run waiting · waiting on a human')")
        assert (await page.evaluate(FIELD % "tenant")) == "globex"
        assert "since 20" in await page.evaluate(FIELD % "waiting")
        await page.screenshot("dashboard-run-waiting")
        await open_run(page, ids["cancelled"])
        await until(page, "document.getElementById('meta').textContent"
                          ".startsWith('run cancelled · finished')")
        await page.screenshot("dashboard-run-cancelled")
        errors = list(page.errors)
    assert errors == [], errors
    assert (ARTIFACTS / "dashboard-run-screened.png").stat().st_size > 10_000
