"""``podium serve``: serve agents over HTTP (embedded by default, or in front of Redis)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import socket
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from podium._config_checks import check_archive, check_queue, check_store
from podium.cli.common import (
    LISTEN_BACKLOG,
    RawHelpFormatter,
    UserError,
    bind_listeners,
    check_redis_url,
    check_sqlite_path,
    configure_logging,
    host_port,
    log_level,
    non_empty,
    port_number,
    seconds,
)
from podium.config import load_config
from podium.factory import model_from_option, parse_agent_option, with_model
from podium.gctune import check_gc_env
from podium.store.postgres_errors import is_postgres_url
from podium.store.postgres_preflight import check_postgres_store

if TYPE_CHECKING:
    from podium.config import Config
    from podium.gateway.auth import KeyRing
    from podium.gateway.first_key import FirstKey

__all__ = ("register", "serve")

DESCRIPTION = """\
Serve agents over HTTP: in one process with the embedded defaults (SQLite
store, in-process queue and workers), or as a stateless gateway in front of
Redis and 'podium worker' processes that read the same podium.toml.

With no API key configured it makes one for tenant 'default' and prints it once:
kept as a digest beside the SQLite file, or in Redis where every gateway replica
accepts it (delete that to make a new key).
SIGINT/SIGTERM stop accepting requests, let in-flight requests and runs
finish within server.drain_grace_s, then exit.
"""

EPILOG = """\
examples:
  podium serve --config podium.toml
  podium serve --agent support=myapp.agents:support --port 8080
  podium serve --redis redis://localhost:6379/0     # workers run as: podium worker
  podium serve --hash-key pk_secret                 # print the hash for podium.toml
