"""The run-store interface: run records plus an append-only journal per run.

Implementations: :class:`~podium.store.memory.MemoryRunStore` (benchmarks,
tests), :class:`~podium.store.sqlite.SQLiteRunStore` (the embedded default)
and a Redis store for distributed deployments.
"""

from __future__ import annotations

import abc
import asyncio
import builtins
import logging
import time
from collections.abc import Sequence

import msgspec

from podium.engine.records import JournalEntry, RunRecord
from podium.lifecycle import AsyncCloseable
from podium.memory.item import MemoryItem
from podium.store.notify import JournalNotifier
from podium.threads.record import ThreadRecord

__all__ = ("JournalItem", "RunStore", "StoreStatistics")

#: A journal entry with its sequence number in the run (0, 1, 2, …).
JournalItem = tuple[int, JournalEntry]


class StoreStatistics(msgspec.Struct, frozen=True):
    runs: int
    appends: int
    entries: int
    bytes_written: int
    #: Runs found missing though a queue entry or an index referenced them (evicted by
    #: Redis, deleted by hand): ``podium_runs_lost_total``.
    lost: int = 0


log = logging.getLogger("podium.store")


def log_lost(run_id: str, where: str) -> None:
    """The one line a lost run gets (see :meth:`RunStore.report_lost`)."""
    log.error(
        "run %s is lost: %s referenced it, but the store no longer holds it (evicted by "
        "Redis? its maxmemory-policy must be noeviction; or deleted by hand)", run_id, where,
    )


