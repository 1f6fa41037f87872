"""The PostgreSQL queue's tables, versioned apart from the store's.

The queue keeps its own version in ``podium_queue_schema`` so that its tables can change
without a store migration (and a database that holds only a store, queued through
Redis, never gets them). Like the store's, migrations are forward-only, run in one
transaction under an advisory lock, and are never edited once released: a change is a
new entry in :data:`MIGRATIONS`. ``podium db upgrade`` applies both; a queue opened on a
database without its tables creates them, and one that finds another version refuses
with one line saying what to run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from podium.store.postgres_schema import SchemaMismatchError, apply_migrations, table_version

if TYPE_CHECKING:
    import asyncpg

__all__ = ("MIGRATIONS", "SCHEMA_VERSION", "TABLES", "check_queue_schema",
           "queue_schema_version", "upgrade_queue")

#: The queue's tables (its version table included), as the docs name them.
TABLES = ("podium_queue", "podium_queue_versions", "podium_queue_dead", "podium_queue_schema")

#: Version 1: the queue, the last version submitted per run, the dead letters.
_V1 = (
    # One row per queued or in-flight run. consumer NULL: waiting. A claim sets consumer
    # and lease_until (the server's clock) and bumps claim_no, the receipt's fencing token:
    # a holder whose lease was taken over cannot heartbeat, release or keep the row.
    # earlier: deliveries before the current one that count (a release gives one back).
    """CREATE TABLE podium_queue (
        id          bigserial PRIMARY KEY,
        pool        text NOT NULL,
        run_id      text NOT NULL,
        item        bytea NOT NULL,
        deliveries  integer NOT NULL DEFAULT 0,
        claim_no    bigint NOT NULL DEFAULT 0,
        consumer    text,
        lease_until timestamptz
    )""",
    # What a claim reads: the oldest waiting rows of a pool; the leases that ran out.
    "CREATE INDEX podium_queue_waiting ON podium_queue (pool, id) WHERE consumer IS NULL",
    """CREATE INDEX podium_queue_leases ON podium_queue (pool, lease_until)
        WHERE consumer IS NOT NULL""",
    # A run's last submitted version (see QueueItem.version): kept until its end is seen,
    # else until expires_at (epoch seconds, the server's clock).
    """CREATE TABLE podium_queue_versions (
        run_id     text PRIMARY KEY,
        version    bigint NOT NULL,
        expires_at double precision NOT NULL
    )""",
    """CREATE TABLE podium_queue_dead (
        id         bigserial PRIMARY KEY,
        pool       text NOT NULL,
        run_id     text NOT NULL,
        reason     text NOT NULL,
        deliveries integer NOT NULL,
        ts         double precision NOT NULL,
        item       bytea NOT NULL
    )""",
    "CREATE INDEX podium_queue_dead_by_pool ON podium_queue_dead (pool, id)",
)

#: ``MIGRATIONS[n]`` takes the queue's tables from version n to n + 1.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1,)
SCHEMA_VERSION = len(MIGRATIONS)

#: "podiumq": the advisory lock the queue's migrations take (not the store's: a store
#: and a queue opening a fresh database at once each create their own tables).
LOCK_KEY = 0x706F6469756D71
_UPGRADE = "podium db upgrade --store URL"


async def queue_schema_version(conn: asyncpg.Connection) -> int | None:
    """The version of the queue's tables: None without them."""
    return await table_version(conn, "podium_queue_schema")


def _mismatch(found: int, where: str) -> SchemaMismatchError:
    if found < SCHEMA_VERSION:
        return SchemaMismatchError(
            f"{where}: the database's Podium queue tables are version {found}, this Podium "
            f"needs {SCHEMA_VERSION}: run `{_UPGRADE}` (forward-only; back up first)")
    return SchemaMismatchError(
        f"{where}: the database's Podium queue tables are version {found}, newer than this "
        f"Podium's {SCHEMA_VERSION}: upgrade Podium (pip install -U 'podium[postgres]')")


async def check_queue_schema(conn: asyncpg.Connection, where: str, *, create: bool) -> None:
    """The queue's tables at this version: created if missing (``create``), else refused."""
    found = await queue_schema_version(conn)
    if found == SCHEMA_VERSION:
        return
    if found is None and create:
        await upgrade_queue(conn)
        return
    if found is None:
        raise SchemaMismatchError(
            f"{where}: the database has no Podium queue tables: run `{_UPGRADE}`")
    raise _mismatch(found, where)


async def upgrade_queue(conn: asyncpg.Connection) -> tuple[int | None, int]:
    """Apply the queue migrations the database lacks, in one transaction; (before, after)."""
    return await apply_migrations(conn, table="podium_queue_schema", migrations=MIGRATIONS,
                                  lock_key=LOCK_KEY, mismatch=_mismatch)
