"""``podium bench --overhead``: engine overhead from 1 to 10,000 sessions, every default on.

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

    podium bench --overhead [--sessions 1,100,1000,10000] [--rounds 7]
        [--no-profile] [--latency] [--loop asyncio] [--json]

(``bench/bench_engine_scaling.py`` runs the same from a checkout.)
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec

from podium.agent import Agent
from podium.engine.driver import Engine
from podium.messages import ToolCall, Usage
from podium.models.base import Model, ModelRequest, ModelResponse
from podium.tools.tool import tool

TOOL_STEPS = 6
STEPS = TOOL_STEPS + 1
#: Issue #10's goal: CPU per step within this many times the hand-written loop's.
TARGET_RATIO = 3.0
#: Issue #10's goal for the always-on workload profile: CPU µs per step at most.
TARGET_PROFILE_US = 3.0
#: Sessions in flight while the profile's own cost is measured.
PROFILE_SESSIONS = 1000
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


def hand_loop(
    model_s: float = 0.0,
    tool_s: float = 0.0,
    wait: Callable[[], Awaitable[Any]] | None = None,
) -> Callable[[str], Awaitable[str]]:
    """The loop a careful engineer writes by hand; ``wait``, if given, is awaited by
    every tool call (to park the runs in their tool)."""

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
        if wait is not None:
            await wait()
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


def parked_tool(gate: _Gate) -> Any:
    """The workload's lookup tool, parked at ``gate`` until it opens."""

    @tool
    async def lookup(query: str) -> str:
        """Look something up.

        Args:
            query: What to look up.
        """
        await gate.wait()
        return f"Result for {query}: 42 items found."

    return lookup


async def held_while_waiting(n: int, profile: bool) -> tuple[float, float, float, float]:
    """(GC-tracked objects per waiting run, bytes per waiting run) for ours and the hand loop.

    Every run is parked in its 4th tool call; the difference to the quiet state,
    divided by n, is what one session waiting in a tool costs.
    """

    async def measure(start: Callable[[_Gate], list[asyncio.Task[Any]]]) -> tuple[float, float]:
        gate = _Gate()
        gate.expected = n
        gc.collect()
        gc.collect()  # what the first pass's finalizers freed, too
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

    engine = Engine(profile=profile)

    def start_podium(gate: _Gate) -> list[asyncio.Task[Any]]:
        parked = Agent("react", CountingModel(), INSTRUCTIONS, [parked_tool(gate)],
                       max_steps=STEPS + 1)
        return [asyncio.ensure_future(engine.run(parked, "Find podium")) for _ in range(n)]

    def start_hand(gate: _Gate) -> list[asyncio.Task[Any]]:
        run = hand_loop(wait=gate.wait)
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


class SessionsResult(msgspec.Struct):
    """One concurrency level: CPU per step (medians of alternating rounds) and what a
    session waiting in its tool holds."""

    sessions: int
    hand_us: float
    podium_us: float
    ratio: float  # median of the per-round ratios
    ratio_min: float
    ratio_max: float
    gc_objects_waiting: float
    hand_gc_objects_waiting: float
    bytes_per_session: int
    hand_bytes_per_session: int


class OverheadResult(msgspec.Struct):
    rounds: int
    profile: bool
    levels: list[SessionsResult]
    target_ratio: float = TARGET_RATIO
    latency_podium_steps_s: int | None = None
    latency_hand_steps_s: int | None = None
    #: What the always-on profile costs per step: ``Engine()`` against
    #: ``Engine(profile=False)`` in alternating rounds at ``PROFILE_SESSIONS`` sessions
    #: (median of the per-round differences, and their spread); None with ``profile=False``.
    profile_us: float | None = None
    profile_us_min: float | None = None
    profile_us_max: float | None = None
    target_profile_us: float = TARGET_PROFILE_US


