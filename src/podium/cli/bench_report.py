"""``podium bench --report FILE`` and ``--sweep 10,100,1000``: the bench as a picture.

A sweep runs the scenario once per concurrency (at least twice as many runs as
sessions in flight, so each point reaches a steady state), then names the sweet
spot: the lowest concurrency reaching 95 % of the best throughput of completed runs
(failed runs are no throughput). Interrupted (Ctrl-C), it stops at that level.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from podium.cli.common import write_output_file
from podium.engine.records import RunRecord
from podium.errors import ConfigError
from podium.observe.html import (
    SWEEP_COLUMNS,
    SweepPoint,
    edge_warning,
    profile_report,
    sweep_cells,
    sweet_spot,
)
from podium.observe.report import BenchReport, ms, rate
from podium.observe.report import summary_rows as report_rows

__all__ = (
    "parse_sweep",
    "render_sweep",
    "summary_rows",
    "sweep",
    "sweep_json",
    "write_report",
)

#: Runs one bench: (runs, concurrency, records to fill or None) → its report.
BenchFn = Callable[[int, int, list[RunRecord] | None], Coroutine[Any, Any, BenchReport]]


def parse_sweep(text: str) -> list[int]:
    try:
        levels = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"--sweep {text!r}: give concurrencies like 10,100,1000") from None
    if not levels or levels[0] < 1:
        raise ConfigError(f"--sweep {text!r}: concurrencies must be at least 1")
    return levels


def _point(report: BenchReport) -> SweepPoint:
    return SweepPoint(
        report.concurrency, report.runs, report.runs_per_s, report.steps_per_s,
        report.run_wall_p50_ms, report.run_wall_p99_ms, report.cpu_utilization,
        completed_runs_per_s=report.completed_runs_per_s,
        completed_steps_per_s=report.completed_steps_per_s, failed=report.failed,
        completed_run_p50_ms=report.completed_run_wall_p50_ms,
        completed_run_p99_ms=report.completed_run_wall_p99_ms,
        cpu_us_per_step=report.cpu_us_per_step,
        loop_wakeups_per_step=report.loop_wakeups_per_step,
    )


def sweep(
    levels: list[int], runs: int, bench: BenchFn, run: Callable[[Any], BenchReport],
    records: list[RunRecord] | None,
) -> tuple[list[SweepPoint], BenchReport]:
    """One bench per level (each on a fresh loop); the last level's records are kept. An
    interrupted level ends the sweep: its partial report (and records) are returned, not
    made a point."""
    points: list[SweepPoint] = []
    last: BenchReport | None = None
    for level in levels:
        if records is not None:
            records.clear()  # the level that ends the sweep, last or interrupted, is plotted
        last = run(bench(max(runs, 2 * level), level, records))
        if last.partial:
            break
        points.append(_point(last))
    assert last is not None
    return points, last


def sweep_json(report: BenchReport, points: list[SweepPoint]) -> dict[str, Any]:
    """What ``--sweep --json`` prints: the last level's report, ``sweep`` and ``sweet_spot``."""
    spot = sweet_spot(points)
    return {**msgspec.structs.asdict(report), "sweep": points,
            "sweet_spot": spot.concurrency if spot is not None else None,
            "sweet_spot_warning": edge_warning(points, spot)}


def render_sweep(points: list[SweepPoint], console: Console) -> None:
    table = Table(title="concurrency sweep (throughput and latency of completed runs)",
                  title_justify="left")
    for col in SWEEP_COLUMNS:
        table.add_column(col, justify="right")
    for p in points:
        table.add_row(*sweep_cells(p))
    console.print(table)
    spot = sweet_spot(points)
    if spot is not None:
        console.print(f"sweet spot: concurrency {spot.concurrency:,} "
                      f"({rate(spot.completed_runs_per_s)} completed runs/s, "
                      f"p99 {ms(spot.completed_run_p99_ms)} ms)")
    elif points:
        console.print("no sweet spot: no run completed at any concurrency")
    if (warning := edge_warning(points, spot)) is not None:
        console.print(f"[bold yellow]warning:[/] {warning}")


def summary_rows(report: BenchReport) -> list[tuple[str, str]]:
    """The HTML report's facts: those of the text report (its steps are the page's own)."""
    return [("scenario", f"{report.scenario} ({report.loop})"),
            *report_rows(report, steps=False)]


def write_report(
    path: str, report: BenchReport, records: list[RunRecord], points: list[SweepPoint]
) -> None:
    partial = " (partial: interrupted)" if report.partial else ""
    page = profile_report(records, title=f"podium bench — {report.scenario}{partial}",
                          summary=summary_rows(report), sweep=points)
    write_output_file(path, "--report", page)


def run_on(loop_name: str) -> Callable[[Any], BenchReport]:
    """How to run one bench coroutine to completion on the chosen loop."""
    if loop_name == "uvloop":
        import uvloop

        return lambda coro: uvloop.run(coro)
    return lambda coro: asyncio.run(coro)
