"""Distributed execution on Redis: CPU per step against in-memory, and scaling over processes.

Two measurements, one run (issue #4):

1. **CPU µs per step**, one worker process driving ``--runs`` ReAct runs (6
   tool steps + a final answer, instant simulated model and tool) through a
   queue and a store: ``LocalQueue`` + ``MemoryRunStore`` versus ``RedisQueue``
   + ``RedisRunStore``. Process CPU time of the worker; the Redis server's own
   CPU (from ``INFO cpu``) is reported beside it. Target: Redis ≤ 3× memory.
2. **Steps/s with 1 and 2 ``podium worker`` processes** (``--procs 1|2``,
   pinned, burst mode) on the same queued load, timed from the first run's
   start to the last run's end as recorded in the store. Target: ≥ 1.7×.
   redis-server shares the machine's cores, so its CPU per step caps the
   scaling of these tiny steps; a second round gives each tool call
   ``--heavy-tool-us`` of CPU work, nearer a real step's cost.

    python bench/bench_distributed.py [--redis URL] [--runs 400] [--scale-runs 3000] [--json]

Takes about a minute on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis as sync_redis

from podium import Agent, Engine, Scenario, SimulatedModel, tool
from podium.engine.records import RunRecord
from podium.queue.base import QueueItem, RunQueue
from podium.queue.local import LocalQueue
from podium.queue.redis import RedisQueue
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.redis import RedisRunStore, connect
from podium.worker.worker import Worker

TOOL_STEPS = 6
STEPS_PER_RUN = TOOL_STEPS + 1
ROOT = Path(__file__).resolve().parents[1]


#: CPU µs each tool call burns (the `--heavy-tool-us` round sets it in the workers' env).
TOOL_CPU_US = int(os.environ.get("PODIUM_BENCH_TOOL_CPU_US", "0"))


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    if TOOL_CPU_US:  # stands in for real per-step work: parsing a large result, say
        end = time.thread_time_ns() + TOOL_CPU_US * 1000
        while time.thread_time_ns() < end:
            pass
    return f"Result for {query}: 42 items found."


def make_agent() -> Agent:
    return Agent(
        "react",
        SimulatedModel(Scenario.react("lookup", {"query": "podium"}, tool_steps=TOOL_STEPS)),
        "You are a helpful research agent. Use the lookup tool.",
        [lookup],
        max_steps=TOOL_STEPS + 2,
    )


agent = make_agent()  # for `podium worker --agent bench.bench_distributed:agent`


# -- 1. CPU per step in one process ----------------------------------------------------------


async def submit(store: RunStore, queue: RunQueue, runs: int) -> list[str]:
    ids = [f"b{uuid.uuid4().hex[:12]}" for _ in range(runs)]
    for run_id in ids:
        await store.create(RunRecord(run_id, agent.name, "Find podium"))
        await queue.submit(QueueItem(run_id, agent.name))
    return ids


async def drive(store: RunStore, queue: RunQueue, runs: int, concurrency: int) -> float:
    """CPU µs per step for one burst worker over ``runs`` queued runs."""
    await submit(store, queue, runs)
    engine = Engine(store)
    worker = Worker(queue, engine, {agent.name: agent}, concurrency=concurrency,
                    claim_block_s=0.05)
    gc.collect()
    t0 = time.process_time()
    await worker.run(burst=True)
    cpu = time.process_time() - t0
    await engine.aclose()
    assert worker.statistics().completed == runs, worker.statistics()
    return cpu / (runs * STEPS_PER_RUN) * 1e6


def redis_cpu_s(url: str) -> float:
    client = sync_redis.Redis.from_url(url)
    info: Any = client.info("cpu")
    client.close()
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def cleanup(url: str, prefix: str) -> None:
    client = sync_redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=5000))
    for i in range(0, len(keys), 1000):
        client.delete(*keys[i : i + 1000])
    client.close()


async def cpu_per_step(url: str, runs: int, rounds: int, concurrency: int) -> dict[str, float]:
    memory: list[float] = []
    redis_client: list[float] = []
    redis_server: list[float] = []
    await drive(MemoryRunStore(), LocalQueue(), 50, concurrency)  # warm up
    for _ in range(rounds):
        memory.append(await drive(MemoryRunStore(), LocalQueue(), runs, concurrency))
        prefix = f"podium-bench-{uuid.uuid4().hex[:8]}"
        client = connect(url)
        store = RedisRunStore(client, prefix=prefix)
        queue = RedisQueue(client, prefix=prefix)
        try:
            before = redis_cpu_s(url)
            redis_client.append(await drive(store, queue, runs, concurrency))
            redis_server.append((redis_cpu_s(url) - before) / (runs * STEPS_PER_RUN) * 1e6)
        finally:
            await client.aclose()
            cleanup(url, prefix)
    mem, red, srv = (statistics.median(x) for x in (memory, redis_client, redis_server))
    return {
        "memory_cpu_us_per_step": mem,
        "redis_cpu_us_per_step": red,
        "redis_server_cpu_us_per_step": srv,
        "ratio": red / mem,
        "ratio_with_server": (red + srv) / mem,
    }


# -- 2. steps/s over worker processes ---------------------------------------------------------


async def steps_per_s(
    url: str, procs: int, runs: int, concurrency: int, tool_cpu_us: int = 0
) -> float:
    prefix = f"podium-bench-{uuid.uuid4().hex[:8]}"
    client = connect(url)
    store = RedisRunStore(client, prefix=prefix)
    queue = RedisQueue(client, prefix=prefix)
    try:
        ids = await submit(store, queue, runs)
        cmd = [sys.executable, "-m", "podium.cli.main", "worker", "--redis", url,
               "--prefix", prefix, "--agent", "bench.bench_distributed:agent", "--burst",
               "--procs", str(procs), "--concurrency", str(concurrency),
               "--log-level", "WARNING"]
        env = dict(os.environ, PODIUM_BENCH_TOOL_CPU_US=str(tool_cpu_us))
        proc = await asyncio.create_subprocess_exec(
            *cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), 300)
        if proc.returncode != 0:
            raise RuntimeError(err.decode()[-2000:])
        records = [await store.get(i) for i in ids]
        assert all(r is not None and r.status == "completed" for r in records)
        start = min(r.started_at or 0.0 for r in records if r is not None)
        end = max(r.finished_at or 0.0 for r in records if r is not None)
        return runs * STEPS_PER_RUN / (end - start)
    finally:
        await client.aclose()
        cleanup(url, prefix)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    cpu = await cpu_per_step(args.redis, args.runs, args.rounds, args.concurrency)
    ones: list[float] = []
    twos: list[float] = []
    for _ in range(args.scale_rounds):  # alternate, so drifting background load hits both
        ones.append(await steps_per_s(args.redis, 1, args.scale_runs, args.concurrency))
        twos.append(await steps_per_s(args.redis, 2, args.scale_runs, args.concurrency))
    one, two = statistics.median(ones), statistics.median(twos)
    heavy_one = heavy_two = 0.0
    if args.heavy_tool_us:
        h1: list[float] = []
        h2: list[float] = []
        for _ in range(args.scale_rounds):
            h1.append(await steps_per_s(args.redis, 1, args.scale_runs // 2, args.concurrency,
                                        args.heavy_tool_us))
            h2.append(await steps_per_s(args.redis, 2, args.scale_runs // 2, args.concurrency,
                                        args.heavy_tool_us))
        heavy_one, heavy_two = statistics.median(h1), statistics.median(h2)
    return {
        **cpu,
        "steps_per_s_1_proc": one,
        "steps_per_s_2_procs": two,
        "scaling": two / one,
        "heavy_tool_us": args.heavy_tool_us,
        "heavy_steps_per_s_1_proc": heavy_one,
        "heavy_steps_per_s_2_procs": heavy_two,
        "heavy_scaling": heavy_two / heavy_one if heavy_one else 0.0,
        "runs": args.runs,
        "scale_runs": args.scale_runs,
        "scale_rounds": args.scale_rounds,
        "concurrency": args.concurrency,
        "cpus": len(os.sched_getaffinity(0)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--runs", type=int, default=400, help="runs per CPU-per-step round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale-runs", type=int, default=3000, help="runs per scaling test")
    parser.add_argument("--scale-rounds", type=int, default=3)
    parser.add_argument("--heavy-tool-us", type=int, default=300,
                        help="also scale with tools burning this much CPU per call (0: skip)")
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        import uvloop

        result = uvloop.run(main_async(args))
    except ImportError:
        result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"CPU µs per step, one worker process, {args.runs} runs × {STEPS_PER_RUN} steps "
          f"(median of {args.rounds}):")
    print(f"  memory store + local queue   {result['memory_cpu_us_per_step']:8.1f}")
    print(f"  Redis store + Redis queue    {result['redis_cpu_us_per_step']:8.1f}  "
          f"({result['ratio']:.2f}× memory; target ≤ 3×)")
    print(f"  + Redis server's own CPU     {result['redis_server_cpu_us_per_step']:8.1f}  "
          f"({result['ratio_with_server']:.2f}× memory, client + server)")
    print(f"Steps/s, `podium worker --procs N --burst`, {args.scale_runs} runs, "
          f"{result['cpus']} CPUs shared with redis-server (median of {args.scale_rounds}):")
    print(f"  1 process    {result['steps_per_s_1_proc']:9.0f}")
    print(f"  2 processes  {result['steps_per_s_2_procs']:9.0f}  "
          f"({result['scaling']:.2f}×; target ≥ 1.7×)")
    if args.heavy_tool_us:
        print(f"  … with tools burning {args.heavy_tool_us} µs of CPU per call "
              f"({args.scale_runs // 2} runs):")
        print(f"  1 process    {result['heavy_steps_per_s_1_proc']:9.0f}")
        print(f"  2 processes  {result['heavy_steps_per_s_2_procs']:9.0f}  "
              f"({result['heavy_scaling']:.2f}×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
