"""The dashboard against hostile runs: nothing in a run executes, everything shows as text,
a huge run stays a bounded page, and only an operator's key reads any of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx
import pytest
from chromium import open_page
from hostile_agents import HOSTILE, XSS, hostile, long_run

from .conftest import serving

if TYPE_CHECKING:
    from podium.gateway.service import Gateway

pytestmark = pytest.mark.anyio

KEY = "pk_hostile_ops"
TENANT_KEY = "pk_hostile_tenant"
OTHER_KEY = "pk_hostile_other"
TENANT = 'acme"><img src=x onerror="window.pwned=7">'
CONFIG = f"""
[server]
store = "memory"
drain_grace_s = 1

[[agents]]
path = "hostile_agents:hostile"

[[keys]]
key = "{KEY}"
tenant = "ops"
admin = true

[[keys]]
key = "{TENANT_KEY}"
tenant = '{TENANT}'
"""

#: In the page: did anything injected run or become an element?
INJECTED = """({
  pwned: window.pwned === undefined ? null : window.pwned,
  elements: document.querySelectorAll(
    'img, iframe, object, embed, #messages svg, a[href^="javascript"]').length,
  scripts: document.scripts.length,
  handlers: Array.from(document.querySelectorAll('*')).filter(
    e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).length,
})"""

WAIT_FOR = """new Promise((resolve, reject) => {
  const deadline = Date.now() + 30000;
  (function poll() {
    const found = (%s);
    if (found) return resolve(found);
    if (Date.now() > deadline) return reject(new Error('timed out'));
    setTimeout(poll, 25);
  })();
})"""


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[str]:
    async with serving(CONFIG, tmp_path) as url:
        yield url


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_hostile_run_content_shows_as_text_and_runs_nothing(server: str) -> None:
    async with httpx.AsyncClient(base_url=server, timeout=60) as http:
        resp = await http.post(
            "/v1/runs", json={"agent": "hostile", "input": f"input {HOSTILE}",
                              "metadata": {"note": HOSTILE}, "wait": True},
            headers={"Authorization": f"Bearer {TENANT_KEY}"})
        assert resp.status_code == 200 and resp.json()["status"] == "completed", resp.text
        run_id = resp.json()["id"]
    async with open_page(f"{server}/dashboard#key={KEY}&tenant={quote(TENANT)}") as page:
        meta = await page.evaluate(WAIT_FOR % (
            "document.querySelector('#status-completed b')?.textContent === '1'"
            " && document.getElementById('meta').textContent"))
        assert f"tenant {TENANT}" in meta
        await page.evaluate(f"location.hash = 'run={run_id}'")
        text = await page.evaluate(WAIT_FOR % (
            "document.getElementById('messages').rows.length > 5"
            " && document.getElementById('messages').innerText"))
        title = await page.evaluate("document.getElementById('run-title').textContent")
        fields = await page.evaluate("document.getElementById('run-fields').innerText")
        # The runs view draws the tenant's name and the run's id as text too.
        await page.evaluate("location.hash = 'view=runs'")
        listed = await page.evaluate(WAIT_FOR % (
            f"document.querySelector('#runs-table tr[data-run=\"{run_id}\"]')"
            "?.innerText"))
        injected = await page.evaluate(INJECTED)
        # The page's own policy stops what slips past the text nodes: an inline handler
        # put in by hand is refused (and reported) rather than run.
        refused = await page.evaluate("""new Promise(resolve => {
          document.addEventListener('securitypolicyviolation',
            e => resolve(e.violatedDirective), {once: true});
          document.body.insertAdjacentHTML('beforeend',
            '<img src="data:," onerror="window.pwned=9">');
        })""")
        pwned_after = await page.evaluate("window.pwned === undefined")
        dialog = page.event("Page.javascriptDialogOpening").is_set()
        errors = [e for e in page.errors if "Content Security Policy" not in e]
    assert injected == {"pwned": None, "elements": 0, "scripts": 1, "handlers": 0}, injected
    assert refused.startswith("script-src") and pwned_after and not dialog
    assert errors == [], errors
    assert "<script>window.pwned=1;alert(1)</script>" in text  # literally
    assert "\"><img src=x onerror=\"window.pwned=2;alert(2)\">" in text
    assert "[bold red]not bold[/]" in text and "🦄" in text and "𝔸" in text
    assert "more characters)" in text  # the 5 MB tool result, cut with a marker
    assert "hostile" in title and run_id in title
    assert TENANT in fields and TENANT in listed and run_id in listed


def _admin_app_client(gw: Gateway) -> httpx.AsyncClient:
    from podium.gateway.app import create_app

    transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
    return httpx.AsyncClient(transport=transport, base_url="http://podium.test")


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_a_huge_run_is_a_bounded_page() -> None:
    """10,000 steps, a 5 MB tool result, a run with no steps and no profile: each run's
    data is well under a megabyte, cut with markers, and served in well under a second."""
    from podium.config import load_config
    from podium.engine.driver import Engine
    from podium.engine.records import RunRecord
    from podium.gateway.runtime import build_gateway
    from podium.gateway.service import ServedAgent
    from podium.store.memory import MemoryRunStore

    store = MemoryRunStore()
    async with Engine(store) as engine:
        big = await engine.execute(hostile(), await engine.create(hostile(), HOSTILE))
        long = await engine.execute(long_run(), await engine.create(long_run(), ""))
    await store.create(RunRecord("run_empty", "hostile", ""))  # queued: no steps, no profile
    assert long.steps == 10_000 and big.status == "completed"
    config = load_config(None, {"PODIUM_KEYS": f"{KEY}=ops:admin"})
    gw = build_gateway(config, [ServedAgent(hostile())], store=store)
    await gw.start()
    try:
        async with _admin_app_client(gw) as http:
            got = {}
            for run_id in (big.run_id, long.run_id, "run_empty"):
                resp = await http.get(f"/dashboard/data?run={run_id}",
                                      headers={"Authorization": f"Bearer {KEY}"})
                assert resp.status_code == 200, resp.text
                got[run_id] = (resp.json(), len(resp.content))
    finally:
        await gw.stop()
    # Bounded is its size (what it costs to build and send follows it), not the seconds a
    # busy machine takes to build it.
    for data, size in got.values():
        assert size < 1_000_000, size
        assert all(len(m["text"]) < 2100 for m in data["messages"])
    data = got[long.run_id][0]
    assert len(data["timeline"]) == 1000 and data["steps_left_out"] == 9000
    assert len(data["messages"]) == 401
    assert {"role": "…", "text": "19,600 messages not shown"} in data["messages"]
    assert data["timeline"][-1]["step"] == 9999 and data["done"]
    # The engine keeps 8 KB of the 5 MB result; the page shows 2,000 characters of that.
    assert any(m["role"] == "tool hostile_lookup" and m["text"].endswith("more characters)")
               for m in got[big.run_id][0]["messages"])
    empty = got["run_empty"][0]
    assert empty["timeline"] == [] and empty["messages"] == [{"role": "user", "text": ""}]


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_only_an_operator_reads_the_dashboard_and_tenants_see_only_their_runs() -> None:
    from podium.config import load_config
    from podium.gateway.runtime import build_gateway
    from podium.gateway.service import ServedAgent
    from podium.store.memory import MemoryRunStore

    config = load_config(None, {"PODIUM_KEYS":
                                f"{KEY}=ops:admin,{TENANT_KEY}=acme,{OTHER_KEY}=globex"})
    gw = build_gateway(config, [ServedAgent(hostile())], store=MemoryRunStore())
    await gw.start()
    try:
        async with _admin_app_client(gw) as http:
            resp = await http.post("/v1/runs", json={"agent": "hostile", "input": "x",
                                                     "wait": True},
                                   headers={"Authorization": f"Bearer {TENANT_KEY}"})
            run_id = resp.json()["id"]
            bad = {
                "none": ({}, 401), "unknown": ({"Authorization": "Bearer pk_nope"}, 401),
                "basic": ({"Authorization": f"Basic {KEY}"}, 401),
                "tenant": ({"Authorization": f"Bearer {TENANT_KEY}"}, 403),
                "tenant x-api-key": ({"X-Api-Key": TENANT_KEY}, 403),
            }
            for query in ("", f"?run={run_id}", "?tenant=acme", f"?key={KEY}"):
                for name, (headers, status) in bad.items():
                    resp = await http.get(f"/dashboard/data{query}", headers=headers)
                    assert resp.status_code == status, (query, name, resp.text)
                    assert run_id not in resp.text and "acme" not in resp.text
            page = await http.get("/dashboard")
            other = {"Authorization": f"Bearer {OTHER_KEY}"}
            foreign = [await http.get(f"/v1/runs/{run_id}{tail}", headers=other)
                       for tail in ("", "/events", "/children", "/approvals")]
            listed = await http.get("/v1/runs", headers=other)
    finally:
        await gw.stop()
    # The page is static and holds no data; its policy allows only its own script.
    assert page.status_code == 200 and run_id not in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'sha256-" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "connect-src 'self'" in csp
    # Another tenant cannot tell the run exists.
    assert [r.status_code for r in foreign] == [404] * 4, [r.text for r in foreign]
    assert listed.json()["data"] == []


def test_the_hostile_fixture_is_what_the_tests_claim() -> None:
    assert "\x1b[" in HOSTILE and "</script>" in XSS and "\u2028" in XSS
