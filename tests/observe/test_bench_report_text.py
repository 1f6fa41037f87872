"""What `podium bench` prints and writes, from a report: rates with the precision they need,
"-" for what there is none of, the sweet spot on completed runs only."""

from __future__ import annotations

import io
import re

from rich.console import Console

from podium.engine.profile import PHASES, ProfileAggregator
from podium.observe.html import (
    SweepPoint,
    edge_warning,
    profile_report,
    sweep_section,
    sweet_spot,
)
from podium.observe.report import BenchReport, rate, render_report


def report(**changes: object) -> BenchReport:
    phases = ProfileAggregator().summary().phases
    figures: dict[str, object] = dict(
        scenario="s", loop="asyncio", runs=3, completed=3, concurrency=1, steps=3, wall_s=4.1,
        steps_per_s=0.73, runs_per_s=0.73, cpu_us_per_step=50.0, profiled_cpu_us_per_step=20.0,
        cpu_utilization=0.01, loop_lag_p99_ms=0.1, rss_per_run_kb=10.0, run_wall_p50_ms=1370.0,
        run_wall_p99_ms=1400.0, phases=phases, completed_runs_per_s=0.73,
        completed_steps_per_s=0.73, completed_run_wall_p50_ms=1370.0,
        completed_run_wall_p99_ms=1400.0, runs_planned=3,
    )
    figures.update(changes)
    return BenchReport(**figures)  # type: ignore[arg-type]


def printed(r: BenchReport) -> str:
    out = io.StringIO()
    render_report(r, Console(file=out, width=200))
    return " ".join(out.getvalue().split())


def test_rates_keep_their_precision() -> None:
    assert [rate(v) for v in (0.73, 0.0, 9.87, 12.34, 3346.6)] == [
        "0.73", "0.00", "9.87", "12.3", "3,347"]
    text = printed(report())
    assert "steps/s 0.73" in text and "runs/s 0.73" in text, text  # "1" before


def test_phases_without_samples_print_dashes_not_zeros() -> None:
    text = printed(report())
    for name in PHASES:
        assert f"│ {name} │ - │ - │ - │ 0.0 │ 0.0 │ 0.0 │ - │" in text, text
    page = profile_report([])
    assert re.search(r"<tr><td>tools</td><td>-</td><td>-</td><td>-</td>", page), page


def test_a_partial_report_says_so() -> None:
    text = printed(report(partial=True, runs_planned=100))
    assert "PARTIAL (interrupted)" in text and "interrupted: 3 of 100 runs finished" in text


def test_the_sweet_spot_goes_by_completed_runs() -> None:
    # Failing fast at 8 was "the best throughput"; the completed runs peak at 4.
    points = [
        SweepPoint(1, 10, 5.0, 50.0, 10.0, 20.0, 0.1, completed_runs_per_s=5.0),
        SweepPoint(4, 10, 18.0, 180.0, 10.0, 20.0, 0.3, completed_runs_per_s=18.0, failed=1),
        SweepPoint(8, 16, 90.0, 90.0, 1.0, 2.0, 0.5, completed_runs_per_s=2.0, failed=15),
    ]
    spot = sweet_spot(points)
    assert spot is not None and spot.concurrency == 4
    nan = float("nan")
    failing = [SweepPoint(c, 10, 99.0, 99.0, 1.0, 1.0, 0.1, failed=10) for c in (1, 2)]
    assert sweet_spot(failing) is None
    assert sweet_spot([SweepPoint(1, 1, 1.0, 1.0, 1.0, 1.0, 0.1, completed_runs_per_s=nan)]) \
        is None
    assert "No sweet spot: no run completed" in sweep_section(failing)


def test_a_sweet_spot_at_the_highest_level_tried_is_a_warning() -> None:
    """Throughput still rising at the last level: that level is where the sweep stopped,
    not a sweet spot, and every form of the report says so."""
    rising = [SweepPoint(c, 10, float(c), float(c), 10.0, 20.0, 0.1, completed_runs_per_s=float(c))
              for c in (1, 2, 4)]
    spot = sweet_spot(rising)
    assert spot is not None and spot.concurrency == 4
    warning = edge_warning(rising, spot)
    assert warning is not None and "highest concurrency tried (4)" in warning
    assert "--sweep" in warning and "Warning:" in sweep_section(rising)
    from podium.cli.bench_report import render_sweep, sweep_json

    out = io.StringIO()
    render_sweep(rising, Console(file=out, width=200))
    assert "warning:" in out.getvalue()
    assert sweep_json(report(), rising)["sweet_spot_warning"] == warning
    # A peak below the last level: no warning.
    peaked = [*rising, SweepPoint(8, 10, 4.0, 4.0, 10.0, 90.0, 0.1, completed_runs_per_s=4.0)]
    assert edge_warning(peaked, sweet_spot(peaked)) is None
    assert "Warning:" not in sweep_section(peaked)


def test_the_processs_cpu_is_accounted_for_once_line_by_line() -> None:
    """Phases, garbage collection, the loop's own work outside phases and the other threads
    add up to the process's CPU; "in phases" is printed once."""
    text = printed(report(cpu_us_per_step=50.0, loop_cpu_us_per_step=46.0,
                          profiled_cpu_us_per_step=30.0, gc_cpu_us_per_step=4.0))
    assert "CPU µs per step (loop thread) 46.0" in text, text
    assert "in phases 30.0 (65% of the loop thread's)" in text, text
    assert "garbage collection 4.0" in text and "loop, outside phases 12.0" in text, text
    assert "CPU µs per step (other threads) 4.0" in text, text
    assert "accounted for 50.0 of the process's 50.0" in text, text
    assert text.count("in phases") == 2, text  # (the CPU line and the blocked line)


def test_the_html_report_of_a_bench_says_in_phases_once() -> None:
    from podium.cli.bench_report import summary_rows

    page = profile_report([], summary=summary_rows(report(loop_cpu_us_per_step=46.0)))
    cpu_rows = sum(page.count(f"<td>{row}</td>")
                   for row in ("CPU µs per step (in phases)", "  in phases"))
    assert cpu_rows == 1, page
