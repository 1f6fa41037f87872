"""Runs on threads: join in order, wait for the turn, fold the ended run into the thread.

The protocol, on any store (one process or many workers around Redis):

1. **join** (right after the run is stored): the run's id is appended to the
   thread's ``runs``. That order is the order the thread's runs execute in.
2. **turn** (when a worker loads the run): the run waits until every run that
   joined before it is *settled*, then starts from the thread's ``history``. A
   run ahead of it that has ended but was not settled (its worker died between
   the run's end and the thread's write) is settled here, from its journal.
3. **settle** (when the run ends): the thread's ``history`` becomes the run's final
   context if it completed, and ``settled`` moves past it; waiters are woken.

The holder of a thread is a *run*, not a worker: a worker killed mid-run leaves
the run ``running`` and the thread held; the queue's lease gives the run to
another worker, which resumes it from its checkpoint and settles the thread at
its end. A run that never ends well (dead-lettered, cancelled, failed) releases
the thread by ending: the next run finds it ended and settles it. Every write is
a compare-and-set on the thread's version, so two settlers cannot both apply.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import Sequence
from typing import Protocol

import msgspec

from podium.agent import ContextPolicy
from podium.context.buffer import Prefix
from podium.context.tokenizers import EstimateTokenizer
from podium.engine.records import RunRecord
from podium.errors import StaleRunError, StoreError, StoreUnavailableError, ThreadNotFoundError
from podium.messages import Message
from podium.store.base import RunStore
from podium.store.notify import JournalNotifier
from podium.threads.record import DEFAULT_THREAD_TTL_S, ThreadRecord, check_thread_id
from podium.threads.slot import TurnSlot, current_slot

__all__ = ("ThreadKeeper", "keeper_for")

log = logging.getLogger("podium.threads")

#: Compare-and-set attempts before a write gives up (only the thread's own runs contend).
_ATTEMPTS = 64


class _Neutral:
    """Stands in for an agent when an ended run is replayed by someone who does not serve
    it: its messages carry their token counts, only its input is counted (estimated)."""

    prefix = Prefix("", (), EstimateTokenizer())
    context = ContextPolicy()


class _Replayable(Protocol):
    prefix: Prefix
    context: ContextPolicy


def _history(context: Sequence[Message]) -> list[Message]:
    """A run's final context as a thread keeps it: without the system prompt (the next
    run brings its own) and without reasoning text (never sent back to a model)."""
    return [
        msgspec.structs.replace(m, reasoning="") if m.reasoning else m for m in context[1:]
    ]


class ThreadKeeper:
    """Threads on one store. Get the store's with :func:`keeper_for`, so that runs
    waiting for a turn in this process are woken by settles in this process (runs
    settled by another process are seen by polling every ``poll_s``)."""

    def __init__(self, store: RunStore, *, poll_s: float = 0.2) -> None:
        self.store = store
        self.poll_s = poll_s
        self._turns = JournalNotifier()  # keyed by thread id

    # -- create, join -------------------------------------------------------------------------

    async def create(
        self,
        thread_id: str,
        tenant: str,
        *,
        ttl_s: float | None = DEFAULT_THREAD_TTL_S,
        metadata: dict[str, str] | None = None,
    ) -> ThreadRecord:
        """A new empty thread (:class:`~podium.errors.StoreError` if the id is taken)."""
        thread = ThreadRecord(
            check_thread_id(thread_id), tenant, ttl_s=ttl_s, metadata=dict(metadata or {})
        )
        thread.touch(thread.created_at)
        await self.store.create_thread(thread)
        return thread

    async def join(
        self,
        thread_id: str,
        tenant: str,
        run_id: str,
        *,
        create: bool = False,
        ttl_s: float | None = DEFAULT_THREAD_TTL_S,
    ) -> ThreadRecord:
        """Append ``run_id`` to the thread's runs (again: no change). A thread that does
        not exist, or is another tenant's, is :class:`~podium.errors.ThreadNotFoundError`
        unless ``create`` (then a missing one is created for ``tenant``)."""
        check_thread_id(thread_id)
        for attempt in range(_ATTEMPTS):
            thread = await self.store.get_thread(thread_id)
            if thread is None:
                if not create:
                    raise ThreadNotFoundError(thread_id)
                thread = ThreadRecord(thread_id, tenant, ttl_s=ttl_s, runs=[run_id])
                thread.touch(thread.created_at)
                try:
                    await self.store.create_thread(thread)
                except StoreUnavailableError:
                    raise
                except StoreError:
                    continue  # created meanwhile by another run: join that one
                return thread
            if thread.tenant != tenant:
                raise ThreadNotFoundError(thread_id)  # as absent as a thread that never was
            if run_id in thread.runs:
                return thread  # a retried submit
            thread.runs.append(run_id)
            thread.touch()
            try:
                await self.store.update_thread(thread)
            except StaleRunError:
                await _back_off(attempt)
                continue
            return thread
        raise StaleRunError(f"thread {thread_id}: too much contention to join it")

    async def create_run(self, record: RunRecord, *, create_thread: bool = False) -> None:
        """Store the new run ``record`` and join it to its thread.

        Stored first, joined second: a run the thread lists always exists (a crash in
        between leaves a run its thread does not list yet; it joins when it is loaded).
        A thread that is missing (unless ``create_thread``) or another tenant's is checked
        before the run is stored, and if it goes meanwhile the run is failed, so no run is
        left queued that nothing will start: :class:`~podium.errors.ThreadNotFoundError`.
        """
        thread_id = record.thread_id
        assert thread_id is not None
        thread = await self.store.get_thread(check_thread_id(thread_id))
        if (thread is None and not create_thread) or (
            thread is not None and thread.tenant != record.tenant
        ):
            raise ThreadNotFoundError(thread_id)
        await self.store.create(record)
        try:
            await self.join(thread_id, record.tenant, record.run_id, create=create_thread)
        except ThreadNotFoundError:
            record.status, record.reason = "failed", "thread_not_found"
            record.error = f"thread {thread_id} was deleted before the run joined it"
            await self.store.update(record)
            raise
        except StaleRunError as exc:  # a crowd joining at once: it joins when it is loaded
            log.warning("run %s: joins thread %s when loaded (%s)", record.run_id, thread_id, exc)

    # -- a run's turn ---------------------------------------------------------------------------

    async def turn(self, record: RunRecord) -> list[Message]:
        """Wait until it is ``record``'s turn on its thread; the history it starts from.

        A thread that is gone (deleted, expired) gives an empty history: the run
        starts a new conversation rather than failing.
        """
        thread_id = record.thread_id
        assert thread_id is not None
        slot = current_slot.get()
        history = await self._await_turn(record, thread_id, slot)
        if slot is not None:
            # Hold a slot again before any work. Not on a cancel or an error: ending the
            # run is one write, and waiting for a slot there would delay the cancel.
            await slot.take_back()
        return history

    async def _await_turn(
        self, record: RunRecord, thread_id: str, slot: TurnSlot | None
    ) -> list[Message]:
        while True:
            thread = await self.store.get_thread(thread_id)
            if thread is None:
                return []
            pending = thread.pending
            if record.run_id not in pending:
                if record.run_id in thread.runs:  # settled already: nothing to wait for
                    return thread.history
                try:  # stored but never joined (its creator died in between): join now
                    await self.join(thread_id, record.tenant, record.run_id)
                except ThreadNotFoundError:  # gone meanwhile, or another tenant's now
                    return []
                continue
            if pending[0] == record.run_id:
                return thread.history
            if not await self._settle_head(thread):
                if slot is not None:  # waiting is admission: free the worker's slot
                    slot.lend()  # (the head may be parked on a human; see threads.slot)
                await self._turns.wait(thread_id, self.poll_s)

    async def _settle_head(self, thread: ThreadRecord) -> bool:
        """Settle the thread's head run if it has ended (or is gone: expired, deleted);
        False if it is still going."""
        head = thread.pending[0]
        record = await self.store.get(head)
        if record is not None and not record.done:
            return False
        messages = None
        if record is not None and record.status == "completed":
            messages = await self._final_context(thread, record)
        await self._fold(thread, head, messages)
        return True

    async def _final_context(self, thread: ThreadRecord, record: RunRecord) -> list[Message]:
        """The run's final context, replayed from its journal on the thread's history."""
        from podium.engine.replay import replay

        entries = [e for _, e in await self.store.journal(record.run_id)]
        neutral: _Replayable = _Neutral()
        state = replay(neutral, record, entries, thread.history)  # type: ignore[arg-type]
        return _history(state.ctx.messages)

    # -- settle ---------------------------------------------------------------------------------

    async def settle(self, record: RunRecord, context: Sequence[Message] | None = None) -> None:
        """Fold the ended run ``record`` into its thread; ``context`` is its final context
        if the caller holds it (else it is replayed from the journal when needed)."""
        thread_id = record.thread_id
        assert thread_id is not None
        thread = await self.store.get_thread(thread_id)
        if thread is None or not thread.pending or thread.pending[0] != record.run_id:
            return  # gone, or settled already (a resumed run's second try)
        messages = None
        if record.status == "completed":
            if context is not None:
                messages = _history(context)
            else:
                messages = await self._final_context(thread, record)
        await self._fold(thread, record.run_id, messages)

    async def settle_quietly(
        self, record: RunRecord, context: Sequence[Message] | None = None
    ) -> None:
        """:meth:`settle`, where a store failure is only logged: the run's end is written,
        and the next run on the thread (or a read of it) settles it from its journal."""
        try:
            await self.settle(record, context)
        except StoreError as exc:
            log.warning("run %s: thread %s not settled yet (%s)", record.run_id,
                        record.thread_id, exc)

    async def _fold(
        self, thread: ThreadRecord | None, run_id: str, messages: list[Message] | None
    ) -> None:
        """Move ``settled`` past ``run_id`` (the head), with its history if it completed."""
        for attempt in range(_ATTEMPTS):
            if thread is None or not thread.pending or thread.pending[0] != run_id:
                return  # settled by someone else meanwhile
            thread.settled += 1
            if messages is not None:
                thread.history = messages
                thread.turns += 1
            thread.touch()
            try:
                await self.store.update_thread(thread)
            except StaleRunError:
                await _back_off(attempt)
                thread = await self.store.get_thread(thread.thread_id)
                continue
            except ThreadNotFoundError:
                return
            self._turns.notify(thread.thread_id)
            return
        raise StaleRunError(f"run {run_id}: too much contention to settle its thread")

    # -- reading --------------------------------------------------------------------------------

    async def read(self, thread_id: str, tenant: str) -> ThreadRecord:
        """The tenant's thread with every ended run settled into it (so its history is
        current even where a worker died before settling)."""
        thread = await self.store.get_thread(check_thread_id(thread_id))
        while thread is not None and thread.tenant == tenant:
            if not thread.pending or not await self._settle_head(thread):
                return thread
            thread = await self.store.get_thread(thread_id)
        raise ThreadNotFoundError(thread_id)


async def _back_off(attempt: int) -> None:
    """After a lost compare-and-set: a short random pause, so a crowd spreads out."""
    await asyncio.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))


_keepers: weakref.WeakKeyDictionary[RunStore, ThreadKeeper] = weakref.WeakKeyDictionary()


def keeper_for(store: RunStore) -> ThreadKeeper:
    """The store's keeper (one per store object, shared by its engine and gateway)."""
    keeper = _keepers.get(store)
    if keeper is None:
        keeper = _keepers[store] = ThreadKeeper(store)
    return keeper
