"""Instructions per step, counted by callgrind: the overhead benchmark without the noise.

CPU time on a shared virtual machine moves by ±10 % between runs; instruction
counts do not. This runs the workload of ``podium bench --overhead`` (a ReAct
agent, six tool steps and an answer, an instant model and tool, uvloop) under
``valgrind --tool=callgrind`` twice per loop, with ``--small`` and ``--large``
runs, and reports the difference divided by the extra steps: what one more
step costs, start-up and imports cancelled out.

    python bench/bench_engine_instructions.py [--small 200] [--large 1200]
        [--loops hand,noprof,default] [--cache]

Needs valgrind (``apt-get install valgrind``). The sampled profile re-scales
its provisional CPU figures when a measured slice is off by more than 2 %,
which under valgrind depends on the machine's load; the count is taken with
that tolerance made infinite so that two runs of it agree (the re-scaling
costs ~1k instructions a step when it happens).

``--cache`` adds the level-1 data-cache misses per step, in this machine's cache
(valgrind's simulation, automatic GC off): the hand loop's step fits its cache, the
engine's does not, which is most of why the engine's CPU-time ratio is above its
instruction ratio.
"""

from __future__ import annotations

import asyncio

from _callgrind import per_step_cli

STEPS = 7


async def _workload(loop: str, runs: int) -> None:
    from podium.cli import overhead
    from podium.engine.driver import Engine
    from podium.engine.stopwatch import SampledStopwatch

    SampledStopwatch.tolerance = float("inf")
    if loop == "hand":
        run = overhead.hand_loop()
        await asyncio.gather(*(run("Find podium") for _ in range(runs)))
        return
    engine = Engine(profile=loop != "noprof")
    agent = overhead.podium_agent()
    records = await asyncio.gather(*(engine.run(agent, "Find podium") for _ in range(runs)))
    assert all(r.steps == STEPS for r in records)
    await engine.aclose()


def main() -> None:
    per_step_cli(
        __doc__ or "", __file__, _workload, "loops", "hand,noprof,default", STEPS,
        baseline="hand", versus=lambda count, hand: f"/ hand: {count / hand:.2f}×",
    )


if __name__ == "__main__":
    main()
