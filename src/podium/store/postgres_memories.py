"""The PostgreSQL store's long-term memories: items by namespace and key, searched with
PostgreSQL's full-text search."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from podium.memory.item import MemoryItem
from podium.store.postgres_pool import PostgresPool

if TYPE_CHECKING:
    import asyncpg

__all__ = ("PostgresMemories",)


class PostgresMemories(PostgresPool):
    """Memories in ``podium_memories`` (a part of
    :class:`~podium.store.postgres.PostgresRunStore`)."""

    async def put_memory(self, namespace: str, item: MemoryItem) -> None:
        # (str.encode refuses a lone surrogate with a ValueError, before anything is sent)
        args = (namespace.encode(), item.key.encode(), item.created_at,
                self._encoder.encode(item), item.text.replace("\x00", " "))

        async def op(conn: asyncpg.Connection) -> None:
            await conn.execute(
                "INSERT INTO podium_memories (namespace, key, created_at, item, body)"
                " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (namespace, key) DO UPDATE SET"
                " created_at = EXCLUDED.created_at, item = EXCLUDED.item, body = EXCLUDED.body",
                *args,
            )

        await self._call(op)

    async def list_memories(self, namespace: str, limit: int = 1000) -> builtins.list[MemoryItem]:
        space = namespace.encode()

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                "SELECT item FROM podium_memories WHERE namespace = $1"
                " ORDER BY created_at DESC LIMIT $2",
                space, max(limit, 0),
            )
            return rows

        decode = self._memory_decoder.decode
        return [decode(row[0]) for row in await self._call(op)]

    async def search_memories(
        self, namespace: str, query: str, limit: int = 5
    ) -> builtins.list[MemoryItem]:
        """The namespace's items matching ``query`` (PostgreSQL full-text search, any of its
        words), best match first, then newest. Only ``namespace`` is searched: a tenant's
        namespace is the bound of what its agents can find."""

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                # Any of the query's words (each quoted: a word like "a:b" or "x&y" is a
                # word, never tsquery syntax), ranked by how much of the item matches.
                """SELECT item FROM podium_memories,
                       to_tsquery('simple', array_to_string(array(
                           SELECT quote_literal(w)
                           FROM unnest(tsvector_to_array(to_tsvector('simple', $2))) AS w
                       ), ' | ')) AS q
                   WHERE namespace = $1 AND q <> ''::tsquery AND words @@ q
                   ORDER BY ts_rank(words, q) DESC, created_at DESC LIMIT $3""",
                namespace.encode(), query.replace("\x00", " "), max(limit, 0),
            )
            return rows

        decode = self._memory_decoder.decode
        return [decode(row[0]) for row in await self._call(op)]

    async def delete_memory(self, namespace: str, key: str) -> bool:
        space, name = namespace.encode(), key.encode()

        async def op(conn: asyncpg.Connection) -> bool:
            done = await conn.execute(
                "DELETE FROM podium_memories WHERE namespace = $1 AND key = $2",
                space, name,
            )
            return bool(done != "DELETE 0")

        return await self._call(op)
