"""CPU per model call: Podium's OpenAIChatModel vs the official ``openai.AsyncOpenAI``.

Both clients make the same agent-shaped calls (system prompt, a growing
history with tool calls and results, two tool schemas) at the same
concurrency against one loopback ``podium sim-server`` running in its own
process, pinned to another core. The client process is pinned to one core;
CPU per call is this process's CPU time (``time.process_time``) over the
calls made, the median of several interleaved repeats.

    python bench/bench_openai_client.py [--calls 2000] [--concurrency 64] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from _simproc import SimServer, pin_self
from podium.messages import Message, ToolCall
from podium.models import ModelRequest, OpenAIChatModel, ToolDefinition

TOOLS = (
    ToolDefinition(
        "search",
        "Search the web and return the top results.",
        {
            "type": "object",
            "properties": {"q": {"type": "string"}, "k": {"type": "integer", "default": 5}},
            "required": ["q"],
        },
    ),
    ToolDefinition(
        "read_page",
        "Fetch a web page and return its text.",
        {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
    ),
)


def agent_request() -> ModelRequest:
    """Step 3 of a research agent: ~2 KB system prompt, 7 messages of history."""
    msgs = [Message("system", "You are a careful research agent. Cite sources. " * 40)]
    msgs.append(Message("user", "What is the capital of France and its population?"))
    for i in range(3):
        call = ToolCall(f"call_{i}", "search", f'{{"q":"paris population {i}"}}')
        msgs.append(Message("assistant", "", tool_calls=(call,)))
        msgs.append(
            Message("tool", f"result {i}: Paris has 2.1 million people. " * 8, tool_call_id=call.id)
        )
    return ModelRequest(messages=msgs, tools=TOOLS, run_id="bench")


def openai_payload(req: ModelRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    for m in req.messages:
        d: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            d["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        messages.append(d)
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in req.tools
    ]
    return messages, tools


Call = Callable[[], Awaitable[int]]


async def drive(call: Call, calls: int, concurrency: int) -> tuple[float, float]:
    """Run ``calls`` calls at ``concurrency``; (CPU µs per call, calls per second)."""
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            n = await call()
            assert n > 0, "no tool call decoded"

    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    return cpu / calls * 1e6, calls / wall


async def bench_mode(base_url: str, stream: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved repeats of both clients in one mode (plain or streamed)."""
    import openai

    req = agent_request()
    messages, tools = openai_payload(req)
    ours = OpenAIChatModel(base_url, "podium-sim", stream=stream, max_connections=args.concurrency)
    theirs = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)

    async def call_ours() -> int:
        r = await ours.request(req)
        return len(r.tool_calls)

    async def call_theirs() -> int:
        if not stream:
            r = await theirs.chat.completions.create(
                model="podium-sim",
                messages=messages,
                tools=tools,  # type: ignore[arg-type]
            )
            return len(r.choices[0].message.tool_calls or ())
        s = await theirs.chat.completions.create(
            model="podium-sim",
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        args_by_index: dict[int, list[str]] = {}
        async for chunk in s:
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or ():
                    if tc.function is not None and tc.function.arguments:
                        args_by_index.setdefault(tc.index, []).append(tc.function.arguments)
        return len(args_by_index)

    per: dict[str, list[tuple[float, float]]] = {"podium": [], "openai": []}
    for fn in (call_ours, call_theirs):
        await drive(fn, max(200, args.calls // 5), args.concurrency)  # warm up
    for _ in range(args.repeats):
        for name, fn in (("podium", call_ours), ("openai", call_theirs)):
            per[name].append(await drive(fn, args.calls, args.concurrency))
    await ours.aclose()
    await theirs.close()
    row = {
        name: {
            "cpu_us_per_call": statistics.median(r[0] for r in runs),
            "calls_per_s": statistics.median(r[1] for r in runs),
            "repeats_cpu_us": [round(r[0], 1) for r in runs],
        }
        for name, runs in per.items()
    }
    row["ratio"] = row["podium"]["cpu_us_per_call"] / row["openai"]["cpu_us_per_call"]
    return row


async def bench(base_url: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "plain": await bench_mode(base_url, False, args),
        "stream": await bench_mode(base_url, True, args),
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--calls", type=int, default=2000, help="calls per repeat and client")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    server = SimServer(
        [
            "--capacity",
            "1024",
            "--step-ms",
            "1",
            "--step-per-seq-us",
            "0",
            "--prefill-per-token-us",
            "0",
            "--output-tokens",
            "16",
            "--tool-steps",
            "99",
        ],
        cpu=1,
    )
    pin_self(0)
    try:
        if args.loop == "uvloop":
            import uvloop

            results = uvloop.run(bench(server.base_url, args))
        else:
            results = asyncio.run(bench(server.base_url, args))
    finally:
        server.close()
    results["config"] = {k: v for k, v in vars(args).items() if k != "json"}
    if args.json:
        sys.stdout.write(msgspec.json.encode(results).decode() + "\n")
        return 0
    print(
        f"CPU per model call, {args.calls} calls x {args.repeats} repeats at concurrency "
        f"{args.concurrency} ({args.loop}), median:"
    )
    for mode in ("plain", "stream"):
        row = results[mode]
        print(
            f"  {mode:6}  podium {row['podium']['cpu_us_per_call']:7.1f} µs  "
            f"({row['podium']['calls_per_s']:6.0f} calls/s)   "
            f"openai {row['openai']['cpu_us_per_call']:7.1f} µs  "
            f"({row['openai']['calls_per_s']:6.0f} calls/s)   ratio {row['ratio']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
