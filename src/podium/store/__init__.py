"""Run stores: in memory, SQLite, Redis.

``RedisRunStore`` is imported on first use, so importing Podium never needs
the ``redis`` package (install the ``podium[redis]`` extra to use it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.memory import MemoryRunStore

if TYPE_CHECKING:
    from podium.store.redis import RedisRunStore

__all__ = ("JournalItem", "MemoryRunStore", "RedisRunStore", "RunStore", "StoreStatistics")


def __getattr__(name: str) -> Any:
    if name == "RedisRunStore":
        from podium.store.redis import RedisRunStore

        return RedisRunStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
