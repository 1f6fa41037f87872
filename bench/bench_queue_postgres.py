"""Run queues side by side: Redis Streams and PostgreSQL (``FOR UPDATE SKIP LOCKED``), one run.

Two measurements per queue, each repeated ``--repeats`` times (the median is reported):

1. **Throughput**: ``--items`` runs submitted (versioned, as the gateway submits them) by
   ``--submitters`` concurrent tasks while ``--consumers`` workers, each with a queue
   handle of its own, claim up to ``--batch`` at a time and ack each: items/s through
   the queue, and CPU µs per item (submit + claim + ack) in this process and in the
   queue's server (Redis: ``INFO cpu``; PostgreSQL: its backends for the bench's database,
   read from /proc, so the server must run on this machine).
2. **Latency**: one worker blocked in ``claim``; one run submitted at a time: the time
   from the submit's call to the claim's return (a wake-up: Redis's blocking XREADGROUP,
   PostgreSQL's LISTEN/NOTIFY), ``--samples`` times: median and p99.

    python bench/bench_queue_postgres.py [--postgres URL] [--redis URL] [--json]

The PostgreSQL database is created for the run and dropped after it. Numbers are this
machine's: the clients and the servers share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench_store_postgres import (
    PostgresCpu,
    RedisCpu,
    ServerCpu,
    create_scratch_database,
    drop_scratch,
)
from podium.queue.base import QueueItem, RunQueue


async def throughput(
    open_queue: Callable[[], RunQueue], server: ServerCpu, args: argparse.Namespace
) -> dict[str, float | None]:
    tag = uuid.uuid4().hex[:8]
    submitter, workers = open_queue(), [open_queue() for _ in range(args.consumers)]
    try:
        for q in (submitter, *workers):  # connections and tables, before the clock
            await q.depth("bench")
        done = 0
        finished = asyncio.Event()

        async def submit(part: int) -> None:
            for i in range(part, args.items, args.submitters):
                await submitter.submit(QueueItem(f"{tag}-{i}", "bench", pool="bench",
                                                 version=1))

        async def work(q: RunQueue, name: str) -> None:
            nonlocal done
            while not finished.is_set():
                claims = await q.claim(name, pool="bench", count=args.batch, block_s=0.2)
                for claim in claims:
                    await q.ack(claim)
                done += len(claims)
                if done >= args.items:
                    finished.set()

        s0 = await server.seconds()
        c0, t0 = time.process_time(), time.perf_counter()
        consumers = [asyncio.create_task(work(q, f"w{n}")) for n, q in enumerate(workers)]
        await asyncio.gather(*(submit(p) for p in range(args.submitters)))
        await finished.wait()
        c1, t1 = time.process_time(), time.perf_counter()
        s1 = await server.seconds()
        await asyncio.gather(*consumers)
    finally:
        for q in (submitter, *workers):
            await q.aclose()
    return {
        "items": args.items,
        "per_s": args.items / (t1 - t0),
        "client_cpu_us": (c1 - c0) / args.items * 1e6,
        "server_cpu_us": None if s0 is None or s1 is None else (s1 - s0) / args.items * 1e6,
    }


async def latency(open_queue: Callable[[], RunQueue], samples: int) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    submitter, worker = open_queue(), open_queue()
    waits: list[float] = []
    try:
        await submitter.depth("lat")
        await worker.claim("w", pool="lat", block_s=0)  # opens its connections (and listener)
        for i in range(samples):
            claiming = asyncio.create_task(worker.claim("w", pool="lat", block_s=5))
            await asyncio.sleep(0.002)  # blocked in its wait by now
            t0 = time.perf_counter()
            await submitter.submit(QueueItem(f"{tag}-{i}", "bench", pool="lat", version=1))
            claims = await claiming
            waits.append(time.perf_counter() - t0)
            assert len(claims) == 1, claims
            await worker.ack(claims[0])
    finally:
        await submitter.aclose()
        await worker.aclose()
    waits.sort()
    return {"median_ms": statistics.median(waits) * 1e3,
            "p99_ms": waits[min(len(waits) - 1, int(len(waits) * 0.99))] * 1e3}


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = statistics.median(values) if values else None
    return out


async def bench_queue(
    name: str, open_queue: Callable[[], RunQueue], server: ServerCpu, args: argparse.Namespace
) -> dict[str, Any]:
    through = [await throughput(open_queue, server, args) for _ in range(args.repeats)]
    lat = [await latency(open_queue, args.samples) for _ in range(args.repeats)]
    return {"queue": name, "throughput": _median_of(through), "latency": _median_of(lat)}


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    queues: list[tuple[str, Callable[[], RunQueue], ServerCpu]] = []
    prefix = f"bench-queue-{uuid.uuid4().hex[:8]}"
    if args.redis:
        from podium.queue.redis import RedisQueue

        queues.append(("redis", lambda: RedisQueue(args.redis, prefix=prefix),
                       RedisCpu(args.redis)))
    database = None
    if args.postgres:
        from podium.queue.postgres import PostgresQueue

        url, database = await create_scratch_database(args.postgres)
        queues.append(("postgres", lambda: PostgresQueue(url),
                       PostgresCpu(args.postgres, database)))
        # Commits acknowledged before their WAL is flushed (no fsync wait per operation).
        queues.append(("pg-async", lambda: PostgresQueue(url, synchronous_commit=False),
                       PostgresCpu(args.postgres, database)))
    try:
        for name, opener, server in queues:
            results.append(await bench_queue(name, opener, server, args))
    finally:
        await drop_scratch(args.postgres, database, args.redis, prefix)
    return results


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(results: list[dict[str, Any]]) -> None:
    print(f"{'queue':<9} {'items/s':>9} {'client µs':>10} {'server µs':>10}   "
          f"{'wake p50 ms':>11} {'wake p99 ms':>11}")
    for r in results:
        t, lat = r["throughput"], r["latency"]
        print(f"{r['queue']:<9} {_fmt(t['per_s']):>9} {_fmt(t['client_cpu_us']):>10} "
              f"{_fmt(t['server_cpu_us']):>10}   {_fmt(lat['median_ms'], 2):>11} "
              f"{_fmt(lat['p99_ms'], 2):>11}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server to create the bench's database on ('' to skip)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="'' to skip")
    parser.add_argument("--items", type=int, default=3000, help="runs through the queue")
    parser.add_argument("--submitters", type=int, default=16)
    parser.add_argument("--consumers", type=int, default=4, help="workers, a handle each")
    parser.add_argument("--batch", type=int, default=16, help="runs a claim takes at most")
    parser.add_argument("--samples", type=int, default=200, help="latency samples")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    out = asyncio.run(main(ns))
    if ns.json:
        print(json.dumps(out, indent=2))
    else:
        report(out)
