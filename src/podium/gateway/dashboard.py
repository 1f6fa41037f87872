"""``/dashboard``: a live page of the gateway's runs, for operators.

The page itself is static (no data in it, so it needs no key); it reads an
operator's key (``admin = true``) from its URL fragment (``/dashboard#key=pk_…``,
never sent to the server in a URL) or asks for it, then polls ``/dashboard/data``
with it every second and draws what it gets with inline SVG: runs per status (of
every tenant, or ``#tenant=NAME``'s), throughput, where a step's time goes, the
longest-running runs (however many runs started since), model backend occupancy, queue
depths. ``#run=ID`` shows one
run's step timeline and messages. No script or style is fetched from anywhere.

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
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from podium.engine.profile import STEP_PHASES
from podium.engine.records import ModelTurn, StepRecord, ToolOutcome
from podium.gateway.errors import ApiError
from podium.observe.display import clip, keep_ends
from podium.observe.inspect import aggregate, read_progress, step_timeline

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
# A run's page is polled every second: its size is bounded whatever the run holds (a 5 MB
# tool result, 10,000 steps). Each cut says what it left out.
_TEXT, _CALL = 2000, 200  # characters of a message, of a tool call's arguments
_MESSAGES, _TIMELINE = 400, 1000  # messages and steps sent: the first and last halves


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


async def _run(gw: Gateway, run_id: str) -> dict[str, Any] | None:
    record = await gw.store.get(run_id)
    if record is None:
        return None
    journal = await gw.store.journal(run_id)
    messages: list[dict[str, str]] = [{"role": "user", "text": clip(record.input, _TEXT)}]
    for _, entry in journal:
        if isinstance(entry, StepRecord | ModelTurn):
            m = entry.message
            calls = ", ".join(f"{clip(c.name, _CALL)}({clip(c.arguments, _CALL)})"
                              for c in m.tool_calls)
            messages.append({"role": "assistant", "text": clip(m.content or f"→ {calls}", _TEXT)})
        if isinstance(entry, StepRecord):
            messages.extend({"role": f"tool {clip(r.name, _CALL)}", "text": clip(r.content, _TEXT)}
                            for r in entry.results)
        elif isinstance(entry, ToolOutcome):
            messages.append({"role": f"tool {clip(entry.result.name, _CALL)}",
                             "text": clip(entry.result.content, _TEXT)})
    first, last, messages_left_out = keep_ends(messages, _MESSAGES)
    if messages_left_out:
        first.append({"role": "…", "text": f"{messages_left_out:,} messages not shown"})
    early, late, steps_left_out = keep_ends(step_timeline(record, journal), _TIMELINE)
    return {
        "run_id": record.run_id, "agent": record.agent, "tenant": record.tenant,
        "status": record.status, "done": record.done,
        "reason": record.reason, "error": clip(record.error or "", _TEXT) or None,
        "steps": record.steps,
        "timeline": early + late, "steps_left_out": steps_left_out, "phases": STEP_PHASES,
        "messages": first + last,
    }


def dashboard_routes(gw: Gateway) -> list[Route]:
    async def page(request: Request) -> Response:
        return HTMLResponse(_PAGE, headers=_PAGE_HEADERS)

    async def data(request: Request) -> Response:
        # Every tenant's runs and the process-wide numbers: operators only (401 / 403).
        gw.keys.authenticate_admin(request.headers)
        run_id = request.query_params.get("run")
        if run_id:
            found = await _run(gw, run_id)
            if found is None:  # the gateway's error body, as every other 404 of the API
                raise ApiError(404, "not_found", f"no run {run_id!r}", field="run")
            return _json(found)
        return _json(await _overview(gw, request.query_params.get("tenant") or None))

    return [
        Route("/dashboard", page, methods=["GET"]),
        Route("/dashboard/data", data, methods=["GET"]),
    ]


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:20px;color:#222}
h1{font-size:20px;margin:0} h2{font-size:15px;margin:18px 0 6px}
.cards{display:flex;gap:10px;flex-wrap:wrap} .card{border:1px solid #ddd;border-radius:6px;
padding:8px 14px;min-width:110px} .card b{display:block;font-size:22px}
table{border-collapse:collapse} td,th{padding:2px 10px;text-align:left}
th{border-bottom:1px solid #ccc} .muted{color:#777} svg{border:1px solid #eee;background:#fff}
a{color:#2a62c9} #err{color:#b00}
"""

