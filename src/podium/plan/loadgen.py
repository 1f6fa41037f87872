"""One worker process under load, measured: what ``podium plan --check`` and
``bench/bench_plan.py`` start once per planned worker.

Two ways to load it, both with the bench's engine (memory store, the serving GC
settings), so that what is measured is what ``podium bench`` profiled:

- **open** (``--rate R``): runs arrive at random (Poisson) at ``R`` per second, whether or
  not the earlier ones finished, at most ``--concurrency`` driven at once (the rest wait
  for a slot, as queued runs wait for a worker); latency is from arrival to end.
- **closed** (``--closed C``): ``C`` runs in flight all the time, a new one as each ends:
  at a high ``C`` the loop is never idle, and runs per second is the saturation
  throughput.

Prints one JSON object: the latencies (seconds) of the runs after the warm-up, the wall
and CPU seconds of the measured part, and how many runs failed.

    python -m podium.plan.loadgen --scenario react.toml --rate 400 --runs 6000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time

import msgspec

from podium.agent import Agent
from podium.cli.scenario import build_agent, load_scenario
from podium.engine.driver import Engine
from podium.gctune import tune_for_serving
from podium.observe.loopcost import ThreadCounters, thread_counters
from podium.store.memory import MemoryRunStore

__all__ = ("LoadResult", "closed_loop", "main", "open_loop", "runqueue_wait_s")

#: The share of the runs that fill the empty worker and are not measured.
WARMUP = 0.1


class LoadResult(msgspec.Struct, frozen=True):
    latencies_s: list[float]
    wall_s: float
    cpu_s: float
    failed: int
    runs: int
    #: Seconds the loop's thread was ready to run but waited for a CPU (other processes
    #: had it): what a shared machine takes from a worker, from /proc (0 where absent).
    runqueue_wait_s: float = 0.0
    #: The garbage collector's pauses over the measured part: the longest and their sum
    #: (a pause stops the loop, every run in flight waits).
    gc_pause_max_s: float = 0.0
    gc_pause_total_s: float = 0.0
    #: Open load: seconds from the first measured arrival to the last (the rate's span:
    #: the drain after the last arrival is no part of it). 0 for a closed load.
    arrivals_s: float = 0.0
    #: Times the loop's thread was scheduled onto a CPU (schedstat): the run-queue wait
    #: over them is the mean wait of one episode.
    runqueue_episodes: int = 0
    #: Times the loop's thread went to sleep with nothing to do (voluntary context
    #: switches): each costs a wake-up's CPU, which a saturated loop does not pay.
    wakeups: int = 0


class _GcPauses:
    """Times the collector's pauses (``gc.callbacks``) while it is installed."""

    def __init__(self) -> None:
        self.started = 0.0
        self.longest = self.total = 0.0
        self.on = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        elif self.started and self.on:
            pause = time.perf_counter() - self.started
            self.longest = max(self.longest, pause)
            self.total += pause

    def __enter__(self) -> _GcPauses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def runqueue_wait_s() -> float:
    """This thread's time waiting on a run queue so far (Linux's schedstat)."""
    return thread_counters().runqueue_s


class _Window:
    """The measured part of a load: from the first run after the warm-up to the end."""

    def __init__(self, runs: int, pauses: _GcPauses) -> None:
        self.runs = runs
        self.first = int(runs * WARMUP)
        self.pauses = pauses
        self.latencies: list[tuple[int, float]] = []
        self.failed = 0
        self.t0 = self.cpu0 = self.last_arrival = 0.0
        self.counters = ThreadCounters()

    def open(self) -> None:
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        self.counters = thread_counters()
        self.pauses.on = True

    def add(self, i: int, latency: float, ok: bool) -> None:
        if i >= self.first:
            self.latencies.append((i, latency))
            self.failed += not ok

    def close(self) -> LoadResult:
        host = thread_counters() - self.counters
        # In arrival order (the order runs started): runs slow together stay together,
        # which a percentile's confidence interval needs (podium.plan.confidence).
        latencies = [latency for _, latency in sorted(self.latencies)]
        return LoadResult(
            latencies, time.perf_counter() - self.t0, time.process_time() - self.cpu0,
            self.failed, self.runs, host.runqueue_s, self.pauses.longest,
            self.pauses.total, max(0.0, self.last_arrival - self.t0), host.episodes,
            host.wakeups)


async def _one(engine: Engine, store: MemoryRunStore, agent: Agent) -> bool:
    record = await engine.run(agent, "Find out what Podium is.")
    store.forget(record.run_id)  # keep memory flat, as the bench does
    return record.status == "completed"


async def open_loop(agent: Agent, rate: float, runs: int, concurrency: int,
                    seed: int = 1) -> LoadResult:
    """Poisson arrivals at ``rate``; the runs after the first :data:`WARMUP` share are
    measured (latency from arrival, the rate over their span)."""
    store = MemoryRunStore()
    rng = random.Random(seed)
    slots = asyncio.Semaphore(concurrency)
    tune_for_serving()
    with _GcPauses() as pauses:
        window = _Window(runs, pauses)
        async with store, Engine(store) as engine:

            async def arrive(i: int, due: float) -> None:
                # From when the run was due, not when the loop got to it: a loop behind
                # (busy, or off its core) starts arrivals late, and the lateness is the
                # run's as the simulation counts it (no coordinated omission).
                async with slots:
                    ok = await _one(engine, store, agent)
                window.add(i, time.perf_counter() - due, ok)

            tasks: set[asyncio.Task[None]] = set()
            due = time.perf_counter()
            for i in range(runs):
                due += rng.expovariate(rate)
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if i == window.first:
                    window.open()
                task = asyncio.create_task(arrive(i, due))
                window.last_arrival = time.perf_counter()
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks))
            return window.close()


async def closed_loop(agent: Agent, concurrency: int, runs: int) -> LoadResult:
    """``concurrency`` lanes of back-to-back runs; measured after the first share."""
    store = MemoryRunStore()
    started = 0
    tune_for_serving()
    with _GcPauses() as pauses:
        window = _Window(runs, pauses)
        async with store, Engine(store) as engine:

            async def lane() -> None:
                nonlocal started
                while started < runs:
                    i = started
                    started += 1
                    if i == window.first:
                        window.open()
                    t0 = time.perf_counter()
                    ok = await _one(engine, store, agent)
                    window.add(i, time.perf_counter() - t0, ok)

            await asyncio.gather(*(lane() for _ in range(concurrency)))
            return window.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m podium.plan.loadgen", description=__doc__)
    p.add_argument("--scenario", help="scenario file (default: built-in ReAct)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--rate", type=float, help="open load: runs per second (Poisson)")
    how.add_argument("--closed", type=int, metavar="C", help="closed load: C runs at once")
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=256, help="open load: slots")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="write the JSON to this file (default: stdout)")
    args = p.parse_args(argv)
    agent = build_agent(load_scenario(args.scenario))
    import uvloop

    if args.rate is not None:
        result = uvloop.run(open_loop(agent, args.rate, args.runs, args.concurrency, args.seed))
    else:
        result = uvloop.run(closed_loop(agent, args.closed, args.runs))
    data = msgspec.json.encode(result) + b"\n"
    if args.out:  # a file: a pipe its parent is not reading yet could cut a long result
        with open(args.out, "wb") as f:
            f.write(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
