"""Instructions per step, counted by callgrind: the overhead benchmark without the noise.

CPU time on a shared virtual machine moves by ±10 % between runs; instruction
counts do not. This runs the workload of ``podium bench --overhead`` (a ReAct
agent, six tool steps and an answer, an instant model and tool, uvloop) under
``valgrind --tool=callgrind`` twice per loop, with ``--small`` and ``--large``
runs, and reports the difference divided by the extra steps: what one more
step costs, start-up and imports cancelled out.

    python bench/bench_engine_instructions.py [--small 200] [--large 1200]
        [--loops hand,noprof,default,busy] [--cache]   # a loop LOOP@N: N runs at a time

``function`` and ``simulated`` are the default loop driven by the models of
``bench_engine_overhead.py --model function|simulated`` (a FunctionModel, the
SimulatedModel's inlined fast path) instead of the ``podium bench`` counting model.

Needs valgrind (``apt-get install valgrind``). The sampled profile takes the loop
thread's CPU/running ratio as 1.0 within a 2 % tolerance, and scales every CPU figure
by it outside; under valgrind the measured ratio depends on the machine's load, so the
``default`` count is taken with that tolerance made infinite, and two runs agree.
``busy`` is the other case, made as deterministic: the thread's CPU clock runs at 95 %
of the wall clock (a busy machine preempts the thread), so the ratio settles at 0.95
and every step's CPU figures are scaled.

A loop named ``LOOP@N`` runs its runs N at a time (``asyncio.gather`` of N, then the
next N): ``--loops function@1,function@10000 --small 10000 --large 20000`` counts a
step at 1 and at 10,000 sessions in flight (without ``@N`` every run is in flight at once).

``--cache`` adds the level-1 data-cache misses per step, in this machine's cache
(valgrind's simulation, automatic GC off): the hand loop's step fits its cache, the
engine's does not, which is most of why the engine's CPU-time ratio is above its
instruction ratio.
"""

from __future__ import annotations

import asyncio
import time

from _callgrind import per_step_cli

STEPS = 7


async def _workload(variant: str, runs: int) -> None:
    from podium.cli import overhead
    from podium.engine.driver import Engine
    from podium.engine.stopwatch import SampledStopwatch

    loop, _, sessions = variant.partition("@")
    batch = int(sessions) if sessions else runs
    batches = [min(batch, runs - start) for start in range(0, runs, batch)]
    _as_fast_as_the_machine()
    if loop == "busy":  # a preempted thread: its CPU clock runs at 95 % of the wall clock
        perf = time.perf_counter_ns
        time.thread_time_ns = lambda: perf() * 95 // 100
    else:
        SampledStopwatch.tolerance = float("inf")
        # Nor is any step's CPU cut for being more than the thread's clock saw: under
        # valgrind on a busy machine that depends on the load (on a starved host every
        # step is cut: ``busy`` is that case).
        from podium.observe import threadclock

        threadclock.CREDIT_NS = threadclock.thread_clock.credit = 1 << 60
    if loop == "hand":
        run = overhead.hand_loop()
        for n in batches:
            await asyncio.gather(*(run("Find podium") for _ in range(n)))
        return
    engine = Engine(profile=loop != "noprof")
    agent = overhead.podium_agent()
    if loop in ("function", "simulated"):  # the overhead bench's models, profile on
        import bench_engine_overhead

        agent = bench_engine_overhead.podium_agent(model=loop)
    for n in batches:
        records = await asyncio.gather(*(engine.run(agent, "Find podium") for _ in range(n)))
        assert all(r.steps == STEPS for r in records)
        del records
    await engine.aclose()


#: How much slower a program runs under callgrind than on the machine (about: 30–60×).
SLOWDOWN = 50


def _as_fast_as_the_machine() -> None:
    """The profile reads the CPU clock where time says to (a span longer than a
    millisecond is checked, an anchor taken at most every half millisecond): under
    callgrind every step would be "long". Its thresholds are scaled by the slowdown, so the
    count is of the clock reads a step costs on the machine."""
    from podium.engine import exact_stopwatch, sampled_stopwatch
    from podium.observe import threadclock

    for module in (exact_stopwatch, sampled_stopwatch, threadclock):
        for name in ("LONG_NS", "ANCHOR_NS", "CALIBRATE_NS", "CREDIT_NS"):
            if hasattr(module, name):
                setattr(module, name, getattr(module, name) * SLOWDOWN)


def main() -> None:
    per_step_cli(
        __doc__ or "", __file__, _workload, "loops", "hand,noprof,default,busy", STEPS,
        baseline="hand", versus=lambda count, hand: f"/ hand: {count / hand:.2f}×",
    )


if __name__ == "__main__":
    main()
