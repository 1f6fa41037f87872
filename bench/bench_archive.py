"""Tiered history (Redis hot, PostgreSQL archive): what archiving costs (issue #36).

Two measurements, in one run:

1. **The hot path**: engine steps/s through a :class:`RedisRunStore` alone and through
   a :class:`TieredRunStore` over the same Redis (each finishing write first marks the
   run for the archive), ``--rounds`` rounds each, alternated, medians compared. Twice:
   with the archiver in another process (a deployment where another worker holds the
   archive's lease: the hot path pays the marks only) and in this process (the worker
   that holds it: it pays the archiving's CPU too).
2. **Archive throughput**: ``--archive-runs`` finished runs (7 steps each) waiting in
   Redis, archived by one :class:`RunArchiver` (batches of ``--batch``): runs/s, CPU µs
   per run in the archiver and in the PostgreSQL server.

    python bench/bench_archive.py [--postgres URL] [--redis URL] [--json]

The PostgreSQL database is created for the run and dropped after it. Numbers are this
machine's: the clients and the servers share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from asyncio.subprocess import PIPE
from typing import Any

from bench_store_postgres import PostgresCpu, RedisCpu, _measure, engine_steps
from podium.store.archiver import RunArchiver
from podium.store.postgres import PostgresRunStore
from podium.store.redis import RedisRunStore
from podium.store.tiered import TieredRunStore, pending_key


async def _archiver_child(redis_url: str, prefix: str, pg_url: str) -> None:
    """The archiver of another process: archives until its stdin closes."""
    async with (
        RedisRunStore(redis_url, prefix=prefix, reap_every_s=0) as hot,
        PostgresRunStore(pg_url) as cold,
    ):
        archiver = RunArchiver(hot, cold)
        archiver.ensure_started()
        await asyncio.to_thread(sys.stdin.read)
        await archiver.aclose()  # its loop stopped: the drain is the only one archiving
        await archiver.drain()
        print(json.dumps({"archived": archiver.statistics().archived}), flush=True)


async def hot_path(args: argparse.Namespace, pg_url: str, in_process: bool) -> dict[str, Any]:
    prefix = f"bench-arch-{uuid.uuid4().hex[:8]}"
    child = None
    if not in_process:
        child = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--child", args.redis, prefix, pg_url,
            stdin=PIPE, stdout=PIPE)
    redis_only: list[float] = []
    tiered: list[float] = []
    cpu: dict[str, list[float]] = {"redis": [], "tiered": []}  # µs/step, round by round
    try:
        async with (
            RedisRunStore(args.redis, prefix=prefix, reap_every_s=0) as alone,
            TieredRunStore(RedisRunStore(args.redis, prefix=prefix, reap_every_s=0),
                           PostgresRunStore(pg_url), archiver=in_process) as both,
        ):
            await engine_steps(alone, 20, 10)  # warm both
            await engine_steps(both, 20, 10)
            for _ in range(args.rounds):
                for name, store, into in (("redis", alone, redis_only),
                                          ("tiered", both, tiered)):
                    got = await _measure(
                        lambda s=store: engine_steps(s, args.runs, args.concurrency),  # type: ignore[misc]
                        RedisCpu(args.redis))
                    into.append(got["per_s"])
                    cpu[name].append(got["client_cpu_us"])
            if both.archiver is not None:
                await both.archiver.drain()
                archived = both.archiver.statistics().archived
    finally:
        if child is not None:
            out, _ = await asyncio.wait_for(child.communicate(b""), 300)
            archived = json.loads(out.decode().strip().splitlines()[-1])["archived"]
        _delete_prefix(args.redis, prefix)
    a, b = statistics.median(redis_only), statistics.median(tiered)
    return {
        "archiver": "this process" if in_process else "another process",
        "redis_steps_per_s": a, "tiered_steps_per_s": b, "ratio": b / a,
        "redis_client_cpu_us": statistics.median(cpu["redis"]),
        "tiered_client_cpu_us": statistics.median(cpu["tiered"]),
        # each round's tiered CPU/step over the Redis round just before it
        "cpu_ratio": statistics.median(b / a for a, b in zip(cpu["redis"], cpu["tiered"],
                                                             strict=True)),
        "rounds": args.rounds, "runs_archived": archived,
    }


async def mark_cost(args: argparse.Namespace, pg_url: str) -> dict[str, Any]:
    """The one thing archiving adds to the hot path: the mark a finishing write makes
    first (a ZADD on the store's pipelined connection), CPU µs per run in this process,
    measured alone (``--marks`` marks, 50 at a time) so the machine's noise is its own."""
    prefix = f"bench-arch-{uuid.uuid4().hex[:8]}"
    from podium.engine.records import RunRecord

    records = [RunRecord(f"m{i}", "bench", "x", status="completed") for i in range(args.marks)]
    try:
        async with TieredRunStore(RedisRunStore(args.redis, prefix=prefix, reap_every_s=0),
                                  PostgresRunStore(pg_url), archiver=False) as store:
            await asyncio.gather(*(store._mark(r) for r in records[:100]))  # warm
            c0, t0 = time.process_time(), time.perf_counter()
            for i in range(0, len(records), 50):
                await asyncio.gather(*(store._mark(r) for r in records[i:i + 50]))
            c1, t1 = time.process_time(), time.perf_counter()
    finally:
        _delete_prefix(args.redis, prefix)
    return {"marks": len(records), "cpu_us_per_mark": (c1 - c0) / len(records) * 1e6,
            "wall_us_per_mark": (t1 - t0) / len(records) * 1e6}


async def throughput(args: argparse.Namespace, pg_url: str, database: str) -> dict[str, Any]:
    prefix = f"bench-arch-{uuid.uuid4().hex[:8]}"
    try:
        async with TieredRunStore(RedisRunStore(args.redis, prefix=prefix, reap_every_s=0),
                                  PostgresRunStore(pg_url), archiver=False) as store:
            await engine_steps(store, args.archive_runs, args.concurrency)
            archiver = RunArchiver(store.hot, store.archive, batch=args.batch)
            got = await _measure(archiver.drain, PostgresCpu(args.postgres, database))
            left = await store.hot.client.zcard(pending_key(prefix))
    finally:
        _delete_prefix(args.redis, prefix)
    return {"runs": got["ops"], "runs_per_s": got["per_s"],
            "archiver_cpu_us_per_run": got["client_cpu_us"],
            "postgres_cpu_us_per_run": got["server_cpu_us"], "batch": args.batch,
            "left_pending": left}


def _delete_prefix(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    database = f"podium_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.postgres)
    await admin.execute(f"CREATE DATABASE {database}")
    await admin.close()
    url = args.postgres.rsplit("/", 1)[0] + f"/{database}"
    try:
        async with PostgresRunStore(url) as store:
            await store.list(limit=1)  # the tables, before two processes race to make them
        out = {"hot_path": [await hot_path(args, url, in_process=False),
                            await hot_path(args, url, in_process=True)],
               "mark": await mark_cost(args, url),
               "throughput": await throughput(args, url, database)}
    finally:
        admin = await asyncpg.connect(args.postgres)
        await admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        await admin.close()
    return out


def report(out: dict[str, Any]) -> None:
    print(f"{'archiver in':<16} {'redis steps/s':>14} {'tiered steps/s':>15} {'ratio':>6} "
          f"{'redis µs/step':>14} {'tiered µs/step':>15} {'cpu ratio':>9} {'archived':>9}")
    for r in out["hot_path"]:
        print(f"{r['archiver']:<16} {r['redis_steps_per_s']:>14,.0f} "
              f"{r['tiered_steps_per_s']:>15,.0f} {r['ratio']:>6.3f} "
              f"{r['redis_client_cpu_us']:>14,.0f} {r['tiered_client_cpu_us']:>15,.0f} "
              f"{r['cpu_ratio']:>9.3f} {r['runs_archived']:>9}")
    m = out["mark"]
    per_run = out["hot_path"][0]["redis_client_cpu_us"] * 7
    print(f"mark: {m['cpu_us_per_mark']:.1f} µs CPU per finished run "
          f"({m['cpu_us_per_mark'] / per_run:.1%} of a 7-step run's {per_run:,.0f} µs on "
          f"Redis alone)")
    t = out["throughput"]
    server = "-" if t["postgres_cpu_us_per_run"] is None else f"{t['postgres_cpu_us_per_run']:,.0f}"
    print(f"archive: {t['runs']} runs at {t['runs_per_s']:,.0f} runs/s (batch {t['batch']}), "
          f"{t['archiver_cpu_us_per_run']:,.0f} µs CPU/run in the archiver, {server} µs in "
          f"PostgreSQL; {t['left_pending']} left pending")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_archiver_child(*sys.argv[2:5]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--runs", type=int, default=200, help="runs per round")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--archive-runs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--marks", type=int, default=5000)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    t0 = time.perf_counter()
    result = asyncio.run(main(ns))
    result["seconds"] = time.perf_counter() - t0
    if ns.json:
        print(json.dumps(result, indent=2))
    else:
        report(result)
