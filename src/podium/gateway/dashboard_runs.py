"""The dashboard's runs: any run of the store, found by filters and paged, and one run in full.

``GET /dashboard/runs`` lists runs of every tenant (operators only, like the rest of the
dashboard), newest first, filtered by ``status``, ``agent``, ``tenant`` and a creation
window (``since``/``until``, epoch seconds), ``limit`` at a time; ``cursor`` (the
previous page's ``next_cursor``) moves to older runs. The cursor names the oldest
creation time shown and the runs shown at that very time, so paging neither repeats nor
skips a run however the store orders runs created in the same instant, and works over
every store's :meth:`~podium.store.base.RunStore.list` as it is.

``GET /dashboard/data?run=ID`` (see :func:`run_detail`) is one run: its header (status,
tenant, agent, model, times, tokens), its steps on a time axis with their phases and
timestamps, its messages, the screening verdicts journaled on its input and tool results,
and its parent and child runs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from podium.engine.children import child_runs
from podium.engine.profile import STEP_PHASES
from podium.engine.records import (
    RUN_STATUSES,
    ModelTurn,
    OutputRejected,
    Screened,
    StepCommitted,
    StepRecord,
    ToolOutcome,
)
from podium.gateway.errors import ApiError
from podium.observe.display import clip, keep_ends
from podium.observe.inspect import read_progress, step_timeline, with_progress

if TYPE_CHECKING:
    from podium.engine.records import RunRecord
    from podium.gateway.service import Gateway
    from podium.security.screen import ScreenVerdict
    from podium.store.base import JournalItem

__all__ = ("run_detail", "runs_page", "runs_route")

_LIMIT, _MAX_LIMIT = 50, 200
_FILTERS = frozenset({"status", "agent", "tenant", "since", "until", "cursor", "limit"})
_EPOCH = re.compile(r"\d{1,12}(\.\d{1,9})?")
# A run's page is polled every second: its size is bounded whatever the run holds (a 5 MB
# tool result, 10,000 steps). Each cut says what it left out.
_TEXT, _CALL = 2000, 200  # characters of a message, of a tool call's arguments
_MESSAGES, _TIMELINE, _VERDICTS = 400, 1000, 200  # the first and last halves are sent
_CHILDREN = 200


class _Cursor(msgspec.Struct, array_like=True):
    """Where the next page starts: runs created at ``until`` or before, less ``seen`` (the
    runs created exactly at ``until`` that a page showed already)."""

    until: float
    seen: list[str]


def _encode_cursor(cursor: _Cursor) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode(cursor)).decode().rstrip("=")


def _decode_cursor(text: str) -> _Cursor:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return msgspec.json.decode(raw, type=_Cursor)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise ApiError(422, "invalid_request", "cursor is not one this listing gave",
                       field="cursor") from None


def _epoch(query: Mapping[str, str], name: str) -> float | None:
    raw = query.get(name)
    if not raw:
        return None
    if not _EPOCH.fullmatch(raw):
        raise ApiError(422, "invalid_request",
                       f"{name} must be epoch seconds (digits, an optional fraction)", field=name)
    return float(raw)


def _row(r: RunRecord) -> dict[str, Any]:
    return {
        "run_id": r.run_id, "agent": r.agent, "tenant": r.tenant, "status": r.status,
        "reason": r.reason, "created_at": r.created_at, "started_at": r.started_at,
        "finished_at": r.finished_at, "steps": r.steps,
        "input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens,
        "parent_run_id": r.parent_run_id,
    }


async def runs_page(gw: Gateway, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of the listing (the body of ``GET /dashboard/runs``)."""
    for name in query:
        if name not in _FILTERS:
            raise ApiError(422, "invalid_request", f"unknown query parameter {name!r}",
                           field=name)
    status = query.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise ApiError(422, "invalid_request",
                       f"status must be one of {', '.join(RUN_STATUSES)}", field="status")
    raw_limit = query.get("limit") or str(_LIMIT)
    if not (raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) <= 4
            and 1 <= int(raw_limit) <= _MAX_LIMIT):
        raise ApiError(422, "invalid_request",
                       f"limit must be an integer from 1 to {_MAX_LIMIT}", field="limit")
    limit = int(raw_limit)
    since, until = _epoch(query, "since"), _epoch(query, "until")
    seen: set[str] = set()
    cursor = _decode_cursor(query["cursor"]) if query.get("cursor") else None
    if cursor is not None:
        until = cursor.until if until is None else min(until, cursor.until)
        seen = set(cursor.seen) if until == cursor.until else set()
    # One more than a page (and the runs already shown at the cursor's instant, which the
    # store lists again since its window is inclusive): whether an older page exists.
    found = await gw.store.list(
        tenant=query.get("tenant") or None, status=status, agent=query.get("agent") or None,
        since=since, until=until, limit=limit + len(seen) + 1,
    )
    found = [r for r in found if r.run_id not in seen]
    page = found[:limit]
    next_cursor = None
    if len(found) > limit and page:
        last = page[-1].created_at
        same = [r.run_id for r in page if r.created_at == last]
        if until == last:  # a third page at the same instant: still skip the first's
            same += sorted(seen)
        next_cursor = _encode_cursor(_Cursor(last, same))
    # A run not ended has its steps and tokens so far in its journal (its record says 0).
    rows = await asyncio.gather(*(read_progress(gw.store, r) for r in page))
    return {"runs": [_row(r) for r in rows], "next_cursor": next_cursor, "limit": limit}


