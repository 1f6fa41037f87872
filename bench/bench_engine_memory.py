"""Memory held per waiting session: bytes, GC-tracked objects, and where they come from.

At 10,000 sessions a step finds its run's state out of the CPU's caches, so what a run
holds while it waits (and what its next step touches) is what its cost grows with. This
parks N runs in their 4th tool call (the workload of ``podium bench --overhead``: a
ReAct agent, an in-process model, an async tool) and reports, per waiting run, the bytes
``tracemalloc`` sees and the objects the collector tracks, against the hand-written
loop's; ``--top K`` breaks the bytes down by the line that allocated them, and
``--types`` the objects by type. ``--unstarted`` counts N sessions created and not
started yet instead: what ``asyncio.gather`` of N runs holds in
``bench_engine_overhead.py``, whose instant model and tool never make a run wait (each
runs to its end in one slice), so its 10,000 sessions are that many unstarted ones.

    python bench/bench_engine_memory.py [--sessions 1000] [--no-profile] [--top 12]
        [--types] [--unstarted] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

from podium.agent import Agent
from podium.cli.overhead import (
    INSTRUCTIONS,
    STEPS,
    CountingModel,
    _Gate,
    hand_loop,
    parked_tool,
)
from podium.engine.driver import Engine

Start = Callable[[_Gate], list["asyncio.Task[Any]"]]


async def _measure(
    n: int, start: Start, top: int, types: bool, unstarted: bool = False
) -> dict[str, Any]:
    gate = _Gate()
    gate.expected = 0 if unstarted else n
    gc.collect()
    gc.collect()
    before_ids = {id(o) for o in gc.get_objects()} if types else set()
    before = len(gc.get_objects())
    tracemalloc.start(1)
    base = tracemalloc.get_traced_memory()[0]
    first = tracemalloc.take_snapshot() if top else None
    tasks = start(gate)
    if not unstarted:
        await gate.all_in.wait()
    gc.collect()
    out: dict[str, Any] = {
        "gc_objects": round((len(gc.get_objects()) - before) / n, 2),
        "bytes": round((tracemalloc.get_traced_memory()[0] - base) / n, 1),
    }
    if first is not None:
        diff = tracemalloc.take_snapshot().compare_to(first, "lineno")
        out["by_line"] = [
            (f"{d.traceback[0].filename.split('/src/')[-1]}:{d.traceback[0].lineno}",
             round(d.size_diff / n, 1))
            for d in diff[:top]
        ]
    tracemalloc.stop()
    if types:
        sizes: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        for o in gc.get_objects():
            if id(o) not in before_ids and o is not before_ids:
                name = type(o).__qualname__
                counts[name] += 1
                sizes[name] += sys.getsizeof(o)
        out["by_type"] = [
            (name, round(counts[name] / n, 2), round(size / n, 1))
            for name, size in sizes.most_common(12)
        ]
    gate.event.set()
    await asyncio.gather(*tasks)
    return out


async def measure(
    n: int, profile: bool, top: int, types: bool, unstarted: bool = False
) -> dict[str, Any]:
    engine = Engine(profile=profile)

    def podium(gate: _Gate) -> list[asyncio.Task[Any]]:
        agent = Agent("react", CountingModel(), INSTRUCTIONS, [parked_tool(gate)],
                      max_steps=STEPS + 1)
        return [asyncio.ensure_future(engine.run(agent, "Find podium")) for _ in range(n)]

    def hand(gate: _Gate) -> list[asyncio.Task[Any]]:
        run = hand_loop(wait=gate.wait)
        return [asyncio.ensure_future(run("Find podium")) for _ in range(n)]

    await _measure(min(n, 50), podium, 0, False)  # warm up: the process's one-time objects
    await _measure(min(n, 50), hand, 0, False)
    ours = await _measure(n, podium, top, types, unstarted)
    theirs = await _measure(n, hand, top, types, unstarted)
    await engine.aclose()
    return {"sessions": n, "profile": profile, "unstarted": unstarted, "podium": ours,
            "hand": theirs}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--top", type=int, default=0, help="bytes by allocating line")
    parser.add_argument("--types", action="store_true", help="tracked objects by type")
    parser.add_argument("--unstarted", action="store_true",
                        help="sessions created but not started yet (what asyncio.gather "
                             "of N runs holds: the overhead bench's runs never wait)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(measure(args.sessions, not args.no_profile, args.top, args.types,
                                 args.unstarted))
    if args.json:
        print(json.dumps(result))
        return
    for name in ("podium", "hand"):
        row = result[name]
        print(f"{name:>6}: {row['bytes']:8.1f} bytes, {row['gc_objects']:5.2f} GC-tracked "
              f"objects per waiting session ({result['sessions']:,} sessions)")
        for where, size in row.get("by_line", ()):
            print(f"        {size:8.1f} B  {where}")
        for kind, count, size in row.get("by_type", ()):
            print(f"        {count:5.2f} × {kind:<28} {size:8.1f} B")


if __name__ == "__main__":
    main()
