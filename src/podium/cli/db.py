"""``podium db upgrade|status``: the PostgreSQL store's schema, from the shell.

::

    podium db status  --store postgresql://podium@db/podium
    podium db upgrade --store postgresql://podium@db/podium   # before starting a new Podium

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
        q.set_defaults(handler=_run)


def _url(args: argparse.Namespace) -> str:
    url: str | None = args.store
    if url is None:
        path = args.config or ("podium.toml" if os.path.exists("podium.toml") else None)
        url = load_config(path).server.store
        if not is_postgres_url(url):
            raise UserError(
                f"server.store is {url!r}, not a PostgreSQL store: give --store postgresql://…"
            )
    if not is_postgres_url(url):
        raise UserError(f"--store: a postgresql:// URL, got {redact(url)!r}")
    check_postgres_url(url)
    return url


def _run(args: argparse.Namespace) -> int:
    url = _url(args)
    message = asyncio.run(_upgrade(url) if args.verb == "upgrade" else _status(url))
    print(message, flush=True)
    return 0


async def _connect(url: str) -> Any:
    import asyncpg

    from podium.store.postgres_errors import translate

    try:
        return await asyncpg.connect(url, timeout=10)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise translate(exc, url) from None


async def _upgrade(url: str) -> str:
    from podium.store.postgres_schema import upgrade

    conn = await _connect(url)
    try:
        before, after = await upgrade(conn)
    finally:
        await conn.close()
    where = redact(url)
    if before == after:
        return f"{where}: schema at version {after}, nothing to do"
    return f"{where}: schema upgraded from version {before or 0} to {after}"


async def _status(url: str) -> str:
    from podium.store.postgres_schema import SCHEMA_VERSION, schema_version

    conn = await _connect(url)
    try:
        found = await schema_version(conn)
    finally:
        await conn.close()
    where = redact(url)
    if found is None:
        return f"{where}: no Podium tables (this Podium creates version {SCHEMA_VERSION})"
    state = ("up to date" if found == SCHEMA_VERSION else
             "behind: run podium db upgrade" if found < SCHEMA_VERSION else
             "ahead of this Podium: upgrade Podium")
    return f"{where}: schema version {found}, this Podium's {SCHEMA_VERSION} ({state})"
