"""Run stores: in memory, SQLite, Redis, PostgreSQL.

``RedisRunStore`` and ``PostgresRunStore`` are imported on first use, so importing
Podium never needs the ``redis`` or ``asyncpg`` package (install the ``podium[redis]``
or ``podium[postgres]`` extra to use them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.memory import MemoryRunStore

if TYPE_CHECKING:
    from podium.store.postgres import PostgresRunStore
    from podium.store.redis import RedisRunStore

__all__ = (
    "JournalItem",
    "MemoryRunStore",
    "PostgresRunStore",
    "RedisRunStore",
    "RunStore",
    "StoreStatistics",
)


def __getattr__(name: str) -> Any:
    if name == "RedisRunStore":
        from podium.store.redis import RedisRunStore

        return RedisRunStore
    if name == "PostgresRunStore":
        from podium.store.postgres import PostgresRunStore

        return PostgresRunStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
