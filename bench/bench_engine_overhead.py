"""CPU per step: Podium's engine versus a minimal hand-written asyncio agent loop.

The workload (issue #2): a ReAct agent making 6 tool-call steps then a final
answer, an instant simulated model, an instant async tool, 1,000 concurrent
runs. Both loops run in this one process, in alternating rounds, and the
report gives the median CPU µs per step of each and their ratio.

    python bench/bench_engine_overhead.py [--runs 1000] [--rounds 9] [--uvloop] [--json]
        [--screening]   # with the injection screen on every input and tool result
        [--observe [both|metrics|tracing]] [--sample RATIO]
        [--model simulated|function|both|openai|all] [--sessions 1,100,1000]

``--model function`` drives the agent with a :class:`~podium.FunctionModel` (a plain
Python function returning the same replies, as a user's own model object would),
not the simulated model, whose replies the engine takes on an inlined fast path.
``--model openai`` drives it with an :class:`~podium.OpenAIChatModel` talking to a real
``podium sim-server`` subprocess on a loopback port with zero latency; its hand loop calls
the same model object, so the HTTP client's CPU is common to both and the ratio is the
engine's overhead on top (the server's CPU, in its own process, is not counted).
``--sessions N1,N2,…`` measures each level apart: N runs in flight at once, in as
many batches as make about ``--runs`` × 7 steps, the hand loop alike; the report
gives the ratio per model and level. With an instant tool and model a run never
waits: each completes in one resume, so N is N runs started together, not N waiting
at once. ``--tool-waits`` makes both loops' tool wait one turn of the event loop (as a
tool awaiting I/O does), so every step of all N runs interleaves: N sessions really in
flight, each parked in its tool while the others step.

``--observe`` also measures the engine with Prometheus metrics and OpenTelemetry
tracing on (spans batched and exported over OTLP/HTTP to a sink in another process,
as a collector is: the export's CPU, encoding and request, is counted, the collector's
is not) and reports its overhead over both off. Tracing
samples as ``podium serve`` and ``podium worker`` do by default (parent-based, up to one
root run a second, a burst of ten: see podium.observe.sampling); ``--sample R`` traces a
share R of the runs instead (``parentbased_traceidratio``; 1 traces every run).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from typing import Any

from podium import (
    Agent,
    Engine,
    FunctionModel,
    ProfileAggregator,
    Scenario,
    ScreeningPolicy,
    SimulatedModel,
    tool,
    tool_call_reply,
)
from podium.messages import Message
from podium.models.base import Model, ModelRequest, ModelResponse, ToolDefinition
from podium.models.openai import OpenAIChatModel
from podium.store.memory import MemoryRunStore

TOOL_STEPS = 6


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"Result for {query}: 42 items found."


@tool(name="lookup")
async def lookup_waiting(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    await asyncio.sleep(0)  # one turn of the loop, as a tool awaiting I/O
    return f"Result for {query}: 42 items found."


def react_reply(messages: object, request: ModelRequest) -> ModelResponse | str:
    """The simulated model's replies, from a user's function: six lookups, then done."""
    if request.step < TOOL_STEPS:
        return tool_call_reply(("lookup", '{"query":"podium"}'))
    return "Done."


def podium_agent(
    screening: bool = False, model: str = "simulated", url: str = "", tool_waits: bool = False
) -> Agent:
    chosen: Model
    if model == "function":
        chosen = FunctionModel(react_reply, name="react")
    elif model == "openai":
        chosen = OpenAIChatModel(url, "podium-sim")
    else:
        chosen = SimulatedModel(
            Scenario.react("lookup", {"query": "podium"}, tool_steps=TOOL_STEPS))
    return Agent(
        "react",
        chosen,
        "You are a helpful research agent. Use the lookup tool.",
        [lookup_waiting if tool_waits else lookup],
        max_steps=TOOL_STEPS + 2,
        screening=ScreeningPolicy() if screening else None,
    )


# -- the baseline: what a careful engineer writes by hand ------------------------------------


async def hand_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    steps = sum(1 for m in messages if m["role"] == "assistant")
    if steps < TOOL_STEPS:
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": f"call_{steps}", "name": "lookup", "arguments": '{"query":"podium"}'}
            ],
        }
    return {"role": "assistant", "content": "Done.", "tool_calls": []}


async def hand_lookup(query: str) -> str:
    return f"Result for {query}: 42 items found."


async def hand_lookup_waiting(query: str) -> str:
    await asyncio.sleep(0)  # one turn of the loop, as a tool awaiting I/O
    return f"Result for {query}: 42 items found."


HAND_TOOLS = {"lookup": hand_lookup}


async def hand_run(user_input: str) -> str:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful research agent. Use the lookup tool."},
        {"role": "user", "content": user_input},
    ]
    while True:
        reply = await hand_model(messages)
        messages.append(reply)
        if not reply["tool_calls"]:
            return str(reply["content"])
        for call in reply["tool_calls"]:
            args = json.loads(call["arguments"])
            out = await HAND_TOOLS[call["name"]](**args)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})


HAND_TOOL_DEFS = (ToolDefinition("lookup", "Look something up.", {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),)


async def hand_run_model(model: OpenAIChatModel, user_input: str) -> str:
    """The hand loop around a user's model object: its own messages, the model's API."""
    messages = [
        Message("system", "You are a helpful research agent. Use the lookup tool."),
        Message("user", user_input),
    ]
    while True:
        reply = await model.request(ModelRequest(messages, HAND_TOOL_DEFS))
        messages.append(Message("assistant", reply.content, reply.tool_calls))
        if not reply.tool_calls:
            return reply.content
        for call in reply.tool_calls:
            args = json.loads(call.arguments)
            out = await HAND_TOOLS[call.name](**args)
            messages.append(Message("tool", out, tool_call_id=call.id))


def sim_server() -> tuple[subprocess.Popen[str], str]:
    """A ``podium sim-server`` with no latency on a free loopback port, and its /v1 URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "podium", "sim-server", "--port", "0", "--uvloop",
         "--step-ms", "0", "--step-per-seq-us", "0", "--prefill-per-token-us", "0",
         "--capacity", "100000", "--output-tokens", "4", "--tool-steps", str(TOOL_STEPS)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "listening on http://127.0.0.1:PORT"
    return proc, line.split()[-1] + "/v1"


