"""Threads: what a run on a thread costs against a plain run (in-memory store).

Per step (the profile's CPU µs per step) a thread run must cost what a plain run does —
no thread code runs per step; per run, joining, taking the turn and settling the thread
show in runs per CPU-second. Modes: ``plain`` (no thread), ``fresh`` (each run its own
new thread), ``continued`` (runs spread over 50 threads, each starting from a history).

    python bench/bench_threads.py [--runs 600] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from podium import Agent, Engine, ProfileAggregator, Scenario, SimulatedModel, tool


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return "42 items"


AGENT = Agent(
    "bench",
    SimulatedModel(Scenario.react("lookup", {"query": "x"}, tool_steps=3)),
    "Look things up.",
    [lookup],
)


def thread_of(mode: str, i: int) -> str | None:
    if mode == "plain":
        return None
    return f"fresh-{i}" if mode == "fresh" else f"continued-{i % 50}"


async def measure(mode: str, runs: int) -> tuple[float, float]:
    """(CPU µs per step, runs per CPU-second) after a warm-up."""
    async with Engine() as engine:
        for i in range(runs // 6):
            await engine.run(AGENT, "q", thread_id=thread_of(mode, -i - 1))
        engine.aggregator = aggregator = ProfileAggregator()
        t0 = time.process_time()
        for i in range(runs):
            await engine.run(AGENT, "q", thread_id=thread_of(mode, i))
        cpu = time.process_time() - t0
    return aggregator.summary().cpu_us_per_step, runs / cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"plain": [], "fresh": [], "continued": []}
    for _ in range(args.rounds):  # interleaved, so drift hits every mode alike
        for mode, found in results.items():
            found.append(await measure(mode, args.runs))
    for mode, found in results.items():
        step = statistics.median(s for s, _ in found)
        rate = statistics.median(r for _, r in found)
        print(f"{mode:10} cpu/step {step:6.1f} µs   runs per cpu-second {rate:8.0f}")


if __name__ == "__main__":
    asyncio.run(main())
