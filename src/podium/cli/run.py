"""``podium run AGENT "input"``: one run, its steps printed live, then the answer."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

import msgspec

from podium.agent import Agent
from podium.cli.common import (
    EXIT_INTERRUPTED,
    RawHelpFormatter,
    UserError,
    check_sqlite_path,
    non_empty,
    run_store,
)
from podium.cli.prompt import read_line
from podium.cli.textline import line
from podium.config import load_config
from podium.engine.approvals import PendingApproval
from podium.engine.driver import Engine
from podium.engine.profile import STEP_PHASES, StepProfile
from podium.engine.records import (
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
from podium.errors import DecisionError
from podium.factory import (
    BUILTIN_AGENTS,
    model_from_option,
    resolve_agent,
    served_agents,
    with_model,
)
from podium.messages import Message, Usage
from podium.observe.display import terminal_safe
from podium.store.base import RunStore
from podium.store.postgres_errors import is_postgres_url, redact
from podium.store.postgres_preflight import check_postgres_store
from podium.tools.executor import ToolResult

if TYPE_CHECKING:
    # rich loads with the command that prints, not with `podium --help` or another command
    from rich.console import Console

__all__ = ("EXIT_WAITING", "register")

#: ``podium run``'s exit status for a run left waiting for a human decision.
EXIT_WAITING = 3


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run an agent once, printing its steps",
        description="Run an agent once: its steps live, its workload profile, the answer.",
        epilog="examples:\n"
        '  podium run react "What is Podium?"\n'
        '  podium run mypkg.agents:support "Where is A-1?" --store runs.sqlite\n'
        "  podium run mypkg.agents:support --resume RUN_ID --store runs.sqlite\n"
        '  podium run refunds "Refund 250 on A-1001" --store runs.sqlite --approve\n'
        '  podium run react "Hi" --model qwen --json',
        formatter_class=RawHelpFormatter,
    )
    p.add_argument(
        "agent",
        # From the one registry: a list written out here had already lost research-team.
        help=f"package.module:agent, or a built-in: {', '.join(BUILTIN_AGENTS)}",
    )
    p.add_argument("input", nargs="?", default="", help="the user's input; - reads it from stdin")
    p.add_argument("--store", type=run_store, default="memory",
                   help="memory, or a SQLite file as PATH or sqlite:PATH (resumable)")
    p.add_argument("--resume", type=non_empty, metavar="RUN_ID",
                   help="continue this run from its last checkpoint")
    p.add_argument(
        "--model",
        type=non_empty,
        metavar="NAME",
        help="run on this model: a [[models]] name from --config, else a model id at "
        "$OPENAI_BASE_URL (with $OPENAI_API_KEY)",
    )
    p.add_argument("--config", "-c", type=non_empty,
                   help="podium.toml (default: ./podium.toml if present)")
    human = p.add_mutually_exclusive_group()
    human.add_argument(
        "--approve", action="store_true",
        help="approve every tool call the run waits on (else: asked on a terminal)",
    )
    human.add_argument(
        "--reject", metavar="MESSAGE", help="reject them; the model reads MESSAGE as the result"
    )
    human.add_argument("--answer", metavar="TEXT", help="answer the tools' questions with TEXT")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--quiet", "-q", action="store_true", help="print only the final answer")
    out.add_argument(
        "--json", action="store_true", help="print the finished run as one JSON object"
    )
    p.set_defaults(handler=main)


class RunOutput(msgspec.Struct):
    """``podium run --json``: the finished run (a structured answer's ``output`` is JSON)."""

    run_id: str
    agent: str
    status: str
    output: Any
    error: str | None
    reason: str | None
    steps: int
    usage: Usage
    wall_ms: float
    cpu_ms: float
    phases: dict[str, dict[str, float]]


class _Printer:
    """Prints journal entries as they are written."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.root: str | None = None  # the run asked for; the others are its child runs
        self.label = ""

    def __call__(self, run_id: str, entry: JournalEntry) -> None:
        # Rendered once the run next waits (its model call, usually), not here: an
        # observer's time counts in the step's checkpoint phase, and a terminal's rendering
        # (1–5 ms a step) made every step's stored checkpoint several times its real cost.
        asyncio.get_running_loop().call_soon(self._show, run_id, entry)

    @staticmethod
    async def flush() -> None:
        """Render what is pending (before printing anything else)."""
        await asyncio.sleep(0)  # the renders were queued before this task's wake-up

    def _show(self, run_id: str, entry: JournalEntry) -> None:
        c = self.console
        if self.root is None:
            self.root = run_id
        # A child run's steps say whose they are: "child 0.1" is call 1 of the run's step 0.
        self.label = "" if run_id == self.root else f"child {run_id[len(self.root) + 1:]} "
        if isinstance(entry, StepRecord):
            self._turn(entry.step, entry.message)
            for result in entry.results:
                self._result(result)
            self._timings(entry.profile)
        elif isinstance(entry, ModelTurn):
            self._turn(entry.step, entry.message)
        elif isinstance(entry, OutputRejected):
            self._turn(entry.step, entry.message)
            c.print(line("  ", ("output rejected", "yellow"), ": ", entry.error))
            self._timings(entry.profile)
        elif isinstance(entry, ToolOutcome):
            self._result(entry.result)
        elif isinstance(entry, StepCommitted):
            self._timings(entry.profile)
        elif isinstance(entry, Compacted):
            c.print(line("  ", ("context compacted", "magenta"), f" ({entry.method}): "
                         f"messages {entry.start}–{entry.end} → 1 summary"))
        elif isinstance(entry, HandedOff):
            c.print(line("  ", (f"→ {entry.agent}", "magenta"),
                         f" continues with {len(entry.messages)} messages (input filter)"))
        elif isinstance(entry, ApprovalRequested):
            what = (
                f"asks: {entry.question or ''}"
                if entry.kind == "interrupt"
                else f"waits for approval ({entry.arguments[:200]})"
            )
            c.print(line("  ", (f"⏸ {entry.tool}", "magenta"), f" {what} ",
                         (f"(call {entry.call_id})", "dim")))
        elif isinstance(entry, ApprovalDecided):
            c.print(line("  ", (f"✓ {entry.decision}", "magenta"), " ",
                         (f"(call {entry.call_id})", "dim")))
        elif isinstance(entry, RunFinished) and entry.status != "completed":
            c.print(line((f"run {entry.status}", "red"), ": ", entry.error or entry.reason or ""))

    def _turn(self, step: int, message: Message) -> None:
        self.console.rule(f"{self.label}step {step}", align="left", style="dim")
        if message.content and message.tool_calls:
            self.console.print(line("  ", (message.content, "italic")))
        for call in message.tool_calls:
            self.console.print(line("  ", (f"→ {call.name}", "cyan"), f"({call.arguments[:200]})"))

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
        self.console.print(line(
            "  ", (f"← {result.name}", style), f" {text[:160]}{more} ",
            (f"({result.wall_ns / 1e6:.1f} ms, {result.attempts} attempt(s))", "dim"),
        ))


def _print_profile(console: Console, record: RunRecord) -> None:
    """The run's workload profile: per phase, wall and CPU summed over its steps."""
    if record.profile is None or not record.profile.steps:
        return
    from rich.table import Table

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


def _open_agent(args: argparse.Namespace) -> Agent:
    """The agent ``podium serve`` would serve by that name: the config's ``[[agents]]``
    entry first (a built-in's name too, so both commands run the same agent), else a
    built-in example, else an import path. The config (``--config``, else
    ``./podium.toml``) is read whenever there is one: a file in use is never skipped."""
    path = args.config or ("podium.toml" if os.path.exists("podium.toml") else None)
    config = load_config(path) if path is not None else None
    if ":" in args.agent or config is None or not config.agents:
        agent = resolve_agent(args.agent)  # raises the error that names the accepted forms
    else:
        served = {s.name: s for s in served_agents(config)}
        if args.agent in served:
            agent = served[args.agent].agent
        elif args.agent in BUILTIN_AGENTS:
            agent = resolve_agent(args.agent)
        else:
            names = ", ".join(sorted({*served, *BUILTIN_AGENTS}))
            raise UserError(
                f"agent {args.agent!r}: not in {path}; use MODULE:ATTR or one of: {names}"
            )
    if args.model:
        agent = with_model(agent, model_from_option(args.model, config))
    return agent


def main(args: argparse.Namespace) -> int:
    if args.input == "-":
        args.input = _read_stdin()
    if args.resume and args.input:
        raise UserError("give an input or --resume RUN_ID, not both")
    if not args.input and not args.resume:
        raise UserError("give an input (or --resume RUN_ID)")
    if args.resume and args.store == "memory":
        raise UserError("--resume needs the --store FILE the run was checkpointed to")
    if is_postgres_url(args.store):
        check_postgres_store(args.store, create=not args.resume)
    elif args.store != "memory":
        check_sqlite_path(args.store)
        if args.resume and not os.path.exists(args.store):
            raise UserError(f"--resume: store {args.store!r} does not exist")
    agent = _open_agent(args)
    from rich.console import Console

    piped = not sys.stdout.isatty()  # a pipe or a file: no hard wrapping at 80 columns
    console = (
        Console(highlight=False, soft_wrap=piped)
        if not (args.quiet or args.json)
        else Console(stderr=True)
    )
    started: list[str] = []
    try:
        record = asyncio.run(_run(agent, args, console, started))
    except KeyboardInterrupt:
        print(_interrupted(args, started), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    if record.status == "waiting":
        print(_how_to_decide(args, record), file=sys.stderr, flush=True)
        if args.json:
            sys.stdout.write(msgspec.json.encode(_output(record)).decode() + "\n")
        return EXIT_WAITING
    if args.json:
        sys.stdout.write(msgspec.json.encode(_output(record)).decode() + "\n")
    elif args.quiet:
        if record.status == "completed":
            sys.stdout.write((record.output or "") + "\n")
        else:
            print(f"podium run: run {record.status}: {_why(record)}", file=sys.stderr)
    else:
        _print_profile(console, record)
        if record.status == "completed":
            console.rule("answer", align="left")
            # print(), not rich: the answer is the user's text, unwrapped and unstyled; on a
            # terminal its control characters are shown, not obeyed (piped, it is as written).
            sys.stdout.flush()
            answer = record.output or ""
            print(terminal_safe(answer) if sys.stdout.isatty() else answer, flush=True)
        u = record.usage
        console.print(
            f"[dim]{record.run_id} {record.status} in {record.steps} steps; "
            f"{u.input_tokens} input / {u.output_tokens} output tokens "
            f"({u.cached_tokens} cached)[/dim]"
        )
    return 0 if record.status == "completed" else 1


def _read_stdin() -> str:
    """``podium run AGENT -``: the input is all of stdin (its last line end dropped)."""
    try:
        text = sys.stdin.buffer.read().decode()
    except UnicodeDecodeError as exc:
        raise UserError(
            f"input from stdin is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text.strip():
        raise UserError("input from stdin ('-') is empty")
    return text


def _how_to_decide(args: argparse.Namespace, record: RunRecord) -> str:
    head = f"podium run: run {record.run_id} is waiting for a human decision"
    if args.store == "memory":
        return (
            f"{head}; it was kept in memory and is gone. Decide up front with --approve, "
            "--reject MESSAGE or --answer TEXT, or keep it with --store FILE"
        )
    again = f"podium run {args.agent} --resume {record.run_id} --store {redact(args.store)}"
    return (
        f"{head}; decide with: {again} --approve (or --reject MESSAGE, --answer TEXT), "
        "or through the gateway's /v1/approvals"
    )


def _why(record: RunRecord) -> str:
    return record.error or record.reason or "no reason recorded"


def _interrupted(args: argparse.Namespace, started: list[str]) -> str:
    if not started:
        return "podium run: interrupted before the run started"
    run_id = started[0]
    if args.store == "memory":
        return (
            f"podium run: interrupted; run {run_id} was kept in memory and is gone "
            "(use --store FILE to make runs resumable)"
        )
    return (
        f"podium run: interrupted; resume with: podium run {args.agent} --resume {run_id} "
        f"--store {redact(args.store)}"
    )


def _output(record: RunRecord) -> RunOutput:
    phases: dict[str, dict[str, float]] = {}
    wall = cpu = 0
    if record.profile is not None:
        wall, cpu = record.profile.wall_ns, record.profile.cpu_ns
        phases = {
            name: {"wall_ms": w / 1e6, "cpu_ms": c / 1e6}
            for name, (w, c) in record.profile.phase_totals().items()
        }
    output: Any = record.output
    if record.structured and output is not None:
        output = msgspec.Raw(output.encode())  # the answer as JSON, not a string holding it
    return RunOutput(
        record.run_id, record.agent, record.status, output, record.error,
        record.reason, record.steps, record.usage, wall / 1e6, cpu / 1e6, phases,
    )


async def _run(
    agent: Agent, args: argparse.Namespace, console: Console, started: list[str]
) -> RunRecord:
    if args.store == "memory":
        from podium.store.memory import MemoryRunStore

        store: Any = MemoryRunStore()
    elif is_postgres_url(args.store):
        from podium.store.postgres import PostgresRunStore

        store = PostgresRunStore(args.store)
    else:
        from podium.store.sqlite import SQLiteRunStore

        store = SQLiteRunStore(args.store)
    verbose = not (args.quiet or args.json)
    printer = _Printer(console)
    observers = [printer] if verbose else []
    async with store, Engine(store, observers=observers) as engine:
        if args.resume:
            started.append(args.resume)
            found = await engine.store.get(args.resume)
            if found is None:
                raise UserError(f"--resume: no run {args.resume!r} in {redact(args.store)}")
            if found.agent != agent.name:  # (the engine refuses it too, in its words)
                raise UserError(
                    f"--resume: run {args.resume} belongs to agent {found.agent!r}, not "
                    f"{agent.name!r}: podium run {found.agent} --resume {args.resume} "
                    f"--store {redact(args.store)}"
                )
            _refuse_a_driven_run(engine.store, found, args.store)
            record = await engine.resume(agent, args.resume)
        else:
            record = await engine.create(agent, args.input)
            started.append(record.run_id)
            if verbose:
                console.print(line((agent.name, "bold"), f" run {record.run_id}"))
            record = await engine.execute(agent, record)
        await printer.flush()
        interactive = verbose and sys.stdin.isatty()
        while record.status == "waiting":  # parked on a human: decide here, if we may
            if not await _decide(engine, agent, record, args, console, interactive):
                return record
            record = await engine.resume(agent, record.run_id)
            await printer.flush()
        return record


def _refuse_a_driven_run(store: RunStore, found: RunRecord, path: str) -> None:
    """A run ``queued`` or ``running`` on a file another process has open may be driven
    there (a ``podium serve`` takes up such runs): driven here too, its calls would run
    twice (the store refuses the second writer's checkpoint, not its side effects)."""
    if found.status not in ("queued", "running") or store.sole_user() is not False:
        return
    pids = store.other_users()
    who = f" (pid {', '.join(map(str, pids))})" if pids else ""
    raise UserError(
        f"--resume: run {found.run_id} is {found.status} and another process{who} has "
        f"{path} open: it may be driving the run. Cancel it there, or stop that process "
        "and resume here"
    )


async def _decide(
    engine: Engine,
    agent: Agent,
    record: RunRecord,
    args: argparse.Namespace,
    console: Console,
    interactive: bool,
) -> bool:
    """Decide on every call the run waits on, from the options or a terminal prompt;
    False when neither is there (the run stays waiting, for later)."""
    if not (args.approve or args.reject is not None or args.answer is not None or interactive):
        return False
    for pending in await engine.pending_approvals(record.run_id):
        if args.approve or args.reject is not None or args.answer is not None:
            if pending.kind == "interrupt":
                if args.answer is None and args.reject is None:
                    return False  # a question --approve cannot answer
                answer, reject = args.answer, args.reject
            else:
                answer, reject = None, args.reject
                if args.answer is not None:
                    return False
            if answer is not None:
                await engine.decide(record.run_id, pending.call_id, answer=answer, by="cli")
            else:
                await engine.decide(
                    record.run_id, pending.call_id, approve=reject is None, message=reject,
                    by="cli",
                )
            continue
        if not await _prompt(engine, agent, record, pending, console):
            return False
    return True


async def _prompt(
    engine: Engine, agent: Agent, record: RunRecord, pending: PendingApproval, console: Console
) -> bool:
    """Ask on the terminal until the decision is taken; False on end of input (Ctrl-D):
    the run stays waiting, undecided."""
    while True:
        try:
            if pending.kind == "interrupt":
                text = await read_line(f"{pending.tool} asks: {pending.question}\nanswer> ")
                await engine.decide(record.run_id, pending.call_id, answer=text, by="cli")
                return True
            choice = (
                await read_line(
                    f"{pending.tool}({pending.arguments}) needs approval: "
                    "[a]pprove, [r]eject, [e]dit arguments? "
                )
            ).strip().lower()
            if choice in ("a", "approve", "y", "yes"):
                await engine.decide(record.run_id, pending.call_id, approve=True, by="cli")
            elif choice in ("r", "reject", "n", "no"):
                why = await read_line("message for the model> ")
                await engine.decide(
                    record.run_id, pending.call_id, approve=False, message=why or None, by="cli"
                )
            elif choice in ("e", "edit"):
                edited = await read_line("arguments (JSON)> ")
                await engine.decide(
                    record.run_id, pending.call_id, approve=True, arguments=edited, agent=agent,
                    by="cli",
                )
            else:
                continue
            return True
        except EOFError:
            return False
        except DecisionError as exc:
            console.print(line((str(exc), "red")))
