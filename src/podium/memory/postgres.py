"""Long-term memory searched by PostgreSQL's full-text search (``tsvector``, GIN-indexed).

:class:`~podium.memory.keyword.StoreMemory` ranks in Python over the newest
``scan_limit`` items of a namespace; this one asks the database, over all of them:
the items matching any word of the query, best match first, then newest. A namespace is
the bound of every query (``WHERE namespace = …``, compared as bytes): a tenant's
namespace (see :func:`~podium.memory.tools.per_run`) never finds another's items, however
alike the names, and a query's characters are words, never tsquery or SQL syntax.

Given an ``embed`` function (text to a vector of ``dimensions`` numbers), it searches by
meaning too, where the server has the pgvector extension (see
:mod:`podium.memory.postgres_vectors`): each item's embedding is kept beside it, and a
search returns the nearest items of the namespace. Without the extension it says so once
in the log and searches by words.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from podium.memory.base import Memory
from podium.memory.item import MemoryItem
from podium.memory.keyword import keywords
from podium.memory.postgres_vectors import VectorIndex, missing_extension

if TYPE_CHECKING:
    from podium.store.postgres import PostgresRunStore

__all__ = ("Embed", "PostgresMemory")

log = logging.getLogger("podium.memory")

#: Text to its embedding (sync or async): the same model for every item and query.
Embed = Callable[[str], Sequence[float] | Awaitable[Sequence[float]]]


class PostgresMemory(Memory):
    """Memory in a :class:`~podium.store.postgres.PostgresRunStore`. Example::

        memory = PostgresMemory(PostgresRunStore("postgresql://podium@db/podium"))
        await memory.put("user:42", "Prefers deliveries after 6 pm.")
        [best] = await memory.search("user:42", "deliveries in the evening", limit=1)

    With ``embed`` and ``dimensions`` (pgvector on the server), searches are by meaning:
    ``PostgresMemory(store, embed=model.embed, dimensions=384)``.
    """

    def __init__(
        self, store: PostgresRunStore, *, embed: Embed | None = None,
        dimensions: int | None = None,
    ) -> None:
        if (embed is None) != (dimensions is None):
            raise ValueError("give embed and dimensions together (or neither)")
        self.store = store
        self._embed = embed
        self._vectors = None if dimensions is None else VectorIndex(
            store.dsn, dimensions, schema=store.schema)

    async def vector_search(self) -> bool:
        """Whether searches go by embedding: ``embed`` given and pgvector on the server."""
        if self._vectors is None:
            return False
        if not self._vectors.known:
            await self.store.list_memories("", 1)  # the store's tables (and schema) first
        if await self._vectors.available():
            return True
        if self._embed is not None:  # said once
            log.warning(missing_extension(self.store.where))
            self._embed = None
        return False

    async def _embedding(self, text: str) -> Sequence[float]:
        assert self._embed is not None
        vector = self._embed(text)
        if inspect.isawaitable(vector):
            return await vector
        return vector

    async def put_item(self, namespace: str, item: MemoryItem) -> None:
        if self._vectors is not None and await self.vector_search():
            # Embedded first: an embedding of the wrong size stores nothing of the item.
            vector = self._vectors.checked(await self._embedding(item.text))
            await self.store.put_memory(namespace, item)
            await self._vectors.put(namespace, item.key, vector)
            return
        await self.store.put_memory(namespace, item)

    async def search(self, namespace: str, query: str, *, limit: int = 5) -> list[MemoryItem]:
        if self._vectors is not None and query.strip() and await self.vector_search():
            return await self._vectors.nearest(namespace, await self._embedding(query), limit)
        if not keywords(query):  # nothing to match: the newest, as every memory answers
            return await self.store.list_memories(namespace, limit)
        return await self.store.search_memories(namespace, query, limit)

    async def delete(self, namespace: str, key: str) -> bool:
        if self._vectors is not None and await self.vector_search():
            await self._vectors.delete(namespace, key)
        return await self.store.delete_memory(namespace, key)

    async def aclose(self) -> None:
        if self._vectors is not None:
            await self._vectors.aclose()
