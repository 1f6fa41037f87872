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
  return tr;
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
async function get(query, path) {
  const resp = await fetch((path || "/dashboard/data") + query,
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
    const a = document.createElement("a");  // every run of that status, in the runs view
    a.href = "#view=runs&status=" + s + (d.tenant ? "&tenant=" + encodeURIComponent(d.tenant) : "");
    a.textContent = s;
    c.append(b, a);
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
function clock(t) {  // UTC, to the millisecond: the same on every operator's screen
  return t == null ? "—" : new Date(t * 1000).toISOString().replace("T", " ").replace("Z", "");
}
function dur(ms) {
  if (ms == null) return "—";
  if (ms >= 1000) return (ms / 1000).toFixed(ms >= 10000 ? 1 : 2) + " s";
  return ms.toFixed(ms >= 10 ? 1 : 2) + " ms";
}
function niceStep(raw) {  // 1, 2 or 5 times a power of ten: the time axis's tick spacing
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-6))));
  for (const m of [1, 2, 5]) if (m * p >= raw) return m * p;
  return 10 * p;
}
function runLink(id, text) {
  const a = document.createElement("a");
  // Encoded: an id holding "&key=" must not rewrite the fragment the page reads.
  a.href = "#run=" + encodeURIComponent(id); a.textContent = text || id; a.className = "run-link";
  return a;
}
function statusOf(s, reason) {
  const span = document.createElement("span");
  span.className = "status-" + s; span.textContent = s + (reason ? " (" + reason + ")" : "");
  return span;
}
function hashOf(p) {
  return Object.entries(p).filter(([, v]) => v !== undefined && v !== null && v !== "")
    .map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&");
}
function toInput(epoch) {  // epoch seconds -> a datetime-local input's value (local time)
  if (!epoch) return "";
  const d = new Date(Number(epoch) * 1000);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}
