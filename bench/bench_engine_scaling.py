"""Engine overhead from 1 to 10,000 sessions, with every default on (issue #10).

The workload: a ReAct agent that makes 6 tool-call steps then answers, an
instant in-process model that decides by counting the tool results in the
history it is given (so it reads the context like a real model), an instant
async tool, N concurrent sessions on one shared ``Engine()`` with its defaults
(profile, journal in the memory store, deadlines, argument validation, context
accounting). The baseline is the loop a careful engineer writes by hand with
dicts and ``json.loads``. Both run in this process in alternating rounds,
CPython's collector at its default settings (a library does not get to tune
it); each round's ratio is ours / hand, and the report gives the median and
spread of those ratios per N.

It also reports, per N: the GC-tracked objects a run holds while it waits in a
tool, the memory per in-flight session, and (``--latency``) throughput with a
20 ms model and a 5 ms tool at N = 1,000.

    python bench/bench_engine_scaling.py [--sessions 1,100,1000,10000] [--rounds 7]
        [--no-profile] [--latency] [--asyncio] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

from podium import Agent, Engine, tool
from podium.messages import ToolCall, Usage
from podium.models.base import Model, ModelRequest, ModelResponse

TOOL_STEPS = 6
STEPS = TOOL_STEPS + 1
INSTRUCTIONS = "You are a helpful research agent. Use the lookup tool."
ARGS = '{"query":"podium"}'


class CountingModel(Model):
    """Calls ``lookup`` until the history holds ``TOOL_STEPS`` tool results, then answers.

    ``delay_s`` > 0 makes each call wait that long (a remote model's latency).
    """

    def __init__(self, delay_s: float = 0.0) -> None:
        self.name = "counting"
        self.delay_s = delay_s

    async def request(self, request: ModelRequest) -> ModelResponse:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        seen = sum(1 for m in request.messages if m.role == "tool")
        if seen < TOOL_STEPS:
            call = ToolCall(f"call_{seen}", "lookup", ARGS)
            return ModelResponse(
                tool_calls=(call,), finish_reason="tool_calls", usage=Usage(50, 10, 0, 1)
            )
        return ModelResponse(content=f"Found {seen} results.", usage=Usage(50, 10, 0, 1))


def make_lookup(delay_s: float) -> Any:
    @tool
    async def lookup(query: str) -> str:
        """Look something up.

        Args:
            query: What to look up.
        """
        if delay_s:
            await asyncio.sleep(delay_s)
        return f"Result for {query}: 42 items found."

    return lookup


def podium_agent(model_s: float = 0.0, tool_s: float = 0.0) -> Agent:
    return Agent(
        "react",
        CountingModel(model_s),
        INSTRUCTIONS,
        [make_lookup(tool_s)],
        max_steps=STEPS + 1,
    )


# -- the baseline ----------------------------------------------------------------------------


def hand_loop(model_s: float = 0.0, tool_s: float = 0.0) -> Callable[[str], Awaitable[str]]:
    async def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
        if model_s:
            await asyncio.sleep(model_s)
        seen = sum(1 for m in messages if m["role"] == "tool")
        if seen < TOOL_STEPS:
            call = {"id": f"call_{seen}", "name": "lookup", "arguments": ARGS}
            return {"role": "assistant", "content": "", "tool_calls": [call]}
        return {"role": "assistant", "content": f"Found {seen} results.", "tool_calls": []}

    async def lookup(query: str) -> str:
        if tool_s:
            await asyncio.sleep(tool_s)
        return f"Result for {query}: 42 items found."

    tools = {"lookup": lookup}

    async def run(user_input: str) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": user_input},
        ]
        while True:
            reply = await model(messages)
            messages.append(reply)
            if not reply["tool_calls"]:
                return str(reply["content"])
            for call in reply["tool_calls"]:
                out = await tools[call["name"]](**json.loads(call["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})

    return run


# -- measurements ----------------------------------------------------------------------------


async def cpu_hand(n: int) -> float:
    run = hand_loop()
    t0 = time.process_time()
    await asyncio.gather(*(run("Find podium") for _ in range(n)))
    return (time.process_time() - t0) / (n * STEPS) * 1e6


async def cpu_podium(engine: Engine, agent: Agent, n: int) -> float:
    t0 = time.process_time()
    records = await asyncio.gather(*(engine.run(agent, "Find podium") for _ in range(n)))
    cpu = time.process_time() - t0
    if any(r.status != "completed" or r.steps != STEPS for r in records):
        raise SystemExit("a run did not complete its 7 steps")
    return cpu / (n * STEPS) * 1e6


class _Gate:
    """A tool that parks every caller until released: runs frozen mid-tool, for counting."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.waiting = 0
        self.all_in = asyncio.Event()
        self.expected = 0

    async def wait(self) -> None:
        self.waiting += 1
        if self.waiting == self.expected:
            self.all_in.set()
        await self.event.wait()


async def held_while_waiting(n: int, profile: bool) -> tuple[float, float, float, float]:
    """(GC-tracked objects per waiting run, bytes per waiting run) for ours and the hand loop.

    Every run is parked in its 4th tool call; the difference to the quiet state,
    divided by n, is what one session waiting in a tool costs.
    """

    def parked_tool(gate: _Gate) -> Any:
        @tool
        async def lookup(query: str) -> str:
            """Look something up.

            Args:
                query: What to look up.
            """
            await gate.wait()
            return f"Result for {query}: 42 items found."

        return lookup

    async def measure(start: Callable[[_Gate], list[asyncio.Task[Any]]]) -> tuple[float, float]:
        gate = _Gate()
        gate.expected = n
        gc.collect()
        before = len(gc.get_objects())
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tasks = start(gate)
        await gate.all_in.wait()
        gc.collect()
        objects = (len(gc.get_objects()) - before) / n
        size = (tracemalloc.get_traced_memory()[0] - base) / n
        tracemalloc.stop()
        gate.event.set()
        await asyncio.gather(*tasks)
        return objects, size

    engine = Engine(**({} if profile else {"profile": False}))
    agent = Agent("react", CountingModel(), INSTRUCTIONS, [parked_tool(_Gate())],
                  max_steps=STEPS + 1)

    def start_podium(gate: _Gate) -> list[asyncio.Task[Any]]:
        parked = agent.with_tools([parked_tool(gate)]) if hasattr(agent, "with_tools") else Agent(
            "react", agent.model, INSTRUCTIONS, [parked_tool(gate)], max_steps=STEPS + 1
        )
        return [asyncio.ensure_future(engine.run(parked, "Find podium")) for _ in range(n)]

    def start_hand(gate: _Gate) -> list[asyncio.Task[Any]]:
        async def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
            seen = sum(1 for m in messages if m["role"] == "tool")
            if seen < TOOL_STEPS:
                call = {"id": f"call_{seen}", "name": "lookup", "arguments": ARGS}
                return {"role": "assistant", "content": "", "tool_calls": [call]}
            return {"role": "assistant", "content": "done", "tool_calls": []}

        async def lookup(query: str) -> str:
            await gate.wait()
            return f"Result for {query}: 42 items found."

        async def run(user_input: str) -> str:
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": INSTRUCTIONS},
                {"role": "user", "content": user_input},
            ]
            while True:
                reply = await model(messages)
                messages.append(reply)
                if not reply["tool_calls"]:
                    return str(reply["content"])
                for call in reply["tool_calls"]:
                    out = await lookup(**json.loads(call["arguments"]))
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})

        return [asyncio.ensure_future(run("Find podium")) for _ in range(n)]

    ours = await measure(start_podium)
    hand = await measure(start_hand)
    await engine.aclose()
    return ours[0], ours[1], hand[0], hand[1]


