"""``podium run AGENT "input"``: one run, its steps printed live, then the answer."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from podium.cli.resolve import resolve_agent
from podium.engine.driver import Engine
from podium.engine.profile import STEP_PHASES, StepProfile
from podium.engine.records import (
    Compacted,
    JournalEntry,
    ModelTurn,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.errors import ConfigError
from podium.messages import Message
from podium.tools.executor import ToolResult

__all__ = ("register",)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("run", help="run an agent once, printing its steps")
    p.add_argument(
        "agent", help="package.module:agent, or a built-in: react, order-support, research"
    )
    p.add_argument("input", nargs="?", default="", help="the user's input")
    p.add_argument("--store", default="memory", help="memory (default) or a SQLite file path")
    p.add_argument("--resume", metavar="RUN_ID", help="continue this run from its last checkpoint")
    p.add_argument("--quiet", action="store_true", help="print only the final answer")
    p.set_defaults(handler=main)


class _Printer:
    """Prints journal entries as they are written."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, run_id: str, entry: JournalEntry) -> None:
        c = self.console
        if isinstance(entry, StepRecord):
            self._turn(entry.step, entry.message)
            for result in entry.results:
                self._result(result)
            self._timings(entry.profile)
        elif isinstance(entry, ModelTurn):
            self._turn(entry.step, entry.message)
        elif isinstance(entry, ToolOutcome):
            self._result(entry.result)
        elif isinstance(entry, StepCommitted):
            self._timings(entry.profile)
        elif isinstance(entry, Compacted):
            c.print(
                f"  [magenta]context compacted[/magenta] ({entry.method}): "
                f"messages {entry.start}–{entry.end} → 1 summary"
            )
        elif isinstance(entry, RunFinished) and entry.status != "completed":
            c.print(f"[red]run {entry.status}[/red]: {escape(entry.error or entry.reason or '')}")

    def _turn(self, step: int, message: Message) -> None:
        self.console.rule(f"step {step}", align="left", style="dim")
        if message.content and message.tool_calls:
            self.console.print(f"  [italic]{escape(message.content)}[/italic]")
        for call in message.tool_calls:
            self.console.print(f"  [cyan]→ {call.name}[/cyan]({escape(call.arguments[:200])})")

    def _timings(self, profile: StepProfile | None) -> None:
        if profile is None or not profile.wall_ns:
            return
        parts = ", ".join(
            f"{name} {w / 1e6:.2f}"
            for name, w in zip(STEP_PHASES, profile.wall_ns, strict=True)
            if w and name != "checkpoint"
        )
        self.console.print(f"  [dim]ms: {parts}[/dim]")

    def _result(self, result: ToolResult) -> None:
        style = "green" if result.ok else "red"
        text = result.content.replace("\n", " ")
        more = "…" if len(text) > 160 else ""
        self.console.print(
            f"  [{style}]← {result.name}[/{style}] {escape(text[:160])}{more} "
            f"[dim]({result.wall_ns / 1e6:.1f} ms, {result.attempts} attempt(s))[/dim]"
        )


def _print_profile(console: Console, record: RunRecord) -> None:
    """The run's workload profile: per phase, wall and CPU summed over its steps."""
    if record.profile is None or not record.profile.steps:
        return
    table = Table(title="workload profile", title_justify="left", box=None)
    for col in ("phase", "wall ms", "CPU ms", "wait ms"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    for name, (wall, cpu) in record.profile.phase_totals().items():
        if name == "admit" and not wall:
            continue
        table.add_row(
            name, f"{wall / 1e6:.2f}", f"{cpu / 1e6:.2f}", f"{max(0, wall - cpu) / 1e6:.2f}"
        )
    console.print(table)


def main(args: argparse.Namespace) -> int:
    console = Console()
    try:
        agent = resolve_agent(args.agent)
    except ConfigError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    if not args.input and not args.resume:
        console.print("[red]error:[/red] give an input (or --resume RUN_ID)")
        return 2
    record = asyncio.run(_run(agent, args, console))
    if not args.quiet:
        _print_profile(console, record)
    if record.status == "completed":
        console.rule("answer", align="left")
        console.print(record.output or "")
    u = record.usage
    console.print(
        f"[dim]{record.run_id} {record.status} in {record.steps} steps; "
        f"{u.input_tokens} input / {u.output_tokens} output tokens ({u.cached_tokens} cached)[/dim]"
    )
    return 0 if record.status == "completed" else 1


async def _run(agent: Any, args: argparse.Namespace, console: Console) -> RunRecord:
    if args.store == "memory":
        from podium.store.memory import MemoryRunStore

        store: Any = MemoryRunStore()
    else:
        from podium.store.sqlite import SQLiteRunStore

        store = SQLiteRunStore(args.store)
    observers = [] if args.quiet else [_Printer(console)]
    async with store, Engine(store, observers=observers) as engine:
        if args.resume:
            return await engine.resume(agent, args.resume)
        record = await engine.create(agent, args.input)
        if not args.quiet:
            console.print(f"[bold]{agent.name}[/bold] run {record.run_id}")
        return await engine.execute(agent, record)
