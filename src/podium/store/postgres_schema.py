"""The PostgreSQL store's tables, as versioned forward-only migrations.

The database records the version it is at in ``podium_schema``. A store opened on a
database with no Podium tables creates them (version :data:`SCHEMA_VERSION`); one that
finds an older version refuses with the command that upgrades it (``podium db upgrade``,
which :func:`upgrade` implements), and one that finds a newer version (written by a
newer Podium) refuses too: it must not write rows an older code does not understand.

A migration is a list of statements; an upgrade runs the missing ones in one transaction,
under an advisory lock so
that two ``podium db upgrade`` (or two stores creating a fresh database) never race.
Migrations are never edited once released: a change is a new one appended to
:data:`MIGRATIONS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from podium.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable

    import asyncpg

__all__ = (
    "LOCK_KEY",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SchemaMismatchError",
    "apply_migrations",
    "check_schema",
    "schema_version",
    "table_version",
    "upgrade",
)

#: Version 1: runs, journal, cancel requests, threads, long-term memories.
_V1 = (
    """CREATE TABLE podium_runs (
        run_id     text PRIMARY KEY,
        tenant     text NOT NULL,
        agent      text NOT NULL,
        status     text NOT NULL,
        created_at double precision NOT NULL,
        version    bigint NOT NULL,
        -- the next journal sequence number: allocated by the append that writes the row
        next_seq   bigint NOT NULL DEFAULT 0,
        -- a token of the last write, so that a write whose connection died can tell
        -- whether it landed before it tries again
        last_write bytea,
        record     bytea NOT NULL,
        expires_at double precision
    )""",
    "CREATE INDEX podium_runs_by_tenant ON podium_runs (tenant, created_at)",
    "CREATE INDEX podium_runs_by_status ON podium_runs (status, created_at)",
    "CREATE INDEX podium_runs_by_created ON podium_runs (created_at)",
    "CREATE INDEX podium_runs_expiry ON podium_runs (expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE podium_journal (
        run_id text NOT NULL,
        seq    bigint NOT NULL,
        data   bytea NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    """CREATE TABLE podium_cancels (
        run_id text PRIMARY KEY,
        at     double precision NOT NULL
    )""",
    """CREATE TABLE podium_threads (
        thread_id  text PRIMARY KEY,
        tenant     text NOT NULL,
        updated_at double precision NOT NULL,
        version    bigint NOT NULL,
        record     bytea NOT NULL,
        expires_at double precision
    )""",
    "CREATE INDEX podium_threads_by_tenant ON podium_threads (tenant, updated_at)",
    # Namespaces and keys are any strings (NUL too, which a text column refuses): UTF-8 bytes.
    """CREATE TABLE podium_memories (
        namespace  bytea NOT NULL,
        key        bytea NOT NULL,
        created_at double precision NOT NULL,
        item       bytea NOT NULL,
        PRIMARY KEY (namespace, key)
    )""",
    "CREATE INDEX podium_memories_by_age ON podium_memories (namespace, created_at)",
)

#: Version 2: full-text search of long-term memories (a generated tsvector, GIN-indexed).
_V2 = (
    "ALTER TABLE podium_memories ADD COLUMN body text NOT NULL DEFAULT ''",
    """ALTER TABLE podium_memories ADD COLUMN words tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED""",
    "CREATE INDEX podium_memories_words ON podium_memories USING gin (words)",
)

#: Every migration, in order: ``MIGRATIONS[n]`` takes a database from version n to n + 1.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2)
SCHEMA_VERSION = len(MIGRATIONS)

LOCK_KEY = 0x706F6469756D  # "podium": the advisory lock every migration takes
_UPGRADE = "podium db upgrade --store URL"


class SchemaMismatchError(StoreError):
    """The database's schema is not the one this Podium writes; the message says what to
    run."""


async def table_version(conn: asyncpg.Connection, table: str) -> int | None:
    """The version recorded in ``table`` (a schema's version table): None without it."""
    if not await conn.fetchval(f"SELECT to_regclass('{table}') IS NOT NULL"):
        return None
    version = await conn.fetchval(f"SELECT max(version) FROM {table}")
    return 0 if version is None else int(version)


async def schema_version(conn: asyncpg.Connection) -> int | None:
    """The version the database is at: None without Podium's tables."""
    return await table_version(conn, "podium_schema")


async def apply_migrations(
    conn: asyncpg.Connection,
    *,
    table: str,
    migrations: tuple[tuple[str, ...], ...],
    lock_key: int,
    mismatch: Callable[[int, str], SchemaMismatchError],
) -> tuple[int | None, int]:
    """Apply the ``migrations`` (``migrations[n]`` takes version n to n + 1) the database
    lacks, recording each in ``table``, all in one transaction (a failure leaves the
    database as it was); returns the versions (before, after). A database at a newer
    version is refused (``mismatch``), not touched."""
    # A session lock, taken before the transaction starts: the transaction then begins
    # with the catalog as the previous holder committed it (a lock taken inside would
    # leave this backend's cached "no such table" in place, and CREATE would collide).
    target = len(migrations)
    await conn.execute("SELECT pg_advisory_lock($1)", lock_key)
    try:
        async with conn.transaction():
            before = await table_version(conn, table)
            start = before or 0
            if start > target:
                raise mismatch(start, "podium db upgrade")
            await conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version integer NOT NULL)")
            for version in range(start, target):
                for statement in migrations[version]:
                    await conn.execute(statement)
                await conn.execute(f"INSERT INTO {table} VALUES ($1)", version + 1)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", lock_key)
    return before, target


def _mismatch(found: int, where: str) -> SchemaMismatchError:
    if found < SCHEMA_VERSION:
        return SchemaMismatchError(
            f"{where}: the database's Podium schema is version {found}, this Podium needs "
            f"{SCHEMA_VERSION}: run `{_UPGRADE}` (forward-only; back up first)"
        )
    return SchemaMismatchError(
        f"{where}: the database's Podium schema is version {found}, newer than this "
        f"Podium's {SCHEMA_VERSION}: upgrade Podium (pip install -U 'podium[postgres]')"
    )


async def check_schema(conn: asyncpg.Connection, where: str, *, create: bool = True) -> None:
    """Make sure the database holds this version's tables: created on a database without
    Podium's tables (if ``create``), else :class:`SchemaMismatchError` naming what to run."""
    found = await schema_version(conn)
    if found == SCHEMA_VERSION:
        return
    if found is None and create:
        await upgrade(conn)
        return
    if found is None:
        raise SchemaMismatchError(
            f"{where}: the database has no Podium tables: run `{_UPGRADE}` to create them"
        )
    raise _mismatch(found, where)


async def upgrade(conn: asyncpg.Connection) -> tuple[int | None, int]:
    """Apply the migrations the database lacks, all in one transaction (a failure leaves
    the database as it was); returns the versions (before, after). A database at a newer
    version is refused, not touched."""
    return await apply_migrations(conn, table="podium_schema", migrations=MIGRATIONS,
                                  lock_key=LOCK_KEY, mismatch=_mismatch)
