"""The HTML report of hostile runs, in real headless Chromium: names and labels show as
text, nothing runs, the file forbids scripts and fetches; NaN and infinite figures and runs
without steps or a profile still make a whole report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from chromium import open_page
from hostile_agents import XSS, hostile

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.observe.html import SweepPoint, profile_report
from podium.store.sqlite import SQLiteRunStore

from .conftest import subprocess_env

pytestmark = pytest.mark.anyio

#: In the page: did anything injected run or become an element?
INJECTED = """({
  pwned: window.pwned === undefined ? null : window.pwned,
  elements: document.querySelectorAll('img, script, iframe, a, foreignObject').length,
  handlers: Array.from(document.querySelectorAll('*')).filter(
    e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).length,
  text: document.body.innerText,
})"""


def _profile_report(store: Path, report: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "runs", "profile", "--store", str(store),
         "--report", str(report)],
        capture_output=True, text=True, timeout=120, env=subprocess_env())
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_report_of_hostile_runs_renders_them_as_text(tmp_path: Path) -> None:
    # The store's own path is in the report's title: it is hostile too.
    path = tmp_path / 'runs"><img src=x onerror="window.pwned=8">.sqlite'
    async with SQLiteRunStore(path) as store, Engine(store) as engine:
        agent = hostile()
        await engine.execute(agent, await engine.create(agent, XSS, run_id=f"run_{XSS}"))
        await store.create(RunRecord("run_queued", "hostile", ""))  # no steps, no profile
    report = tmp_path / "report.html"
    _profile_report(path, report)
    html = report.read_text()
    assert "Content-Security-Policy" in html and "script-src" not in html
    async with open_page(report.as_uri()) as page:
        found = await page.evaluate(INJECTED)
        dialog = page.event("Page.javascriptDialogOpening").is_set()
        errors = list(page.errors)
    assert errors == [] and not dialog, errors
    assert (found["pwned"], found["elements"], found["handlers"]) == (None, 0, 0), found
    assert '"><img src=x onerror="window.pwned=8">' in found["text"]  # the title, literally


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_report_with_nan_and_infinite_figures_renders(tmp_path: Path) -> None:
    nan, inf = float("nan"), float("inf")
    sweep = [SweepPoint(1, 10, nan, inf, 1.0, nan, 0.5), SweepPoint(8, 10, 4.0, 40.0, inf, 9.0,
                                                                    nan)]
    page = profile_report([RunRecord("run_none", "a", "")], summary=[("wall", "nan s")],
                          sweep=sweep)
    report = tmp_path / "nan.html"
    report.write_text(page)
    async with open_page(report.as_uri()) as browser:
        titles = await browser.evaluate(
            "Array.from(document.querySelectorAll('svg')).map(s => s.getAttribute('aria-label'))")
        errors = list(browser.errors)
    assert errors == [] and "Throughput per concurrency" in titles, (errors, titles)
