"""``podium sim-server``: serve the simulated model over OpenAI-compatible HTTP."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING, Any

from podium.cli.common import (
    UserError,
    amount,
    count,
    host_port,
    non_empty,
    port_number,
    positive_int,
    seconds,
)

if TYPE_CHECKING:
    # the server (aiohttp) loads when it is started, not with `podium --help`
    from podium.models.sim_server import SimServerConfig

__all__ = ("register",)


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sim-server",
        help="serve a simulated continuous-batching model over OpenAI-compatible HTTP",
        description=(
            "A simulated inference server: batch capacity, per-token time growing with the"
            " batch, prefill for uncached prompt tokens, queueing beyond capacity."
            " Endpoints: /v1/chat/completions, /health, /v1/models, /metrics."
        ),
    )
    p.add_argument("--host", type=non_empty, default="127.0.0.1", help="listen address")
    p.add_argument("--port", type=port_number, default=8000, help="0 picks a free port (printed)")
    p.add_argument("--model", type=non_empty, default="podium-sim", help="the model id it serves")
    p.add_argument("--capacity", type=positive_int, default=64, help="sequences decoded at once")
    p.add_argument("--step-ms", type=amount, default=15.0, help="decode step time at batch size 0")
    p.add_argument(
        "--step-per-seq-us", type=amount, default=100.0, help="extra step time per running sequence"
    )
    p.add_argument(
        "--prefill-per-token-us", type=amount, default=20.0, help="prefill time per uncached token"
    )
    p.add_argument(
        "--prefix-cache-tokens", type=count, default=2_000_000, help="prefix cache size in tokens"
    )
    p.add_argument("--output-tokens", type=count, default=24, help="tokens in each reply")
    p.add_argument(
        "--tool-steps", type=count, default=3, help="steps that call a tool before answering"
    )
    odd = p.add_argument_group(
        "real servers' behaviours", "to test clients against them (see podium.models.sim_server)"
    )
    odd.add_argument(
        "--reasoning-tokens", type=count, default=0, help="reasoning_content tokens before a reply"
    )
    odd.add_argument("--no-usage", action="store_true", help="send no usage, streamed or not")
    odd.add_argument(
        "--stall-after",
        type=count,
        default=None,
        metavar="TOKENS",
        help="after this many tokens a stream sends only ': ping' keep-alives",
    )
    odd.add_argument("--ping-ms", type=amount, default=50.0, help="keep-alive interval of a stall")
    odd.add_argument("--no-health", action="store_true", help="answer /health with 404")
    odd.add_argument(
        "--models-waits-for-generation",
        action="store_true",
        help="/v1/models waits until no generation runs (llama-cpp-python's model lock)",
    )
    odd.add_argument(
        "--loading-s",
        type=seconds,
        default=0.0,
        help="answer every path with 503 'Loading model' for this long after start",
    )
    odd.add_argument(
        "--context-tokens",
        type=count,
        default=0,
        help="refuse prompt + max_tokens above this (0: no limit)",
    )
    odd.add_argument(
        "--context-error",
        choices=("vllm", "sglang", "llama.cpp", "ollama"),
        default="vllm",
        help="whose words refuse a context overflow",
    )
    odd.add_argument(
        "--invalid-500",
        action="store_true",
        help="answer invalid requests with 500 and the exception text (llama-cpp-python)",
    )
    odd.add_argument(
        "--json-object-only",
        action="store_true",
        help="refuse response_format json_schema; json_object takes a schema (llama.cpp)",
    )
    odd.add_argument(
        "--models-interrupts",
        action="store_true",
        help="/v1/models cuts the generations in progress (llama-cpp-python)",
    )
    odd.add_argument(
        "--named-tools-only",
        action="store_true",
        help="call tools only when tool_choice names one (llama-cpp-python)",
    )
    odd.add_argument(
        "--hang-after",
        type=count,
        default=None,
        metavar="REQUESTS",
        help="after this many chat requests answer nothing more, on any path (a hung server)",
    )
    odd.add_argument(
        "--mimic",
        choices=("llama-cpp-python",),
        default=None,
        help="every quirk of that server at once",
    )
    guard = p.add_argument_group(
        "guard model", "answer as a Llama Guard-style classifier (see podium.models.sim_guard)"
    )
    guard.add_argument(
        "--guard",
        choices=("off", "classify", "garbage"),
        default="off",
        help="classify: 'safe' or 'unsafe\\nS14' on the last user message; garbage: no verdict",
    )
    guard.add_argument(
        "--guard-delay-ms", type=amount, default=0.0, help="time before each guard verdict"
    )
    p.add_argument("--uvloop", action="store_true", help="run on uvloop")
    p.set_defaults(handler=run)


def config_from_args(args: argparse.Namespace) -> SimServerConfig:
    from podium.models.sim_batching import BatchingConfig
    from podium.models.sim_server import SimServerConfig

    config = SimServerConfig(
        model=args.model,
        batching=BatchingConfig(
            capacity=args.capacity,
            step_s=args.step_ms / 1e3,
            step_per_seq_s=args.step_per_seq_us / 1e6,
            prefill_per_token_s=args.prefill_per_token_us / 1e6,
            prefix_cache_tokens=args.prefix_cache_tokens,
        ),
        tool_steps=args.tool_steps,
        output_tokens=args.output_tokens,
        reasoning_tokens=args.reasoning_tokens,
        usage=not args.no_usage,
        stall_after=args.stall_after,
        ping_s=args.ping_ms / 1e3,
        health=not args.no_health,
        models_wait=args.models_waits_for_generation,
        loading_s=args.loading_s,
        context_tokens=args.context_tokens,
        context_error=args.context_error,
        invalid_500=args.invalid_500,
        json_object_only=args.json_object_only,
        models_interrupt=args.models_interrupts,
        named_tools_only=args.named_tools_only,
        hang_after=args.hang_after,
        guard=args.guard,
        guard_delay_s=args.guard_delay_ms / 1e3,
    )
    return config if args.mimic is None else config.mimic(args.mimic)


async def serve(config: SimServerConfig, host: str, port: int) -> None:
    """Serve until cancelled; prints ``listening on http://HOST:PORT`` once bound."""
    from aiohttp import web

    from podium.models.sim_server import build_app

    # Our signal handling, not aiohttp's (its SIGINT exits 1, in silence): SIGTERM stops it
    # cleanly, Ctrl-C is a KeyboardInterrupt for run() to report.
    # A stop gives in-flight generations a second, not aiohttp's default minute: they are
    # simulations, and a hung one (--hang-after) would otherwise hold the stop that long.
    runner = web.AppRunner(build_app(config), access_log=None, handle_signals=False,
                           shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound = port
    server: Any = site._server  # an asyncio.Server once started
    if server is not None and server.sockets:
        bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://{host_port(host, bound)}", flush=True)
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError):  # (no signal handlers on Windows)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if args.uvloop:
        import uvloop

        runner: Any = uvloop.run
    else:
        runner = asyncio.run
    try:
        runner(serve(config, args.host, args.port))
    except KeyboardInterrupt:  # Ctrl-C: 130, as every podium command
        print("sim-server stopped (interrupted)", file=sys.stderr)
        return 130
    except OSError as exc:  # the port is taken, or the address is not ours
        where = host_port(args.host, args.port)
        raise UserError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    print("sim-server stopped", file=sys.stderr)
    return 0
