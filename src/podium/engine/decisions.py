"""Deciding on waiting runs, against any store: list, decide, expire.

Shared by :class:`~podium.engine.driver.Engine` (embedded users) and the
gateway. Every write is a journal append *with the record*, which every store
fences by the record's version: of two decisions (or a decision and a cancel,
or a sweep) racing on one run, one is written and the other re-reads the run
and is refused (409) — a decision is never lost nor applied twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from podium.engine.approvals import (
    PendingApproval,
    check_decision,
    open_requests,
    pending_approvals,
)
from podium.engine.records import ApprovalDecided, RunFinished, RunRecord
from podium.errors import DecisionError, StaleRunError

if TYPE_CHECKING:
    from podium.store.base import RunStore
    from podium.tools.tool import Tool

__all__ = ("decide", "expire", "list_pending", "run_pending", "sweep_waiting")

#: Reads of a run a decision retries when another write overtakes it.
_ATTEMPTS = 8

#: Finds the tool a waiting call was made to: (the run's record, tool name) -> Tool, or
#: None. The call is the current agent's: after a hand-off, ``record.active_agent``'s.
ToolLookup = Callable[[RunRecord, str], "Tool[Any, Any] | None"]


async def run_pending(store: RunStore, record: RunRecord) -> list[PendingApproval]:
    """The calls of ``record``'s run that wait for a decision."""
    if record.status != "waiting":
        return []
    return pending_approvals(record, [e for _, e in await store.journal(record.run_id)])


async def list_pending(
    store: RunStore, *, tenant: str | None = None, limit: int = 100
) -> list[PendingApproval]:
    """Pending decisions across waiting runs (of ``tenant``), newest run first."""
    found: list[PendingApproval] = []
    for record in await store.list(tenant=tenant, status="waiting", limit=limit):
        found.extend(await run_pending(store, record))
        if len(found) >= limit:
            break
    return found[:limit]


async def decide(
    store: RunStore,
    run_id: str,
    call_id: str,
    decision: str,
    *,
    message: str | None = None,
    arguments: str | None = None,
    by: str | None = None,
    tenant: str | None = None,
    tools: ToolLookup | None = None,
) -> tuple[RunRecord, bool]:
    """Journal a human's decision on one waiting call: ``(record, ready)``.

    ``ready`` is True when it was the step's last open call: the run is ``queued``
    again and must be handed to a worker (enqueued, or ``engine.resume``d).
    Raises :class:`~podium.errors.DecisionError`: 404 for no such run (or another
    tenant's) or call, 409 when the call was decided already or the run is not
    waiting (ended, expired, resumed), 422 for a decision that does not fit.
    """
    for _ in range(_ATTEMPTS):
        record = await store.get(run_id)
        if record is None or (tenant is not None and record.tenant != tenant):
            raise DecisionError(404, f"no run {run_id!r}", field="run_id")
        if record.status != "waiting":
            raise DecisionError(
                409, f"run {run_id!r} is {record.status}, not waiting for a decision"
            )
        asks, decided = open_requests([e for _, e in await store.journal(run_id)])
        ask = asks.get(call_id)
        if ask is None:
            if call_id in decided:
                raise DecisionError(409, f"call {call_id!r} of run {run_id!r} was decided already")
            raise DecisionError(
                404,
                f"run {run_id!r} has no call {call_id!r} waiting for a decision",
                field="call_id",
            )
        tool = tools(record, ask.tool) if tools is not None else None
        check_decision(ask, decision, arguments, tool)
        now = time.time()
        waiting = record.waiting
        if waiting is not None and waiting.until is not None and waiting.until <= now:
            try:
                await expire(store, record, now)
            except StaleRunError:
                continue
            raise DecisionError(
                409, f"run {run_id!r} failed ({waiting.reason}) before the decision"
            )
        entry = ApprovalDecided(
            ask.step,
            now,
            ask.index,
            call_id,
            ask.tool,
            decision,  # type: ignore[arg-type]  # checked by check_decision
            message,
            arguments,
            by,
        )
        ready = len(asks) == 1
        if ready:  # the step's last open call: back to the queue, its wait over
            record.status = "queued"
            if waiting is not None and waiting.pause:
                record.paused_s += now - waiting.since
            record.waiting = None
        try:
            await store.append(run_id, (entry,), record=record)
        except StaleRunError:
            continue  # written meanwhile (another decision, a cancel): look again
        return record, ready
    raise DecisionError(409, f"run {run_id!r} keeps changing; retry the decision")


async def expire(
    store: RunStore,
    record: RunRecord,
    now: float | None = None,
    *,
    reason: str | None = None,
    error: str | None = None,
) -> RunFinished:
    """End a waiting run that waited past its limit: ``failed`` with the wait's reason
    (or with ``reason`` and ``error``, a waiting run that must end for another cause).

    Raises :class:`~podium.errors.StaleRunError` if the run was written meanwhile.
    """
    now = time.time() if now is None else now
    if reason is None:
        waiting = record.waiting
        reason = waiting.reason if waiting is not None else "deadline"
    if error is None:
        what = "its deadline" if reason == "deadline" else "the approval timeout"
        error = f"no decision before {what} while waiting for a human"
    final = RunFinished(now, "failed", error=error, reason=reason)
    record.status, record.error, record.reason = "failed", final.error, reason
    record.finished_at = now
    await store.append(record.run_id, (final,), record=record)
    return final


async def sweep_waiting(
    store: RunStore, *, now: float | None = None, limit: int = 1000
) -> list[tuple[RunRecord, RunFinished]]:
    """Fail the waiting runs past their limit (no worker holds them, so something must
    look): what was ended. A run written meanwhile is left for the next sweep."""
    now = time.time() if now is None else now
    ended: list[tuple[RunRecord, RunFinished]] = []
    for record in await store.list(status="waiting", limit=limit):
        waiting = record.waiting
        if waiting is None or waiting.until is None or waiting.until > now:
            continue
        try:
            ended.append((record, await expire(store, record, now)))
        except StaleRunError:
            continue
    return ended