async def measure(
    sessions: list[int],
    rounds: int,
    *,
    profile: bool = True,
    latency_s: float = 0.0,
    report: Callable[[SessionsResult], None] | None = None,
) -> OverheadResult:
    """Both loops at each level of ``sessions``, ``rounds`` alternating rounds each (half
    as many, at least 3, from 10,000 sessions); ``latency_s`` > 0 adds the 20 ms model /
    5 ms tool throughput at 1,000 sessions, each loop for that long."""
    agent = podium_agent()
    engine = Engine(profile=profile)
    await cpu_hand(100)  # warm both paths up
    await cpu_podium(engine, agent, 100)
    result = OverheadResult(rounds, profile, [])
    for n in sessions:
        hand: list[float] = []
        ours: list[float] = []
        for i in range(rounds if n < 10_000 else max(3, rounds // 2)):
            h, o = await _alternating(
                i, partial(cpu_hand, n), partial(cpu_podium, engine, agent, n)
            )
            hand.append(h)
            ours.append(o)
        ratios = sorted(o / h for o, h in zip(ours, hand, strict=True))
        # Counted over at least 200 parked sessions: one alone is lost in the noise.
        # On a fresh loop in a thread: a loop that just ran thousands of tasks keeps some
        # of them alive in its handle caches until new work reuses them, which would
        # count as objects freed while the parked sessions were counted.
        objs, size, hobjs, hsize = await asyncio.to_thread(
            asyncio.run, held_while_waiting(max(200, min(n, 2000)), profile)
        )
        level = SessionsResult(
            n,
            round(statistics.median(hand), 2),
            round(statistics.median(ours), 2),
            round(statistics.median(ratios), 2),
            round(ratios[0], 2),
            round(ratios[-1], 2),
            round(objs, 1),
            round(hobjs, 1),
            round(size),
            round(hsize),
        )
        result.levels.append(level)
        if report is not None:
            report(level)
    if profile:
        costs = await profile_cost(engine, agent, PROFILE_SESSIONS, rounds)
        result.profile_us = round(statistics.median(costs), 2)
        result.profile_us_min, result.profile_us_max = round(costs[0], 2), round(costs[-1], 2)
    await engine.aclose()
    if latency_s > 0:
        ours_s, hand_s = await throughput(1000, latency_s, 0.020, 0.005)
        result.latency_podium_steps_s, result.latency_hand_steps_s = round(ours_s), round(hand_s)
    return result


async def _alternating(
    i: int, a: Callable[[], Awaitable[float]], b: Callable[[], Awaitable[float]]
) -> tuple[float, float]:
    """Round ``i`` of two measurements, ``(a's, b's)``: which goes first alternates, so
    neither always inherits the other's garbage."""
    if i % 2:
        second = await b()
        return await a(), second
    first = await a()
    return first, await b()


async def profile_cost(engine: Engine, agent: Agent, n: int, rounds: int) -> list[float]:
    """CPU µs per step ``engine`` (its profile on) spends over the same engine with its
    profile off, in ``rounds`` alternating rounds of ``n`` sessions; sorted."""
    bare = Engine(profile=False)
    await cpu_podium(bare, agent, 100)  # warm up
    costs: list[float] = []
    for i in range(max(3, rounds)):
        on, off = await _alternating(
            i, partial(cpu_podium, engine, agent, n), partial(cpu_podium, bare, agent, n)
        )
        costs.append(on - off)
    await bare.aclose()
    return sorted(costs)


def describe_profile(result: OverheadResult) -> str | None:
    if result.profile_us is None:
        return None
    return (
        f"profile {result.profile_us:.2f} µs/step "
        f"[{result.profile_us_min:.2f}–{result.profile_us_max:.2f}], "
        f"N={PROFILE_SESSIONS} (goal ≤ {result.target_profile_us:.0f} µs)"
    )


def describe(level: SessionsResult) -> str:
    """One level as a line of text."""
    return (
        f"N={level.sessions:>6}: hand {level.hand_us:6.2f} µs/step  podium {level.podium_us:6.2f}"
        f"  ratio {level.ratio:.2f}× [{level.ratio_min:.2f}–{level.ratio_max:.2f}]"
        f"  GC objects per waiting session {level.gc_objects_waiting:.1f}"
        f" (hand {level.hand_gc_objects_waiting:.1f})"
        f"  memory per session {level.bytes_per_session / 1024:.1f} KB"
        f" (hand {level.hand_bytes_per_session / 1024:.1f})"
    )


def describe_latency(result: OverheadResult) -> str | None:
    if result.latency_podium_steps_s is None:
        return None
    return (
        f"20 ms model, 5 ms tool, 1,000 sessions: podium {result.latency_podium_steps_s:,} "
        f"steps/s, hand-written loop {result.latency_hand_steps_s:,} steps/s"
    )
