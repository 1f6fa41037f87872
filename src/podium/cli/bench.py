"""``podium bench``: N concurrent runs of a scenario on the simulated model, then the profile."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import msgspec

from podium.agent import Agent
from podium.cli.common import (
    EXIT_INTERRUPTED,
    UserError,
    check_output_file,
    check_sqlite_path,
    local_store,
    non_empty,
    positive_int,
    seconds,
)
from podium.cli.scenario import build_agent, load_scenario
from podium.engine.driver import Engine
from podium.engine.profile import QUANTILE_POINTS, ProfileAggregator, percentile
from podium.engine.records import RunRecord
from podium.gctune import tune_for_serving
from podium.observe.gctime import GcTimer
from podium.observe.html import SweepPoint
from podium.observe.loopcost import ThreadCounters, thread_counters, wake_cpu_s
from podium.observe.looplag import LoopLagMonitor
from podium.observe.report import BenchReport, render_report
from podium.observe.rss import rss_kb
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore

if TYPE_CHECKING:
    # rich loads with the command that prints, not with `podium --help` or another command
    from rich.console import Console

__all__ = ("register", "run_bench")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "bench", help="run a load test on the simulated model and print the workload profile"
    )
    # type=non_empty: an empty value (an unset shell variable) is a mistake, not the default.
    p.add_argument("--scenario", type=non_empty,
                   help="scenario file (.toml or .yaml); default: built-in ReAct")
    p.add_argument("--runs", type=positive_int, help="number of runs (overrides the scenario)")
    p.add_argument("--concurrency", type=positive_int, help="runs in flight at once (overrides)")
    p.add_argument("--store", type=local_store, default="memory",
                   help="memory, or a SQLite file as PATH or sqlite:PATH")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="event loop")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--report", type=non_empty, metavar="FILE",
                   help="also write an HTML report with plots")
    p.add_argument("--sweep", type=non_empty, metavar="C1,C2,…",
                   help="run once per concurrency and find the sweet spot (throughput vs p99)")
    over = p.add_argument_group(
        "engine overhead (--overhead)",
        "CPU per step against a hand-written asyncio loop on an instant model and tool, "
        "both in this process in alternating rounds",
    )
    over.add_argument("--overhead", action="store_true",
                      help="measure the engine's overhead instead of running a load test")
    # No defaults here (None): given without --overhead, they are refused, not ignored.
    over.add_argument("--sessions", type=non_empty, metavar="N1,N2,…",
                      help="concurrent sessions per level (default 1,100,1000,10000)")
    over.add_argument("--rounds", type=positive_int,
                      help="alternating rounds per level (default 7)")
    over.add_argument("--latency", type=seconds, metavar="SECONDS",
                      help="also the 20 ms model / 5 ms tool throughput at 1,000 sessions "
                      "(default 0: not measured)")
    over.add_argument("--no-profile", action="store_true",
                      help="Engine(profile=False): the floor without the workload profile")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=args.json)
    _check_mode(args)
    if args.overhead:
        return _overhead(args, console)
    from podium.cli import bench_report

    # Before the scenario and the store: a ConfigError is one line, from main().
    levels = bench_report.parse_sweep(args.sweep) if args.sweep else None
    scenario = load_scenario(args.scenario)
    if args.store != "memory":
        check_sqlite_path(args.store)
    if args.report:
        check_output_file(args.report, "--report")
    runs = args.runs or scenario.load.runs
    concurrency = min(args.concurrency or scenario.load.concurrency, runs)
    agent = build_agent(scenario)

    def bench(n: int, c: int, keep: list[RunRecord] | None) -> Coroutine[Any, Any, BenchReport]:
        return run_bench(
            agent,
            runs=n,
            concurrency=min(c, n),
            store_spec=args.store,
            label=args.scenario or "built-in react",
            loop_name=args.loop,
            progress=not args.json,
            console=console,
            records=keep,
            partial_on_interrupt=True,  # Ctrl-C: the report of the runs so far, then exit 130
        )

    records: list[RunRecord] | None = [] if args.report else None
    points: list[SweepPoint] = []
    run = bench_report.run_on(args.loop)
    if levels:
        points, report = bench_report.sweep(levels, runs, bench, run, records)
    else:
        report = run(bench(runs, concurrency, records))
    # The results first: a report file that cannot be written (a full disk, its directory
    # removed meanwhile) is said after them, not instead of them.
    _print_results(args, console, report, points, swept=bool(levels))
    if args.report and records is not None:
        bench_report.write_report(args.report, report, records, points)
        console.print(f"report written to {args.report}")
    if report.partial:  # the line any interrupted command says; the report says how far
        print("podium bench: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return 0 if report.completed == report.runs else 1


def _print_results(args: argparse.Namespace, console: Console, report: BenchReport,
                   points: list[SweepPoint], *, swept: bool) -> None:
    from podium.cli import bench_report

    if args.json and swept:  # the last level's report, plus every level and the sweet spot
        print(msgspec.json.encode(bench_report.sweep_json(report, points)).decode(), flush=True)
    elif args.json:
        print(msgspec.json.encode(report).decode(), flush=True)
    else:
        render_report(report, console)
    if points:
        bench_report.render_sweep(points, console)


#: Options of one mode only: given to the other, each was silently ignored.
_OVERHEAD_ONLY = ("sessions", "rounds", "latency", "no_profile")
_LOAD_TEST_ONLY = ("scenario", "runs", "concurrency", "report", "sweep")


def _check_mode(args: argparse.Namespace) -> None:
    def given(names: tuple[str, ...]) -> str:
        return ", ".join(f"--{n.replace('_', '-')}" for n in names
                         if getattr(args, n) not in (None, False))

    if not args.overhead and (wrong := given(_OVERHEAD_ONLY)):
        raise UserError(f"{wrong}: only with --overhead (the engine overhead measurement), "
                        "not a load test")
    if args.overhead and (wrong := given(_LOAD_TEST_ONLY)):
        raise UserError(f"{wrong}: only for a load test, not with --overhead")


def _overhead(args: argparse.Namespace, console: Console) -> int:
    from podium.cli import overhead

    text = args.sessions or "1,100,1000,10000"
    try:
        sessions = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        sessions = []
    if not sessions or min(sessions) < 1:
        raise UserError(f"--sessions {text!r}: give positive integers separated by commas, "
                        "e.g. 1,100,1000")

    def show(level: overhead.SessionsResult) -> None:
        if not args.json:
            console.print(overhead.describe(level), highlight=False)

    coro = overhead.measure(
        sessions, args.rounds or 7, profile=not args.no_profile, latency_s=args.latency or 0.0,
        report=show,
    )
    if args.loop == "uvloop":
        import uvloop

        result = uvloop.run(coro)
    else:
        result = asyncio.run(coro)
    if args.json:
        print(msgspec.json.encode(result).decode())
    else:
        for line in (overhead.describe_profile(result), overhead.describe_latency(result)):
            if line:
                console.print(line, highlight=False)
        worst = max(level.ratio for level in result.levels)
        console.print(
            f"worst ratio {worst:.2f}× (goal ≤ {result.target_ratio:.0f}×); "
            f"profile {'on' if result.profile else 'off'}", highlight=False
        )
    return 0


def _store(spec: str) -> RunStore:
    if spec == "memory":
        return MemoryRunStore()
    from podium.store.sqlite import SQLiteRunStore

    return SQLiteRunStore(spec)


class _SessionMemory:
    """RSS per session in flight, measured over the first wave of runs.

    The process's RSS grows with what the bench keeps of every finished run (the profile's
    samples, the latencies, the records ``--report`` plots) and with what allocators keep:
    its peak over the whole test, divided by the sessions in flight, grew with the number
    of runs (44 KiB at 500 runs, 173 at 12,000). Between the start and the end of the first
    wave all ``concurrency`` sessions are in flight and the bench has kept next to nothing:
    the RSS growth then, per session, is what sizing needs, whatever the number of runs."""

    _SAMPLES = 64  # RSS reads over the first wave, at most: a read is a file read

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.every = max(1, concurrency // self._SAMPLES)
        self.ended = 0
        self.baseline = self.peak = 0

    def start(self) -> None:
        """The baseline: call with everything up but the runs (store, engine, progress bar)."""
        self.baseline = self.peak = rss_kb()

    def run_ended(self) -> None:
        """A run ended (called before the bench keeps anything of it)."""
        ended = self.ended
        if ended >= self.concurrency:
            return
        self.ended = ended + 1
        if ended % self.every == 0 or ended == self.concurrency - 1:
            self.peak = max(self.peak, rss_kb())

    def per_session_kb(self) -> float:
        return round(max(0, self.peak - self.baseline) / self.concurrency, 2)


class _Outcomes:
    """How the runs ended: counts, reasons, steps and latencies (nanoseconds)."""

    def __init__(self) -> None:
        self.latencies: list[int] = []
        self.completed_latencies: list[int] = []
        self.completed_steps = 0
        self.failures: dict[str, int] = {}

    def add(self, record: RunRecord, latency_ns: int) -> None:
        self.latencies.append(latency_ns)
        if record.status == "completed":
            self.completed_latencies.append(latency_ns)
            self.completed_steps += record.steps
        else:  # failed or cancelled: by the stable code that says why
            why = record.reason or record.status
            self.failures[why] = self.failures.get(why, 0) + 1

    @property
    def completed(self) -> int:
        return len(self.completed_latencies)


async def _until_interrupted(lanes: list[Coroutine[Any, Any, None]], stop_early: bool) -> bool:
    """Run the lanes to their end; True if Ctrl-C cut them short (``stop_early``).

    ``asyncio.run`` answers Ctrl-C by cancelling the main task: the lanes are cancelled with
    it (their runs stay ``running``, as at a shutdown) and the bench reports what finished.
    A cancellation that is not of this task (a lane's own) is no interruption."""
    try:
        await asyncio.gather(*lanes)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not stop_early or task is None or task.cancelling() == 0:
            raise
        task.uncancel()  # handled: the store and the engine close as usual
        return True
    return False


def _per_s(count: float, wall: float) -> float:
    return round(count / wall, 3) if wall else 0.0


def _ms(sorted_ns: list[int], q: float) -> float:
    return round(percentile(sorted_ns, q) / 1e6, 3)


async def _loop_costs(counters: ThreadCounters, lag: LoopLagMonitor, steps: int,
                      loop_cpu: float, gc_ns: int) -> dict[str, Any]:
    """The loop thread's figures of a bench (its CPU, the collector's, its wake-ups and
    what one costs, the host's stalls, its lag): what ``podium plan`` takes out of a
    profile. Measures a wake-up's CPU (a fraction of a second) where the loop slept."""
    wake_cpu = await wake_cpu_s(100) if counters.wakeups else 0.0
    per_step = 1 / steps if steps else 0.0
    ready = counters.runqueue_s + loop_cpu
    return {
        "loop_cpu_us_per_step": round(loop_cpu * per_step * 1e6, 2),
        "gc_cpu_us_per_step": round(gc_ns * per_step / 1e3, 2),
        "loop_wakeups_per_step": round(counters.wakeups * per_step, 4),
        "loop_wake_cpu_us": round(wake_cpu * 1e6, 2),
        "loop_runqueue_share": round(counters.runqueue_s / ready, 4) if ready > 0 else 0.0,
        "loop_runqueue_episode_ms": round(counters.runqueue_s / counters.episodes * 1e3, 4)
        if counters.episodes else 0.0,
        "loop_lag_quantiles_ms": [round(v, 4) for v in lag.quantiles_ms(QUANTILE_POINTS)],
    }


async def run_bench(
    agent: Agent,
    *,
    runs: int,
    concurrency: int,
    store_spec: str = "memory",
    label: str = "bench",
    loop_name: str = "asyncio",
    progress: bool = False,
    console: Console | None = None,
    records: list[RunRecord] | None = None,
    partial_on_interrupt: bool = False,
) -> BenchReport:
    """Drive ``runs`` runs, ``concurrency`` at a time, and measure them (keeping each
    finished record in ``records`` when given: what the HTML report plots).

    ``partial_on_interrupt``: a cancellation of the calling task while the runs are driven
    (Ctrl-C under ``asyncio.run``) ends the test early with the report of the runs that
    finished, marked ``partial``, instead of raising."""
    store = _store(store_spec)
    aggregator = ProfileAggregator()
    lag = LoopLagMonitor(0.01, window=1_000_000)  # the whole run, not a sliding window
    outcomes = _Outcomes()
    next_run = 0
    thresholds = gc.get_threshold()
    tune_for_serving()  # as `podium worker` and `podium serve` do (see podium.gctune)

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        refresh_per_second=4,
        disable=not progress,
    )
    task_id = bar.add_task("runs", total=runs)

    async with store, Engine(store, aggregator=aggregator) as engine:
        memory = _SessionMemory(concurrency)

        async def lane() -> None:
            nonlocal next_run
            while next_run < runs:
                next_run += 1
                t0 = time.perf_counter_ns()
                record = await engine.run(agent, "Find out what Podium is.")
                latency = time.perf_counter_ns() - t0
                memory.run_ended()  # before the bench keeps anything of this run
                outcomes.add(record, latency)
                if records is not None:
                    records.append(msgspec.structs.replace(record, input=""))
                if isinstance(store, MemoryRunStore):
                    store.forget(record.run_id)  # keep memory flat: measure in-flight runs only
                bar.advance(task_id)

        if progress and console is not None:
            console.print(f"bench: running {runs} runs, {concurrency} at a time ({label})")
        lag.start()
        with bar:
            memory.start()
            wall0 = time.perf_counter()
            cpu0, loop_cpu0 = time.process_time(), time.thread_time()
            collector = GcTimer()  # (the loop thread's collections: CPU outside the phases)
            collector.start()
            counters0 = thread_counters()
            try:
                partial = await _until_interrupted(
                    [lane() for _ in range(concurrency)], partial_on_interrupt
                )
            finally:
                collector.stop()
            cpu = time.process_time() - cpu0
            loop_cpu = time.thread_time() - loop_cpu0  # (this is the loop's thread)
            wall = time.perf_counter() - wall0
            counters = thread_counters() - counters0
        await lag.stop()
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    summary = aggregator.summary()
    latencies = sorted(outcomes.latencies)
    done = sorted(outcomes.completed_latencies)
    steps = summary.steps
    loop_costs = await _loop_costs(counters, lag, steps, loop_cpu, collector.cpu_ns)
    finished = len(latencies)
    return BenchReport(
        scenario=label,
        loop=loop_name,
        runs=finished,
        completed=outcomes.completed,
        concurrency=concurrency,
        steps=steps,
        wall_s=round(wall, 3),
        steps_per_s=_per_s(steps, wall),
        runs_per_s=_per_s(finished, wall),
        cpu_us_per_step=round(cpu / steps * 1e6, 2) if steps else 0.0,
        profiled_cpu_us_per_step=round(summary.cpu_us_per_step, 2),
        cpu_utilization=round(cpu / wall, 3) if wall else 0.0,
        loop_lag_p99_ms=round(lag.p99_ms(), 3),
        rss_per_run_kb=memory.per_session_kb(),
        run_wall_p50_ms=_ms(latencies, 50),
        run_wall_p99_ms=_ms(latencies, 99),
        phases=summary.phases,
        tool_calls=engine.executor.calls,
        tool_failures=engine.executor.failures,
        failed=finished - outcomes.completed,
        failures=dict(sorted(outcomes.failures.items())),
        completed_runs_per_s=_per_s(outcomes.completed, wall),
        failed_runs_per_s=_per_s(finished - outcomes.completed, wall),
        completed_steps=outcomes.completed_steps,
        completed_steps_per_s=_per_s(outcomes.completed_steps, wall),
        completed_run_wall_p50_ms=_ms(done, 50) if done else None,
        completed_run_wall_p99_ms=_ms(done, 99) if done else None,
        partial=partial,
        runs_planned=runs,
        **loop_costs,
    )
