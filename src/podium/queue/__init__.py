"""Queues of runs waiting for workers: in-process, or Redis Streams."""

from podium.queue.base import Claim, QueueItem, QueueStatistics, RunQueue
from podium.queue.local import LocalQueue

__all__ = ("Claim", "LocalQueue", "QueueItem", "QueueStatistics", "RunQueue")
