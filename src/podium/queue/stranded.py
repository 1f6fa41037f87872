"""Runs the store holds ``queued`` that no queue holds: stranded, and submitted again.

A run is stored first and submitted to the queue after; a decision on a waiting run
is stored first and the run submitted after. A process that dies in between leaves
the run ``queued`` in the store with nothing to deliver it. Two cases:

- The embedded server: its queue lives in its process, so a server that was killed
  (or stopped while runs went on past its drain grace) takes it along and leaves its
  runs ``queued`` or ``running``. The next server on the same store file submits
  them at start-up, before it takes a request (:func:`requeue_left_behind`), if it
  is the file's sole user: another process on it (a second server, a ``podium run``)
  may be driving some of them.
- A shared queue (Redis): the store keeps an index of the runs it holds ``queued``
  whose submit it has not seen (the queue's submit takes a run out); every worker reads
  it every second for runs left there longer than a grace period (2 s by default) and
  submits them (:class:`StrandedSweep`). Each submit, the gateway's and the sweeps',
  carries the run's stored version, and a queue adds only a version above the run's
  last one, so a run is queued once however many of them submit it.

Either way the run resumes from its last checkpoint: a call that had finished is not
made again; one cut short is. A child run (an agent called as a tool) is never
submitted on its own: its parent, resumed, makes the same call and resumes it.
"""

from __future__ import annotations

import logging
import time

from podium.engine.records import RunRecord
from podium.errors import StaleRunError
from podium.queue.base import QueueItem, RunQueue
from podium.store.base import RunStore

__all__ = ("StrandedSweep", "queue_item", "requeue_left_behind", "unfinished_runs")

log = logging.getLogger("podium.queue")

_PAGE = 1000


def queue_item(record: RunRecord, now: float) -> QueueItem:
    """The item that submits ``record`` at its stored version (see ``QueueItem.version``)."""
    return QueueItem(
        record.run_id, record.agent, record.pool, record.tenant, now, version=record.version
    )


async def unfinished_runs(store: RunStore) -> list[RunRecord]:
    """The runs ``queued`` or ``running`` in ``store``, oldest first."""
    found: dict[str, RunRecord] = {}
    for status in ("running", "queued"):
        until: float | None = None
        while True:
            page = await store.list(status=status, limit=_PAGE, until=until)
            fresh = [r for r in page if r.run_id not in found]
            for record in fresh:
                found[record.run_id] = record
            if len(page) < _PAGE or not fresh:
                break
            until = page[-1].created_at  # the next page ends where this one did (ties re-read)
    return sorted(found.values(), key=lambda r: r.created_at)


def _where(store: RunStore) -> str:
    path = getattr(store, "path", None)
    return type(store).__name__ if path is None else f"{path}"


async def requeue_left_behind(store: RunStore, queue: RunQueue) -> int:
    """An embedded server's start-up: submit the runs an earlier process left unfinished
    in ``store``; how many. Nothing when another process uses the store."""
    where = _where(store)
    # A store of a shared service (PostgreSQL) knows who else uses it once it has opened,
    # which its first call does; a file or memory store answers this read at once.
    await store.list(limit=1)
    alone = store.sole_user()
    if alone is None:  # nothing left behind for this process to take up
        return 0
    if not alone:
        left = await store.list(status="running", limit=1) or await store.list(
            status="queued", limit=1
        )
        if left:
            pids = store.other_users()
            log.warning(
                "runs are queued or running in %s and another process%s uses it: this server "
                "does not resume any (start it alone on the store to resume what a stopped "
                "server left)",
                where,
                f" (pid {', '.join(map(str, pids))})" if pids else "",
            )
        return 0
    # A child run (an agent called as a tool) is resumed by its parent, which makes the
    # same call again and finds it: queued on its own it would be driven twice, or
    # dead-lettered by a server that does not serve its agent at the top.
    runs = [r for r in await unfinished_runs(store) if r.parent_run_id is None]
    now = time.time()
    for record in runs:
        if record.status == "running":  # its driver stopped before it finished: counted
            await _count_restart(store, record)
        await queue.submit(queue_item(record, now))
    if runs:
        log.warning("resuming %d run(s) an earlier server left unfinished in %s", len(runs), where)
    return len(runs)


async def _count_restart(store: RunStore, record: RunRecord) -> None:
    """One more ``restarts`` for ``record`` (its worker dead-letters it past its
    ``max_deliveries``, as a shared queue's redeliveries are)."""
    record.restarts += 1
    try:
        await store.update(record)
    except StaleRunError:  # written meanwhile (a cancel): submitted as it now stands
        record.restarts -= 1
        fresh = await store.get(record.run_id)
        if fresh is not None:
            record.version = fresh.version


class StrandedSweep:
    """A worker's sweep of a shared queue's store for runs stored ``queued`` more than
    ``after_s`` ago whose submit was never seen (the store keeps an index of them: the
    queue's submit takes a run out, see :meth:`RunStore.unsubmitted`), ``limit`` a pass,
    one pass per ``every_s`` at most.

    A pass is one indexed read that finds nothing while every submitter lives, so it is
    cheap enough to make every second on every worker: a run stranded by a crash is
    queued again within ``after_s + every_s`` (plus a claim). Every worker sweeps, and
    each submits at the run's stored version: the queue adds it once.

    After an outage (a pass that failed, or whose read waited ``slow_s`` for Redis) the
    sweep rests ``holdoff_s``: the gateways whose submits failed in it are settling
    those runs now, failing the ones created without an idempotency key (their clients,
    told 503, send them again as new runs); queued by a sweep first, they would run
    twice.
    """

    def __init__(
        self,
        store: RunStore,
        queue: RunQueue,
        after_s: float,
        limit: int = 500,
        *,
        every_s: float = 1.0,
        slow_s: float = 1.0,
        holdoff_s: float = 10.0,
    ):
        self.store = store
        self.queue = queue
        self.after_s = after_s
        self.limit = limit
        self.every_s = every_s
        self.slow_s = slow_s
        self.holdoff_s = holdoff_s
        self._next = 0.0  # monotonic time of the next pass

    async def run_once(self) -> list[str]:
        """One pass (none if the last was too recent); the ids of the runs it submitted
        (stranded ones: the others' submits were made before, and add nothing)."""
        mono = time.monotonic()
        if mono < self._next:
            return []
        self._next = mono + self.every_s
        now = time.time()
        try:
            found = await self.store.unsubmitted(now - self.after_s, self.limit)
        except BaseException:
            self._next = time.monotonic() + self.holdoff_s  # an outage: see above
            raise
        if time.monotonic() - mono > self.slow_s:  # it waited for Redis: an outage ended
            self._next = time.monotonic() + self.holdoff_s
            return []
        submitted: list[str] = []
        settled: list[RunRecord] = []
        for record in found:
            if record.status != "queued":  # moved on since it was indexed (it is taken out)
                continue
            if record.parent_run_id is not None:  # its parent's resume finds it (see above)
                settled.append(record)
                continue
            if await self.queue.submit(queue_item(record, now)):
                submitted.append(record.run_id)
                log.warning(
                    "run %s was queued in the store but in no queue (its submitter died?): "
                    "submitted it",
                    record.run_id,
                )
            else:  # submitted at this version already: nothing to look for any more
                settled.append(record)
        await self.store.forget_unsubmitted(settled)
        return submitted
