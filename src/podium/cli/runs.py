"""``podium runs list|show|tail|profile|cancel``: the runs in any store, from the shell.

::

    podium runs list --store runs.sqlite --status failed --since 2h
    podium runs show run_… --redis redis://127.0.0.1:6379/0
    podium runs tail run_… --store runs.sqlite         # follow a live run to its end
    podium runs profile --store runs.sqlite --agent support --report profile.html
    podium runs cancel run_… --store runs.sqlite       # works with no server up

All but ``cancel`` only look: they open a SQLite file read-only.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

from podium.cli.common import (
    check_output_file,
    check_redis_url,
    non_empty,
    positive_int,
    seconds,
    write_output_file,
)
from podium.cli.textline import line as _t
from podium.engine.children import child_runs
from podium.engine.profile import PHASE_COLUMNS, STEP_PHASES
from podium.engine.records import (
    RUN_STATUSES,
    ApprovalDecided,
    ApprovalRequested,
    Compacted,
    HandedOff,
    JournalEntry,
    ModelTurn,
    OutputRejected,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.errors import ConfigError, PodiumError, StaleRunError
from podium.messages import Message
from podium.observe.display import clip, keep_ends
from podium.observe.inspect import (
    RunFilter,
    StepTiming,
    aggregate,
    find_runs,
    follow,
    open_store,
    parse_time,
    read_progress,
    step_timeline,
    with_progress,
)
from podium.store.base import JournalItem, RunStore
from podium.store.postgres_errors import is_postgres_url
from podium.tools.executor import ToolResult

if TYPE_CHECKING:
    # rich loads with the command that prints, not with `podium --help` or another command
    from rich.console import Console
    from rich.table import Table

__all__ = ("register",)

_STATUSES = RUN_STATUSES
#: What the timeline's figures (step, start, six phases, CPU) take of a terminal's width.
_FIGURE_COLUMNS = 72
#: One colour per step phase on the timeline bars.
_PHASE_STYLE = dict(zip(STEP_PHASES, ("blue", "magenta", "cyan", "yellow", "green", "red"),
                        strict=True))
#: What ``show``/``tail`` print of one text (an input, a reply) and of a tool's result or
#: arguments; ``--json`` prints everything.
_TEXT_LIMIT, _BRIEF_LIMIT = 4000, 300
#: Journal entries and timeline rows ``show`` prints of a long run: the first and last
#: halves, with a line saying how many are left out (10,000 steps would take a minute).
_ENTRIES_LIMIT, _TIMELINE_LIMIT = 400, 200

def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "runs", help="list, show, follow and profile the runs in a store"
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        # An empty value (an unset shell variable) is a mistake, never "no filter" or the
        # default: `--agent ""` listed every run and `--prefix ""` read keys without one.
        # One store: with both, --redis was silently ignored.
        where = q.add_mutually_exclusive_group()
        where.add_argument("--store", type=non_empty, metavar="SPEC",
                           help="sqlite:PATH, a SQLite file path, a postgresql:// URL "
                           "or a redis:// URL")
        where.add_argument("--redis", type=non_empty, metavar="URL",
                           help="a Redis store (instead of --store)")
        q.add_argument("--prefix", type=non_empty, default="podium",
                       help="prefix of the Redis keys")
        q.add_argument("--archive", type=non_empty, metavar="URL",
                       help="with a Redis store: the postgresql:// URL its finished runs are "
                       "archived to (runs gone from Redis are read there)")
        q.add_argument("--json", action="store_true", help="print JSON instead of tables")

    def filters(q: argparse.ArgumentParser, limit: int) -> None:
        q.add_argument("--status", choices=_STATUSES)
        q.add_argument("--agent", type=non_empty)
        q.add_argument("--tenant", type=non_empty)
        q.add_argument("--since", type=non_empty, metavar="WHEN",
                       help="created after: 15m, 2h, 1d, ISO, epoch")
        q.add_argument("--until", type=non_empty, metavar="WHEN",
                       help="created before (same forms)")
        q.add_argument("--limit", type=positive_int, default=limit,
                       help=f"at most N runs ({limit})")

    q = verbs.add_parser("list", help="runs, newest first, filtered")
    common(q)
    filters(q, 50)
    q.set_defaults(handler=_handler(_list))
    q = verbs.add_parser("show", help="a run's record, messages and step timeline")
    q.add_argument("run_id")
    common(q)
    q.set_defaults(handler=_handler(_show))
    q = verbs.add_parser("tail", help="follow a run's steps as they happen, until it ends")
    q.add_argument("run_id")
    common(q)
    q.add_argument("--timeout", type=seconds, default=None, metavar="S",
                   help="give up after S seconds (exit 1)")
    q.set_defaults(handler=_handler(_tail))
    q = verbs.add_parser("profile", help="the workload profile of the runs matching filters")
    common(q)
    filters(q, 1000)
    q.add_argument("--report", metavar="FILE", help="also write an HTML report with plots")
    q.set_defaults(handler=_handler(_profile))
    q = verbs.add_parser(
        "cancel",
        help="cancel a queued, waiting or running run, whether or not a server is up",
        description="A run nobody can be driving (queued, waiting for a human, or running "
        "on a file no other process has open) ends `cancelled` at once; one another "
        "process may drive gets a cancel request, which its driver honours at its next "
        "step (or the next server that takes the run up, before any call).",
    )
    q.add_argument("run_id")
    common(q)
    q.set_defaults(handler=_handler(_cancel, writes=True))


Verb: TypeAlias = "Callable[[RunStore, argparse.Namespace, Console], Coroutine[Any, Any, int]]"


def _handler(verb: Verb, *, writes: bool = False) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        from rich.console import Console

        err = Console(stderr=True, soft_wrap=True)  # one line, however narrow the terminal
        try:
            if getattr(args, "report", None):  # written at the end: refused before the query
                check_output_file(args.report, "--report")
            if hasattr(args, "since"):  # list, profile: a filter that cannot match is refused
                args.filter = _filter(args)
            redis = args.redis or (args.store if "://" in (args.store or "") else None)
            if redis is not None and is_postgres_url(redis):
                redis = None  # a PostgreSQL store: open_store checks its URL
            if redis is not None:  # a typo is one line, not redis-py's traceback
                check_redis_url(redis)
            store = open_store(args.store, redis=args.redis, prefix=args.prefix,
                               read_only=not writes, archive=args.archive)
            return asyncio.run(_with_store(store, verb, args))
        # Named like every other command's line (`podium runs list: error: ...`), so
        # the one line says which command refused.
        except (ConfigError, PodiumError) as exc:
            err.print(_t(f"podium runs {args.verb}: ", ("error:", "red"), " ", str(exc)))
            return 2
        except KeyboardInterrupt:
            err.print(f"podium runs {args.verb}: interrupted")
            return 130

    return handle


async def _with_store(store: RunStore, verb: Verb, args: argparse.Namespace) -> int:
    from rich.console import Console

    async with store:
        return await verb(store, args, Console(highlight=False, soft_wrap=args.json))


# -- cancel ---------------------------------------------------------------------------------


async def _cancel(store: RunStore, args: argparse.Namespace, console: Console) -> int:
    """End the run in the store when nobody can be driving it, else leave a request for its
    driver (as ``POST /v1/runs/{id}/cancel`` does): the way out of a run no server can be
    started for, or one left by a server that died."""
    from podium.engine.driver import Engine

    record = await store.get(args.run_id)
    if record is None:
        raise ConfigError(f"no run {args.run_id!r} in this store")
    if record.done:
        raise ConfigError(f"run {record.run_id} already {record.status}")
    alone = store.sole_user()  # a viewer would not know: this one writes
    if record.status in ("queued", "waiting") or (record.status == "running" and alone):
        try:  # nobody drives it: a worker that claims it later finds it ended
            await Engine(store).end_stored(record, "cancelled", "cancelled", "cancelled")
        except StaleRunError:  # taken up meanwhile: ask its driver, below
            pass
        else:
            _said(console, args, record, "cancelled")
            return 0
    await store.request_cancel(record.run_id)
    pids = store.other_users()
    who = f" (pid {', '.join(map(str, pids))})" if pids else ""
    _said(console, args, record,
          f"cancel requested: another process{who} may be driving it, and ends it at its "
          "next step; the next server that takes it up ends it before any call")
    return 0


def _said(console: Console, args: argparse.Namespace, record: RunRecord, what: str) -> None:
    if args.json:
        _json({"run_id": record.run_id, "status": record.status, "cancel": what})
    else:
        console.print(_t(("run ", "dim"), record.run_id, (": ", "dim"), what))


def _filter(args: argparse.Namespace) -> RunFilter:
    now = time.time()  # one moment for both: "--since 1d --until 1d" is the same time
    since = parse_time(args.since, now=now) if args.since else None
    until = parse_time(args.until, now=now) if args.until else None
    if since is not None and until is not None and since > until:
        # Silently 0 runs, as if there were none: say the window is empty instead.
        raise ConfigError(
            f"--since {args.since!r} is after --until {args.until!r}: no run can match "
            "(--since is the earlier time, e.g. --since 2d --until 1d)"
        )
    return RunFilter(
        status=args.status, agent=args.agent, tenant=args.tenant, since=since, until=until,
        limit=args.limit,
    )


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds") if ts else "-"


def _wall_ms(record: RunRecord) -> float | None:
    if record.started_at is None:
        return None
    end = record.finished_at or record.updated_at or record.started_at
    return (end - record.started_at) * 1e3


def _json(value: Any) -> None:
    sys.stdout.write(msgspec.json.encode(_every_field(value)).decode() + "\n")
    sys.stdout.flush()


def _every_field(value: Any) -> Any:
    """``value`` with each struct in it as a dict of all its fields. The records omit the
    fields at their defaults when encoded (smaller checkpoints), so a queued run had no
    ``"status"``: a script reading ``run["status"]`` must find it, and ``"steps": 0``."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        out: dict[str, Any] = {}
        if config.tag_field is not None:  # a journal entry's kind, as encoded
            out[config.tag_field] = config.tag
        for name, key in zip(value.__struct_fields__, value.__struct_encode_fields__,
                             strict=True):
            out[key] = _every_field(getattr(value, name))
        return out
    if isinstance(value, dict):
        return {key: _every_field(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_every_field(item) for item in value]
    return value


# -- list -----------------------------------------------------------------------------------


async def _list(store: RunStore, args: argparse.Namespace, console: Console) -> int:
    runs = await find_runs(store, args.filter)
    # A running run's steps and tokens so far (one journal read each: the runs listed).
    runs = [await read_progress(store, r) for r in runs]
    if args.json:
        _json([msgspec.structs.replace(r, profile=None) for r in runs])
        return 0
    from rich.console import Console
    from rich.table import Table

    if not console.is_terminal:  # piped to grep or a file: whole rows, never cut to 80
        console = Console(highlight=False, width=1000)
    table = Table(title=f"{len(runs)} run(s)", title_justify="left", box=None)
    # A run id cut short cannot be pasted into `podium runs show`: its column never shrinks.
    ids = max((len(r.run_id) for r in runs), default=3)
    for col in ("run", "agent", "tenant", "status", "reason", "steps", "created", "wall ms",
                "tokens"):
        table.add_column(col, justify="right" if col in ("steps", "wall ms", "tokens") else "left",
                         no_wrap=col in ("run", "created"), min_width=ids if col == "run" else None)
    style = {
        "completed": "green", "failed": "red", "cancelled": "yellow", "running": "cyan",
        "waiting": "magenta",
    }
    for r in runs:
        wall = _wall_ms(r)
        table.add_row(
            _t(r.run_id), _t(r.agent), _t(r.tenant),
            _t((r.status, style.get(r.status, "white"))), _t(r.reason or ""), str(r.steps),
            datetime.fromtimestamp(r.created_at).strftime("%m-%d %H:%M:%S"),
            f"{wall:,.1f}" if wall is not None else "-",
            f"{r.usage.total_tokens:,}",
        )
    console.print(table)
    return 0


# -- show and tail --------------------------------------------------------------------------


async def _get(store: RunStore, run_id: str) -> RunRecord:
    record = await store.get(run_id)
    if record is None:
        raise ConfigError(f"no run {run_id!r} in this store")
    return record


async def _show(store: RunStore, args: argparse.Namespace, console: Console) -> int:
    record = await _get(store, args.run_id)
    journal = await store.journal(args.run_id)
    record = with_progress(record, journal)  # a running run's steps and tokens so far
    timeline = step_timeline(record, journal)
    children = await _tree(store, record)
    if args.json:
        _json({
            "record": record,
            "journal": [{"seq": seq, "entry": entry} for seq, entry in journal],
            "timeline": timeline,
            "children": [{"depth": depth, "record": child} for depth, child in children],
        })
        return 0
    _header(console, record)
    if children:
        console.rule("child runs", align="left", style="dim")
        for depth, child in children:
            wall = _wall_ms(child)
            console.print(_t(
                f"{'  ' * depth}└ ", (child.run_id, "bold"), f" agent={child.agent} "
                f"call={child.parent_call} status=", (child.status, "bold"),
                f" steps {child.steps}" + (f" wall {wall:,.1f} ms" if wall is not None else ""),
            ))
    console.rule("messages", align="left", style="dim")
    console.print(_t(("user", "bold"), ": ", clip(record.input, _TEXT_LIMIT)))
    head, tail, left_out = keep_ends(journal, _ENTRIES_LIMIT)
    for item in head:
        _print_entry(console, item)
    if left_out:
        console.print(_t((f"… {left_out:,} journal entries not shown (--json prints them all)",
                          "dim")))
    for item in tail:
        _print_entry(console, item)
    _print_timeline(console, timeline)
    return 0


async def _tree(store: RunStore, record: RunRecord, depth: int = 1) -> list[tuple[int, RunRecord]]:
    """The run's child runs and theirs, depth first, with their depth (1: a child)."""
    out: list[tuple[int, RunRecord]] = []
    for child in await child_runs(store, record):
        out.append((depth, child))
        out.extend(await _tree(store, child, depth + 1))
    return out


def _header(console: Console, r: RunRecord) -> None:
    wall = _wall_ms(r)
    console.print(_t(
        (r.run_id, "bold"), f" agent={r.agent} tenant={r.tenant} pool={r.pool} status=",
        (r.status, "bold"),
        (f" reason={r.reason}" if r.reason else "")
        + (f" parent={r.parent_run_id} call={r.parent_call}" if r.parent_run_id else "")
        + (f" now={r.active_agent}" if r.active_agent else ""),
    ))
    console.print(
        f"  created {_when(r.created_at)}  started {_when(r.started_at)}  "
        f"finished {_when(r.finished_at)}  steps {r.steps}"
        + (f"  wall {wall:,.1f} ms" if wall is not None else "")
        + f"  tokens {r.usage.input_tokens:,} in / {r.usage.output_tokens:,} out"
    )
    if r.error:
        console.print(_t("  ", ("error", "red"), ": ", clip(r.error, _TEXT_LIMIT)))


def _print_entry(console: Console, item: JournalItem) -> None:
    _, entry = item
    if isinstance(entry, StepRecord):
        _turn(console, entry.step, entry.message)
        for result in entry.results:
            _result(console, result)
    elif isinstance(entry, ModelTurn):
        _turn(console, entry.step, entry.message)
    elif isinstance(entry, OutputRejected):
        _turn(console, entry.step, entry.message)
        console.print(_t("  ", ("output rejected", "yellow"), ": ",
                         clip(entry.error, _TEXT_LIMIT)))
    elif isinstance(entry, ToolOutcome):
        _result(console, entry.result)
    elif isinstance(entry, Compacted):
        console.print(_t("  ", ("context compacted", "magenta"), f" ({entry.method}): "
                         f"messages {entry.start}–{entry.end} → 1 summary"))
    elif isinstance(entry, HandedOff):
        console.print(_t("  ", (f"→ {entry.agent}", "magenta"),
                         f" continues with {len(entry.messages)} messages (input filter)"))
    elif isinstance(entry, ApprovalRequested):
        what = f"asks: {entry.question}" if entry.kind == "interrupt" else "waits for approval"
        console.print(_t("  ", (f"⏸ {entry.tool}", "magenta"), " ", clip(what, _TEXT_LIMIT), " ",
                         (f"(call {entry.call_id}, {_when(entry.ts)})", "dim")))
    elif isinstance(entry, ApprovalDecided):
        edited = f" with {clip(entry.arguments, _BRIEF_LIMIT)}" if entry.arguments else ""
        said = f": {clip(entry.message, _TEXT_LIMIT)}" if entry.message else ""
        console.print(_t("  ", (f"✓ {entry.decision}{edited}{said}", "magenta"), " ",
                         (f"(call {entry.call_id}, by {entry.by or '?'}, {_when(entry.ts)})",
                          "dim")))
    elif isinstance(entry, RunFinished):
        style = "green" if entry.status == "completed" else "red"
        console.print(_t((f"run {entry.status}", style),
                         (f" ({entry.reason})" if entry.reason else "")
                         + (f": {clip(entry.error, _TEXT_LIMIT)}" if entry.error else "")))


def _turn(console: Console, step: int, message: Message) -> None:
    console.print(_t((f"── step {step}", "dim")))
    if message.content:
        console.print(_t(("assistant", "bold"), ": ", clip(message.content, _TEXT_LIMIT)))
    for call in message.tool_calls:
        console.print(_t("  ", (f"→ {clip(call.name, _BRIEF_LIMIT)}", "cyan"),
                         f"({clip(call.arguments, _BRIEF_LIMIT)})"))


def _result(console: Console, result: ToolResult) -> None:
    style = "green" if result.ok else "red"
    status = "" if result.ok else f" {result.error}"
    console.print(_t(
        "  ", (f"← {clip(result.name, _BRIEF_LIMIT)}", style), (status, "red"), " ",
        clip(result.content, _BRIEF_LIMIT).replace("\n", " "), " ",
        (f"({result.wall_ns / 1e6:.1f} ms, {result.attempts} attempt(s))", "dim"),
    ))


def _print_timeline(console: Console, timeline: list[StepTiming]) -> None:
    if not timeline:
        return
    total = max(t.start_ms + t.total_ms for t in timeline) or 1.0
    # The bars get what the figures leave of the terminal (about 72 columns), 40 at most:
    # drawn 40 wide in 80 columns, every bar but the first was cut to "…".
    width = min(40, max(8, console.width - _FIGURE_COLUMNS))
    from rich.table import Table

    table = Table(title="step timeline (ms)", title_justify="left", box=None)
    table.add_column("step", justify="right")
    table.add_column("start", justify="right")
    for name in STEP_PHASES:
        table.add_column(f"[{_PHASE_STYLE[name]}]{name}[/]", justify="right")
    table.add_column("CPU", justify="right")
    table.add_column("bar", no_wrap=True, overflow="crop")
    head, tail, left_out = keep_ends(timeline, _TIMELINE_LIMIT)
    for t in head:
        _timeline_row(table, t, total, width)
    if left_out:
        table.add_row("…", "", *([""] * len(STEP_PHASES)), "",
                      f"[dim]{left_out:,} steps not shown (--json prints them all)[/dim]")
    for t in tail:
        _timeline_row(table, t, total, width)
    console.print(table)


def _timeline_row(table: Table, t: StepTiming, total: float, width: int) -> None:
    bar = " " * int(t.start_ms / total * width)
    for name, wall in zip(STEP_PHASES, t.wall_ms, strict=False):
        cells = round(wall / total * width)
        if cells:
            bar += f"[{_PHASE_STYLE[name]}]{'█' * cells}[/]"
    table.add_row(
        str(t.step), f"{t.start_ms:.1f}", *(f"{w:.2f}" for w in t.wall_ms),
        f"{sum(t.cpu_ms):.2f}", bar or "▏",
    )


async def _tail(store: RunStore, args: argparse.Namespace, console: Console) -> int:
    async def run() -> int:
        record = await _get(store, args.run_id)
        if not args.json:
            _header(console, record)
            console.print(_t(("user", "bold"), ": ", clip(record.input, _TEXT_LIMIT)))
            console.print(_t((f"following {args.run_id}…", "dim")))
        status = "unknown"
        async for item in follow(store, args.run_id):
            if args.json:
                _json({"seq": item[0], "entry": item[1]})
            else:
                _print_entry(console, item)
                _print_step_timing(console, item[1])
            if isinstance(item[1], RunFinished):
                status = item[1].status
        final = await store.get(args.run_id)
        if final is not None:
            status = final.status
        if not args.json:
            console.print(_t((f"{args.run_id} {status}", "dim")))
        return 0

    try:
        return await asyncio.wait_for(run(), args.timeout)
    except TimeoutError:
        from rich.console import Console

        Console(stderr=True).print(_t((f"{args.run_id} still going after {args.timeout}s",
                                       "yellow")))
        return 1


def _print_step_timing(console: Console, entry: JournalEntry) -> None:
    kinds = StepRecord | StepCommitted | OutputRejected
    profile = entry.profile if isinstance(entry, kinds) else None
    if profile is None:
        return
    parts = ", ".join(f"{name} {w / 1e6:.2f}" for name, w in zip(STEP_PHASES, profile.wall_ns,
                                                                  strict=False) if w)
    console.print(f"  [dim]ms: {parts}[/dim]")


# -- profile --------------------------------------------------------------------------------


async def _profile(store: RunStore, args: argparse.Namespace, console: Console) -> int:
    runs = await find_runs(store, args.filter)
    agg = aggregate(runs)
    summary = agg.summary()
    if args.report:
        from podium.observe.html import profile_report

        page = profile_report(runs, title=f"Podium runs — {store_label(args)}")
        write_output_file(args.report, "--report", page)
    if args.json:  # no run: its percentiles and shares are null, not zeros
        _json(summary)
        return 0
    if not summary.runs:  # a table of dashes would not say why
        where = f" in {store_label(args)}" if store_label(args) else ""
        console.print(f"no run matches{where}: nothing to profile" if not runs else
                      f"{len(runs):,} run(s) match{where}, none with a workload profile",
                      markup=False)
        if args.report:
            console.print(f"report written to {args.report}")
        return 0
    from rich.table import Table

    table = Table(title=f"workload profile — {summary.runs:,} runs, {summary.steps:,} steps",
                  title_justify="left")
    table.add_column("phase")
    for col in PHASE_COLUMNS:
        table.add_column(col, justify="right")
    for name, p in summary.phases.items():  # "-": no step had the phase
        table.add_row(name, *p.cells())
    console.print(table)
    console.print(f"CPU µs per step (in phases): {summary.cpu_us_per_step:.1f}")
    if summary.ttft_p50_ms is not None:
        console.print(f"time to first token p50 / p99: {summary.ttft_p50_ms:.1f} / "
                      f"{summary.ttft_p99_ms or 0:.1f} ms")
    if args.report:
        console.print(f"report written to {args.report}")
    return 0


def store_label(args: argparse.Namespace) -> str:
    return args.redis or args.store or ""
