"""Long-term memory searched by PostgreSQL's full-text search (``tsvector``, GIN-indexed).

:class:`~podium.memory.keyword.StoreMemory` ranks in Python over the newest
``scan_limit`` items of a namespace; this one asks the database, over all of them:
the items matching any word of the query, best match first, then newest. A namespace is
the bound of every query (``WHERE namespace = …``, compared as bytes): a tenant's
namespace (see :func:`~podium.memory.tools.per_run`) never finds another's items, however
alike the names, and a query's characters are words, never tsquery or SQL syntax.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from podium.memory.base import Memory
from podium.memory.item import MemoryItem
from podium.memory.keyword import keywords

if TYPE_CHECKING:
    from podium.store.postgres import PostgresRunStore

__all__ = ("PostgresMemory",)


class PostgresMemory(Memory):
    """Memory in a :class:`~podium.store.postgres.PostgresRunStore`. Example::

        memory = PostgresMemory(PostgresRunStore("postgresql://podium@db/podium"))
        await memory.put("user:42", "Prefers deliveries after 6 pm.")
        [best] = await memory.search("user:42", "deliveries in the evening", limit=1)
    """

    def __init__(self, store: PostgresRunStore) -> None:
        self.store = store

    async def put_item(self, namespace: str, item: MemoryItem) -> None:
        await self.store.put_memory(namespace, item)

    async def search(self, namespace: str, query: str, *, limit: int = 5) -> list[MemoryItem]:
        if not keywords(query):  # nothing to match: the newest, as every memory answers
            return await self.store.list_memories(namespace, limit)
        return await self.store.search_memories(namespace, query, limit)

    async def delete(self, namespace: str, key: str) -> bool:
        return await self.store.delete_memory(namespace, key)
