"""The HTML report: one self-contained file (inline SVG and CSS, no script, no network).

``podium bench --report`` and ``podium runs profile --report`` write it. It shows, for a
set of runs: the per-phase CPU and waiting per step, latency CDFs of steps, model calls
and tool phases, throughput and runs in flight over time, and the slowest runs'
timelines; for ``podium bench --sweep`` also throughput and p99 per concurrency.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Sequence
from html import escape

import msgspec

from podium.engine.profile import PHASE_COLUMNS, PHASES, STEP_PHASES, ProfileAggregator
from podium.engine.records import RunRecord
from podium.observe.report import ms, rate
from podium.observe.svg import Series, line_chart, stacked_bars, timelines

__all__ = ("SWEEP_COLUMNS", "SweepPoint", "edge_warning", "profile_report", "sweep_cells",
           "sweep_section", "sweet_spot")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px}
.muted{color:#666} .grid-2{display:flex;flex-wrap:wrap;gap:12px}
table{border-collapse:collapse;margin:8px 0} td,th{padding:3px 10px;text-align:right}
th{border-bottom:1px solid #ccc} td:first-child,th:first-child{text-align:left}
svg{background:#fff;border:1px solid #e4e4e4;border-radius:4px;max-width:100%;height:auto}
svg .title{font-size:13px;font-weight:600} svg .tick{font-size:11px;fill:#555}
svg .axis{font-size:12px;fill:#333} svg .legend{font-size:11px;fill:#333}
svg .grid{stroke:#eee} svg .plot{fill:none;stroke:#ccc} svg .empty{font-size:13px;fill:#999}
"""

_CDF_POINTS = 200
#: Every name and label in the report is HTML-escaped where it is written; the policy makes
#: "no script, no network" hold for the file as a whole, whatever a future change lets in.
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
        "form-action 'none'")


class SweepPoint(msgspec.Struct, frozen=True):
    """One concurrency of a sweep: how fast, how long the tail.

    ``runs_per_s`` and ``run_p50_ms``/``run_p99_ms`` count every run that finished, failed
    ones too; the ``completed_*`` figures the completed runs only (None: none completed),
    what the sweet spot and the tables go by; ``failed``: the runs that did not complete."""

    concurrency: int
    runs: int
    runs_per_s: float
    steps_per_s: float
    run_p50_ms: float
    run_p99_ms: float
    cpu_utilization: float
    completed_runs_per_s: float = 0.0
    completed_steps_per_s: float = 0.0
    failed: int = 0
    completed_run_p50_ms: float | None = None
    completed_run_p99_ms: float | None = None
    #: The process's CPU per step and the loop's wake-ups from idle per step at this
    #: level: across levels, what one wake-up costs a loaded worker (``podium plan``).
    cpu_us_per_step: float | None = None
    loop_wakeups_per_step: float | None = None


#: The sweep table's columns, in the terminal and in the HTML report (see :func:`sweep_cells`).
SWEEP_COLUMNS = ("concurrency", "runs", "failed", "completed/s", "steps/s", "p50 ms", "p99 ms",
                 "CPU")


def sweep_cells(p: SweepPoint) -> tuple[str, ...]:
    """One row of the sweep table: throughput and latency of the completed runs."""
    return (f"{p.concurrency:,}", f"{p.runs:,}", f"{p.failed:,}", rate(p.completed_runs_per_s),
            rate(p.completed_steps_per_s), ms(p.completed_run_p50_ms), ms(p.completed_run_p99_ms),
            f"{p.cpu_utilization:.0%}")


def sweet_spot(points: Sequence[SweepPoint], share: float = 0.95) -> SweepPoint | None:
    """The lowest concurrency reaching ``share`` of the best throughput of completed runs:
    past it, more sessions in flight only lengthen the tail. None when no run completed
    (failed runs are no throughput: the fastest way to fail is no sweet spot)."""
    # A NaN throughput (a sweep step with no time) compares false to everything: left out,
    # it cannot make the best a NaN that no point reaches.
    measured = [p for p in points if math.isfinite(p.completed_runs_per_s)]
    best = max((p.completed_runs_per_s for p in measured), default=0.0)
    if best <= 0:
        return None
    return min((p for p in measured if p.completed_runs_per_s >= share * best),
               key=lambda p: p.concurrency)