"""


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="serve agents over HTTP",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    # argparse would re-wrap the paragraphs and the examples: keep them as written.
    parser.formatter_class = RawHelpFormatter
    parser.add_argument("--config", "-c", type=non_empty,
                        help="podium.toml (default: ./podium.toml if present)")
    parser.add_argument("--host", type=non_empty,
                        help="listen address (default: server.host, 127.0.0.1)")
    parser.add_argument("--port", type=port_number,
                        help="listen port, 0: any free one, printed (default: server.port, 8000)")
    parser.add_argument("--redis", type=non_empty, metavar="URL",
                        help="distributed mode: Redis store and queue")
    parser.add_argument("--archive", type=non_empty, metavar="URL",
                        help="with --redis: copy finished runs to PostgreSQL (a postgresql:// "
                        "URL) before their Redis TTL ends (default: server.archive)")
    parser.add_argument("--queue", type=non_empty, metavar="URL",
                        help="distributed mode on PostgreSQL alone: queue runs in this "
                        "postgresql:// database (default: server.queue; the store defaults "
                        "to the same URL)")
    parser.add_argument("--prefix", type=non_empty,
                        help="prefix of every Redis key (default: server.prefix)")
    parser.add_argument("--ttl", type=seconds, metavar="S",
                        help="finished runs expire after S seconds, 0: never (server.ttl_s)")
    parser.add_argument("--allow-evicting-redis", action="store_true", default=None,
                        help="serve on a Redis whose maxmemory-policy evicts keys (runs may "
                        "vanish; server.allow_evicting_redis)")
    parser.add_argument(
        "--store", type=non_empty,
        help="'sqlite:PATH', 'memory' or a postgresql:// URL (default: server.store, "
        "sqlite:podium.sqlite)"
    )
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="[NAME=]MODULE:ATTR",
        help="an agent to serve (repeatable; adds to the config's)",
    )
    parser.add_argument(
        "--model",
        type=non_empty,
        metavar="NAME",
        help="serve every agent on this model: a [[models]] name, else a model id "
        "at $OPENAI_BASE_URL",
    )
    parser.add_argument("--log-level", type=log_level, default="INFO", metavar="LEVEL",
                        help="debug, info, warning, error, critical")
    parser.add_argument("--access-log", action="store_true",
                        help="log every request (method, path, status) at level info")
    # An empty KEY (an unset shell variable) started the whole server instead of hashing.
    parser.add_argument("--hash-key", type=non_empty, metavar="KEY",
                        help="print the sha256 hash of KEY and exit")
    parser.set_defaults(handler=serve)


def raise_fd_limit() -> None:
    """Raise this process's soft limit on open files to its hard limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and target > soft:
        # A hard limit above the kernel's nr_open is refused: then the soft limit stays.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def url_for_log(url: str) -> str:
    """``url`` with its password starred: deployments put the Redis password in the URL
    (from a Secret), and the start-up line goes to every log collector."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def serve(args: argparse.Namespace) -> int:
    from podium.gateway.auth import hash_key

    if args.hash_key is not None:
        print(hash_key(args.hash_key))
        return 0
    configure_logging(args.log_level)
    path = args.config or ("podium.toml" if os.path.exists("podium.toml") else None)
    config = load_config(path)
    check_gc_env()
    server = config.server
    if args.host:
        server.host = args.host
    if args.port is not None:
        server.port = args.port
    if args.redis:
        server.redis = args.redis
    if args.store:
        server.store = args.store
    if args.prefix:
        server.prefix = args.prefix
    if args.ttl is not None:
        server.ttl_s = args.ttl
    if args.allow_evicting_redis:
        server.allow_evicting_redis = True
    if args.store:  # the file's store was checked as it was read; the option's is here
        check_store(args.store, "--store")
    if args.archive:
        server.archive = args.archive
    if server.archive is not None:  # checked beside the Redis and store it goes with
        check_archive(server.archive, server.redis, server.store,
                      "--archive" if args.archive else "server.archive")
    if args.queue:
        server.queue = args.queue
        if not args.store and not is_postgres_url(server.store):  # one URL for both
            server.store = args.queue
        check_queue(args.queue, server.store, redis=server.redis, what="--queue")
    # Bound now, the port the flag or podium.toml names is ours, or one line says why; and
    # with port 0 the port the OS picked is known before it is announced.
    listeners = bind_listeners(server.host, server.port, "port")
    try:
        return _serve(args, config, listeners)
    finally:
        for sock in listeners:  # uvicorn closes them too when it shuts down
            sock.close()


def _accept_first_key(config: Config, keys: KeyRing) -> None:
    """Accept the operator key of a server with none configured (for tenant 'default', its
    one user and operator) and say which it is: shared through Redis, kept beside the
    SQLite file, or (``--store memory``) this process's own."""
    from podium.gateway.first_key import (
        file_first_key,
        memory_first_key,
        share_first_key,
    )

    def accept(first: FirstKey) -> None:
        keys.add_digest(first.digest, "default", admin=True)
        print(first.announcement(), file=sys.stderr, flush=True)

    server = config.server
    if server.redis:
        if not share_first_key(server.redis, server.prefix, accept):
            print(
                "podium: no API keys configured; the key every gateway shares is kept in "
                "Redis, which does not answer yet: it is read (or made and printed) once it "
                "does",
                file=sys.stderr,
                flush=True,
            )
    elif server.store.startswith("sqlite:"):
        accept(file_first_key(server.store.removeprefix("sqlite:")))
    else:
        accept(memory_first_key())


