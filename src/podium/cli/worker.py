"""``podium worker``: claim runs from Redis (or PostgreSQL) and drive them, in one or many
processes.

It reads the same ``podium.toml`` as ``podium serve`` (agents with their
names and pools, ``[[models]]``, ``server.redis``, ``server.prefix``,
``server.ttl_s``, ``server.profile``), so the runs the gateway queues are the runs the workers
know how to drive.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from podium._config_checks import check_archive, check_queue, check_store
from podium.cli.common import (
    LISTEN_BACKLOG,
    RawHelpFormatter,
    UserError,
    bind_listeners,
    check_redis_url,
    log_level,
    non_empty,
    port_number,
    positive_int,
    positive_seconds,
    seconds,
)
from podium.config import ServerConfig, load_config
from podium.factory import worker_agents
from podium.gctune import check_gc_env
from podium.observe.otel_env import check_tracing_env
from podium.store.postgres_errors import is_postgres_url
from podium.store.postgres_preflight import check_postgres_store

__all__ = ("register",)

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"

EPILOG = """examples:
  podium worker --config podium.toml --pool support --procs auto
  podium worker --redis redis://redis:6379/0 --agent support=myapp.agents:support --burst
"""


def _procs(value: str) -> int | None:
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("use a number of processes or 'auto'") from None
    if n < 0:
        raise argparse.ArgumentTypeError("0 (this one process, the default), N or 'auto'")
    return n


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "worker",
        help="claim queued runs from Redis and drive them",
        description="A stateless worker: claims runs of a pool from Redis, drives many at once, "
        "heartbeats their leases, and drains on SIGTERM. It reads the same podium.toml as "
        "podium serve.",
        epilog=EPILOG,
        formatter_class=RawHelpFormatter,
    )
    p.add_argument("--config", "-c", type=non_empty,
                   help="podium.toml (default: ./podium.toml if present)")
    p.add_argument("--redis", type=non_empty,
                   help=f"Redis URL (default: server.redis, else {DEFAULT_REDIS})")
    p.add_argument("--queue", type=non_empty, metavar="URL",
                   help="claim runs from a queue in PostgreSQL (a postgresql:// URL): no "
                   "Redis at all (default: server.queue; the store defaults to the same URL)")
    p.add_argument("--store", type=non_empty, metavar="URL",
                   help="keep runs in PostgreSQL (a postgresql:// URL; the queue stays in "
                   "Redis; default: server.store when it is one, else Redis)")
    p.add_argument("--archive", type=non_empty, metavar="URL",
                   help="copy finished runs to PostgreSQL (a postgresql:// URL) before their "
                   "Redis TTL ends; readers find them there after it (default: "
                   "server.archive)")
    p.add_argument("--agent", action="append", default=[], metavar="[NAME=]MODULE:ATTR",
                   help="an agent to serve, under NAME (repeatable; adds to the config's)")
    p.add_argument("--pool", type=non_empty, default="default",
                   help="the resource pool (queue) to serve")
    p.add_argument("--concurrency", type=positive_int, default=256,
                   help="runs driven at once per process")
    p.add_argument("--procs", type=_procs, default=0, metavar="N|auto",
                   help="start N pinned worker processes (auto: one per CPU); "
                   "0: this one process, unpinned")
    p.add_argument("--burst", action="store_true",
                   help="exit when the pool has nothing waiting or in flight")
    p.add_argument("--burst-patience", type=positive_seconds, default=60.0, metavar="S",
                   help="with --burst, exit 1 when Redis has not answered for S seconds")
    # Below Kubernetes' default terminationGracePeriodSeconds (30): the platform's grace
    # must exceed this plus any preStop, or its SIGKILL races the hand-back of runs.
    p.add_argument("--grace", type=seconds, default=20.0, metavar="S",
                   help="on SIGTERM, seconds running steps get to finish before release "
                   "(default 20; the platform's stop grace must exceed it plus any preStop)")
    p.add_argument("--max-deliveries", type=positive_int, default=3, metavar="N",
                   help="dead-letter a run delivered more than N times")
    p.add_argument("--lease", type=positive_seconds, default=30.0, metavar="S",
                   help="a run whose worker stops heartbeating is reclaimed after S seconds")
    p.add_argument("--outage-hold", type=seconds, default=90.0, metavar="S",
                   help="while Redis is away, hold a run and the tool outcomes it has not "
                   "written yet for up to S seconds, written when Redis answers (0: give "
                   "up after the usual 10 s; a held call's outcome is then lost and the "
                   "call runs again)")
    p.add_argument("--prefix", type=non_empty,
                   help="prefix of every Redis key (default: server.prefix, podium)")
    p.add_argument("--allow-evicting-redis", action="store_true",
                   help="work on a Redis whose maxmemory-policy evicts keys (runs may "
                   "vanish; default: server.allow_evicting_redis)")
    p.add_argument("--ttl", type=seconds, metavar="S",
                   help="finished runs expire after S seconds, 0: never "
                   "(default: server.ttl_s, 7 days)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="thread-pool size for sync tools (default: physical cores of the node)")
    p.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    p.add_argument("--metrics-port", type=port_number, default=None, metavar="PORT",
                   help="serve Prometheus metrics on PORT (with --procs: one endpoint for all)")
    p.add_argument("--metrics-host", type=non_empty, default="127.0.0.1", metavar="HOST",
                   help="the address the metrics port listens on (default 127.0.0.1: this "
                   "host only; 0.0.0.0 for a scraper or a kubelet probe from elsewhere)")
    p.add_argument("--metrics-token-env", type=non_empty, default=None, metavar="VAR",
                   help="require 'Authorization: Bearer <$VAR>' on /metrics (the probes "
                   "/livez and /readyz stay open)")
    p.add_argument("--log-level", type=log_level, default="INFO", metavar="LEVEL",
                   help="debug, info, warning, error, critical")
    p.set_defaults(handler=run)


def _check_redis(args: argparse.Namespace, server: ServerConfig) -> tuple[str, bool]:
    """The Redis URL a worker uses, checked (and its server asked) now; whether it may work
    on an evicting one."""
    redis_url: str = args.redis or server.redis or DEFAULT_REDIS
    check_redis_url(redis_url)
    for module in ("redis", "hiredis"):  # missing: main() names the extra to install
        importlib.import_module(module)
    from podium.store.redis_preflight import preflight

    # a server that can never work is one line now, not a worker retrying forever
    allow_evicting = bool(args.allow_evicting_redis or server.allow_evicting_redis)
    if warning := preflight(redis_url, args.prefix or server.prefix, [args.pool],
                            allow_evicting=allow_evicting):
        print(f"podium worker: warning: {warning}", file=sys.stderr, flush=True)
    return redis_url, allow_evicting


def run(args: argparse.Namespace) -> int:
    from podium.worker.process import WorkerConfig, serve, supervise

    path = args.config or ("podium.toml" if os.path.exists("podium.toml") else None)
    config = load_config(path)
    check_gc_env()  # each child tunes the collector: a bad PODIUM_GC is one line here
    server = config.server
    queue_url = args.queue or server.queue
    store_url = args.store or (server.store if is_postgres_url(server.store) else None)
    if queue_url is not None:  # PostgreSQL alone: its queue, and its store
        store_url = store_url or queue_url
        check_queue(queue_url, store_url, redis=args.redis,
                    what="--queue" if args.queue else "server.queue")
        redis_url, allow_evicting = args.redis or DEFAULT_REDIS, False  # (unused)
    else:
        redis_url, allow_evicting = _check_redis(args, server)
    if store_url is not None:
        check_store(store_url, "--store" if args.store else "server.store")
        if not is_postgres_url(store_url):
            raise UserError(f"--store: a worker keeps runs in Redis or in PostgreSQL "
                            f"(a postgresql:// URL), got {store_url!r}")
        importlib.import_module("asyncpg")  # missing: main() names the extra to install
        check_postgres_store(store_url)  # a wrong password or database: one line now
    archive_url = args.archive or server.archive
    if archive_url is not None:
        what = "--archive" if args.archive else "server.archive"
        check_archive(archive_url, redis_url, store_url or "", what)
        importlib.import_module("asyncpg")
        check_postgres_store(archive_url)
    # Resolve here, once, so a bad agent or pool is one line now, not a child's traceback.
    agents = worker_agents(config, args.agent, args.pool)
    check_tracing_env()  # a bad OTEL_* setting: one line here, not each child's traceback
    ttl = server.ttl_s if args.ttl is None else args.ttl
    if ttl < 0:
        raise UserError("--ttl must be 0 (never) or positive")
    worker = WorkerConfig(
        redis_url=redis_url, store_url=store_url, archive_url=archive_url, queue_url=queue_url,
        agents=tuple(args.agent), pool=args.pool,
        config_file=os.path.abspath(path) if path else None,
        concurrency=args.concurrency, burst=args.burst, burst_patience_s=args.burst_patience,
        grace_s=args.grace,
        max_deliveries=args.max_deliveries, lease_s=args.lease, outage_hold_s=args.outage_hold,
        prefix=args.prefix or server.prefix, finished_ttl_s=ttl, profile=server.profile,
        allow_evicting_redis=allow_evicting,
        threads=args.threads,
        use_uvloop=not args.no_uvloop, log_level=args.log_level, metrics_port=args.metrics_port,
        metrics_host=args.metrics_host, metrics_token_env=args.metrics_token_env,
    )
    if args.metrics_token_env is not None and not os.environ.get(args.metrics_token_env):
        raise UserError(f"--metrics-token-env {args.metrics_token_env}: the variable is "
                        "unset or empty")
    # Bound and listening now, before any child starts: the port is ours from here on (a
    # scrape waits in the backlog until the endpoint serves), or one line says why not.
    # Checked now and bound later, another process could take it in between.
    metrics = None
    if args.metrics_port is not None:
        # (One socket: a name that resolves to IPv4 and IPv6 serves on the first.)
        metrics = bind_listeners(args.metrics_host, args.metrics_port, "--metrics-port")[0]
        metrics.listen(LISTEN_BACKLOG)
    try:
        print(f"podium worker: pool {args.pool!r} serves {', '.join(agents)}",
              file=sys.stderr, flush=True)
        if args.procs == 0:
            return serve(worker, metrics_socket=metrics)
        return supervise(worker, args.procs, metrics_socket=metrics)
    finally:
        if metrics is not None:
            metrics.close()
