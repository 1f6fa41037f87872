"""Instructions per step of the observability hooks, counted by callgrind.

The companion of ``bench_engine_instructions.py`` for ``bench_engine_overhead.py
--observe``: the overhead benchmark's agent (six tool steps and an answer, an instant
model and tool, uvloop), all runs at once, with the Prometheus metrics hook, the tracer
or both, under ``valgrind --tool=callgrind`` with ``--small`` and ``--large`` runs; the
difference divided by the extra steps is what one more step costs, start-up and imports
cancelled out. The tracer samples with Podium's rate limit set to trace the first run
only: every other run is the untraced case a busy process sees.

    python bench/bench_observe_instructions.py [--small 200] [--large 1200]
        [--parts off,metrics,tracing,both]

The clocks are counters (see ``_clock``): the steps' timings, and with them the metrics'
bucketing work, are then the same in every run and like a native run's rather than
valgrind's fifty times slower ones. Automatic garbage collection is off (a
full collection comes or not with tiny differences) and done between the two batches.
Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import random
import time
from collections.abc import Iterator
from typing import Any

from _callgrind import per_step_cli

STEPS = 7


def _clock(seed: int = 1) -> Iterator[int]:
    """A wall clock like a native run's: each read advances 0.5 to 2 µs, one in 300 by
    50 to 500 µs (a collection, another task), from a fixed seed, so the metrics bucket
    realistic figures (outliers included) and two runs count the same instructions. The
    advances are drawn once and cycled: a read costs what ``itertools.count`` did."""
    rng = random.Random(seed)
    advances = [
        rng.randint(50_000, 500_000) if rng.random() < 1 / 300 else rng.randint(500, 2_000)
        for _ in range(4999)
    ]
    return itertools.accumulate(itertools.cycle(advances), initial=10**9)


async def _workload(parts: str, runs: int) -> None:
    # The thread's CPU clock is the wall clock: a thread the OS does not preempt (the
    # default stopwatch scales CPU figures by the CPU/running ratio it measures, 1.0 here).
    walls = _clock()
    time.perf_counter_ns = lambda: next(walls)  # before podium binds them
    time.thread_time_ns = time.perf_counter_ns
    from prometheus_client import CollectorRegistry

    from bench_engine_overhead import podium_agent
    from podium.engine.driver import Engine
    from podium.engine.hook import combine
    from podium.observe.metrics import RunMetrics
    from podium.store.memory import MemoryRunStore

    gc.disable()
    metrics = RunMetrics(CollectorRegistry()) if parts in ("metrics", "both") else None
    tracer: Any = None
    if parts in ("tracing", "both"):
        from opentelemetry.sdk.trace import TracerProvider

        from podium.observe.sampling import RateLimitedSampler
        from podium.observe.tracing import RunTracer

        tracer = RunTracer(TracerProvider(sampler=RateLimitedSampler(0.0, 1.0)))
    hook = combine(metrics, tracer)
    agent = podium_agent()
    for batch in (20, runs):  # the first to warm up
        async with Engine(MemoryRunStore()) as engine:
            engine.hook = hook
            records = await asyncio.gather(*(engine.run(agent, "Find podium")
                                             for _ in range(batch)))
        assert all(r.steps == STEPS for r in records)
        if metrics is not None:
            metrics.fold()
        gc.collect()


def main() -> None:
    per_step_cli(
        __doc__ or "", __file__, _workload, "parts", "off,metrics,tracing,both", STEPS,
        baseline="off", versus=lambda count, off: f"over off: {count / off - 1:+.1%}",
    )


if __name__ == "__main__":
    main()