def _serve(args: argparse.Namespace, config: Config, listeners: list[socket.socket]) -> int:
    """Load the agents, then serve them on ``listeners`` (bound, not yet listening)."""
    from podium.gateway.auth import KeyRing

    server = config.server
    if server.redis:
        check_redis_url(server.redis)
        for module in ("redis", "hiredis"):  # missing: main() names the extra to install
            importlib.import_module(module)
        from podium.store.redis_preflight import preflight

        # a server that can never work is one line now, not a 500 per request
        pools = dict.fromkeys(["default", *config.pool_names()])
        if warning := preflight(server.redis, server.prefix, pools,
                                allow_evicting=server.allow_evicting_redis):
            print(f"podium serve: warning: {warning}", file=sys.stderr, flush=True)
    if is_postgres_url(server.store):
        importlib.import_module("asyncpg")  # missing: main() names the extra to install
        check_postgres_store(server.store)  # a wrong password or database: one line now
    elif not server.redis and server.store.startswith("sqlite:"):
        check_sqlite_path(server.store.removeprefix("sqlite:"))
    config.agents.extend(parse_agent_option(spec) for spec in args.agent)
    keys = KeyRing(config.keys)
    from podium.gateway.runtime import build_gateway, load_agents

    served = load_agents(config)
    # After the agents' modules: an application may install its own tracer provider there.
    from podium.observe.otel_env import check_tracing_env

    check_tracing_env()  # a bad OTEL_* setting is one line now, not a traceback at start-up
    if args.model:
        model = model_from_option(args.model, config)
        for s in served:
            s.agent = with_model(s.agent, model)
    gateway = build_gateway(config, served, keys=keys)
    if not len(keys):  # one key for every replica and every start (podium.gateway.first_key)
        # Made after everything that can fail: a key made is a key printed, and it works.
        _accept_first_key(config, gateway.keys)
    import uvicorn

    from podium.cli._uvicorn_server import BoundServer, StartupGuard
    from podium.gateway.app import create_app
    from podium.gateway.guard import ConnectionLimits, guarded_protocol
    from podium.gctune import tune_for_serving

    raise_fd_limit()  # each connection is a descriptor: the usual 1,024 is few
    limits = ConnectionLimits(
        header_timeout_s=server.header_timeout_s,
        write_timeout_s=server.write_timeout_s,
        max_header_bytes=server.max_header_bytes,
        max_headers=server.max_headers,
        max_connections=server.max_connections,
    )

    loop = "uvloop" if sys.platform != "win32" else "asyncio"
    mode = f"distributed ({url_for_log(server.redis)})" if server.redis else (
        f"distributed (PostgreSQL {url_for_log(server.queue)})" if server.queue else
        f"embedded ({url_for_log(server.store)})"
    )
    if server.redis and is_postgres_url(server.store):
        mode += f", runs kept in {url_for_log(server.store)}"
    port = listeners[0].getsockname()[1]
    url = f"http://{host_port(server.host, port)}"
    for sock in listeners:  # from now on a connection waits for the app instead of failing
        sock.listen(LISTEN_BACKLOG)
    print(
        f"podium: serving {', '.join(gateway.agents)} on {url} in {mode} mode",
        file=sys.stderr,
        flush=True,
    )
    tune_for_serving()  # freeze start-up objects, raise the thresholds (see podium.gctune)
    guard = StartupGuard(create_app(gateway))
    uv = BoundServer(
        uvicorn.Config(
            guard,
            host=server.host,
            port=port,
            backlog=LISTEN_BACKLOG,
            loop=loop,
            lifespan="on",
            http=guarded_protocol(limits),
            timeout_keep_alive=int(server.keep_alive_s),  # whole, >= 1: load_config
            log_level=args.log_level.lower(),
            access_log=args.access_log,
            # The gateway's drain takes drain_grace_s at most, then ends its streams:
            # a little more, so they can say so before uvicorn cancels what is left.
            timeout_graceful_shutdown=math.ceil(server.drain_grace_s) + 2,
        ),
        url,
        on_stop=gateway.begin_stop,
        guard=guard,
    )
    try:
        uv.run(sockets=listeners)
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down cleanly
        print("podium serve: stopped (interrupted)", file=sys.stderr, flush=True)
        return 130
    except SystemExit:  # uvicorn's exit 3 on a failed start-up
        if uv.startup_error is not None:  # (a store it cannot create, a file it may not write)
            raise UserError(f"could not start: {uv.startup_error}") from None
        raise
    if not uv.started:
        raise UserError(f"could not serve on {url} (see the log above)")
    return 0