def edge_warning(points: Sequence[SweepPoint], spot: SweepPoint | None) -> str | None:
    """A warning when the sweet spot is the highest concurrency tried: the throughput may
    still grow past it, so it is where the sweep stopped, not a sweet spot (None else)."""
    if spot is None or len(points) < 2:
        return None
    highest = max(p.concurrency for p in points)
    if spot.concurrency < highest:
        return None
    return (f"the sweet spot is the highest concurrency tried ({highest:,}): throughput may "
            f"still grow past it; sweep higher (e.g. --sweep …,{highest:,},{2 * highest:,})")


def _cdf(values: Sequence[float]) -> list[tuple[float, float]]:
    ordered = sorted(v for v in values if v > 0)
    n = len(ordered)
    if n == 0:
        return []
    if n <= _CDF_POINTS:
        return [(v, (i + 1) / n) for i, v in enumerate(ordered)]
    return [(ordered[min(n - 1, int(q * n / _CDF_POINTS))], min(1.0, (q + 1) / _CDF_POINTS))
            for q in range(_CDF_POINTS)]


def _phase_table(agg: ProfileAggregator) -> str:
    s = agg.summary()
    rows = [f"<tr><td>{name}</td>{_cells(s.phases[name].cells())}</tr>" for name in PHASES]
    head = "".join(f"<th>{col}</th>" for col in PHASE_COLUMNS)
    return f"<table><tr><th>phase</th>{head}</tr>" + "".join(rows) + "</table>"


def _cells(cells: Sequence[str]) -> str:
    return "".join(f"<td>{escape(c)}</td>" for c in cells)


def _cpu_vs_wait(agg: ProfileAggregator) -> str:
    s = agg.summary()
    steps = max(1, s.steps)
    cpu = [s.phases[n].cpu_ms_total / steps for n in STEP_PHASES]
    wait = [s.phases[n].wait_ms_total / steps for n in STEP_PHASES]
    return stacked_bars("CPU vs waiting per step, by phase (mean)", STEP_PHASES,
                        [("CPU", cpu), ("wait", wait)], unit="ms per step")


def _latency_cdfs(runs: Sequence[RunRecord]) -> str:
    step_ms: list[float] = []
    model_ms: list[float] = []
    tool_ms: list[float] = []
    run_ms: list[float] = []
    model, tools = STEP_PHASES.index("model"), STEP_PHASES.index("tools")
    for r in runs:
        if r.profile is None:
            continue
        run_ms.append(r.profile.wall_ns / 1e6)
        for st in r.profile.steps:
            step_ms.append(sum(st.wall_ns) / 1e6)
            model_ms.append(st.wall_ns[model] / 1e6)
            if st.tool_calls:
                tool_ms.append(st.wall_ns[tools] / 1e6)
    series: list[Series] = [
        ("steps", _cdf(step_ms)), ("model calls", _cdf(model_ms)),
        ("tool calls (tools phase)", _cdf(tool_ms)), ("runs", _cdf(run_ms)),
    ]
    return line_chart("Latency CDFs", series, x_label="ms (log scale)",
                      y_label="fraction ≤ x", log_x=True, step=True)