# -- measurement -----------------------------------------------------------------------------


async def measure_hand(runs: int, batches: int = 1, model: OpenAIChatModel | None = None) -> float:
    t0 = time.process_time()
    for _ in range(batches):
        await asyncio.gather(*(
            hand_run("Find podium") if model is None else hand_run_model(model, "Find podium")
            for _ in range(runs)))
    await asyncio.sleep(0)  # its tasks are freed on the next turn: counted, as ours are
    return (time.process_time() - t0) / (runs * batches * (TOOL_STEPS + 1)) * 1e6


async def measure_levels(
    agents: dict[str, Agent], levels: list[int], runs: int, rounds: int
) -> dict[str, Any]:
    """Per model and level: the median per-round ratio of the engine's CPU per step to the
    hand loop's (each round measures, per model, its hand loop then the engine, back to
    back; an OpenAIChatModel's hand loop calls that same model object)."""
    engine = Engine(MemoryRunStore())  # one shared engine, as a service runs
    out: dict[str, Any] = {}
    for level in levels:
        batches = max(1, runs // level)
        hand: dict[str, list[float]] = {name: [] for name in agents}
        ours: dict[str, list[float]] = {name: [] for name in agents}
        user = {n: a.model if isinstance(a.model, OpenAIChatModel) else None
                for n, a in agents.items()}
        for name, agent in agents.items():  # warm up
            await _batches(engine, agent, min(level, 50), 1)
            await measure_hand(min(level, 50), 1, user[name])
        for _ in range(rounds):
            for name, agent in agents.items():
                gc.collect()
                hand[name].append(await measure_hand(level, batches, user[name]))
                gc.collect()
                ours[name].append(await _batches(engine, agent, level, batches))
        for name, cpu in ours.items():
            ratios = sorted(p / h for p, h in zip(cpu, hand[name], strict=True))
            out[f"{name}@{level}"] = {
                "sessions": level, "model": name, "batches": batches, "rounds": rounds,
                "hand_cpu_us_per_step": round(statistics.median(hand[name]), 2),
                "podium_cpu_us_per_step": round(statistics.median(cpu), 2),
                "ratio": round(statistics.median(ratios), 2),
                "ratio_min": round(ratios[0], 2), "ratio_max": round(ratios[-1], 2),
            }
            print(json.dumps(out[f"{name}@{level}"]), file=sys.stderr, flush=True)  # progress
    await engine.aclose()
    for model in user.values():
        if model is not None:
            await model.aclose()
    return out


async def _batches(engine: Engine, agent: Agent, runs: int, batches: int) -> float:
    t0 = time.process_time()
    steps = 0
    for _ in range(batches):
        records = await asyncio.gather(*(engine.run(agent, "Find podium") for _ in range(runs)))
        assert all(r.status == "completed" for r in records), "every run must complete"
        steps += sum(r.steps for r in records)
    await asyncio.sleep(0)
    return (time.process_time() - t0) / steps * 1e6


async def measure_podium(
    agent: Agent, runs: int, observe: Observability | None = None
) -> tuple[float, float]:
    store = MemoryRunStore()
    aggregator = ProfileAggregator()
    async with Engine(store, aggregator=aggregator) as engine:
        t0 = time.process_time()
        if observe is not None:
            engine.hook = observe.hook()
        records = await asyncio.gather(*(engine.run(agent, "Find podium") for _ in range(runs)))
        if observe is not None:
            await observe.finish()  # fold the metrics, export every span: counted too
        # The runs' tasks are freed on the loop's next turn (its handle holds the gather until
        # then): a turn here counts that in every configuration, not only in those whose
        # finish() awaits (1-1.5 ms a round of 2,000 runs, about 1 % of it).
        await asyncio.sleep(0)
        cpu = time.process_time() - t0
    assert all(r.status == "completed" for r in records), "every run must complete"
    steps = sum(r.steps for r in records)
    assert steps == runs * (TOOL_STEPS + 1)
    return cpu / steps * 1e6, aggregator.summary().cpu_us_per_step


class Observability:
    """Metrics and tracing as a serving process runs them, with a real OTLP exporter."""

    def __init__(self, parts: str = "both", sample: float | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from prometheus_client import CollectorRegistry

        self.sink = subprocess.Popen(
            [sys.executable, "-c", _SINK], stdout=subprocess.PIPE, text=True
        )
        assert self.sink.stdout is not None
        port = int(self.sink.stdout.readline())
        endpoint = f"http://127.0.0.1:{port}/v1/traces"
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        self.parts = parts
        from podium.observe.tracing import default_sampler

        sampler = default_sampler({}) if sample is None else ParentBased(TraceIdRatioBased(sample))
        self.provider = TracerProvider(sampler=sampler)
        # A queue that holds every span of a round: the default (2,048) drops spans when every
        # run is traced, and a dropped span is never encoded, so its cost would go uncounted.
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=endpoint), max_queue_size=1 << 20))
        self.registry = CollectorRegistry()
        self._metrics: Any = None

    def hook(self) -> Any:
        if self.parts == "off":
            return None
        from podium.engine.hook import combine
        from podium.observe.metrics import RunMetrics
        from podium.observe.tracing import RunTracer

        metrics = None
        if self.parts in ("both", "metrics"):  # tracing alone runs no metrics task either
            if self._metrics is None:
                self._metrics = RunMetrics(self.registry)
            metrics = self._metrics
            metrics.start()
        return combine(
            metrics, RunTracer(self.provider) if self.parts in ("both", "tracing") else None
        )

    async def finish(self) -> None:
        if self._metrics is not None:
            await self._metrics.stop()
        self.provider.force_flush()

    def close(self) -> None:
        self.provider.shutdown()
        self.sink.terminate()
        self.sink.wait()


