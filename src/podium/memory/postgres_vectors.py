"""Vector search of long-term memories with pgvector, where the server has it.

:class:`VectorIndex` keeps one embedding per memory in ``podium_memory_vectors`` (a
``vector(N)`` column, HNSW-indexed for cosine distance) beside the store's
``podium_memories`` rows, which it joins to answer: the nearest items of one namespace
(``WHERE namespace = …``: a tenant's query never reaches another's vectors). The
extension is created on first use (``CREATE EXTENSION IF NOT EXISTS vector``: the role
needs the right, or an administrator runs it once); a server without pgvector answers
:meth:`VectorIndex.available` False and :class:`~podium.memory.postgres.PostgresMemory`
searches by words instead. PostgreSQL's own apt repository (apt.postgresql.org) and
Debian from trixie on package it as ``postgresql-<major>-pgvector``; elsewhere it is built
from source (docs/postgres.md says how).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from podium.errors import ConfigError
from podium.memory.item import MemoryItem
from podium.store.postgres_errors import redact

if TYPE_CHECKING:
    import asyncpg

__all__ = ("EXTENSION", "TABLE", "VectorIndex", "missing_extension")

#: Where the embeddings are kept.
TABLE = "podium_memory_vectors"
#: pgvector's name on the server (a module global: the tests name one the server lacks,
#: the one way to meet "not installed" on a server that has it).
EXTENSION = "vector"
#: Candidates an HNSW search keeps (pgvector's ``hnsw.ef_search``, 40 by default). A
#: tenant's filter drops the other tenants' candidates after the index found them: with
#: 40, a tenant holding half of 5,000 random 384-number embeddings got half its true
#: nearest 10 back (recall 0.52); with 100, all of them, for ~1 ms more
#: (bench/bench_memory_vectors.py, docs/postgres.md).
EF_SEARCH = 100
_NEAREST = ("SELECT m.item FROM podium_memory_vectors v JOIN podium_memories m"
            " ON m.namespace = v.namespace AND m.key = v.key"
            " WHERE v.namespace = $1 ORDER BY v.embedding <=> $2 LIMIT $3")
#: Where to get it, in the lines that say it is missing.
_INSTALL = ("apt-get install postgresql-<major>-pgvector from apt.postgresql.org (or "
            "Debian trixie), or build it: https://github.com/pgvector/pgvector#installation")


def missing_extension(where: str) -> str:
    return (f"{where}: the server has no pgvector extension ({EXTENSION!r}), so memories "
            f"are searched by their words; for vector search, {_INSTALL}")


def _not_creatable(where: str, exc: BaseException) -> ConfigError:
    return ConfigError(
        f"{where}: pgvector is installed on the server but not created in this database, "
        f"and this role may not create it ({str(exc).strip().splitlines()[0]}): a "
        f"superuser runs `CREATE EXTENSION {EXTENSION}` in it once")


async def _session(conn: asyncpg.Connection) -> None:
    """A connection ready for the index: the extension's schema on its search path (an
    administrator may have created it anywhere; its type, operators and operator class
    are named unqualified), and a query's embedding sent as a ``vector`` parameter in
    pgvector's text form. (A ``$2::text::vector`` cast instead is folded once by a custom
    plan, but a prepared statement's generic plan, PostgreSQL's choice after five
    executions, casts it again for every row it sorts: 1,000 items of 384 numbers took
    70 ms, not 1.5 ms.) Nothing yet where the extension is not created."""
    where = await conn.fetchval(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
        " WHERE e.extname = $1", EXTENSION)
    if where is None:
        return
    await conn.execute(  # (kept: the pool's reset leaves the session's settings alone)
        "SELECT set_config('search_path', current_setting('search_path') || ', ' ||"
        " quote_ident($1), false)", where)
    await conn.set_type_codec("vector", schema=where, encoder=str, decoder=str,
                              format="text")


async def _reset(conn: asyncpg.Connection) -> None:
    """On the way back to the pool: a transaction a cancelled call left open rolled back,
    and nothing else (asyncpg's default ``RESET ALL`` would drop the search path)."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class VectorIndex:
    """Embeddings of ``dimensions`` numbers, in the database (and schema) of ``dsn``."""

    def __init__(self, dsn: str, dimensions: int, *, schema: str | None = None) -> None:
        if dimensions < 1 or dimensions > 16000:
            raise ConfigError(f"dimensions: 1 to 16000 (pgvector's bound), got {dimensions}")
        self.dsn = dsn
        self.where = redact(dsn)
        self.dimensions = dimensions
        self.schema = schema
        self._pool: asyncpg.Pool | None = None
        self._available: bool | None = None
        self._opening = asyncio.Lock()
        self._decoder = msgspec.msgpack.Decoder(MemoryItem)

    @property
    def known(self) -> bool:
        """Whether :meth:`available` has been answered (no query needed any more)."""
        return self._available is not None

    async def available(self) -> bool:
        """Whether the server has pgvector (and the table is made): asked once."""
        if self._available is None:
            async with self._opening:
                if self._available is None:
                    self._available = await self._open()
        return self._available

    async def _open(self) -> bool:
        import asyncpg

        settings = {"application_name": "podium-memory", "hnsw.ef_search": str(EF_SEARCH)}
        if self.schema is not None:
            settings["search_path"] = f"{self.schema},public"
        pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=4,
                                         server_settings=settings, init=_session,
                                         reset=_reset)
        try:
            async with pool.acquire() as conn:  # (a pool closes once this is back)
                ready = await self._prepare(conn)
        except BaseException:
            await pool.close()
            raise
        if not ready:
            await pool.close()
            return False
        self._pool = pool
        return True

    async def _prepare(self, conn: asyncpg.Connection) -> bool:
        """The extension and the table (False: the server has no pgvector)."""
        import asyncpg

        if not await conn.fetchval(
                "SELECT count(*) > 0 FROM pg_available_extensions WHERE name = $1", EXTENSION):
            return False
        if not await conn.fetchval(
                "SELECT count(*) > 0 FROM pg_extension WHERE extname = $1", EXTENSION):
            try:  # (pgvector is not a trusted extension: creating it takes a superuser)
                await conn.execute(f"CREATE EXTENSION IF NOT EXISTS {EXTENSION} SCHEMA public")
            except asyncpg.InsufficientPrivilegeError as exc:
                raise _not_creatable(self.where, exc) from None
            await _session(conn)  # (this connection opened before it existed)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS podium_memory_vectors ("
            " namespace bytea NOT NULL, key bytea NOT NULL,"
            f" embedding vector({self.dimensions}) NOT NULL,"
            " PRIMARY KEY (namespace, key))")
        found = await conn.fetchval(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = "
            "'podium_memory_vectors'::regclass AND attname = 'embedding'")
        if found != self.dimensions:
            raise ConfigError(
                f"{self.where}: podium_memory_vectors holds embeddings of {found} numbers, "
                f"this memory makes {self.dimensions}: one embedding model per database "
                "(or schema)")
        await conn.execute(
            "CREATE INDEX IF NOT EXISTS podium_memory_vectors_hnsw ON "
            "podium_memory_vectors USING hnsw (embedding vector_cosine_ops)")
        return True

    def checked(self, vector: Sequence[float]) -> Sequence[float]:
        """``vector``, if it has this index's size (else one line: ``ValueError``)."""
        self._literal(vector)
        return vector

    def _literal(self, vector: Sequence[float]) -> str:
        if len(vector) != self.dimensions:
            raise ValueError(f"embed gave {len(vector)} numbers, this memory's dimensions "
                             f"are {self.dimensions}")
        return "[" + ",".join(repr(float(x)) for x in vector) + "]"

    async def put(self, namespace: str, key: str, vector: Sequence[float]) -> None:
        assert self._pool is not None
        await self._pool.execute(
            "INSERT INTO podium_memory_vectors (namespace, key, embedding)"
            " VALUES ($1, $2, $3::text::vector) ON CONFLICT (namespace, key)"
            " DO UPDATE SET embedding = EXCLUDED.embedding",
            namespace.encode(), key.encode(), self._literal(vector))

    async def nearest(
        self, namespace: str, vector: Sequence[float], limit: int
    ) -> list[MemoryItem]:
        """The namespace's items nearest ``vector`` (cosine distance), nearest first."""
        assert self._pool is not None
        args = (namespace.encode(), self._literal(vector), limit)
        if limit <= EF_SEARCH:
            rows: list[Any] = await self._pool.fetch(_NEAREST, *args)
        else:  # HNSW returns at most ef_search rows: this query's own, in its transaction
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL hnsw.ef_search = {int(limit)}")
                rows = await conn.fetch(_NEAREST, *args)
        return [self._decoder.decode(r["item"]) for r in rows]

    async def delete(self, namespace: str, key: str) -> None:
        assert self._pool is not None
        await self._pool.execute(
            "DELETE FROM podium_memory_vectors WHERE namespace = $1 AND key = $2",
            namespace.encode(), key.encode())

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