def _over_time(runs: Sequence[RunRecord]) -> tuple[str, str]:
    spans = [(r.started_at, r.finished_at) for r in runs
             if r.started_at is not None and r.finished_at is not None]
    if not spans:
        empty: list[Series] = []
        return (line_chart("Throughput", empty, x_label="s", y_label="runs/s"),
                line_chart("Runs in flight", empty, x_label="s", y_label="runs"))
    buckets = max(8, min(60, len(spans) // 20))  # enough runs per bucket to mean something
    starts = sorted(s for s, _ in spans)
    ends = sorted(e for _, e in spans)
    t0, t1 = starts[0], max(ends[-1], starts[0] + 1e-3)
    width = (t1 - t0) / buckets
    through: list[tuple[float, float]] = []
    flight: list[tuple[float, float]] = []
    for i in range(buckets):
        a, b = t0 + i * width, t0 + (i + 1) * width
        done = bisect.bisect_right(ends, b) - bisect.bisect_right(ends, a)
        mid = (a + b) / 2
        through.append((mid - t0, done / width))
        flight.append((mid - t0, bisect.bisect_right(starts, mid) - bisect.bisect_right(ends, mid)))
    return (
        line_chart("Throughput (runs finished per second)", [("runs/s", through)],
                   x_label="seconds since the first run started", y_label="runs/s"),
        line_chart("Runs in flight", [("in flight", flight)],
                   x_label="seconds since the first run started", y_label="runs"),
    )


def _slowest(runs: Sequence[RunRecord], n: int = 10) -> str:
    timed = sorted((r for r in runs if r.profile is not None),
                   key=lambda r: r.profile.wall_ns if r.profile else 0, reverse=True)[:n]
    rows = []
    for r in timed:
        assert r.profile is not None
        segs = []
        at = r.profile.admit_ns / 1e6
        if at:
            segs.append((0.0, at, len(STEP_PHASES), "admit (queue)"))
        for st in r.profile.steps:
            for i, w in enumerate(st.wall_ns):
                ms = w / 1e6
                if ms > 0:
                    segs.append((at, ms, i, f"step {st.step} {STEP_PHASES[i]}"))
                at += ms
        rows.append((r.run_id, segs))
    return timelines(f"The {len(rows)} slowest runs, step by step", rows,
                     (*STEP_PHASES, "admit"))


def _measured(
    points: Sequence[SweepPoint], figure: Callable[[SweepPoint], float | None]
) -> list[tuple[float, float]]:
    """(concurrency, figure) of the points that have the figure (no run completed: none)."""
    return [(p.concurrency, v) for p in points if (v := figure(p)) is not None]


def sweep_section(points: Sequence[SweepPoint]) -> str:
    """Throughput and p99 per concurrency, with the sweet spot named."""
    if not points:
        return ""
    spot = sweet_spot(points)
    rows = "".join(f"<tr>{_cells(sweep_cells(p))}</tr>" for p in points)
    header = "".join(f"<th>{escape(c)}</th>" for c in SWEEP_COLUMNS)
    tp: list[Series] = [
        ("completed runs/s", [(p.concurrency, p.completed_runs_per_s) for p in points])
    ]
    p99: list[Series] = [
        ("run p99 ms (completed)", _measured(points, lambda p: p.completed_run_p99_ms)),
        ("run p50 ms (completed)", _measured(points, lambda p: p.completed_run_p50_ms)),
    ]
    verdict = (f"<p>Sweet spot: <b>concurrency {spot.concurrency:,}</b> — the lowest that "
               f"reaches 95 % of the best throughput of completed runs "
               f"({rate(spot.completed_runs_per_s)} runs/s, p99 "
               f"{ms(spot.completed_run_p99_ms)} ms). Past it more sessions in flight only "
               f"lengthen the tail.</p>") if spot else (
               "<p>No sweet spot: no run completed at any concurrency.</p>")
    if (warning := edge_warning(points, spot)) is not None:
        verdict += f'<p class="warn"><b>Warning:</b> {escape(warning)}.</p>'
    return (
        "<h2>Concurrency sweep</h2>" + verdict + '<div class="grid-2">'
        + line_chart("Throughput per concurrency", tp, x_label="concurrency (log scale)",
                     y_label="completed runs/s", log_x=True, markers=True)
        + line_chart("Run latency per concurrency", p99, x_label="concurrency (log scale)",
                     y_label="ms", log_x=True, markers=True)
        + f"</div><table><tr>{header}</tr>" + rows + "</table>"
    )


def profile_report(
    runs: Sequence[RunRecord],
    *,
    title: str = "Podium workload profile",
    summary: Sequence[tuple[str, str]] = (),
    sweep: Sequence[SweepPoint] = (),
) -> str:
    """The whole report page for ``runs`` (plus a bench's summary rows and sweep)."""
    agg = ProfileAggregator()
    for r in runs:
        if r.profile is not None:
            agg.add_run(r.profile)
    s = agg.summary()
    in_phases = "CPU µs per step (in phases)"
    facts = [("runs", f"{s.runs:,}"), ("steps", f"{s.steps:,}")]
    # (a bench's summary has it already, as a line of the loop thread's CPU)
    if all(key.strip() not in (in_phases, "in phases") for key, _ in summary):
        facts.append((in_phases, f"{s.cpu_us_per_step:.1f}"))
    facts += summary
    if s.ttft_p50_ms is not None:
        facts.append(("time to first token p50 / p99",
                      f"{s.ttft_p50_ms:.1f} / {s.ttft_p99_ms or 0:.1f} ms"))
    fact_rows = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in facts)
    throughput, flight = _over_time(runs)
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">generated {time.strftime("%Y-%m-%d %H:%M:%S %Z")} by podium</p>',
        f"<table>{fact_rows}</table>",
        sweep_section(sweep),
        "<h2>Where a step's time goes</h2>", _phase_table(agg),
        '<div class="grid-2">', _cpu_vs_wait(agg), _latency_cdfs(runs), "</div>",
        "<h2>Over time</h2>", '<div class="grid-2">', throughput, flight, "</div>",
        "<h2>Slowest runs</h2>", _slowest(runs),
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        + "".join(body) + "</body></html>\n"
    )