# The OTLP collector stand-in: answers every export with 200 and prints its port first.
_SINK = """
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_port, flush=True)
server.serve_forever()
"""


async def main_async(
    runs: int, rounds: int, observe: str | None = None, sample: float | None = None,
    screening: bool = False,
) -> dict[str, Any]:
    agent = podium_agent(screening)
    obs = Observability(observe, sample) if observe else None
    await measure_hand(50)  # warm up both paths
    await measure_podium(agent, 50)
    if obs is not None:
        await measure_podium(agent, 50, obs)
    hand: list[float] = []
    ours: list[float] = []
    profiled: list[float] = []
    observed: list[float] = []
    for i in range(rounds):
        gc.collect()
        hand.append(await measure_hand(runs))
        # Whichever of two back-to-back measurements comes second runs ~10 % slower here (an
        # A/A run, --observe off, shows it), so observed and plain swap places every round.
        observed_first = obs is not None and i % 2 == 1
        if observed_first:
            gc.collect()
            observed.append((await measure_podium(agent, runs, obs))[0])
        gc.collect()
        p, prof = await measure_podium(agent, runs)
        ours.append(p)
        profiled.append(prof)
        if obs is not None and not observed_first:
            gc.collect()
            observed.append((await measure_podium(agent, runs, obs))[0])
    if obs is not None:
        obs.close()
    h, o = statistics.median(hand), statistics.median(ours)
    # Each round measures both loops back to back; the median of those per-round ratios is
    # the figure least moved by a noisy neighbour on a shared machine.
    ratios = [p / b for p, b in zip(ours, hand, strict=True)]
    extra: dict[str, Any] = {}
    if observed:
        over = [o / p - 1 for o, p in zip(observed, ours, strict=True)]
        # Pairs of rounds (one of each order) cancel the order's bias; then the median.
        pairs = zip(over[::2], over[1::2], strict=False)
        paired = [math.sqrt((1 + a) * (1 + b)) - 1 for a, b in pairs]
        extra = {
            "observed_cpu_us_per_step": round(statistics.median(observed), 2),
            "observe_overhead": round(statistics.median(paired or over), 3),
            "round_observe_overheads": [round(x, 3) for x in over],
            "target_observe_overhead": 0.15,
            "observe": observe,
            "trace_sample": "default" if sample is None else sample,
        }
    return {
        **extra,
        "runs": runs,
        "rounds": rounds,
        "steps_per_run": TOOL_STEPS + 1,
        "hand_cpu_us_per_step": round(h, 2),
        "podium_cpu_us_per_step": round(o, 2),
        "podium_profiled_cpu_us_per_step": round(statistics.median(profiled), 2),
        "ratio": round(statistics.median(ratios), 2),
        "ratio_of_medians": round(o / h, 2),
        "round_ratios": [round(r, 2) for r in ratios],
        "target_ratio": 5.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--screening", action="store_true", help="screen input and tool results (flag)"
    )
    parser.add_argument("--observe", nargs="?", const="both", choices=("both", "metrics",
                        "tracing", "off"), help="also measure with metrics and/or tracing on "
                        "(OTLP); off: the same engine again, the measurement's noise floor")
    parser.add_argument("--sample", type=float, default=None,
                        help="with --observe: trace this share of the runs (default: as "
                             "podium serve/worker sample, up to one run a second)")
    parser.add_argument("--model", choices=("simulated", "function", "both", "openai", "all"),
                        default="simulated", help="the model the engine drives")
    parser.add_argument("--sessions", default=None, metavar="N1,N2,…",
                        help="measure each level of sessions in flight apart")
    parser.add_argument("--tool-waits", action="store_true",
                        help="with --sessions: both loops' tool waits one turn of the loop, "
                             "so the sessions of a level are all in flight at once")
    args = parser.parse_args()
    if args.sessions or args.model != "simulated" or args.tool_waits:
        return _levels_main(args)
    run_args = (args.runs, args.rounds, args.observe, args.sample, args.screening)
    if args.uvloop:
        import uvloop

        result = uvloop.run(main_async(*run_args))
    else:
        result = asyncio.run(main_async(*run_args))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"hand-written loop : {result['hand_cpu_us_per_step']:8.2f} CPU µs/step")
        print(f"podium engine     : {result['podium_cpu_us_per_step']:8.2f} CPU µs/step")
        print(
            f"  (of which the profile attributes to phases: "
            f"{result['podium_profiled_cpu_us_per_step']:.2f} µs)"
        )
        print(
            f"ratio             : {result['ratio']:8.2f}×  median of per-round ratios "
            f"(target ≤ {result['target_ratio']}×); ratio of medians {result['ratio_of_medians']}×"
        )
        if "observe_overhead" in result:
            print(
                f"{result['observe']} (traces sampled: {result['trace_sample']}): "
                f"{result['observed_cpu_us_per_step']:8.2f} CPU µs/step, "
                f"{result['observe_overhead']:+.1%} over both off (median of rounds; "
                f"target ≤ +{result['target_observe_overhead']:.0%})"
            )
    return 0


def _levels_main(args: argparse.Namespace) -> int:
    names = {"both": ("simulated", "function"), "all": ("simulated", "function", "openai")
             }.get(args.model, (args.model,))
    server, url = sim_server() if "openai" in names else (None, "")
    agents = {name: podium_agent(args.screening, name, url, args.tool_waits) for name in names}
    if args.tool_waits:
        HAND_TOOLS["lookup"] = hand_lookup_waiting
    levels = [int(n) for n in (args.sessions or str(args.runs)).split(",")]
    coro = measure_levels(agents, levels, args.runs, args.rounds)
    try:
        if args.uvloop:
            import uvloop

            result = uvloop.run(coro)
        else:
            result = asyncio.run(coro)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    if args.json:
        print(json.dumps(result))
        return 0
    for row in result.values():
        print(f"{row['model']:>9} model, {row['sessions']:>6,} sessions: hand "
              f"{row['hand_cpu_us_per_step']:6.2f} µs/step, podium "
              f"{row['podium_cpu_us_per_step']:6.2f}, ratio {row['ratio']:.2f}× "
              f"(rounds {row['ratio_min']:.2f}–{row['ratio_max']:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
