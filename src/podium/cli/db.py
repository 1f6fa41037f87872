"""``podium db upgrade|status``: the PostgreSQL store's schema, from the shell.

::

    podium db status  --store postgresql://podium@db/podium
    podium db upgrade --store postgresql://podium@db/podium   # before starting a new Podium
    podium db upgrade --queue --store postgresql://…           # and the queue's tables

Migrations are forward-only and run in one transaction under an advisory lock (two
upgrades at once: one applies them, the other finds them applied). The store URL comes
from ``--store``, else ``server.store`` in ``podium.toml``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from podium.cli.common import UserError, non_empty
from podium.config import load_config
from podium.store.postgres_errors import check_postgres_url, is_postgres_url, redact

__all__ = ("register",)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "db", help="create or upgrade the PostgreSQL store's tables"
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, text in (("upgrade", "apply the migrations the database lacks"),
                       ("status", "the database's schema version and this Podium's")):
        q = verbs.add_parser(verb, help=text)
        q.add_argument("--store", type=non_empty, metavar="URL",
                       help="a postgresql:// URL (default: server.store in podium.toml)")
        q.add_argument("--config", "-c", type=non_empty,
                       help="podium.toml (default: ./podium.toml if present)")
        q.add_argument("--queue", action="store_true",
                       help="the queue's tables too (a PostgreSQL-only deployment; "
                       "default: when server.queue is set or the database has them)")
        q.set_defaults(handler=_run)


def _url(args: argparse.Namespace) -> tuple[str, bool]:
    """The store's URL, and whether its queue's tables were asked for."""
    url: str | None = args.store
    queue = bool(args.queue)
    if url is None:
        path = args.config or ("podium.toml" if os.path.exists("podium.toml") else None)
        server = load_config(path).server
        url, queue = server.store, queue or server.queue is not None
        if not is_postgres_url(url):
            raise UserError(
                f"server.store is {url!r}, not a PostgreSQL store: give --store postgresql://…"
            )
    if not is_postgres_url(url):
        raise UserError(f"--store: a postgresql:// URL, got {redact(url)!r}")
    check_postgres_url(url)
    return url, queue


def _run(args: argparse.Namespace) -> int:
    url, queue = _url(args)
    message = asyncio.run(_upgrade(url, queue) if args.verb == "upgrade" else _status(url))
    print(message, flush=True)
    return 0


async def _connect(url: str) -> Any:
    import asyncpg

    from podium.store.postgres_errors import translate

    try:
        return await asyncpg.connect(url, timeout=10)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise translate(exc, url) from None


async def _upgrade(url: str, queue: bool) -> str:
    from podium.queue.postgres_schema import queue_schema_version, upgrade_queue
    from podium.store.postgres_schema import upgrade

    conn = await _connect(url)
    try:
        before, after = await upgrade(conn)
        queue_before: int | None = None
        queue_after: int | None = None
        if queue or await queue_schema_version(conn) is not None:
            queue_before, queue_after = await upgrade_queue(conn)
    finally:
        await conn.close()
    where = redact(url)
    if before == after:
        line = f"{where}: schema at version {after}, nothing to do"
    else:
        line = f"{where}: schema upgraded from version {before or 0} to {after}"
    if queue_after is not None:
        line += (f"; queue tables at version {queue_after}, nothing to do"
                 if queue_before == queue_after else
                 f"; queue tables upgraded from version {queue_before or 0} to {queue_after}")
    return line


def _state(found: int, mine: int) -> str:
    return ("up to date" if found == mine else
            "behind: run podium db upgrade" if found < mine else
            "ahead of this Podium: upgrade Podium")


async def _status(url: str) -> str:
    from podium.queue.postgres_schema import SCHEMA_VERSION as QUEUE_VERSION
    from podium.queue.postgres_schema import queue_schema_version
    from podium.store.postgres_schema import SCHEMA_VERSION, schema_version

    conn = await _connect(url)
    try:
        found = await schema_version(conn)
        queue = await queue_schema_version(conn)
    finally:
        await conn.close()
    where = redact(url)
    if found is None:
        line = f"{where}: no Podium tables (this Podium creates version {SCHEMA_VERSION})"
    else:
        line = (f"{where}: schema version {found}, this Podium's {SCHEMA_VERSION} "
                f"({_state(found, SCHEMA_VERSION)})")
    if queue is not None:
        line += (f"; queue tables version {queue}, this Podium's {QUEUE_VERSION} "
                 f"({_state(queue, QUEUE_VERSION)})")
    return line
