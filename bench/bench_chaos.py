"""Chaos: the distributed mode under SIGKILLed workers and a SIGKILLed, restarted Redis.

Starts a private ``redis-server`` (append-only file, fsync on every write), a
``podium serve --redis`` gateway and ``podium worker --procs N``, then submits
runs of ``bench/chaos_agent.py`` over HTTP — every step makes ``--parallel``
side-effecting tool calls whose effects are counted in a file — while it

* SIGKILLs one worker process every ``--kill-every`` seconds (the supervisor
  starts a new one), and
* takes Redis away every ``--redis-every`` seconds for ``--redis-down`` seconds,
  as ``--outage-kind`` says: ``kill`` (SIGKILL, then started again on its AOF),
  ``stop`` (SIGSTOP then SIGCONT: a hung server) or ``partition`` (every Podium
  process reaches Redis through a TCP proxy that black-holes: it accepts, forwards
  nothing and answers nothing, then lets everything through again).

The client behaves as a careful client should: each submission carries an
``Idempotency-Key`` and is retried with it on a 503, a 5xx or a broken
connection. When the chaos ends it waits for every run to settle and checks:

* every acknowledged run is terminal and completed (0 lost);
* no run exists that its client was not given (retries returned the same run);
* no completed tool call was executed twice: a call may repeat only if its
  worker was SIGKILLed after it started (``calls_repeated_in_flight``). A call
  that was in flight when Redis went away must not repeat either: its worker
  holds the outcome and writes it when Redis is back; any that does is counted
  in ``calls_repeated_at_redis_outage`` (target 0);
* each step is journaled once and each run finished once;
* no dead letter (workers run with a delivery budget no kill schedule exhausts).

    python bench/bench_chaos.py [--duration 60] [--runs 300] [--procs 3] [--json]
    python bench/bench_chaos.py --matrix 20,60   # one outage of each kind and length
    python bench/bench_chaos.py --postgres --outage-kind pg-full --redis-down 14

``--postgres`` keeps the runs in a private PostgreSQL (initdb'd here, on a free port;
Redis keeps the queue), and ``--outage-kind pg-kill|pg-terminate|pg-hang|pg-full``
fails it instead of Redis (see docs/postgres.md); the checks are the same.

Exits 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # (the PostgreSQL server's module imports so)

from tests.distributed.blackhole_proxy import BlackholeProxy  # noqa: E402
from tests.distributed.postgres_server import PostgresServer  # noqa: E402
from tests.distributed.redis_server import RedisServer, free_port  # noqa: E402

from _chaos_matrix import matrix  # noqa: E402
from _chaos_postgres import (  # noqa: E402
    fill_disk,
    hold_lock,
    small_disk,
    sql,
    statements_cancelled,
    with_statement_timeout,
)
from podium.engine.records import RunFinished, StepCommitted  # noqa: E402
from podium.store.base import RunStore  # noqa: E402
from podium.store.postgres import PostgresRunStore  # noqa: E402
from podium.store.redis import RedisRunStore  # noqa: E402

KEY = "pk_chaos"
KINDS = ("kill", "stop", "partition")
#: --postgres: what happens to PostgreSQL, which keeps the runs (Redis keeps the queue).
PG_KINDS = ("pg-kill", "pg-terminate", "pg-hang", "pg-full")
AGENT_PATH = "chaos_agent:agent"
PREFIX = "podium"
RETRYABLE = {429, 500, 502, 503, 504}


@dataclass
class Execution:
    key: str
    pid: int
    start: float
    end: float


@dataclass
class Report:
    runs_submitted: int = 0
    runs_acknowledged: int = 0
    runs_completed: int = 0
    runs_not_completed: list[str] = field(default_factory=list)
    orphan_runs: list[str] = field(default_factory=list)
    duplicate_runs_per_key: int = 0
    submit_retries: int = 0
    submit_status_codes: dict[str, int] = field(default_factory=dict)
    worker_kills: int = 0
    redis_kills: int = 0  # outages, of --outage-kind
    outage_kind: str = "kill"
    outage_s: float = 0.0
    tool_calls_expected: int = 0
    tool_calls_executed: int = 0
    calls_missing: int = 0
    calls_completed_during_outage: int = 0  # their outcomes waited for Redis in a worker
    calls_repeated_in_flight: int = 0  # in flight on a worker SIGKILLed: unavoidable
    calls_repeated_at_redis_outage: list[str] = field(default_factory=list)  # target: none
    calls_repeated_after_checkpoint: list[str] = field(default_factory=list)
    steps_journaled_twice: list[str] = field(default_factory=list)
    runs_finished_twice: list[str] = field(default_factory=list)
    dead_letters: int = 0
    # --postgres: statements the server cancelled at --pg-statement-timeout (its log),
    # and the gateway's 503s that said when to come back (Retry-After)
    pg_statements_cancelled: int = 0
    unavailable_with_retry_after: int = 0
    duration_s: float = 0.0
    settle_s: float = 0.0
    ok: bool = False


class Chaos:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.redis = RedisServer(workdir / "redis")
        self.postgres = PostgresServer() if args.postgres else None
        self.disk: Path | None = None  # pg-full: the small mount Podium's tables live on
        self.proxy: BlackholeProxy | None = None  # --outage-kind partition: Podium's way in
        self.effects = workdir / "effects.log"
        self.report = Report()
        self.worker_kills: list[tuple[float, int]] = []  # (time, pid)
        self.redis_outages: list[tuple[float, float]] = []  # (down at, up again at)
        self.acked: dict[str, str] = {}  # idempotency key -> run id the client was given
        self.seen: dict[str, set[str]] = defaultdict(set)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.rng = random.Random(args.seed)

    # -- processes ------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        path = os.pathsep.join([str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")])
        return dict(
            os.environ,
            PYTHONPATH=path,
            PYTHONUNBUFFERED="1",
            PODIUM_CHAOS_EFFECTS=str(self.effects),
            PODIUM_CHAOS_TOOL_STEPS=str(self.args.tool_steps),
            PODIUM_CHAOS_PARALLEL=str(self.args.parallel),
            PODIUM_CHAOS_TOOL_DELAY=str(self.args.tool_delay),
        )

    def _spawn(self, name: str, *cmd: str) -> subprocess.Popen[bytes]:
        with (self.workdir / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "podium.cli.main", *cmd],
                cwd=self.workdir, env=self._env(), stdout=out, stderr=out,
            )
        self.procs.append(proc)
        return proc

    def start_services(self) -> None:
        (self.workdir / "redis").mkdir()
        self.redis.start()
        url = self.redis.url
        if self.args.outage_kind == "partition":
            self.proxy = BlackholeProxy(self.redis.port).start()
            url = self.proxy.url
        store: tuple[str, ...] = ()
        server = f'[server]\nredis = "{url}"\n'
        if self.postgres is not None:  # runs kept in PostgreSQL, queued in Redis
            self.postgres.start()
            if self.args.outage_kind == "pg-full":
                self.disk = small_disk(self.postgres.root, self.postgres.url,
                                       self.args.pg_disk_mb)
            # Every statement bounded by --pg-statement-timeout (the URL says so), so a
            # pg-hang longer than it is cancelled by the server, and retried.
            pg_url = with_statement_timeout(self.postgres.url, self.args.pg_statement_timeout)
            store = ("--store", pg_url)
            server += f'store = "{pg_url}"\n'
        config = self.workdir / "podium.toml"
        config.write_text(
            f'{server}\n[[agents]]\npath = "{AGENT_PATH}"\n'
            f'\n[[keys]]\nkey = "{KEY}"\ntenant = "chaos"\n'
        )
        self.port = free_port()
        self.gateway = self._spawn("gateway", "serve", "--config", str(config),
                                   "--port", str(self.port), "--log-level", "warning")
        self.supervisor = self._spawn(
            "workers", "worker", "--redis", url, "--agent", AGENT_PATH,
            "--procs", str(self.args.procs), "--lease", str(self.args.lease),
            "--max-deliveries", str(self.args.max_deliveries),
            "--concurrency", str(self.args.concurrency), "--log-level", "WARNING",
            "--outage-hold", str(self.args.outage_hold), *store,
        )

    def worker_pids(self) -> list[int]:
        pid = self.supervisor.pid
        pids: list[int] = []
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    pids += [int(p) for p in f.read().split()]
        return pids

    async def wait_ready(self, client: httpx.AsyncClient) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for proc in (self.gateway, self.supervisor):
                if proc.poll() is not None:
                    raise SystemExit(f"a process exited at start-up; logs in {self.workdir}")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/healthz")).status_code == 200 and \
                        len(self.worker_pids()) >= self.args.procs:
                    return
            await asyncio.sleep(0.1)
        raise SystemExit(f"gateway or workers not ready in 30 s; logs in {self.workdir}")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.proxy is not None:
            self.proxy.close()
        self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()
        if self.disk is not None:  # (the server's folder went but for its mount point)
            subprocess.run(["umount", "-l", str(self.disk)], check=False)
            with contextlib.suppress(OSError):
                self.disk.rmdir()
                self.disk.parent.rmdir()

    # -- the client ------------------------------------------------------------------------

    async def submit(self, client: httpx.AsyncClient, key: str) -> None:
        body = {"agent": "chaos", "input": f"charge {key}", "metadata": {"chaos_key": key}}
        headers = {"Idempotency-Key": key}
        deadline = time.monotonic() + self.args.duration + 60
        attempt = 0
        while time.monotonic() < deadline:
            attempt += 1
            status = "transport"
            try:
                r = await client.post("/v1/runs", json=body, headers=headers)
                status = str(r.status_code)
                if r.status_code in (200, 201, 202):
                    run_id = r.json()["id"]
                    self.seen[key].add(run_id)
                    self.acked[key] = run_id
                    break
                if r.status_code == 503 and "Retry-After" in r.headers:
                    self.report.unavailable_with_retry_after += 1
                if r.status_code not in RETRYABLE:
                    raise SystemExit(f"submission refused: {r.status_code} {r.text}")
                retry_after = float(r.headers.get("Retry-After", "0.2") or 0.2)
            except httpx.TransportError:
                retry_after = 0.2
            codes = self.report.submit_status_codes
            codes[status] = codes.get(status, 0) + 1
            self.report.submit_retries += 1
            await asyncio.sleep(min(retry_after, 1.0) * (0.5 + self.rng.random()))
        if attempt:
            self.report.runs_submitted += 1

    async def submitter(self, client: httpx.AsyncClient) -> None:
        spread = self.args.duration * 0.8
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with sem:
                await self.submit(client, f"chaos-{i:05d}")

        tasks = []
        for i in range(self.args.runs):
            tasks.append(asyncio.create_task(one(i)))
            await asyncio.sleep(spread / self.args.runs)
        await asyncio.gather(*tasks)

    # -- the chaos -------------------------------------------------------------------------

    async def chaos(self) -> None:
        start = time.monotonic()
        next_kill = start + self.args.kill_every
        next_redis = start + self.args.redis_every
        while (now := time.monotonic()) < start + self.args.duration:
            if self.args.kill_every > 0 and now >= next_kill:
                # --matrix: not within two leases of the outage, so the kill's repeats (its
                # runs reclaimed a lease later) are kept apart from the outage's.
                near = next_redis - now <= 2 * self.args.lease + 1
                if not (self.args.kills_apart and self.args.redis_every > 0 and near):
                    self.kill_a_worker()
                next_kill = now + self.args.kill_every
            if self.args.redis_every > 0 and now >= next_redis:
                down = time.time()
                end = self.outage()
                # No worker is SIGKILLed meanwhile: its held outcomes would die with it, a
                # repeat counted as a kill's, which would hide the outage's own repeats.
                await asyncio.sleep(self.args.redis_down)
                await asyncio.to_thread(end)
                self.redis_outages.append((down, time.time()))
                next_redis = time.monotonic() + self.args.redis_every
                next_kill = time.monotonic() + self.args.kill_every
            await asyncio.sleep(0.05)

    def outage(self) -> Callable[[], None]:
        """Take Redis (or PostgreSQL) away as ``--outage-kind`` says; returns what brings
        it back."""
        kind = self.args.outage_kind
        if kind.startswith("pg-"):
            return self.postgres_outage(kind)
        if kind == "kill":  # only what the append-only file holds survives
            self.redis.kill()
            return self.redis.start
        if kind == "stop":  # hung: connections accepted by the kernel, never answered
            self.redis.pause()
            return self.redis.resume
        assert self.proxy is not None  # cut off: accepted, never answered
        self.proxy.cut()
        return self.proxy.heal

    def postgres_outage(self, kind: str) -> Callable[[], None]:
        """``pg-kill``: stopped at once (``-m immediate``), started again; ``pg-terminate``:
        every Podium connection cut by ``pg_terminate_backend``; ``pg-hang``: the runs'
        table locked, so that every statement on it hangs until the server cancels it at
        the store's ``statement_timeout`` (``--pg-statement-timeout``) and the store sends
        it again, until the lock goes."""
        assert self.postgres is not None
        server = self.postgres
        if kind == "pg-kill":
            server.kill()
            return server.start
        if kind == "pg-full":
            assert self.disk is not None
            return fill_disk(self.disk)
        if kind == "pg-terminate":
            sql(server.url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                 " WHERE application_name LIKE 'podium%'")
            return lambda: None
        return hold_lock(server.url, "LOCK TABLE podium_runs IN ACCESS EXCLUSIVE MODE")

    def kill_a_worker(self) -> None:
        pids = self.worker_pids()
        if pids:
            victim = self.rng.choice(pids)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
                self.worker_kills.append((time.time(), victim))

    async def settle(self, client: httpx.AsyncClient) -> None:
        """Wait until every acknowledged run is terminal (bounded)."""
        began = time.monotonic()
        pending = set(self.acked.values())
        while pending and time.monotonic() - began < self.args.settle:
            for run_id in list(pending):
                with contextlib.suppress(httpx.TransportError, ValueError):
                    r = await client.get(f"/v1/runs/{run_id}")
                    if r.status_code == 200 and r.json()["status"] in (
                        "completed", "failed", "cancelled"
                    ):
                        pending.discard(run_id)
            if pending:
                await asyncio.sleep(0.25)
        self.report.settle_s = round(time.monotonic() - began, 2)

    # -- the verdict -----------------------------------------------------------------------

    def executions(self) -> list[Execution]:
        if not self.effects.exists():
            return []
        out = []
        for line in self.effects.read_text().splitlines():
            key, pid, start, end = line.split()
            out.append(Execution(key, int(pid), float(start), float(end)))
        return out

    def in_flight_at_a_kill(self, e: Execution, again: Execution) -> bool:
        """Its worker was SIGKILLed after the call started and before it ran ``again``:
        its outcome may have died with it."""
        return any(pid == e.pid and e.start <= t <= again.start
                   for t, pid in self.worker_kills)

    def in_flight_at_an_outage(self, e: Execution) -> bool:
        """Redis went away before the outcome could be checkpointed (within a lease of the
        effect): the repeat this benchmark's outages measure (target: none)."""
        return any(down >= e.start and down <= e.end + self.args.lease
                   for down, _ in self.redis_outages)

    async def verify(self) -> None:
        rep = self.report
        rep.runs_acknowledged = len(self.acked)
        rep.worker_kills = len(self.worker_kills)
        rep.redis_kills = len(self.redis_outages)
        rep.outage_kind, rep.outage_s = self.args.outage_kind, self.args.redis_down
        rep.duplicate_runs_per_key = sum(len(ids) - 1 for ids in self.seen.values())
        acked_ids = set(self.acked.values())
        store: RunStore = RedisRunStore(self.redis.url, prefix=PREFIX)
        if self.postgres is not None:
            store = PostgresRunStore(self.postgres.url, create_schema=False)
        async with store, RedisRunStore(self.redis.url, prefix=PREFIX) as queue_side:
            for run_id in sorted(acked_ids):
                record = await store.get(run_id)
                if record is None or record.status != "completed":
                    rep.runs_not_completed.append(
                        f"{run_id}:{'missing' if record is None else record.status}"
                    )
                else:
                    rep.runs_completed += 1
                entries = [e for _, e in await store.journal(run_id)]
                if sum(isinstance(e, RunFinished) for e in entries) > 1:
                    rep.runs_finished_twice.append(run_id)
                steps = Counter(e.step for e in entries if isinstance(e, StepCommitted))
                rep.steps_journaled_twice += [f"{run_id}:{s}" for s, n in steps.items() if n > 1]
            listed = await store.list(tenant="chaos", limit=10 * self.args.runs + 100)
            rep.orphan_runs = sorted(r.run_id for r in listed if r.run_id not in acked_ids)
            rep.dead_letters = int(await queue_side.client.xlen(f"{PREFIX}:dead:default"))
        if self.postgres is not None:
            rep.pg_statements_cancelled = statements_cancelled(self.postgres.root / "log")

        by_key: dict[str, list[Execution]] = defaultdict(list)
        for e in self.executions():
            by_key[e.key].append(e)
        rep.tool_calls_executed = sum(len(v) for v in by_key.values())
        rep.calls_completed_during_outage = sum(
            any(down <= e.end <= up for down, up in self.redis_outages)
            for runs in by_key.values() for e in runs
        )
        expected = {f"{run_id}:{step}:{call}" for run_id in acked_ids
                    for step in range(self.args.tool_steps) for call in range(self.args.parallel)}
        rep.tool_calls_expected = len(expected)
        rep.calls_missing = len(expected - set(by_key))
        for key, runs in by_key.items():
            ordered = sorted(runs, key=lambda e: e.start)
            for earlier, again in pairwise(ordered):
                if self.in_flight_at_a_kill(earlier, again):
                    rep.calls_repeated_in_flight += 1
                elif self.in_flight_at_an_outage(earlier):
                    rep.calls_repeated_at_redis_outage.append(key)
                else:
                    rep.calls_repeated_after_checkpoint.append(key)
        rep.ok = (
            rep.runs_acknowledged == self.args.runs
            and rep.runs_completed == rep.runs_acknowledged
            and not rep.orphan_runs
            and rep.duplicate_runs_per_key == 0
            and rep.calls_missing == 0
            and not rep.calls_repeated_after_checkpoint
            and not rep.calls_repeated_at_redis_outage
            and not rep.steps_journaled_twice
            and not rep.runs_finished_twice
            and rep.dead_letters == 0
            and not self.hang_unbounded()
        )

    def hang_unbounded(self) -> bool:
        """A pg-hang longer than the statement timeout that the server never cancelled:
        the store's ``statement_timeout`` was not applied."""
        hang = self.args.outage_kind == "pg-hang" and self.report.redis_kills > 0
        longer = self.args.redis_down > self.args.pg_statement_timeout
        return hang and longer and self.report.pg_statements_cancelled == 0

    async def run(self) -> Report:
        self.start_services()
        try:
            base = f"http://127.0.0.1:{self.port}"
            auth = {"Authorization": f"Bearer {KEY}"}
            # (past the gateway's own patience, 10 s: its 503 is what a client should see)
            timeout = httpx.Timeout(30.0)
            async with httpx.AsyncClient(base_url=base, headers=auth, timeout=timeout) as client:
                await self.wait_ready(client)
                began = time.monotonic()
                await asyncio.gather(self.chaos(), self.submitter(client))
                self.report.duration_s = round(time.monotonic() - began, 2)
                await self.settle(client)
            await self.verify()
        finally:
            self.stop_all()
        return self.report


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=60.0, help="seconds of chaos")
    p.add_argument("--runs", type=int, default=300, help="runs submitted over the chaos")
    p.add_argument("--procs", type=int, default=3, help="worker processes")
    p.add_argument("--concurrency", type=int, default=64, help="runs driven at once per worker")
    p.add_argument("--tool-steps", type=int, default=4, help="tool steps per run")
    p.add_argument("--parallel", type=int, default=4, help="parallel tool calls per step")
    p.add_argument("--tool-delay", type=float, default=None,
                   help="seconds per tool call (0.05; with --matrix 0.5)")
    p.add_argument("--kill-every", type=float, default=4.0, help="SIGKILL a worker (0: never)")
    p.add_argument("--redis-every", type=float, default=20.0, help="SIGKILL Redis (0: never)")
    p.add_argument("--redis-down", type=float, default=2.0, help="seconds Redis stays down")
    p.add_argument("--postgres", action="store_true",
                   help="keep runs in a private PostgreSQL (initdb'd here); with "
                   "--outage-kind pg-kill|pg-terminate|pg-hang it is what fails")
    p.add_argument("--pg-statement-timeout", type=float, default=2.0, metavar="S",
                   help="--postgres: every statement's bound (the store URL's "
                   "?statement_timeout=): a pg-hang longer than it is cancelled by the server")
    p.add_argument("--pg-disk-mb", type=int, default=64,
                   help="pg-full: the size of the tmpfs Podium's tables live on")
    p.add_argument("--outage-kind", choices=KINDS + PG_KINDS, default="kill",
                   help="kill: SIGKILL, AOF restart; stop: SIGSTOP/SIGCONT; partition: "
                   "a black-holing proxy between Podium and Redis; with --postgres, "
                   "pg-kill: stopped at once and restarted; pg-terminate: its "
                   "connections terminated; pg-hang: the runs' table locked; pg-full: "
                   "the tables' disk (a tmpfs, root needed) filled, then freed "
                   "(--redis-every/--redis-down time these too)")
    p.add_argument("--outage-hold", type=float, default=90.0, metavar="S",
                   help="the workers' --outage-hold (0: they give up a write after 10 s, "
                   "as before issue 29)")
    p.add_argument("--matrix", type=_seconds_list, default=None, metavar="S,S",
                   help="instead: one outage of each kind per length (seconds), workers "
                   "SIGKILLed before and after it; prints one row per outage")
    p.add_argument("--lease", type=float, default=2.0, help="worker lease seconds")
    p.add_argument("--max-deliveries", type=int, default=50)
    p.add_argument("--settle", type=float, default=90.0, help="max seconds to wait at the end")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    args.kills_apart = False  # (--matrix sets it for each of its runs)
    if args.tool_delay is None and not args.matrix:
        args.tool_delay = 0.05
    for name in ("duration", "runs", "procs", "concurrency", "tool_steps", "parallel"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def _seconds_list(text: str) -> list[float]:
    values = [float(part) for part in text.split(",") if part.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("positive seconds, comma-separated: 20,60")
    return values


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.matrix:
        return matrix(args, Chaos, KINDS)
    workdir = Path(tempfile.mkdtemp(prefix="podium-chaos-"))
    report = asyncio.run(Chaos(args, workdir).run())
    out: dict[str, Any] = asdict(report)
    if args.json:
        print(json.dumps(out))
    else:
        for name, value in out.items():
            shown = len(value) if isinstance(value, list) else value
            print(f"{name:34} {shown}")
    if args.keep or not report.ok:
        print(f"logs: {workdir}", file=sys.stderr)
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