def _messages(record: RunRecord, journal: list[JournalItem]) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = [{"role": "user", "text": clip(record.input, _TEXT)}]
    for _, entry in journal:
        if isinstance(entry, StepRecord | ModelTurn):
            m = entry.message
            calls = ", ".join(f"{clip(c.name, _CALL)}({clip(c.arguments, _CALL)})"
                              for c in m.tool_calls)
            messages.append({"role": "assistant", "text": clip(m.content or f"→ {calls}", _TEXT)})
        if isinstance(entry, StepRecord):
            messages.extend({"role": f"tool {clip(r.name, _CALL)}", "text": clip(r.content, _TEXT)}
                            for r in entry.results)
        elif isinstance(entry, ToolOutcome):
            messages.append({"role": f"tool {clip(entry.result.name, _CALL)}",
                             "text": clip(entry.result.content, _TEXT)})
    first, last, left_out = keep_ends(messages, _MESSAGES)
    if left_out:
        first.append({"role": "…", "text": f"{left_out:,} messages not shown"})
    return first + last


def _verdict(v: ScreenVerdict, step: int | None, tool: str | None, ts: float) -> dict[str, Any]:
    return {"step": step, "tool": tool and clip(tool, _CALL), "ts": ts,
            "source": clip(v.source, _CALL), "rule": clip(v.rule, _CALL), "score": v.score,
            "action": v.action, "screener": clip(v.screener, _CALL),
            "excerpt": clip(v.excerpt, _CALL), "guard": clip(v.guard, _CALL)}


def _screening(journal: list[JournalItem]) -> list[dict[str, Any]]:
    """Every verdict journaled: on the input (``Screened``) and on each tool result."""
    out: list[dict[str, Any]] = []
    for _, entry in journal:
        if isinstance(entry, Screened):
            out.append(_verdict(entry.verdict, None, None, entry.ts))
        elif isinstance(entry, StepRecord):
            out.extend(_verdict(r.screen, entry.step, r.name, entry.ts)
                       for r in entry.results if r.screen is not None)
        elif isinstance(entry, ToolOutcome) and entry.result.screen is not None:
            out.append(_verdict(entry.result.screen, entry.step, entry.result.name, entry.ts))
    first, last, _ = keep_ends(out, _VERDICTS)
    return first + last


