"""Run stores side by side: memory, SQLite, Redis, PostgreSQL, in one run (issue #36).

Two measurements per store:

1. **Fenced checkpoints/s**: ``--tasks`` concurrent runs, each appending one entry with
   its record (the engine's per-step checkpoint: a fenced record write plus a journal
   append) ``--appends`` times. Ops/s, and CPU µs per op in this process and in the
   store's server (Redis: ``INFO cpu``; PostgreSQL: the CPU of this database's backends,
   read from /proc, so the server must run on this machine).
2. **Engine steps/s**: ``--runs`` ReAct runs (6 tool steps + an answer, instant simulated
   model and tool) driven ``--concurrency`` at a time through an
   :class:`~podium.Engine`; CPU µs per step in this process and in the server.

    python bench/bench_store_postgres.py [--postgres URL] [--redis URL] [--json]

The PostgreSQL database is created for the run and dropped after it. Takes about a
minute on a 2-core machine. Numbers are this machine's: the clients and the servers share
its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from podium import Agent, Engine, Scenario, SimulatedModel, tool
from podium.engine.records import ModelTurn, RunRecord
from podium.messages import Message
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore

TOOL_STEPS = 6
STEPS_PER_RUN = TOOL_STEPS + 1
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


@tool
def lookup(q: str) -> str:
    """Look something up.

    Args:
        q: What.
    """
    return f"found {q}"


def _agent() -> Agent:
    return Agent("bench", SimulatedModel(Scenario.react("lookup", {"q": "x"},
                                                        tool_steps=TOOL_STEPS)),
                 tools=[lookup], max_steps=STEPS_PER_RUN + 1)


# -- server CPU ---------------------------------------------------------------------------


class ServerCpu:
    """CPU seconds the store's server has spent so far (None: it cannot tell)."""

    async def seconds(self) -> float | None:
        return None


class RedisCpu(ServerCpu):
    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)

    async def seconds(self) -> float | None:
        info = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


