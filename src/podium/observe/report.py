"""The bench report: one struct, printed as a rich table or as one JSON object."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from podium.engine.profile import PHASES, PhaseSummary

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ("BenchReport", "render_report")


class BenchReport(msgspec.Struct, frozen=True):
    """What ``podium bench --json`` prints."""

    scenario: str
    loop: str
    runs: int
    completed: int
    concurrency: int
    steps: int
    wall_s: float
    steps_per_s: float
    runs_per_s: float
    cpu_us_per_step: float
    profiled_cpu_us_per_step: float
    cpu_utilization: float
    loop_lag_p99_ms: float
    rss_per_run_kb: float
    run_wall_p50_ms: float
    run_wall_p99_ms: float
    phases: dict[str, PhaseSummary]
    #: Tool calls made, and those that failed (after their retries): a scenario's
    #: error_rate, or a tool that cannot work (each failure is the model's observation).
    tool_calls: int = 0
    tool_failures: int = 0


def render_report(report: BenchReport, console: Console) -> None:
    from rich.table import Table  # with the table printed, not with `podium --help`

    table = Table(
        title=f"workload profile — {report.scenario} ({report.loop})", title_justify="left"
    )
    table.add_column("phase")
    for col in ("p50 ms", "p95 ms", "p99 ms", "CPU ms", "wait ms", "CPU share"):
        table.add_column(col, justify="right")
    for name in PHASES:
        p = report.phases[name]
        table.add_row(
            name,
            f"{p.wall_p50_ms:.3f}",
            f"{p.wall_p95_ms:.3f}",
            f"{p.wall_p99_ms:.3f}",
            f"{p.cpu_ms_total:.1f}",
            f"{p.wait_ms_total:.1f}",
            f"{p.cpu_share:.0%}",
        )
    console.print(table)
    summary = Table(show_header=False, box=None)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    rows = [
        (
            "runs completed",
            f"{report.completed:,} / {report.runs:,} at concurrency {report.concurrency:,}",
        ),
        ("steps", f"{report.steps:,}"),
        ("wall", f"{report.wall_s:.2f} s"),
        ("steps/s", f"{report.steps_per_s:,.0f}"),
        ("runs/s", f"{report.runs_per_s:,.1f}"),
        ("CPU µs per step (process)", f"{report.cpu_us_per_step:.1f}"),
        ("CPU µs per step (in phases)", f"{report.profiled_cpu_us_per_step:.1f}"),
        ("CPU utilization", f"{report.cpu_utilization:.0%} of one core"),
        (
            "run latency p50 / p99",
            f"{report.run_wall_p50_ms:.1f} / {report.run_wall_p99_ms:.1f} ms",
        ),
        ("event-loop lag p99", f"{report.loop_lag_p99_ms:.2f} ms"),
        ("RSS per run", f"{report.rss_per_run_kb:.1f} KiB"),
        ("tool calls failed", f"{report.tool_failures:,} of {report.tool_calls:,}"),
    ]
    for k, v in rows:
        summary.add_row(k, v)
    console.print(summary)
