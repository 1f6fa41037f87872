"""An in-memory run store: for tests, benchmarks and ephemeral runs."""

from __future__ import annotations

import time
from collections.abc import Sequence

from podium.engine.records import JournalEntry, RunRecord
from podium.errors import RunNotFoundError, StoreError
from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.notify import JournalNotifier

__all__ = ("MemoryRunStore",)


class MemoryRunStore(RunStore):
    """Keeps records and journals in dicts; entries are stored as the immutable structs they are."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}
        self._journals: dict[str, list[JournalEntry]] = {}
        self._notifier: JournalNotifier | None = JournalNotifier()
        self._appends = 0
        self._entries = 0

    async def create(self, record: RunRecord) -> None:
        if record.run_id in self._runs:
            raise StoreError(f"run {record.run_id} exists")
        record.updated_at = record.updated_at or time.time()
        self._runs[record.run_id] = record
        self._journals[record.run_id] = []

    async def get(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    async def update(self, record: RunRecord) -> None:
        if record.run_id not in self._runs:
            raise RunNotFoundError(record.run_id)
        record.version += 1
        record.updated_at = time.time()
        self._runs[record.run_id] = record

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        journal = self._journals.get(run_id)
        if journal is None:
            raise RunNotFoundError(run_id)
        journal.extend(entries)
        self._appends += 1
        self._entries += len(entries)
        if record is not None:
            await self.update(record)
        if self._notifier is not None:
            self._notifier.notify(run_id)

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        journal = self._journals.get(run_id)
        if journal is None:
            raise RunNotFoundError(run_id)
        return [(i, e) for i, e in enumerate(journal) if i > after]

    async def list(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        found = [
            r
            for r in self._runs.values()
            if (tenant is None or r.tenant == tenant)
            and (status is None or r.status == status)
            and (agent is None or r.agent == agent)
        ]
        found.sort(key=lambda r: r.created_at, reverse=True)
        return found[:limit]

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(len(self._runs), self._appends, self._entries, 0)

    def forget(self, run_id: str) -> None:
        """Drop a run (benchmarks call this to keep memory flat)."""
        self._runs.pop(run_id, None)
        self._journals.pop(run_id, None)
