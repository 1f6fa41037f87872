"""A fixed workload for instruction counts of the observability hooks (callgrind, cachegrind).

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \\
        python bench/observe_instructions.py {off,metrics,tracing,both} RUNS

Runs RUNS concurrent runs of the overhead benchmark's agent (7 steps each) after 20 to
warm up, with the metrics hook, the tracer or both; the tracer samples with
Podium's rate limit set to trace the first run only, so every other run is the untraced
case a busy process sees. The clocks are counters (every read advances about 1 µs), so
the steps' timings, and with them the metrics' bucketing work, are the same in every run
and like a native run's rather than valgrind's fifty times slower ones. Automatic garbage
collection is off (a full collection comes or not with tiny differences) and done
between batches instead. Instructions per step: the difference of the totals of two run
counts (say 1,200 and 200) over the steps between them (1,000 × 7).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import sys
import time

_walls = itertools.count(1_000_000_000, 997)
_cpus = itertools.count(1_000_000_000, 991)
time.perf_counter_ns = lambda: next(_walls)  # before podium binds them
time.thread_time_ns = lambda: next(_cpus)

from prometheus_client import CollectorRegistry  # noqa: E402

from bench_engine_overhead import podium_agent  # noqa: E402
from podium import Engine  # noqa: E402
from podium.engine.hook import EngineHook, combine  # noqa: E402
from podium.observe.metrics import RunMetrics  # noqa: E402
from podium.store.memory import MemoryRunStore  # noqa: E402


def _hook(parts: str) -> tuple[RunMetrics | None, EngineHook | None]:
    metrics = RunMetrics(CollectorRegistry()) if parts in ("metrics", "both") else None
    tracer = None
    if parts in ("tracing", "both"):
        from opentelemetry.sdk.trace import TracerProvider

        from podium.observe.sampling import RateLimitedSampler
        from podium.observe.tracing import RunTracer

        tracer = RunTracer(TracerProvider(sampler=RateLimitedSampler(0.0, 1.0)))
    return metrics, combine(metrics, tracer)


async def main(parts: str, runs: int) -> None:
    gc.disable()
    agent = podium_agent()
    metrics, hook = _hook(parts)
    for batch in (20, runs):
        async with Engine(MemoryRunStore()) as engine:
            engine.hook = hook
            await asyncio.gather(*(engine.run(agent, "Find podium") for _ in range(batch)))
        if metrics is not None:
            metrics.fold()
        gc.collect()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1], int(sys.argv[2])))