function fromInput(value) {
  const t = value ? new Date(value).getTime() : NaN;
  return isNaN(t) ? "" : String(t / 1000);
}
const FILTERS = ["status", "agent", "tenant", "since", "until", "limit"];
let pages = [];  // the cursors of the newer pages seen, to page back to
let next = null;  // the shown page's next_cursor
function runsQuery(p) {
  const q = new URLSearchParams();
  for (const f of [...FILTERS, "cursor"]) if (p[f]) q.set(f, p[f]);
  const s = q.toString();
  return s ? "?" + s : "";
}
function fillFilters(p) {
  for (const f of ["status", "agent", "tenant"]) document.getElementById("f-" + f).value = p[f] || "";
  for (const f of ["since", "until"]) document.getElementById("f-" + f).value = toInput(p[f]);
}
function showRuns(d, p) {
  document.getElementById("meta").textContent =
    "runs of " + (p.tenant ? "tenant " + p.tenant : "every tenant") + ", newest first";
  const t = document.getElementById("runs-table");
  t.replaceChildren();
  row(t, ["run", "status", "agent", "tenant", "created (UTC)", "steps", "tokens in / out",
          "parent"], true);
  for (const r of d.runs) {
    row(t, [runLink(r.run_id), statusOf(r.status, r.reason), r.agent, r.tenant,
            clock(r.created_at), String(r.steps), r.input_tokens + " / " + r.output_tokens,
            r.parent_run_id ? runLink(r.parent_run_id) : ""]).dataset.run = r.run_id;
  }
  if (!d.runs.length) row(t, ["no run matches these filters"]);
  next = d.next_cursor;
  document.getElementById("older").disabled = !next;
  document.getElementById("newer").disabled = !p.cursor;
  document.getElementById("page-note").textContent =
    d.runs.length + " runs" + (p.cursor ? ", page " + (pages.length + 1) : "") +
    (next ? "" : ", the oldest");
}
function field(table, name, value) {
  row(table, [name, value]).dataset.field = name;
}
function linksTo(children) {
  const span = document.createElement("span");
  children.forEach((c, i) => {
    if (i) span.append(", ");
    span.append(runLink(c.run_id, c.run_id + " (" + c.agent + ", " + c.status + ")"));
  });
  return span;
}
function runFields(d) {
  const t = document.getElementById("run-fields");
  t.replaceChildren();
  field(t, "status", statusOf(d.status, d.reason));
  field(t, "tenant", d.tenant);
  field(t, "agent", d.agent + (d.active_agent ? " → " + d.active_agent : ""));
  field(t, "model", d.model || "— (agent not served here)");
  field(t, "created", clock(d.created_at));
  field(t, "started", clock(d.started_at));
  field(t, "finished", clock(d.finished_at));
  if (d.started_at) field(t, d.finished_at ? "duration" : "elapsed so far",
    dur(((d.finished_at || Date.now() / 1000) - d.started_at) * 1000));
  if (d.queue_ms !== null) field(t, "queued for", dur(d.queue_ms));
  field(t, "steps", String(d.steps));
  field(t, "tokens in / out", d.input_tokens + " / " + d.output_tokens +
    (d.cached_tokens ? " (" + d.cached_tokens + " cached)" : ""));
  field(t, "model calls", String(d.requests));
  if (d.waiting) field(t, "waiting", d.waiting.reason + " since " + clock(d.waiting.since) +
    (d.waiting.until ? ", fails at " + clock(d.waiting.until) : ""));
  if (d.parent_run_id) {
    const span = document.createElement("span");
    span.append(runLink(d.parent_run_id), d.parent_call ? " (call " + d.parent_call + ")" : "");
    field(t, "parent run", span);
  }
  if (d.children.length) field(t, "child runs", linksTo(d.children));
  if (d.thread_id) field(t, "thread", d.thread_id);
  field(t, "pool", d.pool);
  if (d.error) field(t, "error", d.error);
}
function timeline(svg, d) {
  svg.replaceChildren();
  const steps = d.timeline, n = steps.length, left = 170, right = 880, top = 26;
  const rowH = n ? Math.max(3, Math.min(22, 640 / n)) : 22;
  const height = Math.ceil(top + Math.max(1, n) * rowH + 6);
  svg.setAttribute("height", height); svg.setAttribute("viewBox", "0 0 900 " + height);
  const end = Math.max(1e-6, ...steps.map(t => t.start_ms + t.wall_ms.reduce((a, b) => a + b, 0)));
  const x = ms => left + ms / end * (right - left);
  const tick = niceStep(end / 6);  // the time axis: ms from the run's creation
  for (let at = 0; n && at <= end * 1.0001; at += tick) {
    svg.appendChild(el("line", {x1: x(at), x2: x(at), y1: top - 6, y2: height, stroke: "#e4e4e4"}));
    svg.appendChild(el("text", {x: x(at) - (at ? 14 : 0), y: 14, "font-size": 10, class: "tick"},
      dur(at)));
  }
  if (!n) {
    svg.appendChild(el("text", {x: left, y: top + 14, "font-size": 11}, "no step recorded yet"));
    return;
  }
  if (steps[0].start_ms > 0) {  // the wait for a worker before the first step
    svg.appendChild(el("rect", {x: left, y: top, width: Math.max(x(steps[0].start_ms) - left, 0.5),
      height: rowH - 2, fill: "#ccc", class: "mark queued"})).appendChild(
      el("title", {}, "queued " + dur(steps[0].start_ms)));
    const label = "queued " + dur(steps[0].start_ms);
    if (rowH >= 12 && x(steps[0].start_ms) - left > label.length * 6 + 6) svg.appendChild(
      el("text", {x: left + 3, y: top + rowH - 7, "font-size": 10, class: "phase-label"}, label));
  }
  steps.forEach((t, i) => {
    const y = top + i * rowH;
    if (rowH >= 12) svg.appendChild(el("text", {x: 4, y: y + rowH - 7, "font-size": 11,
      class: "step-label"}, "step " + t.step + (t.started_at ? " · " + clock(t.started_at).slice(11) : "")));
    let at = t.start_ms;
    t.wall_ms.forEach((w, k) => {
      const width = Math.max(w / end * (right - left), 0.5);
      const r = el("rect", {x: x(at), y, width, height: rowH - 2, fill: COLORS[k % COLORS.length],
        class: "mark phase-" + d.phases[k]});
      r.appendChild(el("title", {}, "step " + t.step + " " + d.phases[k] + " " + dur(w) +
        " (CPU " + dur(t.cpu_ms[k]) + ")"));
      svg.appendChild(r);
      const label = d.phases[k] + " " + dur(w);  // inside the segment, where it fits
      if (rowH >= 12 && width > label.length * 6 + 6) svg.appendChild(el("text", {x: x(at) + 3,
        y: y + rowH - 7, "font-size": 10, fill: "#fff", class: "phase-label"}, label));
      at += w;
    });
  });
}
function legend(phases) {
  const box = document.getElementById("legend");
  box.replaceChildren();
  phases.forEach((p, k) => {
    const span = document.createElement("span");
    const svg = el("svg", {width: 12, height: 12, class: "swatch"});
    svg.appendChild(el("rect", {x: 0, y: 0, width: 12, height: 12, fill: COLORS[k % COLORS.length]}));
    span.append(svg, " " + p);
    box.appendChild(span);
  });
}
function showRun(d) {
  document.getElementById("run-title").textContent =
    d.run_id + " · " + d.agent + " · " + d.status + (d.reason ? " (" + d.reason + ")" : "");
  document.getElementById("meta").textContent = "run " + d.status + (d.done
    ? " · finished " + clock(d.finished_at) + " UTC"
    : d.status === "waiting" ? " · waiting on a human" : " · updated every second") +
    " · tenant " + d.tenant;
  runFields(d);
  legend(d.phases);
  timeline(document.getElementById("timeline"), d);
  document.getElementById("run-note").textContent =
    (d.steps_left_out ? d.steps_left_out + " steps in the middle not drawn. " : "") +
    (d.children_left_out ? d.children_left_out + " more child runs not listed." : "");
  const st = document.getElementById("steps");
  st.replaceChildren();
  row(st, ["step", "started (UTC)", ...d.phases, "total", "tokens in / out", "tool calls"], true);
  for (const t of d.timeline) {
    row(st, [String(t.step), clock(t.started_at), ...t.wall_ms.map(dur),
             dur(t.wall_ms.reduce((a, b) => a + b, 0)), t.input_tokens + " / " + t.output_tokens,
             t.tools.join(", ")]).dataset.step = t.step;
  }
  const sc = document.getElementById("screening");
  sc.replaceChildren();
  if (!d.screening.length) row(sc, ["no screening verdict journaled"]);
  else row(sc, ["on", "action", "rule", "score", "screener", "excerpt"], true);
  for (const v of d.screening) {
    row(sc, [v.tool ? "step " + v.step + " tool " + v.tool : v.source, v.action, v.rule,
             v.score.toFixed(2), v.screener, v.excerpt]);
  }
  const mt = document.getElementById("messages");
  mt.replaceChildren();
  for (const m of d.messages) row(mt, [m.role, m.text]);
}
let shown = null;  // the run last drawn, once it has ended: nothing more to fetch
let listed = null, age = 0;  // the runs page last drawn, and ticks since
async function tick() {
  const p = params(), at = location.hash;
  // A reply to an earlier fragment (the operator moved on while it was on its way) is dropped.
  const current = () => location.hash === at;
  const view = p.run ? "run" : p.view === "runs" ? "runs" : "overview";
  for (const v of ["overview", "runs", "run"]) document.getElementById(v).hidden = v !== view;
  try {
    if (view === "run") {
      if (shown === p.run) return;
      const d = await get("?run=" + encodeURIComponent(p.run));
      if (!current()) return;
      showRun(d);
      shown = d.done ? p.run : null;
    } else if (view === "runs") {
      const q = runsQuery(p);
      if (listed === q && ++age % 5) return;  // a page is read again every 5 s, not every tick
      const d = await get(q, "/dashboard/runs");
      if (!current()) return;
      if (listed !== q) fillFilters(p);  // not while the operator types in them
      listed = q; age = 0;
      showRuns(d, p);
    } else overview(await get(p.tenant ? "?tenant=" + encodeURIComponent(p.tenant) : ""));
    document.getElementById("err").textContent = "";
  } catch (e) {
    document.getElementById("err").textContent = "cannot load: " + e.message;
  }
}
document.getElementById("filters").addEventListener("submit", (e) => {
  e.preventDefault();
  const f = name => document.getElementById("f-" + name).value.trim();
  pages = [];
  location.hash = hashOf({view: "runs", status: f("status"), agent: f("agent"),
    tenant: f("tenant"), since: fromInput(f("since")), until: fromInput(f("until")),
    limit: params().limit});
});
document.getElementById("f-clear").addEventListener("click", () => {
  pages = []; fillFilters({}); location.hash = "view=runs";
});
document.getElementById("older").addEventListener("click", () => {
  const p = params();
  if (!next) return;
  pages.push(p.cursor || "");
  location.hash = hashOf({...p, view: "runs", cursor: next});
});
document.getElementById("newer").addEventListener("click", () => {
  const p = params();
  location.hash = hashOf({...p, view: "runs", cursor: pages.pop() || ""});
});
window.addEventListener("hashchange", () => { shown = null; listed = null; tick(); });
tick();
setInterval(tick, 1000);