class RunStore(AsyncCloseable, abc.ABC):
    """Where runs live. Every method is safe to call from many runs at once."""

    _notifier: JournalNotifier | None = None
    #: With a notifier: how often to look for entries written by other processes (None:
    #: no other process writes this store).
    _notify_poll_s: float | None = None
    _cancels: set[str] | None = None

    @abc.abstractmethod
    async def create(self, record: RunRecord) -> None:
        """Store a new run (its id must be new)."""

    @abc.abstractmethod
    async def get(self, run_id: str) -> RunRecord | None:
        """The run's record, or None."""

    @abc.abstractmethod
    async def update(self, record: RunRecord) -> None:
        """Replace the run's record (its status, output, profile…)."""

    @abc.abstractmethod
    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> int | None:
        """Append journal entries, and update ``record`` in the same atomic write if given.

        When this returns the entries are durable (as durable as the store is). Returns
        the CPU nanoseconds the store spent on the write off the event loop (its own
        thread), where it can tell, else None: the run's checkpoint phase counts them as
        CPU, not as waiting.
        """

    def append_nowait(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> bool:
        """:meth:`append` done without waiting, if this store can (True); else nothing is
        done (False) and the caller awaits :meth:`append`. The engine journals each step
        through it first: for an in-memory store that is a call, not a coroutine."""
        return False

    @property
    def keeps_entries(self) -> bool:
        """True when :meth:`append_nowait` always succeeds and the journal holds the entry
        objects themselves, not copies or encodings (an in-memory store): the engine then
        gives a step's entry its profile as the step closes, after appending it."""
        return False

    @abc.abstractmethod
    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        """The run's journal entries with sequence number greater than ``after``, in order."""

    @abc.abstractmethod
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
        """Runs, newest first, filtered by tenant, status and agent, and created within
        ``since``..``until`` (epoch seconds, both inclusive; None: unbounded). The store
        applies the window before ``limit``: the newest ``limit`` runs *in* the window,
        however many newer runs there are."""

    async def wait_journal(
        self, run_id: str, after: int, timeout: float
    ) -> builtins.list[JournalItem]:
        """Entries after ``after``; waits up to ``timeout`` seconds for some to arrive.

        Stores that write in this process set ``_notifier`` and are woken by their own
        appends; the others poll (or override this with their service's blocking read).
        """
        items = await self.journal(run_id, after)
        deadline = time.monotonic() + timeout
        while not items and (left := deadline - time.monotonic()) > 0:
            if self._notifier is None:
                await asyncio.sleep(min(0.05, left))
            elif self._notify_poll_s is None:  # only this process writes: its appends wake us
                await self._notifier.wait(run_id, left)
            else:  # woken by this process's appends; another's are seen by polling
                await self._notifier.wait(run_id, min(left, self._notify_poll_s))
            items = await self.journal(run_id, after)
        return items

    async def request_cancel(self, run_id: str) -> None:
        """Ask whichever process drives the run to cancel it (it checks :meth:`cancel_requests`).

        In one process this is a set in memory; distributed stores keep the request
        where every worker sees it.
        """
        if self._cancels is None:
            self._cancels = set()
        self._cancels.add(run_id)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        """Which of ``run_ids`` someone asked to cancel."""
        return set() if self._cancels is None else self._cancels.intersection(run_ids)

    # -- threads (conversations): see podium.threads; one record per thread ------------------

    async def create_thread(self, thread: ThreadRecord) -> None:
        """Store a new thread (its id must be new, else :class:`StoreError`)."""
        raise NotImplementedError(f"{type(self).__name__} does not store threads")

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread, or None (never created, deleted, or expired)."""
        raise NotImplementedError(f"{type(self).__name__} does not store threads")

    async def update_thread(self, thread: ThreadRecord) -> None:
        """Replace the thread if its ``version`` is the stored one (then bump it), else
        :class:`~podium.errors.StaleRunError`; a thread that is gone is
        :class:`~podium.errors.ThreadNotFoundError`. Its expiry moves to ``expires_at``."""
        raise NotImplementedError(f"{type(self).__name__} does not store threads")

    async def list_threads(
        self, *, tenant: str | None = None, limit: int = 100
    ) -> builtins.list[ThreadRecord]:
        """Threads, most recently written first, of one tenant (or all)."""
        raise NotImplementedError(f"{type(self).__name__} does not store threads")

    async def delete_thread(self, thread_id: str) -> bool:
        """Forget the thread (its runs stay); False if there was none."""
        raise NotImplementedError(f"{type(self).__name__} does not store threads")

    # -- long-term memory (podium.memory.StoreMemory): items by namespace and key ----------

    async def put_memory(self, namespace: str, item: MemoryItem) -> None:
        """Keep ``item`` in ``namespace``, replacing the item with the same key."""
        raise NotImplementedError(f"{type(self).__name__} does not store memories")

    async def list_memories(self, namespace: str, limit: int = 1000) -> builtins.list[MemoryItem]:
        """The namespace's items, newest first."""
        raise NotImplementedError(f"{type(self).__name__} does not store memories")

    async def delete_memory(self, namespace: str, key: str) -> bool:
        """Forget one item; False if there was none."""
        raise NotImplementedError(f"{type(self).__name__} does not store memories")

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(0, 0, 0, 0)

    def sole_user(self) -> bool | None:
        """Whether this process is the only one using the store now, so that no other one
        can be driving its unfinished runs: an embedded server resumes the runs an earlier
        process left ``queued`` or ``running`` only then. None: the store does not keep
        runs for a later process to resume (a memory store), or hands them over by other
        means (Redis deployments: the queue's leases). A SQLite file can tell."""
        return None

    def problem(self) -> str | None:
        """Why the store cannot take writes now, as far as it knows without writing (a full
        disk its last write met, its file deleted under it), or None: what ``/readyz``
        reports beside a read."""
        return None

    def report_lost(self, run_id: str, where: str) -> None:
        """A run that ``where`` (a queue entry, an index) referenced is not in the store:
        logged, and counted in :meth:`statistics` where the store can lose runs (Redis
        under an evicting policy), not left to look like a 404."""
        log_lost(run_id, where)

    async def unsubmitted(self, before: float, limit: int) -> builtins.list[RunRecord]:
        """Runs stored ``queued`` by a write before ``before`` (a ``time.time()``) that no
        submit to a queue is known to have followed, oldest first, at most ``limit``: the
        stranded sweep's candidates (see :mod:`podium.queue.stranded`). By default every
        run queued since before ``before`` (a listing); a store that keeps an index of
        them (Redis) reads only those."""
        page = await self.list(status="queued", limit=limit, until=before)
        return sorted((r for r in page if r.updated_at <= before), key=lambda r: r.updated_at)

    async def forget_unsubmitted(self, records: Sequence[RunRecord]) -> None:
        """The sweep submitted these runs (or found them submitted): leave them out of
        :meth:`unsubmitted` from now on, unless queued again since they were read."""
        return None

    async def health(self) -> str | None:
        """Why the store cannot take writes now (None: it can), asking its service where
        that is cheap: a Redis store writes a probe key (cached a second or two) and
        reads the server's eviction policy. By default, :meth:`problem`."""
        return self.problem()

    def other_users(self) -> builtins.list[int]:
        """The process ids of the other processes using the store now, where the store can
        tell (a SQLite file on Linux): what a warning that :meth:`sole_user` is False names.
        Empty where it cannot tell."""
        return []

    async def aclose(self) -> None:
        """Flush and release the store."""
