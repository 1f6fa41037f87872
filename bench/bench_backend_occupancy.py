"""How many concurrent agent runs keep a simulated backend of capacity C ≥ 90 % busy?

One ``podium sim-server`` (capacity C, a continuous-batching latency model)
runs in its own process on its own core; this process, pinned to one core,
drives closed-loop runs of a Podium agent — the engine with validation,
context accounting, checkpoints and the profile — on ``BackendPool`` →
``OpenAIChatModel``: each run makes ``tool_steps + 1`` model calls with a tool
call (an I/O wait) between them and a history that grows every step, then a
new run starts.
For each concurrency it reports the backend's occupancy (busy sequence-seconds
from ``/metrics`` over C × the window), agent steps per second, and this
worker's CPU utilization (process CPU time / wall time, of one core).

    python bench/bench_backend_occupancy.py [--capacity 64] [--window 4] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import aiohttp
import msgspec

from _simproc import SimServer, pin_self
from podium import Agent, Engine, MemoryRunStore, tool
from podium.engine.records import StepCommitted, StepRecord
from podium.models import Backend, BackendPool, OpenAIChatModel

SYSTEM = "You are a research agent. Think step by step. " * 30


class Counters:
    def __init__(self) -> None:
        self.steps = 0
        self.runs = 0
        self.errors = 0


def make_agent(pool: BackendPool, tool_s: float) -> Agent:
    """A Podium agent on the pool: the engine, validation, context and profile all on."""

    @tool(timeout=10.0)
    async def search(q: str) -> str:
        """Search the web.

        Args:
            q: The query.
        """
        await asyncio.sleep(tool_s)  # the tool: an I/O wait (HTTP API, database)
        return "Paris: 2.1M inhabitants. " * 6

    return Agent("researcher", pool, SYSTEM, [search], max_steps=20)


async def metrics(session: aiohttp.ClientSession, root: str) -> dict[str, Any]:
    async with session.get(root + "/metrics?format=json") as resp:
        data: dict[str, Any] = await resp.json()
        return data


async def measure(
    root: str, base_url: str, concurrency: int, args: argparse.Namespace
) -> dict[str, Any]:
    model = OpenAIChatModel(
        base_url, "podium-sim", stream=args.stream, max_connections=4 * args.capacity
    )
    pool = BackendPool([Backend(model, capacity=args.capacity)])
    agent = make_agent(pool, args.tool_ms / 1e3)
    c = Counters()
    stop = False

    def count(run_id: str, entry: object) -> None:
        if isinstance(entry, StepRecord | StepCommitted):
            c.steps += 1

    engine = Engine(MemoryRunStore(), observers=[count])

    async def runner() -> None:
        while not stop:
            record = await engine.run(agent, "Find facts about Paris.")
            engine.store.forget(record.run_id)  # type: ignore[attr-defined]
            if record.status == "completed":
                c.runs += 1
            else:
                c.errors += 1

    async with aiohttp.ClientSession() as session, pool, engine:
        tasks = [asyncio.create_task(runner()) for _ in range(concurrency)]
        await asyncio.sleep(args.warmup)
        m0, s0, c0, t0 = (
            await metrics(session, root),
            c.steps,
            time.process_time(),
            time.perf_counter(),
        )
        await asyncio.sleep(args.window)
        m1, s1, c1, t1 = (
            await metrics(session, root),
            c.steps,
            time.process_time(),
            time.perf_counter(),
        )
        stop = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    busy = m1["busy_seq_seconds"] - m0["busy_seq_seconds"]
    wall = t1 - t0
    return {
        "concurrency": concurrency,
        "occupancy": busy / (args.capacity * (m1["uptime_s"] - m0["uptime_s"])),
        "steps_per_s": (s1 - s0) / wall,
        "worker_cpu_util": (c1 - c0) / wall,
        "cpu_us_per_step": (c1 - c0) / max(1, s1 - s0) * 1e6,
        "errors": c.errors,
    }


async def sweep(server: SimServer, args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for n in args.concurrency:
        row = await measure(server.root, server.base_url, n, args)
        out.append(row)
        if not args.json:
            print(
                f"  concurrency {n:4d}: occupancy {row['occupancy']:6.1%}  "
                f"steps/s {row['steps_per_s']:7.1f}  "
                f"worker CPU {row['worker_cpu_util']:6.1%} of one core"
                f"  ({row['cpu_us_per_step']:.0f} µs/step)",
                flush=True,
            )
    return out


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--capacity", type=int, default=64)
    p.add_argument("--concurrency", type=int, nargs="+", default=None)
    p.add_argument("--step-ms", type=float, default=15.0, help="decode step at batch size 0")
    p.add_argument("--step-per-seq-us", type=float, default=100.0)
    p.add_argument("--prefill-per-token-us", type=float, default=20.0)
    p.add_argument("--output-tokens", type=int, default=24)
    p.add_argument("--tool-steps", type=int, default=3)
    p.add_argument("--tool-ms", type=float, default=100.0, help="tool latency between model calls")
    p.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--warmup", type=float, default=1.5)
    p.add_argument("--window", type=float, default=4.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    cap = args.capacity
    if args.concurrency is None:
        args.concurrency = sorted({cap // 2, cap, cap * 5 // 4, cap * 3 // 2, cap * 2, cap * 3})
    server = SimServer(
        [
            "--capacity",
            str(cap),
            "--step-ms",
            str(args.step_ms),
            "--step-per-seq-us",
            str(args.step_per_seq_us),
            "--prefill-per-token-us",
            str(args.prefill_per_token_us),
            "--output-tokens",
            str(args.output_tokens),
            "--tool-steps",
            str(args.tool_steps),
        ],
        cpu=1,
    )
    pin_self(0)
    if not args.json:
        print(f"backend capacity {cap}, tool {args.tool_ms:.0f} ms, stream={args.stream}:")
    try:
        import uvloop

        rows = uvloop.run(sweep(server, args))
    finally:
        server.close()
    enough = [r for r in rows if r["occupancy"] >= 0.9]
    first = enough[0] if enough else None
    result = {"capacity": cap, "rows": rows, "first_concurrency_at_90pct": first}
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    elif first is None:
        print("no concurrency tried reached 90 % occupancy")
    else:
        print(
            f"≥90 % occupancy from concurrency {first['concurrency']}: "
            f"{first['occupancy']:.1%} busy, {first['steps_per_s']:.0f} steps/s, "
            f"worker CPU {first['worker_cpu_util']:.1%} of one core"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
