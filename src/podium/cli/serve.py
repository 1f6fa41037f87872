"""``podium serve``: serve agents over HTTP (embedded by default, or in front of Redis).

    podium serve --config podium.toml
    podium serve --agent support=myapp.agents:support --port 8080
    podium serve --redis redis://localhost:6379/0     # workers run as `podium worker`
    podium serve --hash-key pk_secret                 # print the hash for podium.toml

With no API key configured it makes one for tenant ``default`` and prints it.
SIGINT/SIGTERM stop accepting requests, let in-flight requests and runs finish
within ``server.drain_grace_s``, then exit.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Any

from podium.config import AgentConfig, load_config
from podium.errors import ConfigError

__all__ = ("register", "serve")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="serve agents over HTTP",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", "-c", help="podium.toml (default: ./podium.toml if present)")
    parser.add_argument("--host", help="listen address (server.host)")
    parser.add_argument("--port", type=int, help="listen port (server.port)")
    parser.add_argument("--redis", metavar="URL", help="distributed mode: Redis store and queue")
    parser.add_argument("--store", help="'sqlite:PATH' or 'memory' (server.store)")
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="[NAME=]MODULE:ATTR",
        help="an agent to serve (repeatable; adds to the config's)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--hash-key", metavar="KEY", help="print the sha256 hash of KEY and exit")
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


def serve(args: argparse.Namespace) -> int:
    from podium.gateway.auth import KeyRing, generate_key, hash_key

    if args.hash_key:
        print(hash_key(args.hash_key))
        return 0
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    path = args.config or ("podium.toml" if os.path.exists("podium.toml") else None)
    try:
        config = load_config(path)
        server = config.server
        if args.host:
            server.host = args.host
        if args.port is not None:
            server.port = args.port
        if args.redis:
            server.redis = args.redis
        if args.store:
            server.store = args.store
        for spec in args.agent:
            name, sep, target = spec.partition("=")
            config.agents.append(
                AgentConfig(path=target, name=name) if sep else AgentConfig(path=spec)
            )
        keys = KeyRing(config.keys)
        if not len(keys):
            key = generate_key()
            keys.add(key, "default", admin=True)  # the one user is its operator too
            print(
                f"podium: no API keys configured; for tenant 'default' use: {key}",
                file=sys.stderr,
                flush=True,
            )
        from podium.gateway.runtime import build_gateway

        gateway = build_gateway(config, keys=keys)
    except ConfigError as exc:
        print(f"podium serve: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from podium.gateway.app import create_app
    from podium.gateway.guard import ConnectionLimits, guarded_protocol
    from podium.gctune import tune_for_serving

    raise_fd_limit()  # each connection is a descriptor: the usual 1,024 is few
    limits = ConnectionLimits(
        header_timeout_s=server.header_timeout_s,
        max_header_bytes=server.max_header_bytes,
        max_headers=server.max_headers,
        max_connections=server.max_connections,
    )

    loop = "uvloop" if sys.platform != "win32" else "asyncio"
    mode = f"distributed ({server.redis})" if server.redis else f"embedded ({server.store})"
    print(
        f"podium: serving {', '.join(gateway.agents)} on http://{server.host}:{server.port} "
        f"in {mode} mode",
        file=sys.stderr,
        flush=True,
    )
    tune_for_serving()  # freeze start-up objects, raise the thresholds (see podium.gctune)
    uvicorn.Server(
        uvicorn.Config(
            create_app(gateway),
            host=server.host,
            port=server.port,
            loop=loop,
            lifespan="on",
            http=guarded_protocol(limits),
            timeout_keep_alive=max(1, round(server.keep_alive_s)),
            log_level=args.log_level,
            access_log=False,
            timeout_graceful_shutdown=int(server.drain_grace_s) or None,
        )
    ).run()
    return 0
