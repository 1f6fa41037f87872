"""The names of the keys Podium keeps in Redis (the store's indexes, the queue's streams):
one leaf module, so that what checks them (:mod:`podium.store.redis_preflight`) names
them without importing the store and the queue that use them."""

from __future__ import annotations

__all__ = (
    "clock_key",
    "dead_stream_key",
    "index_prefix",
    "pending_key",
    "queue_stream_key",
    "unsubmitted_key",
)


def index_prefix(prefix: str) -> str:
    """What the store's index keys start with (``all``, ``thall``, ``t:<tenant>``, …)."""
    return f"{prefix}:idx:"


def unsubmitted_key(prefix: str) -> str:
    """The sorted set of runs stored ``queued`` whose submit has not been seen (the queue's
    submit removes a run from it)."""
    return f"{index_prefix(prefix)}enq"


def queue_stream_key(prefix: str, pool: str) -> str:
    """The stream of ``pool``'s waiting and in-flight runs."""
    return f"{prefix}:queue:{pool}"


def clock_key(prefix: str, pool: str) -> str:
    """When a worker of ``pool`` last spoke to Redis (see ``_TOUCH``)."""
    return f"{prefix}:queue:{pool}:clock"


def dead_stream_key(prefix: str, pool: str) -> str:
    """``pool``'s dead-letter stream."""
    return f"{prefix}:dead:{pool}"


def pending_key(prefix: str) -> str:
    """The sorted set of finished (or finishing) runs not archived to PostgreSQL yet
    (:mod:`podium.store.tiered` adds them, :mod:`podium.store.archiver` takes them)."""
    return f"{prefix}:archive:pending"
