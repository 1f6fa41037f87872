"""The runs an earlier embedded server left unfinished, handed to this one's queue.

In the embedded mode the queue lives in the server's process: a server killed, or
stopped while runs went on past its drain grace, takes the queue with it, and its
runs stay ``queued`` or ``running`` in the store file with nothing to drive them.
The next server on the same file queues them again at start-up, before it takes a
request, so each resumes from its last checkpoint (a call cut short runs again; a
finished one does not). It does so only when it is the file's sole user: another
process on it (a second server, a ``podium run``) may be driving some of them.
"""

from __future__ import annotations

import logging
import time

from podium.engine.records import RunRecord
from podium.queue.base import QueueItem, RunQueue
from podium.store.base import RunStore

__all__ = ("requeue_left_behind", "unfinished_runs")

log = logging.getLogger("podium.gateway")

_PAGE = 1000


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
    """Queue the runs an earlier process left unfinished in ``store``; how many. Nothing
    when another process uses the store."""
    where = _where(store)
    alone = store.sole_user()
    if alone is None:  # nothing left behind for this process to take up
        return 0
    if not alone:
        left = await store.list(status="running", limit=1) or await store.list(
            status="queued", limit=1
        )
        if left:
            log.warning(
                "runs are queued or running in %s and another process uses it: this server "
                "does not resume any (start it alone on the store to resume what a stopped "
                "server left)",
                where,
            )
        return 0
    runs = await unfinished_runs(store)
    now = time.time()
    for record in runs:
        await queue.submit(QueueItem(record.run_id, record.agent, record.pool, record.tenant, now))
    if runs:
        log.warning("resuming %d run(s) an earlier server left unfinished in %s", len(runs), where)
    return len(runs)
