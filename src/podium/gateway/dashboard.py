"""``/dashboard``: a live page of the gateway's runs, for operators.

The page itself is static (no data in it, so it needs no key); it reads an
operator's key (``admin = true``) from its URL fragment (``/dashboard#key=pk_…``,
never sent to the server in a URL) or asks for it, then polls ``/dashboard/data``
with it every second and draws what it gets with inline SVG: runs per status (of
every tenant, or ``#tenant=NAME``'s), throughput, where a step's time goes, the
longest-running runs (however many runs started since), model backend occupancy, queue
depths. ``#view=runs`` finds any run of the store (filters by status, agent, tenant and
creation time, paged: ``/dashboard/runs``) and ``#run=ID`` shows one run in full (see
:mod:`podium.gateway.dashboard_runs`). No script or style is fetched from anywhere: the
markup, style and script are files in ``podium/gateway/static/``, served inline.

The runs and queues are read from the store and the queue, so the page is the same
whether the gateway drives runs itself or ``podium worker`` processes do (Redis);
backend occupancy is known only where the calls are made: the gateway's own engine
(embedded), each worker's ``/metrics`` (``podium_backend_outstanding``) otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from podium.engine.profile import STEP_PHASES
from podium.gateway.dashboard_runs import run_detail, runs_route
from podium.gateway.errors import ApiError
from podium.observe.inspect import aggregate, read_progress

if TYPE_CHECKING:
    from podium.engine.records import RunRecord
    from podium.gateway.service import Gateway

__all__ = ("dashboard_routes",)

_RECENT = 500  # the newest runs the page summarizes
_LONGEST = 10
#: Running runs searched for the longest-running (the store lists newest first): a run
#: stuck for an hour is older than the newest _RECENT, so it is looked for among these.
_RUNNING = 2000
_WINDOW_S, _BUCKET_S = 120, 5  # the throughput plot: two minutes in 5-second steps


def _json(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status, media_type="application/json",
                    headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})


def _throughput(finished: list[RunRecord], now: float, *, full: bool) -> list[float]:
    """Runs finished per second in each ``_BUCKET_S`` of the last ``_WINDOW_S``, oldest first.
    When the newest ``_RECENT`` runs do not reach that far back (``full``), the series
    starts at the oldest of them rather than show the missing ones as zero."""
    horizon = now - _WINDOW_S
    if full and finished:
        horizon = max(horizon, min(r.finished_at or now for r in finished))
    n = max(1, math.ceil((now - horizon) / _BUCKET_S))
    counts = [0] * n
    for r in finished:
        age = now - (r.finished_at or now)
        if 0 <= age < n * _BUCKET_S:
            counts[n - 1 - int(age // _BUCKET_S)] += 1
    return [c / _BUCKET_S for c in counts]


def _backends(gw: Gateway) -> list[dict[str, Any]] | None:
    """Calls in flight per model backend of the agents this process drives (pools report
    them); None when workers drive the runs (and so hold the backends)."""
    if gw.engine is None:
        return None
    seen: set[int] = set()
    rows: list[dict[str, Any]] = []
    for served in gw.agents.values():
        model = served.agent.model
        stats = getattr(model, "statistics", None)
        if id(model) in seen or not callable(stats):
            continue
        seen.add(id(model))
        rows.extend({"backend": f"{b.group}/{b.name}", "state": str(b.state),
                     "outstanding": b.outstanding, "capacity": b.capacity}
                    for b in getattr(stats(), "backends", ()))
    return rows


async def _overview(gw: Gateway, tenant: str | None) -> dict[str, Any]:
    runs = await gw.store.list(tenant=tenant, limit=_RECENT)
    now = time.time()
    statuses: dict[str, int] = {}
    for r in runs:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    finished = [r for r in runs if r.finished_at is not None]
    last_minute = sum(1 for r in finished if r.finished_at and r.finished_at >= now - 60)
    throughput = _throughput(finished, now, full=len(runs) >= _RECENT)
    summary = aggregate([r for r in runs if r.status == "completed"]).summary()
    steps = max(1, summary.steps)
    phases = [
        {"phase": name, "cpu_ms": summary.phases[name].cpu_ms_total / steps,
         "wait_ms": summary.phases[name].wait_ms_total / steps}
        for name in STEP_PHASES
    ]
    running = sorted(await gw.store.list(tenant=tenant, status="running", limit=_RUNNING),
                     key=lambda r: r.started_at or now)[:_LONGEST]
    # Their steps so far, from their journals (_LONGEST reads): a record has them at its end.
    running = [await read_progress(gw.store, r) for r in running]
    queues = {}
    for pool in gw.pools:
        try:
            queues[pool] = await gw.queue.depth(pool)
        except (ConnectionError, OSError):
            queues[pool] = -1
    return {
        "now": now,
        "tenant": tenant,
        "runs": len(runs),
        "statuses": statuses,
        "finished_last_minute": last_minute,
        "throughput": throughput,
        "throughput_bucket_s": _BUCKET_S,
        "steps": summary.steps,
        "cpu_us_per_step": summary.cpu_us_per_step,
        "phases": phases,
        "running": [{"run_id": r.run_id, "agent": r.agent, "steps": r.steps,
                     "elapsed_s": now - (r.started_at or now)} for r in running],
        "queues": queues,
        "active": gw.engine.active_runs if gw.engine is not None else None,
        "backends": _backends(gw),
    }


def dashboard_routes(gw: Gateway) -> list[Route]:
    async def page(request: Request) -> Response:
        return HTMLResponse(_PAGE, headers=_PAGE_HEADERS)

    async def data(request: Request) -> Response:
        # Every tenant's runs and the process-wide numbers: operators only (401 / 403).
        gw.keys.authenticate_admin(request.headers)
        run_id = request.query_params.get("run")
        if run_id:
            found = await run_detail(gw, run_id)
            if found is None:  # the gateway's error body, as every other 404 of the API
                raise ApiError(404, "not_found", f"no run {run_id!r}", field="run")
            return _json(found)
        return _json(await _overview(gw, request.query_params.get("tenant") or None))

    return [
        Route("/dashboard", page, methods=["GET"]),
        Route("/dashboard/data", data, methods=["GET"]),
        runs_route(gw),
    ]


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _asset(name: str) -> str:
    return (resources.files("podium.gateway") / "static" / name).read_text(encoding="utf-8")


# The page's markup, style and script are files beside this module (served inline: the page
# is one response, and the CSP names the script and style by their hashes).
_STYLE, _BODY, _SCRIPT = (_asset(f"dashboard.{ext}") for ext in ("css", "html", "js"))
_PAGE = ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
         '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
         '<title>Podium dashboard</title><link rel="icon" href="data:,">\n'
         f"<style>{_STYLE}</style></head><body>{_BODY}<script>{_SCRIPT}</script></body></html>\n")
#: The page draws run content (users', models', tools' text) only as text nodes; the CSP is
#: the second wall: were markup ever to slip in, no script but the page's own (named by its
#: hash) may run, nothing may be fetched but /dashboard/data, and no other site may frame it.
_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        f"default-src 'none'; script-src {_sha256(_SCRIPT)}; style-src {_sha256(_STYLE)}; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
