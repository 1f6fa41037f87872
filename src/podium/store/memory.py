"""An in-memory run store: for tests, benchmarks and ephemeral runs.

Finished runs are kept for a bounded time and number (``finished_ttl_s``,
``max_finished``), oldest finished first out, so a long-lived process does not
keep every run it ever served.
"""

from __future__ import annotations

import builtins
import math
import time
from collections import OrderedDict
from collections.abc import Sequence

import msgspec

from podium.engine.records import JournalEntry, RunRecord
from podium.errors import RunNotFoundError, StaleRunError, StoreError, ThreadNotFoundError
from podium.memory.item import MemoryItem
from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.notify import JournalNotifier
from podium.threads.record import ThreadRecord

__all__ = ("MemoryRunStore",)

def _newest(item: MemoryItem) -> float:
    return item.created_at


_copy = msgspec.structs.replace  # a shallow copy: the store keeps its own snapshot


class MemoryRunStore(RunStore):
    """Keeps records and journals in dicts; entries are stored as the immutable structs they are.

    Records are snapshots: :meth:`get` returns a copy, and :meth:`update` is refused
    with :class:`~podium.errors.StaleRunError` when the record's version is not the
    stored one (someone else wrote the run since it was read), as in every store.

    ``finished_ttl_s``: how long a finished run stays readable (None: no time limit).
    ``max_finished``: how many finished runs are kept at most (None: no limit); past
    it, the ones that finished first are forgotten.
    """

    def __init__(
        self, *, finished_ttl_s: float | None = 3600.0, max_finished: int | None = 10_000
    ) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._journals: dict[str, list[JournalEntry]] = {}
        self._finished: OrderedDict[str, float] = OrderedDict()  # run id -> expiry, in order
        self._first_expiry = 0.0  # no finished run expires before this (0: look)
        self.finished_ttl_s = finished_ttl_s
        self.max_finished = max_finished
        self._notifier: JournalNotifier | None = JournalNotifier()
        self._appends = 0
        self._entries = 0
        self._threads: dict[str, ThreadRecord] = {}
        self._memories: dict[str, dict[str, MemoryItem]] = {}
        # A subclass that changes append() must see every append: no shortcut around it.
        self._nowait = type(self).append is MemoryRunStore.append
        if self._nowait and type(self).append_nowait is MemoryRunStore.append_nowait:
            # The engine's checkpoint (every step) calls straight into _append: a frame less.
            self.append_nowait = self._append  # type: ignore[method-assign]

    async def create(self, record: RunRecord) -> None:
        self._expire()
        if record.run_id in self._runs:
            raise StoreError(f"run {record.run_id} exists")
        record.updated_at = record.updated_at or time.time()
        self._runs[record.run_id] = _copy(record)
        self._journals[record.run_id] = []
        if record.done:
            self._retire(record.run_id)

    async def get(self, run_id: str) -> RunRecord | None:
        self._expire()
        record = self._runs.get(run_id)
        return None if record is None else _copy(record)

    async def update(self, record: RunRecord) -> None:
        self._put(record)

    def _put(self, record: RunRecord) -> None:
        stored = self._runs.get(record.run_id)
        if stored is None:
            raise RunNotFoundError(record.run_id)
        if stored.version != record.version:
            raise StaleRunError(
                f"{record.run_id} is at version {stored.version}, "
                f"this writer holds {record.version}"
            )
        record.version += 1
        record.updated_at = time.time()
        self._runs[record.run_id] = _copy(record)
        if record.done:
            self._retire(record.run_id)

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        self._append(run_id, entries, record)

    @property
    def keeps_entries(self) -> bool:
        return self._nowait

    def append_nowait(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> bool:
        if not self._nowait:
            return False
        self._append(run_id, entries, record)
        return True

    def _append(
        self, run_id: str, entries: Sequence[JournalEntry], record: RunRecord | None = None
    ) -> bool:
        journal = self._journals.get(run_id)
        if journal is None:
            raise RunNotFoundError(run_id)
        if record is not None:
            self._put(record)  # checked first: a refused record write appends nothing
        journal.extend(entries)
        self._appends += 1
        self._entries += len(entries)
        notifier = self._notifier
        if notifier is not None and notifier.waiters:  # a reader is following some run
            notifier.notify(run_id)
        return True  # (as append_nowait: taken)

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        self._expire()
        journal = self._journals.get(run_id)
        if journal is None:
            raise RunNotFoundError(run_id)
        start = max(after + 1, 0)
        return [(i, journal[i]) for i in range(start, len(journal))]

    async def list(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 100,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        self._expire()
        found = [
            r
            for r in self._runs.values()
            if (tenant is None or r.tenant == tenant)
            and (status is None or r.status == status)
            and (agent is None or r.agent == agent)
            and (since is None or r.created_at >= since)
            and (until is None or r.created_at <= until)
        ]
        found.sort(key=lambda r: r.created_at, reverse=True)
        return [_copy(r) for r in found[: max(limit, 0)]]

    # -- threads ----------------------------------------------------------------------------

    def _live_thread(self, thread_id: str) -> ThreadRecord | None:
        thread = self._threads.get(thread_id)
        if thread is not None and thread.expired(time.time()):
            del self._threads[thread_id]
            return None
        return thread

    @staticmethod
    def _thread_copy(thread: ThreadRecord) -> ThreadRecord:
        # The lists are the caller's to change: copy them (the messages are never changed).
        return _copy(thread, runs=list(thread.runs), history=list(thread.history),
                     metadata=dict(thread.metadata))

    async def create_thread(self, thread: ThreadRecord) -> None:
        if self._live_thread(thread.thread_id) is not None:
            raise StoreError(f"thread {thread.thread_id} exists")
        thread.updated_at = thread.updated_at or thread.created_at
        self._threads[thread.thread_id] = self._thread_copy(thread)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        thread = self._live_thread(thread_id)
        return None if thread is None else self._thread_copy(thread)

    async def update_thread(self, thread: ThreadRecord) -> None:
        stored = self._live_thread(thread.thread_id)
        if stored is None:
            raise ThreadNotFoundError(thread.thread_id)
        if stored.version != thread.version:
            raise StaleRunError(
                f"thread {thread.thread_id} is at version {stored.version}, "
                f"this writer holds {thread.version}"
            )
        thread.version += 1
        self._threads[thread.thread_id] = self._thread_copy(thread)

    async def list_threads(
        self, *, tenant: str | None = None, limit: int = 100
    ) -> builtins.list[ThreadRecord]:
        now = time.time()
        for thread_id in [k for k, t in self._threads.items() if t.expired(now)]:
            del self._threads[thread_id]
        found = [t for t in self._threads.values() if tenant is None or t.tenant == tenant]
        found.sort(key=lambda t: t.updated_at, reverse=True)
        return [self._thread_copy(t) for t in found[: max(limit, 0)]]

    async def delete_thread(self, thread_id: str) -> bool:
        return self._threads.pop(thread_id, None) is not None

    # -- long-term memory -------------------------------------------------------------------

    async def put_memory(self, namespace: str, item: MemoryItem) -> None:
        items = self._memories.setdefault(namespace, {})
        items.pop(item.key, None)  # a replaced item counts as new: it goes last
        items[item.key] = item

    async def list_memories(self, namespace: str, limit: int = 1000) -> builtins.list[MemoryItem]:
        items = sorted(self._memories.get(namespace, {}).values(), key=_newest, reverse=True)
        return items[: max(limit, 0)]

    async def delete_memory(self, namespace: str, key: str) -> bool:
        items = self._memories.get(namespace)
        if items is None or items.pop(key, None) is None:
            return False
        if not items:
            del self._memories[namespace]
        return True

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(len(self._runs), self._appends, self._entries, 0)

    def forget(self, run_id: str) -> None:
        """Drop a run (benchmarks call this to keep memory flat)."""
        self._runs.pop(run_id, None)
        self._journals.pop(run_id, None)
        self._finished.pop(run_id, None)

    # -- retention --------------------------------------------------------------------------

    def _retire(self, run_id: str) -> None:
        """The run finished: it is kept for ``finished_ttl_s``, among ``max_finished`` at most."""
        ttl = self.finished_ttl_s
        self._finished.pop(run_id, None)
        expires = self._finished[run_id] = math.inf if ttl is None else time.monotonic() + ttl
        if expires < self._first_expiry:  # (a shorter ttl set meanwhile)
            self._first_expiry = expires
        if self.max_finished is not None:
            while len(self._finished) > self.max_finished:
                self.forget(next(iter(self._finished)))

    def _expire(self) -> None:
        finished = self._finished
        if not finished or self.finished_ttl_s is None:
            return
        now = time.monotonic()
        if now < self._first_expiry:  # (every create and get asks: most find nothing due)
            return
        while finished:
            run_id, expires = next(iter(finished.items()))
            if expires > now:
                self._first_expiry = expires
                return
            self.forget(run_id)
        self._first_expiry = 0.0
