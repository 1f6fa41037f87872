"""The long-term memory interface: what an agent keeps across runs and threads.

Small on purpose: ``put`` / ``search`` / ``delete`` by namespace. A namespace is
whatever the memory is *about* (a user, a tenant, an agent); an implementation
decides how ``search`` ranks (keywords here; embeddings in a vector store of
your own behind the same three methods).
"""

from __future__ import annotations

import abc
import secrets
from collections.abc import Mapping

from podium.memory.item import MemoryItem

__all__ = ("Memory",)


class Memory(abc.ABC):
    """Long-term memory. Implement :meth:`put_item`, :meth:`search` and :meth:`delete`."""

    async def put(
        self,
        namespace: str,
        text: str,
        *,
        key: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> MemoryItem:
        """Remember ``text`` in ``namespace`` (under ``key``: replacing what was there)."""
        item = MemoryItem(key or "mem_" + secrets.token_hex(8), text, metadata=dict(metadata or {}))
        await self.put_item(namespace, item)
        return item

    @abc.abstractmethod
    async def put_item(self, namespace: str, item: MemoryItem) -> None:
        """Keep ``item`` (replacing the namespace's item with the same key)."""

    @abc.abstractmethod
    async def search(self, namespace: str, query: str, *, limit: int = 5) -> list[MemoryItem]:
        """The items that best match ``query``, best first (an empty query: the newest)."""

    @abc.abstractmethod
    async def delete(self, namespace: str, key: str) -> bool:
        """Forget one item; False if there was none."""
