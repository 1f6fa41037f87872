"""``podium worker``: claim runs from Redis and drive them, in one or many processes.

::

    podium worker --redis redis://redis:6379/0 --agent myapp.agents:support \\
        --pool support --concurrency 256 --procs auto --grace 30
"""

from __future__ import annotations

import argparse

from podium.errors import ConfigError

__all__ = ("register",)


def _procs(value: str) -> int | None:
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("use a number of processes or 'auto'") from None
    if n < 1:
        raise argparse.ArgumentTypeError("at least one process")
    return n


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "worker",
        help="claim queued runs from Redis and drive them",
        description="A stateless worker: claims runs of a pool from Redis, drives many at once, "
        "heartbeats their leases, and drains on SIGTERM.",
    )
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="Redis URL")
    p.add_argument("--agent", action="append", required=True, metavar="SPEC",
                   help="pkg.module:attr of an Agent (repeatable)")
    p.add_argument("--pool", default="default", help="the resource pool (queue) to serve")
    p.add_argument("--concurrency", type=int, default=256, help="runs driven at once per process")
    p.add_argument("--procs", type=_procs, default=0, metavar="N|auto",
                   help="start N pinned worker processes (auto: one per CPU); "
                   "default: this one process, unpinned")
    p.add_argument("--burst", action="store_true",
                   help="exit when the pool has nothing waiting or in flight")
    p.add_argument("--grace", type=float, default=30.0, metavar="S",
                   help="on SIGTERM, seconds running steps get to finish before release")
    p.add_argument("--max-deliveries", type=int, default=3, metavar="N",
                   help="dead-letter a run delivered more than N times")
    p.add_argument("--lease", type=float, default=30.0, metavar="S",
                   help="a run whose worker stops heartbeating is reclaimed after S seconds")
    p.add_argument("--prefix", default="podium", help="prefix of every Redis key")
    p.add_argument("--ttl", type=float, default=7 * 86_400, metavar="S",
                   help="finished runs expire after S seconds (0: never)")
    p.add_argument("--threads", type=int, default=None,
                   help="thread-pool size for sync tools (default: physical cores of the node)")
    p.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    p.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve Prometheus metrics on PORT (with --procs: one endpoint for all)")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from podium.worker.process import WorkerConfig, serve, supervise

    if args.concurrency < 1 or args.max_deliveries < 1 or args.lease <= 0:
        raise ConfigError("--concurrency, --max-deliveries and --lease must be positive")
    config = WorkerConfig(
        redis_url=args.redis, agents=tuple(args.agent), pool=args.pool,
        concurrency=args.concurrency, burst=args.burst, grace_s=args.grace,
        max_deliveries=args.max_deliveries, lease_s=args.lease, prefix=args.prefix,
        finished_ttl_s=args.ttl, threads=args.threads, use_uvloop=not args.no_uvloop,
        log_level=args.log_level.upper(), metrics_port=args.metrics_port,
    )
    if args.procs == 0:
        return serve(config)
    return supervise(config, args.procs)
