"""``GET /dashboard/runs``: every tenant's runs for an operator, filtered, paged with a cursor
that neither repeats nor skips a run, however many runs share one creation instant; over
each store (memory, SQLite, and the real Redis and PostgreSQL servers)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.anyio

KEY = "pk_runs_api_ops"
TENANT_KEY = "pk_runs_api_acme"
#: Creation offsets (seconds): four runs share one instant, so pages of two split them.
OFFSETS = (0.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 4.5, 5.25)
STATUSES = ("completed", "failed", "cancelled", "waiting", "completed", "completed", "failed",
            "queued", "completed")


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def client(request: pytest.FixtureRequest, tmp_path: Path
                 ) -> AsyncIterator[tuple[httpx.AsyncClient, list[str], float]]:
    from observe_agents import support

    from podium.config import load_config
    from podium.engine.records import RunRecord
    from podium.gateway.app import create_app
    from podium.gateway.runtime import build_gateway
    from podium.gateway.service import ServedAgent
    from podium.store.base import RunStore
    from podium.store.memory import MemoryRunStore
    from podium.store.postgres import PostgresRunStore
    from podium.store.redis import RedisRunStore
    from podium.store.sqlite import SQLiteRunStore

    store: RunStore
    if request.param == "memory":
        store = MemoryRunStore()
    elif request.param == "sqlite":
        store = SQLiteRunStore(tmp_path / "runs.db")
    elif request.param == "redis":  # the real server, under a prefix of this test's own
        store = RedisRunStore(request.getfixturevalue("redis_url"),
                              prefix=request.getfixturevalue("prefix"))
    else:
        store = PostgresRunStore(request.getfixturevalue("fresh_postgres"))
    config = load_config(None, {"PODIUM_KEYS": f"{KEY}=ops:admin,{TENANT_KEY}=acme"})
    gw = build_gateway(config, [ServedAgent(support())], store=store)
    await gw.start()
    base = time.time() - 600
    ids = []
    try:
        for i, (offset, status) in enumerate(zip(OFFSETS, STATUSES, strict=True)):
            run_id = f"run_{i:02d}"
            await gw.store.create(RunRecord(
                run_id, "support" if i % 3 else "desk", "A-1?", status=status,  # type: ignore[arg-type]
                tenant="acme" if i % 2 else "globex", created_at=base + offset))
            ids.append(run_id)
        transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://podium.test",
                                     headers={"Authorization": f"Bearer {KEY}"}) as http:
            yield http, ids, base
    finally:
        await gw.stop()


async def _all_pages(http: httpx.AsyncClient, query: str) -> list[list[dict[str, Any]]]:
    pages = []
    cursor = None
    while True:
        resp = await http.get(f"/dashboard/runs?{query}" + (f"&cursor={cursor}" if cursor else ""))
        assert resp.status_code == 200, resp.text
        body = resp.json()
        pages.append(body["runs"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) <= len(OFFSETS), "paging does not end"


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_paging_visits_every_run_once_newest_first(
    client: tuple[httpx.AsyncClient, list[str], float],
) -> None:
    http, ids, _ = client
    for limit in (1, 2, 3, 4, 50):
        pages = await _all_pages(http, f"limit={limit}")
        seen = [r["run_id"] for page in pages for r in page]
        assert sorted(seen) == ids, (limit, seen)  # each once
        created = [r["created_at"] for page in pages for r in page]
        assert created == sorted(created, reverse=True)
        assert all(len(page) == limit for page in pages[:-1])
    # Filtered pages: the filter holds on every page.
    pages = await _all_pages(http, "limit=1&status=completed")
    assert sorted(r["run_id"] for p in pages for r in p) == sorted(
        ids[i] for i, s in enumerate(STATUSES) if s == "completed")


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_filters_by_status_agent_tenant_and_creation_time(
    client: tuple[httpx.AsyncClient, list[str], float],
) -> None:
    http, _, base = client

    async def listed(query: str) -> list[str]:
        resp = await http.get(f"/dashboard/runs?{query}")
        assert resp.status_code == 200, resp.text
        return [r["run_id"] for r in resp.json()["runs"]]

    assert await listed("status=waiting") == ["run_03"]
    assert await listed("agent=desk") == ["run_06", "run_03", "run_00"]
    acme = await listed("tenant=acme")  # run_03 and run_05 were created in one instant
    assert acme[0] == "run_07" and set(acme[1:3]) == {"run_03", "run_05"} and acme[3] == "run_01"
    assert await listed("tenant=acme&status=completed") == ["run_05"]
    assert set(await listed(f"since={base + 2!r}&until={base + 3!r}")) == {
        "run_02", "run_03", "run_04", "run_05", "run_06"}
    assert await listed(f"until={base - 1:.3f}") == []
    row = (await http.get("/dashboard/runs?limit=1")).json()["runs"][0]
    assert (row["run_id"], row["tenant"], row["status"]) == ("run_08", "globex", "completed")


@pytest.mark.parametrize("anyio_backend", [("asyncio", {})], ids=["asyncio"])
async def test_only_an_operator_lists_and_bad_queries_say_what_is_wrong(
    client: tuple[httpx.AsyncClient, list[str], float],
) -> None:
    http, _, _ = client
    assert (await http.get("/dashboard/runs", headers={"Authorization": ""})).status_code == 401
    tenant = await http.get("/dashboard/runs", headers={"Authorization": f"Bearer {TENANT_KEY}"})
    assert tenant.status_code == 403  # a tenant's key lists its runs at /v1/runs, not here
    for query, field in (("status=bogus", "status"), ("limit=0", "limit"), ("limit=201", "limit"),
                         ("limit=²", "limit"), ("since=yesterday", "since"),
                         ("cursor=%%%", "cursor"), ("cursor=WzFd", "cursor"),
                         ("page=2", "page")):
        resp = await http.get(f"/dashboard/runs?{query}")
        assert resp.status_code == 422, (query, resp.text)
        assert resp.json()["error"]["field"] == field, resp.text
