"""``podium bench --report FILE`` and ``--sweep 10,100,1000``: the bench as a picture.

A sweep runs the scenario once per concurrency (at least twice as many runs as
sessions in flight, so each point reaches a steady state), then names the sweet
spot: the lowest concurrency reaching 95 % of the best throughput.
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
from podium.observe.html import SweepPoint, profile_report, sweet_spot
from podium.observe.report import BenchReport

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
    return SweepPoint(report.concurrency, report.runs, report.runs_per_s, report.steps_per_s,
                      report.run_wall_p50_ms, report.run_wall_p99_ms, report.cpu_utilization)


def sweep(
    levels: list[int], runs: int, bench: BenchFn, run: Callable[[Any], BenchReport],
    records: list[RunRecord] | None,
) -> tuple[list[SweepPoint], BenchReport]:
    """One bench per level (each on a fresh loop); the last level's records are kept."""
    points: list[SweepPoint] = []
    last: BenchReport | None = None
    for i, level in enumerate(levels):
        keep = records if i == len(levels) - 1 else None
        last = run(bench(max(runs, 2 * level), level, keep))
        points.append(_point(last))
    assert last is not None
    return points, last


def sweep_json(report: BenchReport, points: list[SweepPoint]) -> dict[str, Any]:
    """What ``--sweep --json`` prints: the last level's report, ``sweep`` and ``sweet_spot``."""
    spot = sweet_spot(points)
    return {**msgspec.structs.asdict(report), "sweep": points,
            "sweet_spot": spot.concurrency if spot is not None else None}


def render_sweep(points: list[SweepPoint], console: Console) -> None:
    table = Table(title="concurrency sweep", title_justify="left")
    for col in ("concurrency", "runs", "runs/s", "steps/s", "p50 ms", "p99 ms", "CPU"):
        table.add_column(col, justify="right")
    for p in points:
        table.add_row(f"{p.concurrency:,}", f"{p.runs:,}", f"{p.runs_per_s:,.1f}",
                      f"{p.steps_per_s:,.0f}", f"{p.run_p50_ms:,.1f}", f"{p.run_p99_ms:,.1f}",
                      f"{p.cpu_utilization:.0%}")
    console.print(table)
    spot = sweet_spot(points)
    if spot is not None:
        console.print(f"sweet spot: concurrency {spot.concurrency:,} "
                      f"({spot.runs_per_s:,.1f} runs/s, p99 {spot.run_p99_ms:,.1f} ms)")


def summary_rows(report: BenchReport) -> list[tuple[str, str]]:
    return [
        ("scenario", f"{report.scenario} ({report.loop})"),
        ("runs completed", f"{report.completed:,} / {report.runs:,} at concurrency "
                           f"{report.concurrency:,}"),
        ("throughput", f"{report.runs_per_s:,.1f} runs/s, {report.steps_per_s:,.0f} steps/s"),
        ("CPU µs per step (process)", f"{report.cpu_us_per_step:.1f}"),
        ("CPU utilization", f"{report.cpu_utilization:.0%} of one core"),
        ("run latency p50 / p99", f"{report.run_wall_p50_ms:.1f} / "
                                  f"{report.run_wall_p99_ms:.1f} ms"),
        ("event-loop lag p99", f"{report.loop_lag_p99_ms:.2f} ms"),
    ]


def write_report(
    path: str, report: BenchReport, records: list[RunRecord], points: list[SweepPoint]
) -> None:
    page = profile_report(records, title=f"podium bench — {report.scenario}",
                          summary=summary_rows(report), sweep=points)
    write_output_file(path, "--report", page)


def run_on(loop_name: str) -> Callable[[Any], BenchReport]:
    """How to run one bench coroutine to completion on the chosen loop."""
    if loop_name == "uvloop":
        import uvloop

        return lambda coro: uvloop.run(coro)
    return lambda coro: asyncio.run(coro)
