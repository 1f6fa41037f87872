"""Persistence: what the engine writes to its store, and when that costs no loop iteration.

The journal's appends (redacted, shown to the observers), a step's checkpoint (started
eagerly: an in-memory store takes it without a wait), and a run's end: written with its
record whatever cancels arrive meanwhile, or, for a run no driver holds, ended in the
store with its unfinished child runs (:meth:`Persistence.end_stored`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any

from podium.engine.base import CHECKPOINT, EngineBase, log
from podium.engine.children import child_runs
from podium.engine.records import JournalEntry, RunFinished, RunRecord, RunStatus
from podium.engine.replay import RunState
from podium.engine.stopwatch import Stopwatch
from podium.errors import RunNotFoundError, StaleRunError, StoreError
from podium.observe.inspect import with_progress
from podium.security.redact import RunRedactor
from podium.store.base import JournalItem
from podium.tools.eager import continuation


def _ended_record(record: RunRecord, status: RunStatus, reason: str, error: str) -> RunFinished:
    """``record`` ended with ``status`` (for a run whose state is not loaded: its counts
    stay as stored); the entry that journals that end."""
    final = RunFinished(time.time(), status, error=error, reason=reason)
    record.status, record.error, record.reason = status, error, reason
    record.finished_at = final.ts
    return final


class Persistence(EngineBase):

    async def end_stored(
        self, record: RunRecord, status: RunStatus, reason: str, error: str
    ) -> None:
        """End in the store a run no driver holds (cancelled before a worker took it, a
        dead-lettered one): its record and a ``RunFinished`` entry in one write, so the
        run's followers and waiters hear of its end as of any other, and this engine's
        observers too. Raises :class:`~podium.errors.StaleRunError` if the run was
        written since ``record`` was read. Its steps and tokens so far are read from its
        journal (a running run's record holds them only from its end). Its unfinished
        child runs (agents it called as tools) end with it, theirs too: only their parent
        drives them, so nothing would again."""
        # One read of its journal serves both: its progress and its children.
        try:
            journal = [] if record.done else await self.store.journal(record.run_id)
        except RunNotFoundError:  # gone since it was read: its append says so
            journal = []
        so_far = with_progress(record, journal)
        record.steps, record.usage, record.profile = so_far.steps, so_far.usage, so_far.profile
        final = _ended_record(record, status, reason, error)
        await self.store.append(record.run_id, (final,), record=record)
        for observer in self.observers:
            observer(record.run_id, final)
        try:
            await self._end_children(record, journal, status, reason, error)
        except (StoreError, ConnectionError, OSError) as exc:  # the parent's end stands
            log.warning("run %s: its children not ended with it: %s", record.run_id, exc)

    async def _end_children(
        self,
        record: RunRecord,
        journal: Sequence[JournalItem],
        status: RunStatus,
        reason: str,
        error: str,
    ) -> None:
        why = (
            f"its parent run {record.run_id} was cancelled"
            if status == "cancelled"
            else f"its parent run {record.run_id} ended {status} ({reason}): {error}"
        )
        for child in await child_runs(self.store, record, journal):
            if child.done:
                continue
            child.waiting = None
            with contextlib.suppress(StaleRunError):  # written meanwhile: as it stands
                await self.end_stored(child, status, reason, why)  # and its own children

    async def _append(
        self,
        state: RunState,
        entries: Sequence[JournalEntry],
        sw: Stopwatch | None = None,
        *,
        record: RunRecord | None = None,
    ) -> None:
        """Journal ``entries`` (with ``record``), timed as the checkpoint phase of ``sw``."""
        if sw is None:  # a call of several, journaled from its own task: nothing to time
            if state.redact is not None:
                entries = state.redact(entries)
            await self.store.append(state.record.run_id, entries, record=record)
            if self.observers:
                self._notify(state, entries)
            return
        waiting = self._checkpoint(state, entries, sw, record)
        if waiting is not None:
            await waiting

    def _checkpoint(
        self,
        state: RunState,
        entries: Sequence[JournalEntry],
        sw: Stopwatch,
        record: RunRecord | None = None,
    ) -> Awaitable[None] | None:
        """Start journaling ``entries``: None if the store took them without waiting (an
        in-memory store: no loop iteration), else an awaitable that finishes the write."""
        if state.redact is not None:
            entries = state.redact(entries)
        store = self.store
        run_id = state.record.run_id
        if store.append_nowait(run_id, entries, record=record):
            if self.observers:
                self._notify(state, entries)
            return None
        coro = store.append(run_id, entries, record=record)
        try:
            pending = coro.send(None)
        except StopIteration:
            if self.observers:
                self._notify(state, entries)
            return None
        return self._wait_checkpoint(state, entries, sw, coro, pending)

    async def _wait_checkpoint(
        self,
        state: RunState,
        entries: Sequence[JournalEntry],
        sw: Stopwatch,
        coro: Coroutine[Any, Any, int | None],
        pending: Any,
    ) -> None:
        sw.suspend(CHECKPOINT)
        try:
            off_loop = await continuation(coro, pending)
        finally:
            sw.resume(CHECKPOINT)
        if off_loop:  # the store's own thread's CPU for this write (SQLite's): not waiting
            sw.add_cpu(CHECKPOINT, off_loop)
        if self.observers:
            self._notify(state, entries)

    def _notify(self, state: RunState, entries: Sequence[JournalEntry]) -> None:
        """Show journaled entries to the observers (their time counts as the checkpoint's)."""
        run_id = state.record.run_id
        for observer in self.observers:
            for entry in entries:
                observer(run_id, entry)

    def _apply_final(self, state: RunState, final: RunFinished) -> RunFinished:
        """Bring the record level with the run's end; the end as it is to be written (its
        output and error without the run's secrets: the record and the journal show them)."""
        if isinstance(state.redact, RunRedactor):
            final = state.redact.final(final)
        record = state.record
        record.status = final.status
        record.output = final.output
        record.error = final.error
        record.reason = final.reason
        record.finished_at = final.ts
        record.structured = final.structured
        record.steps = state.step
        record.usage = state.usage
        record.profile = state.profile
        return final

    async def _write_end(
        self,
        state: RunState,
        status: RunStatus,
        reason: str | None,
        output: str | None = None,
        error: str | None = None,
    ) -> None:
        """Journal and store the run's end (a completed run's went with its final step)."""
        record = state.record
        self._tasks.pop(record.run_id, None)  # its end is decided: a cancel is too late
        final = self._apply_final(state, RunFinished(time.time(), status, output, error, reason))
        await self._write_final(record, final)

    def _ended(self, state: RunState) -> RunRecord:
        """The run's end is stored: count it, tell the hook, give its record."""
        record = state.record
        if self.aggregator is not None:
            self.aggregator.finish_run(state.profile.admit_ns)
        if self.hook is not None:
            self.hook.run_finished(record)
        return record

    async def _finish_record(self, record: RunRecord) -> RunRecord:
        """End ``cancelled`` a run whose state was never loaded: the record keeps its counts."""
        final = _ended_record(record, "cancelled", "cancelled", "cancelled")
        await self._write_final(record, final)
        return record

    async def _write_final(self, record: RunRecord, final: RunFinished) -> None:
        """Journal the run's end with its record, whatever cancels arrive meanwhile."""
        try:
            await asyncio.shield(self.store.append(record.run_id, (final,), record=record))
        except StaleRunError:
            # A cancel that cut our own record write short leaves us a version behind the
            # store (fencing stores): take the stored version unless the run ended there.
            if final.status != "cancelled":
                raise
            stored = await self.store.get(record.run_id)
            if stored is None or stored.done:
                raise
            record.version = stored.version
            await asyncio.shield(self.store.append(record.run_id, (final,), record=record))
        for observer in self.observers:
            observer(record.run_id, final)
