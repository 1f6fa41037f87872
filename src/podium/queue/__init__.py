"""Queues of runs waiting for workers: in-process, or Redis Streams.

``RedisQueue`` is imported on first use, so importing Podium never needs the
``redis`` package (install the ``podium[redis]`` extra to use it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podium.queue.base import Claim, QueueItem, QueueStatistics, RunQueue
from podium.queue.local import LocalQueue

if TYPE_CHECKING:
    from podium.queue.redis import RedisQueue

__all__ = ("Claim", "LocalQueue", "QueueItem", "QueueStatistics", "RedisQueue", "RunQueue")


def __getattr__(name: str) -> Any:
    if name == "RedisQueue":
        from podium.queue.redis import RedisQueue

        return RedisQueue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
