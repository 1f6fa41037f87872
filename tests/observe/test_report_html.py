"""The HTML reports, rendered in real headless Chromium: plots drawn, no console errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from chromium import SVG_STATS, open_page

pytestmark = pytest.mark.anyio

FAST = """
[load]
runs = 60
concurrency = 20
[model]
ttft_ms = 1
per_token_ms = 0
jitter = "none"
[script]
tool = "lookup"
tool_steps = 3
"""


def podium(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podium.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


async def check_rendered(path: Path, name: str, min_plots: int) -> list[dict[str, object]]:
    async with open_page(path.as_uri()) as page:
        svgs = await page.evaluate(SVG_STATS)
        shot = await page.screenshot(name)
        errors = list(page.errors)
    assert errors == [], errors
    assert shot.stat().st_size > 10_000  # a real picture, not a blank page
    assert len(svgs) >= min_plots, svgs
    for svg in svgs:
        assert svg["width"] > 100 and svg["height"] > 100, svg
        assert svg["marks"] > 0, f"nothing drawn in {svg['title']!r}"
    return svgs


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_bench_report_with_a_sweep_renders_every_plot(tmp_path: Path) -> None:
    scenario = tmp_path / "fast.toml"
    scenario.write_text(FAST)
    report = tmp_path / "report.html"
    out = podium("bench", "--scenario", str(scenario), "--loop", "asyncio",
                 "--report", str(report), "--sweep", "2,20", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert [p["concurrency"] for p in result["sweep"]] == [2, 20]
    assert result["sweet_spot"] in (2, 20) and result["completed"] == 60
    assert "sweet spot: concurrency" in out.stderr
    html = report.read_text()
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org", "")
    svgs = await check_rendered(report, "bench-report", min_plots=7)
    titles = {str(s["title"]) for s in svgs}
    assert {"Latency CDFs", "Runs in flight", "Throughput per concurrency"} <= titles


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_runs_profile_report_renders(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    out = podium("bench", "--scenario", _fast(tmp_path), "--loop", "asyncio",
                 "--store", str(store))
    assert out.returncode == 0, out.stdout + out.stderr
    report = tmp_path / "profile.html"
    out = podium("runs", "profile", "--store", str(store), "--report", str(report))
    assert out.returncode == 0, out.stderr
    await check_rendered(report, "runs-profile-report", min_plots=5)


def _fast(tmp_path: Path) -> str:
    path = tmp_path / "fast.toml"
    path.write_text(FAST)
    return str(path)
