"""``StoreMemory``: long-term memory kept in a run store, found by keywords and recency.

No vector database: an item matches a query by the words they share, each word
weighted by how rare it is in the namespace (an IDF weight, so "the" counts for
nothing and "allergic" for a lot); ties go to the newer item. The namespace's
items (its newest ``scan_limit``) are read and ranked per search, which suits
memories of a user or an agent (hundreds, thousands), not a corpus.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from podium.memory.base import Memory
from podium.memory.item import MemoryItem

if TYPE_CHECKING:
    from podium.store.base import RunStore

__all__ = ("StoreMemory", "keywords")

_WORD = re.compile(r"\w+")


def keywords(text: str) -> set[str]:
    """The words of ``text``, lower-cased, one-letter ones dropped."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 1}


class StoreMemory(Memory):
    """Memory in any :class:`~podium.store.base.RunStore` (memory, SQLite, Redis).

    Example::

        memory = StoreMemory(SQLiteRunStore("memory.sqlite"))
        await memory.put("user:42", "Prefers deliveries after 6 pm.")
        [best] = await memory.search("user:42", "when to deliver?", limit=1)
    """

    def __init__(self, store: RunStore, *, scan_limit: int = 2000) -> None:
        self.store = store
        self.scan_limit = scan_limit

    async def put_item(self, namespace: str, item: MemoryItem) -> None:
        await self.store.put_memory(namespace, item)

    async def search(self, namespace: str, query: str, *, limit: int = 5) -> list[MemoryItem]:
        items = await self.store.list_memories(namespace, self.scan_limit)  # newest first
        wanted = keywords(query)
        if not wanted:
            return items[:limit]
        words = [keywords(item.text) for item in items]
        documents = len(items)
        weight = {
            w: math.log(1 + documents / (1 + sum(w in ws for ws in words))) for w in wanted
        }
        scored = [
            (sum(weight[w] for w in wanted & ws), -age, item)
            for age, (item, ws) in enumerate(zip(items, words, strict=True))
        ]
        scored = [s for s in scored if s[0] > 0]
        scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
        return [item for _, _, item in scored[:limit]]

    async def delete(self, namespace: str, key: str) -> bool:
        return await self.store.delete_memory(namespace, key)