class PostgresCpu(ServerCpu):
    """The CPU of every backend connected to the bench's database, from /proc (backends
    that ended meanwhile are not counted: the bench keeps its pool open throughout)."""

    def __init__(self, admin_url: str, database: str) -> None:
        self.admin_url, self.database = admin_url, database

    async def seconds(self) -> float | None:
        import asyncpg

        conn = await asyncpg.connect(self.admin_url)
        try:
            pids = [r[0] for r in await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1", self.database)]
        finally:
            await conn.close()
        return _cpu_of(pids)


def _cpu_of(pids: list[int]) -> float | None:
    """utime + stime of the processes (a few small reads of /proc)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) * _TICK_S
    return total


# -- the two measurements ------------------------------------------------------------------


async def _measure(
    work: Callable[[], Awaitable[int]], server: ServerCpu
) -> dict[str, float | None]:
    s0 = await server.seconds()
    c0, t0 = time.process_time(), time.perf_counter()
    ops = await work()
    c1, t1 = time.process_time(), time.perf_counter()
    s1 = await server.seconds()
    wall = t1 - t0
    return {
        "ops": ops,
        "per_s": ops / wall,
        "client_cpu_us": (c1 - c0) / ops * 1e6,
        "server_cpu_us": None if s0 is None or s1 is None else (s1 - s0) / ops * 1e6,
    }


async def checkpoints(store: RunStore, tasks: int, appends: int) -> int:
    async def one(i: int) -> None:
        record = RunRecord(f"ck-{uuid.uuid4().hex[:12]}", "bench", "x", status="running")
        await store.create(record)
        for step in range(appends):
            record.steps = step + 1
            await store.append(record.run_id, [ModelTurn(step, time.time(),
                                                         Message("assistant", "ok"))],
                               record=record)

    await asyncio.gather(*(one(i) for i in range(tasks)))
    return tasks * appends


async def engine_steps(store: RunStore, runs: int, concurrency: int) -> int:
    agent = _agent()
    gate = asyncio.Semaphore(concurrency)
    async with Engine(store) as engine:
        async def one(i: int) -> None:
            async with gate:
                record = await engine.run(agent, f"q{i}")
                assert record.status == "completed", record

        await asyncio.gather(*(one(i) for i in range(runs)))
    return runs * STEPS_PER_RUN


# -- the stores ----------------------------------------------------------------------------


async def bench_store(
    name: str, open_store: Callable[[], RunStore], server: ServerCpu, args: argparse.Namespace
) -> dict[str, Any]:
    async with open_store() as store:
        await checkpoints(store, 4, 5)  # warm: connections, prepared statements, tables
        ck = await _measure(lambda: checkpoints(store, args.tasks, args.appends), server)
        steps = await _measure(lambda: engine_steps(store, args.runs, args.concurrency),
                               server)
    return {"store": name, "checkpoints": ck, "steps": steps}


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


async def create_scratch_database(admin_url: str) -> tuple[str, str]:
    """A fresh database on ``admin_url``'s server: its URL and its name (drop it with
    :func:`drop_scratch`)."""
    import asyncpg

    database = f"podium_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f"CREATE DATABASE {database}")
    await admin.close()
    return admin_url.rsplit("/", 1)[0] + f"/{database}", database


async def drop_scratch(postgres: str | None, database: str | None, redis_url: str | None,
                       prefix: str) -> None:
    """Drop what a bench made: its database (if any), its Redis keys under ``prefix``."""
    if postgres and database:
        import asyncpg

        admin = await asyncpg.connect(postgres)
        await admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        await admin.close()
    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    tmp = Path(tempfile.mkdtemp(prefix="podium-bench-store-"))
    stores: list[tuple[str, Callable[[], RunStore], ServerCpu]] = [
        ("memory", lambda: MemoryRunStore(max_finished=None), ServerCpu()),
        ("sqlite", lambda: SQLiteRunStore(tmp / "runs.sqlite"), ServerCpu()),
    ]
    prefix = f"bench-store-{uuid.uuid4().hex[:8]}"
    if args.redis:
        from podium.store.redis import RedisRunStore

        stores.append(("redis", lambda: RedisRunStore(args.redis, prefix=prefix),
                       RedisCpu(args.redis)))
    database = None
    if args.postgres:
        from podium.store.postgres import PostgresRunStore

        url, database = await create_scratch_database(args.postgres)
        stores.append(("postgres", lambda: PostgresRunStore(url),
                       PostgresCpu(args.postgres, database)))
        # The same, with commits acknowledged before their WAL is flushed: a server crash
        # may lose the last moments of writes (never corrupts), as SQLite's NORMAL may.
        stores.append(("pg-async", lambda: PostgresRunStore(url, synchronous_commit=False),
                       PostgresCpu(args.postgres, database)))
    try:
        for name, opener, server in stores:
            results.append(await bench_store(name, opener, server, args))
    finally:
        await drop_scratch(args.postgres, database, args.redis, prefix)
    return results


def report(results: list[dict[str, Any]]) -> None:
    print(f"{'store':<9} {'ckpt/s':>9} {'client µs':>10} {'server µs':>10}   "
          f"{'steps/s':>9} {'client µs':>10} {'server µs':>10}")
    for r in results:
        ck, st = r["checkpoints"], r["steps"]
        print(f"{r['store']:<9} {_fmt(ck['per_s']):>9} {_fmt(ck['client_cpu_us']):>10} "
              f"{_fmt(ck['server_cpu_us']):>10}   {_fmt(st['per_s']):>9} "
              f"{_fmt(st['client_cpu_us']):>10} {_fmt(st['server_cpu_us']):>10}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server to create the bench's database on ('' to skip)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="'' to skip")
    parser.add_argument("--tasks", type=int, default=50, help="concurrent runs checkpointing")
    parser.add_argument("--appends", type=int, default=40, help="checkpoints per run")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    out = asyncio.run(main(ns))
    if ns.json:
        print(json.dumps(out, indent=2))
    else:
        report(out)