async def throughput(n: int, seconds: float, model_s: float, tool_s: float) -> tuple[float, float]:
    """Steps/s of ours and the hand loop with ``n`` sessions kept in flight for ``seconds``."""

    async def keep(run_one: Callable[[], Awaitable[Any]]) -> float:
        done = 0
        stop = time.perf_counter() + seconds

        async def lane() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await run_one()
                done += STEPS

        t0 = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(n)))
        return done / (time.perf_counter() - t0)

    hand = hand_loop(model_s, tool_s)
    agent = podium_agent(model_s, tool_s)
    async with Engine() as engine:
        ours = await keep(lambda: engine.run(agent, "Find podium"))
    theirs = await keep(lambda: hand("Find podium"))
    return ours, theirs


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    sessions = [int(s) for s in args.sessions.split(",")]
    agent = podium_agent()
    engine = Engine(**({"profile": False} if args.no_profile else {}))
    await cpu_hand(100)
    await cpu_podium(engine, agent, 100)
    out: dict[str, Any] = {"rounds": args.rounds, "profile": not args.no_profile, "by_n": {}}
    for n in sessions:
        hand: list[float] = []
        ours: list[float] = []
        rounds = args.rounds if n < 10_000 else max(3, args.rounds // 2)
        for i in range(rounds):
            # Alternate which loop goes first, so neither always inherits the other's garbage.
            if i % 2:
                ours.append(await cpu_podium(engine, agent, n))
                hand.append(await cpu_hand(n))
            else:
                hand.append(await cpu_hand(n))
                ours.append(await cpu_podium(engine, agent, n))
        ratios = sorted(o / h for o, h in zip(ours, hand, strict=True))
        entry: dict[str, Any] = {
            "hand_us": round(statistics.median(hand), 2),
            "podium_us": round(statistics.median(ours), 2),
            "ratio": round(statistics.median(ratios), 2),
            "ratio_min": round(ratios[0], 2),
            "ratio_max": round(ratios[-1], 2),
        }
        objs, size, hobjs, hsize = await held_while_waiting(min(n, 2000), not args.no_profile)
        entry |= {
            "gc_objects_waiting": round(objs, 1),
            "hand_gc_objects_waiting": round(hobjs, 1),
            "bytes_per_session": round(size),
            "hand_bytes_per_session": round(hsize),
        }
        out["by_n"][n] = entry
        if not args.json:
            print(
                f"N={n:>6}: hand {entry['hand_us']:6.2f} µs/step  podium {entry['podium_us']:6.2f}"
                f"  ratio {entry['ratio']:.2f}× [{entry['ratio_min']:.2f}–{entry['ratio_max']:.2f}]"
                f"  gc objects waiting {objs:.1f} (hand {hobjs:.1f})"
                f"  memory/session {size / 1024:.1f} KB (hand {hsize / 1024:.1f})",
                flush=True,
            )
    await engine.aclose()
    if args.latency:
        ours, theirs = await throughput(1000, args.seconds, 0.020, 0.005)
        out["latency"] = {"podium_steps_s": round(ours), "hand_steps_s": round(theirs)}
        if not args.json:
            print(f"20 ms model, 5 ms tool, N=1000: podium {ours:,.0f} steps/s, "
                  f"hand {theirs:,.0f} steps/s")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,100,1000,10000")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-profile", action="store_true", help="Engine(profile=False)")
    parser.add_argument("--latency", action="store_true", help="also the 20 ms/5 ms throughput")
    parser.add_argument("--seconds", type=float, default=5.0, help="with --latency")
    parser.add_argument("--asyncio", action="store_true", help="the stdlib loop, not uvloop")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.asyncio:
        result = asyncio.run(main_async(args))
    else:
        import uvloop

        result = uvloop.run(main_async(args))
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
