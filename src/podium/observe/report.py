"""The bench report: one struct, printed as a rich table or as one JSON object."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from podium.engine.profile import PHASE_COLUMNS, PHASES, PROFILE_FORMAT, PhaseSummary

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ("BenchReport", "ms", "rate", "render_report", "summary_rows")


class BenchReport(msgspec.Struct, frozen=True):
    """What ``podium bench --json`` prints.

    ``runs`` are the runs that finished (all of them, unless ``partial``); ``completed`` of
    them completed and ``failed`` did not (``failures``: how many by their ``reason`` code,
    or their status when they have none). ``runs_per_s``, ``steps_per_s`` and
    ``run_wall_p50_ms``/``run_wall_p99_ms`` count every finished run, failed ones too; the
    ``completed_*`` figures count the completed runs only, what a load test's throughput
    and latency mean (None: no run completed).
    """

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
    #: Resident memory per session in flight, KiB: the process's RSS growth from just
    #: before the first runs start to the end of the first wave (while the first
    #: ``concurrency`` runs finish, all ``concurrency`` sessions in flight), divided by
    #: ``concurrency``. Measured in that window only, it does not grow with the number of
    #: runs (what the bench keeps of each finished run, for its figures and ``--report``,
    #: is not a session's); it includes the first runs' one-time costs (caches, pools),
    #: which weigh at low concurrency.
    rss_per_run_kb: float
    run_wall_p50_ms: float
    run_wall_p99_ms: float
    phases: dict[str, PhaseSummary]
    #: Tool calls made, and those that failed (after their retries): a scenario's
    #: error_rate, or a tool that cannot work (each failure is the model's observation).
    tool_calls: int = 0
    tool_failures: int = 0
    failed: int = 0
    failures: dict[str, int] = {}
    completed_runs_per_s: float = 0.0
    failed_runs_per_s: float = 0.0
    completed_steps: int = 0
    completed_steps_per_s: float = 0.0
    completed_run_wall_p50_ms: float | None = None
    completed_run_wall_p99_ms: float | None = None
    #: Interrupted (Ctrl-C): the figures of the ``runs`` that finished before, of
    #: ``runs_planned``.
    partial: bool = False
    runs_planned: int = 0
    #: :data:`~podium.engine.profile.PROFILE_FORMAT`: what ``podium plan`` checks.
    profile_format: int = PROFILE_FORMAT
    #: CPU per step of the event loop's thread (the process's less its other threads': the
    #: load generator's progress bar, the tool pools): what the phases' CPU is part of.
    loop_cpu_us_per_step: float = 0.0
    #: CPU per step of the garbage collections on the event loop's thread (part of the loop
    #: thread's, mostly outside the phases).
    gc_cpu_us_per_step: float = 0.0
    #: Times per step the loop's thread went to sleep with nothing to do (voluntary
    #: context switches), and the CPU one such wake-up costs here (µs, measured after the
    #: runs: podium.observe.loopcost): the loop's CPU a saturated worker does not spend.
    loop_wakeups_per_step: float = 0.0
    loop_wake_cpu_us: float = 0.0
    #: The share of the time the loop's thread was ready to run that it waited for a CPU
    #: other processes held (its run-queue wait over that and its CPU), and the mean of
    #: one such wait (ms): how a shared host stalled the loop, which the waits the phases
    #: timed include.
    loop_runqueue_share: float = 0.0
    loop_runqueue_episode_ms: float = 0.0
    #: The loop's lag (a 10 ms timer's lateness) at the profile's percentiles: the delay a
    #: wait ending at a random moment met before the loop ran it, on its core or not.
    loop_lag_quantiles_ms: list[float] = []


def rate(per_s: float) -> str:
    """A rate with the precision its size needs: 0.73 is not "1", 3,347 not "3,347.0"."""
    if per_s >= 100:
        return f"{per_s:,.0f}"
    return f"{per_s:.1f}" if per_s >= 10 else f"{per_s:.2f}"


def ms(value: float | None) -> str:
    """Milliseconds to a tenth, or "-" for a figure there is none of (no run completed)."""
    return "-" if value is None else f"{value:,.1f}"


def _failures(report: BenchReport) -> str:
    if not report.failed:
        return "0"
    reasons = sorted(report.failures.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{report.failed:,} ({', '.join(f'{why} {n:,}' for why, n in reasons)})"


def _throughput(report: BenchReport) -> list[tuple[str, str]]:
    if not report.failed:  # then every figure is the completed runs' own
        return [("steps/s", rate(report.steps_per_s)),
                ("runs/s", rate(report.runs_per_s))]
    return [
        ("steps/s", f"{rate(report.completed_steps_per_s)} in completed runs "
                    f"({rate(report.steps_per_s)} in all)"),
        ("runs/s", f"{rate(report.completed_runs_per_s)} completed, "
                   f"{rate(report.failed_runs_per_s)} failed"),
    ]


def _in_phases(report: BenchReport) -> str:
    """The phases' CPU per step, and its share of the loop thread's: the rest is the
    loop's own work (polling, timers, callbacks no step times). Bounded by the thread's
    CPU clock, it stays below 100 % on a busy host too."""
    figure = f"{report.profiled_cpu_us_per_step:.1f}"
    if report.loop_cpu_us_per_step > 0:
        share = min(1.0, report.profiled_cpu_us_per_step / report.loop_cpu_us_per_step)
        figure += f" ({share:.0%} of the loop thread's)"
    return figure


def _accounts(report: BenchReport) -> list[tuple[str, str]]:
    """Where the process's CPU went, every µs booked once: the phases (never more than the
    loop thread's: see ThreadClock.take), the loop thread's work outside them (garbage
    collection, and the loop's own: polling, timers, waking tasks, the bench's lanes) and the
    other threads (the progress bar, the tool pools). The lines add up to the process."""
    loop, phases = report.loop_cpu_us_per_step, report.profiled_cpu_us_per_step
    if loop <= 0:
        return [("CPU µs per step (in phases)", f"{phases:.1f}")]
    gc_us = min(report.gc_cpu_us_per_step, max(0.0, loop - phases))
    outside = max(0.0, loop - phases - gc_us)
    others = report.cpu_us_per_step - loop
    booked = phases + gc_us + outside + max(0.0, others)
    return [
        ("CPU µs per step (loop thread)", f"{loop:.1f}"),
        ("  in phases", _in_phases(report)),
        ("  garbage collection", f"{gc_us:.1f}"),
        ("  loop, outside phases", f"{outside:.1f}"),
        ("CPU µs per step (other threads)", f"{max(0.0, others):.1f}"),
        ("accounted for", f"{booked:.1f} of the process's {report.cpu_us_per_step:.1f}"),
    ]


def _blocked_us_per_step(report: BenchReport) -> float:
    """Time the phases held the loop without running (a synchronous sleep or read in a
    coroutine), per step."""
    blocked_ms = sum(p.blocked_ms_total for p in report.phases.values())
    return blocked_ms * 1e3 / report.steps if report.steps else 0.0


def summary_rows(report: BenchReport, *, steps: bool = True) -> list[tuple[str, str]]:
    """The figures under the phase table (``steps=False``: without the step count, which
    the HTML report states already)."""
    rows = [
        ("runs completed", f"{report.completed:,} / {report.runs:,} at concurrency "
                           f"{report.concurrency:,}"),
        ("runs failed", _failures(report)),
    ]
    if report.partial:
        rows.insert(0, ("PARTIAL", f"interrupted: {report.runs:,} of "
                                   f"{report.runs_planned:,} runs finished; steps, phases "
                                   "and tool calls count the runs cut short too"))
    if steps:
        rows.append(("steps", f"{report.steps:,}"))
    rows += [
        ("wall", f"{report.wall_s:.2f} s"),
        *_throughput(report),
        ("CPU µs per step (process)", f"{report.cpu_us_per_step:.1f}"),
        *_accounts(report),
        ("blocked µs per step (in phases)", f"{_blocked_us_per_step(report):.1f}"),
        ("CPU utilization", f"{report.cpu_utilization:.0%} of one core"),
        ("run latency p50 / p99 (completed runs)",
         f"{ms(report.completed_run_wall_p50_ms)} / {ms(report.completed_run_wall_p99_ms)} ms"),
        ("event-loop lag p99", f"{report.loop_lag_p99_ms:.2f} ms"),
        ("RSS per run in flight", f"{report.rss_per_run_kb:.1f} KiB"),
        ("tool calls failed", f"{report.tool_failures:,} of {report.tool_calls:,}"),
    ]
    return rows


def render_report(report: BenchReport, console: Console) -> None:
    from rich.table import Table  # with the table printed, not with `podium --help`

    partial = " — PARTIAL (interrupted)" if report.partial else ""
    table = Table(
        title=f"workload profile — {report.scenario} ({report.loop}){partial}",
        title_justify="left",
    )
    table.add_column("phase", no_wrap=True, min_width=10)  # (the figures' headers wrap)
    for col in PHASE_COLUMNS:
        table.add_column(col, justify="right")
    for name in PHASES:
        table.add_row(name, *report.phases[name].cells())
    console.print(table)
    summary = Table(show_header=False, box=None)
    summary.add_column(style="bold")
    summary.add_column(justify="right")
    for k, v in summary_rows(report):
        summary.add_row(k, v)
    console.print(summary)
