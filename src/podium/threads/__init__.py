"""Threads: conversations of several runs (see :mod:`podium.threads.keeper` for how runs
take turns on one). ``engine.threads`` is the keeper of an engine's store."""

from podium.threads.record import (
    DEFAULT_THREAD_TTL_S,
    MAX_THREAD_ID,
    ThreadRecord,
    check_thread_id,
    new_thread_id,
)

__all__ = (
    "DEFAULT_THREAD_TTL_S",
    "MAX_THREAD_ID",
    "ThreadRecord",
    "check_thread_id",
    "new_thread_id",
)