_BODY = """
<h1>Podium dashboard</h1>
<div class="muted" id="meta">connecting…</div><div id="err"></div>
<div id="overview">
<h2>Runs (newest <span id="n">0</span>)</h2>
<div class="cards" id="statuses"></div>
<h2>Throughput: runs finished per second, last two minutes</h2>
<svg id="throughput" width="600" height="132" viewBox="0 0 600 132"></svg>
<h2>Where a step's time goes (ms per step of completed runs: blue CPU, orange waiting)</h2>
<svg id="phases" width="600" height="170" viewBox="0 0 600 170"></svg>
<h2>Longest-running runs</h2><table id="running"></table>
<h2>Model backends: calls in flight / capacity</h2><table id="backends"></table>
<h2>Queues</h2><table id="queues"></table>
</div>
<div id="run" hidden><p><a href="#" id="back">← all runs</a></p><h2 id="run-title"></h2>
<svg id="timeline" width="600" height="200" viewBox="0 0 600 200"></svg>
<p class="muted" id="run-note"></p><table id="messages"></table></div>
"""

_SCRIPT = """
"use strict";
const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#4e79a7","#f28e2b","#59a14f","#e15759","#b07aa1","#76b7b2"];
function params() {
  const out = {};
  for (const part of location.hash.slice(1).split("&")) {
    const at = part.indexOf("=");
    const k = at < 0 ? part : part.slice(0, at), v = at < 0 ? "" : part.slice(at + 1);
    try { if (k) out[k] = decodeURIComponent(v); } catch (e) { out[k] = v; }
  }
  return out;
}
function key() {
  let k = params().key || sessionStorage.getItem("podium-key");
  if (!k) { k = prompt("API key") || ""; }
  sessionStorage.setItem("podium-key", k);
  return k;
}
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function row(table, cells, head) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    const td = document.createElement(head ? "th" : "td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c;
    tr.appendChild(td);
  }
  table.appendChild(tr);
}
function bars(svg, items) {
  svg.replaceChildren();
  const max = Math.max(1e-9, ...items.map(i => i.cpu_ms + i.wait_ms));
  items.forEach((it, n) => {
    const y = 6 + n * 26;
    svg.appendChild(el("text", {x: 4, y: y + 14, "font-size": 11}, it.phase));
    const cw = it.cpu_ms / max * 420, ww = it.wait_ms / max * 420;
    svg.appendChild(el("rect", {x: 90, y, width: Math.max(cw, 0.5), height: 18, fill: COLORS[0],
      class: "mark"})).appendChild(el("title", {}, it.phase + " CPU " + it.cpu_ms.toFixed(3)));
    svg.appendChild(el("rect", {x: 90 + cw, y, width: Math.max(ww, 0.5), height: 18,
      fill: COLORS[1], class: "mark"})).appendChild(
      el("title", {}, it.phase + " wait " + it.wait_ms.toFixed(3)));
    // the value at the bar's end: readable without hovering
    svg.appendChild(el("text", {x: 94 + cw + ww, y: y + 14, "font-size": 11},
      (it.cpu_ms + it.wait_ms).toFixed(2) + " ms"));
  });
}
function line(svg, values, seconds) {
  svg.replaceChildren();
  const max = Math.max(1, ...values), left = 48, right = 590;
  for (const f of [0, 0.5, 1]) {  // the y axis: runs/s at 0, half and the top
    const y = 110 - f * 100;
    svg.appendChild(el("line", {x1: left, x2: right, y1: y, y2: y, stroke: "#ddd"}));
    svg.appendChild(el("text", {x: 2, y: y + 4, "font-size": 10},
      (max * f).toFixed(max * f >= 10 ? 0 : 2) + "/s"));
  }
  for (const f of [0, 0.5, 1]) {  // the x axis: how long ago
    const ago = Math.round(seconds * (1 - f));
    svg.appendChild(el("text", {x: left + f * (right - left) - (f ? 24 : 0), y: 126,
      "font-size": 10}, ago ? "-" + ago + " s" : "now"));
  }
  const pts = values.map((v, i) =>
    (left + i * (right - left) / Math.max(1, values.length - 1)).toFixed(1)
    + "," + (110 - v / max * 100).toFixed(1));
  if (pts.length === 1) pts.push(right + "," + pts[0].split(",")[1]);
  svg.appendChild(el("polyline", {points: pts.join(" "), fill: "none", stroke: COLORS[0],
    "stroke-width": 2, class: "mark"}));
}
async function get(query) {
  const resp = await fetch("/dashboard/data" + query,
    {headers: {Authorization: "Bearer " + key()}, cache: "no-store"});
  if (!resp.ok) {
    const body = await resp.json().catch(() => ({}));
    const why = (body.error && (body.error.message || body.error)) || "";
    throw new Error("HTTP " + resp.status + (why ? ": " + why : ""));
  }
  return resp.json();
}
function overview(d) {
  document.getElementById("meta").textContent =
    (d.tenant ? "tenant " + d.tenant : "all tenants") + " · " +
    new Date(d.now * 1000).toLocaleTimeString() + " · " +
    d.cpu_us_per_step.toFixed(1) + " CPU µs per step";
  document.getElementById("n").textContent = d.runs;
  const st = document.getElementById("statuses");
  st.replaceChildren();
  for (const s of ["queued", "running", "waiting", "completed", "failed", "cancelled"]) {
    const c = document.createElement("div");
    c.className = "card"; c.id = "status-" + s;
    const b = document.createElement("b");
    b.textContent = d.statuses[s] || 0;
    c.append(b, s);
    st.appendChild(c);
  }
  line(document.getElementById("throughput"), d.throughput,
       d.throughput.length * d.throughput_bucket_s);
  bars(document.getElementById("phases"), d.phases);
  const rt = document.getElementById("running");
  rt.replaceChildren();
  row(rt, ["run", "agent", "steps", "running for"], true);
  for (const r of d.running) {
    const a = document.createElement("a");
    // Encoded: an id holding "&key=" must not rewrite the fragment the page reads.
    a.href = "#run=" + encodeURIComponent(r.run_id); a.textContent = r.run_id;
    row(rt, [a, r.agent, String(r.steps), r.elapsed_s.toFixed(1) + " s"]);
  }
  const bt = document.getElementById("backends");
  bt.replaceChildren();
  if (d.backends === null) {
    row(bt, ["driven by podium worker processes: see their /metrics (podium_backend_outstanding)"]);
  } else if (!d.backends.length) {
    row(bt, ["the agents' models report no backend pool"]);
  } else {
    row(bt, ["backend", "state", "in flight", "capacity", ""], true);
    for (const b of d.backends) {
      const svg = el("svg", {width: 200, height: 14, class: "occupancy"});
      svg.appendChild(el("rect", {x: 0, y: 1, width: 200 * Math.min(1, b.outstanding /
        Math.max(1, b.capacity)) + 0.5, height: 12, fill: COLORS[2], class: "mark"}));
      row(bt, [b.backend, b.state, String(b.outstanding), String(b.capacity), svg]);
    }
  }
  const qt = document.getElementById("queues");
  qt.replaceChildren();
  row(qt, ["pool", "waiting"], true);
  for (const [pool, n] of Object.entries(d.queues)) row(qt, [pool, String(n)]);
}
function showRun(d) {
  document.getElementById("run-title").textContent =
    d.run_id + " · " + d.agent + " · " + d.status + (d.reason ? " (" + d.reason + ")" : "");
  const svg = document.getElementById("timeline");
  svg.replaceChildren();
  const ends = d.timeline.map(t => t.start_ms + t.wall_ms.reduce((a, b) => a + b, 0));
  const end = Math.max(1e-6, ...ends);
  d.timeline.forEach((t, n) => {
    let x = t.start_ms;
    const y = 6 + (n % 9) * 20;
    t.wall_ms.forEach((w, i) => {
      const r = el("rect", {x: 10 + x / end * 580, y, width: Math.max(w / end * 580, 0.5),
        height: 16, fill: COLORS[i % COLORS.length], class: "mark"});
      const label = "step " + t.step + " " + d.phases[i] + " " + w.toFixed(3) + " ms";
      r.appendChild(el("title", {}, label));
      svg.appendChild(r);
      x += w;
    });
  });
  document.getElementById("run-note").textContent =
    (d.error ? "error: " + d.error + " " : "") +
    (d.steps_left_out ? d.steps_left_out + " steps in the middle not drawn" : "");
  const mt = document.getElementById("messages");
  mt.replaceChildren();
  for (const m of d.messages) row(mt, [m.role, m.text]);
}
let shown = null;  // the run last drawn, once it has ended: nothing more to fetch
async function tick() {
  const p = params();
  document.getElementById("overview").hidden = !!p.run;
  document.getElementById("run").hidden = !p.run;
  try {
    if (p.run) {
      if (shown === p.run) return;
      const d = await get("?run=" + encodeURIComponent(p.run));
      showRun(d);
      shown = d.done ? p.run : null;
    } else overview(await get(p.tenant ? "?tenant=" + encodeURIComponent(p.tenant) : ""));
    document.getElementById("err").textContent = "";
  } catch (e) {
    document.getElementById("err").textContent = "cannot load: " + e.message;
  }
}
document.getElementById("back").addEventListener("click", (e) => {
  e.preventDefault(); location.hash = "";
});
window.addEventListener("hashchange", () => { shown = null; tick(); });
tick();
setInterval(tick, 1000);
"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


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