def _steps(record: RunRecord, journal: list[JournalItem]) -> tuple[list[dict[str, Any]], int]:
    """The steps on the time axis: phases (ms), when each step ended (the journal's time of
    its commit) and began, its tokens and the tools it called."""
    ended: dict[int, float] = {}
    tokens: dict[int, tuple[int, int]] = {}
    tools: dict[int, list[str]] = {}
    for _, entry in journal:
        if isinstance(entry, StepRecord | StepCommitted | ModelTurn | OutputRejected):
            ended[entry.step] = entry.ts
        if isinstance(entry, StepRecord | ModelTurn | OutputRejected):
            was = tokens.get(entry.step, (0, 0))
            tokens[entry.step] = (was[0] + entry.usage.input_tokens,
                                  was[1] + entry.usage.output_tokens)
        if isinstance(entry, StepRecord | ModelTurn):
            tools[entry.step] = [clip(c.name, _CALL) for c in entry.message.tool_calls][:20]
    early, late, left_out = keep_ends(step_timeline(record, journal), _TIMELINE)
    out = []
    for t in early + late:
        end = ended.get(t.step)
        out.append({
            "step": t.step, "start_ms": t.start_ms, "wall_ms": t.wall_ms, "cpu_ms": t.cpu_ms,
            "tool_calls": t.tool_calls, "ttft_ms": t.ttft_ms,
            "ended_at": end, "started_at": None if end is None else end - t.total_ms / 1e3,
            "input_tokens": tokens.get(t.step, (0, 0))[0],
            "output_tokens": tokens.get(t.step, (0, 0))[1], "tools": tools.get(t.step, []),
        })
    return out, left_out


def _model(gw: Gateway, record: RunRecord) -> str | None:
    served = gw.agents.get(record.active_agent or record.agent) or gw.agents.get(record.agent)
    return None if served is None else served.agent.model.name


async def run_detail(gw: Gateway, run_id: str) -> dict[str, Any] | None:
    """One run for its dashboard page; None when the store has no such run."""
    record = await gw.store.get(run_id)
    if record is None:
        return None
    journal = list(await gw.store.journal(run_id))
    record = with_progress(record, journal)  # a running run's steps and tokens so far
    steps, steps_left_out = _steps(record, journal)
    children = await child_runs(gw.store, record, journal)
    waiting = record.waiting
    return {
        "run_id": record.run_id, "agent": record.agent, "active_agent": record.active_agent,
        "tenant": record.tenant, "model": _model(gw, record), "pool": record.pool,
        "status": record.status, "done": record.done, "reason": record.reason,
        "error": clip(record.error or "", _TEXT) or None,
        "created_at": record.created_at, "started_at": record.started_at,
        "finished_at": record.finished_at, "updated_at": record.updated_at,
        "steps": record.steps, "input_tokens": record.usage.input_tokens,
        "output_tokens": record.usage.output_tokens,
        "cached_tokens": record.usage.cached_tokens, "requests": record.usage.requests,
        "queue_ms": record.profile.admit_ns / 1e6 if record.profile is not None else None,
        "thread_id": record.thread_id, "parent_run_id": record.parent_run_id,
        "parent_call": record.parent_call,
        "waiting": None if waiting is None else {
            "since": waiting.since, "until": waiting.until, "reason": waiting.reason},
        "children": [{"run_id": c.run_id, "agent": c.agent, "status": c.status}
                     for c in children[:_CHILDREN]],
        "children_left_out": max(0, len(children) - _CHILDREN),
        "timeline": steps, "steps_left_out": steps_left_out, "phases": STEP_PHASES,
        "messages": _messages(record, journal), "screening": _screening(journal),
    }


def runs_route(gw: Gateway) -> Route:
    async def runs(request: Request) -> Response:
        # Every tenant's runs: operators only (401 / 403), like the rest of the dashboard.
        gw.keys.authenticate_admin(request.headers)
        page = await runs_page(gw, request.query_params)
        return Response(msgspec.json.encode(page), media_type="application/json",
                        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})

    return Route("/dashboard/runs", runs, methods=["GET"])
