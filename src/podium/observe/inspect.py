"""Looking at stored runs: open any store by its address, filter runs, rebuild a run's steps.

What ``podium runs`` and the reports read. Nothing here writes to a store.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path

import msgspec

from podium.engine.profile import STEP_PHASES, ProfileAggregator, RunProfile, StepProfile
from podium.engine.records import (
    ModelTurn,
    OutputRejected,
    RunFinished,
    RunRecord,
    StepCommitted,
    StepRecord,
)
from podium.errors import ConfigError, RunNotFoundError
from podium.messages import Usage
from podium.store.base import JournalItem, RunStore
from podium.store.postgres_errors import is_postgres_url

__all__ = (
    "RunFilter",
    "StepTiming",
    "aggregate",
    "find_runs",
    "follow",
    "open_store",
    "parse_time",
    "read_progress",
    "step_timeline",
    "with_progress",
)

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def open_store(
    spec: str | None, *, redis: str | None = None, prefix: str = "podium", read_only: bool = False,
    archive: str | None = None,
) -> RunStore:
    """A store from an address: ``sqlite:PATH``, a SQLite file path, a ``postgresql://``
    URL, or a ``redis://`` URL
    (or ``redis``, given on its own). An SQLite file that does not exist is an error: looking
    at runs must never create an empty store by a typo. ``read_only``: a SQLite file is
    opened to look at it, not counted among the processes that drive its runs.
    ``archive``: beside a Redis store, the ``postgresql://`` URL its finished runs are
    archived to (see :mod:`podium.store.tiered`)."""
    if redis is not None or (spec is not None and spec.startswith(("redis://", "rediss://"))):
        from podium.store.redis import RedisRunStore

        hot = RedisRunStore(redis or spec or "", prefix=prefix)
        if archive is None:
            return hot
        from podium._config_checks import check_archive
        from podium.store.postgres import PostgresRunStore
        from podium.store.tiered import TieredRunStore

        check_archive(archive, redis or spec, "", "--archive")
        # Only looking: no archiver, no tables created (a typo'd database stays empty).
        return TieredRunStore(hot, PostgresRunStore(archive, create_schema=False),
                              archiver=False)
    if archive is not None:
        raise ConfigError("--archive: goes with a Redis store (--redis or a redis:// --store)")
    if not spec:
        raise ConfigError(
            "give a store: --store sqlite:PATH (or a file path), --store postgresql://… "
            "or --redis URL"
        )
    if is_postgres_url(spec):  # looking never creates tables: a typo'd database stays empty
        from podium.store.postgres import PostgresRunStore

        return PostgresRunStore(spec, create_schema=False)
    path = Path(spec.removeprefix("sqlite:"))
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a SQLite store")
    if not path.is_file():
        raise ConfigError(f"{path}: no such SQLite store")
    _check_run_store(path)
    from podium.store.sqlite import SQLiteRunStore

    return SQLiteRunStore(path, read_only=read_only)


def _check_run_store(path: Path) -> None:
    """Refuse a file that is not a Podium run store, looking without writing: opened as a
    store, another application's database (or an empty file) would get Podium's tables and
    WAL mode, by a command that only reads."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        from podium.store.sqlite import read_only_reason

        why = read_only_reason(str(path))
        if why is not None:  # SQLite's "unable to open database file" says nothing of it
            raise ConfigError(
                f"{path} is read-only: {why}, and SQLite cannot read a WAL database there "
                "without the -shm file beside it; copy the file to a writable directory "
                "to look at it"
            ) from None
        raise ConfigError(f"{path}: cannot open as a SQLite database: {exc}") from None
    if not {"runs", "journal"} <= tables:
        what = "an empty file" if not tables and path.stat().st_size == 0 else (
            "a SQLite database without Podium's runs and journal tables")
        raise ConfigError(f"{path}: not a Podium run store ({what})")


def parse_time(text: str, *, now: float | None = None) -> float:
    """A moment as epoch seconds: ``90s``/``15m``/``2h``/``1d`` ago, ISO 8601, or epoch."""
    text = text.strip()
    match = _RELATIVE.match(text)
    if match:
        return (time.time() if now is None else now) - float(match[1]) * _UNIT_S[match[2]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ConfigError(
            f"{text!r} is not a time: use 15m, 2h, 1d ago, ISO 8601 or epoch seconds"
        ) from None


class RunFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs: every field that is set must match. Times are epoch seconds."""

    status: str | None = None
    agent: str | None = None
    tenant: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 50


async def find_runs(store: RunStore, flt: RunFilter) -> list[RunRecord]:
    """Runs matching ``flt``, newest first (the store applies every filter, the time
    window included)."""
    return await store.list(
        tenant=flt.tenant, status=flt.status, agent=flt.agent, limit=flt.limit,
        since=flt.since, until=flt.until,
    )


def aggregate(runs: Sequence[RunRecord]) -> ProfileAggregator:
    """The workload profile of ``runs`` (those that have one)."""
    agg = ProfileAggregator()
    for record in runs:
        if record.profile is not None:
            agg.add_run(record.profile)
    return agg


class StepTiming(msgspec.Struct, frozen=True):
    """One step on a run's timeline: where it started (ms from the run's start), per phase."""

    step: int
    start_ms: float
    wall_ms: tuple[float, ...]
    cpu_ms: tuple[float, ...]
    tool_calls: int
    ttft_ms: float | None

    @property
    def total_ms(self) -> float:
        return sum(self.wall_ms)


def step_timeline(record: RunRecord, journal: Sequence[JournalItem] = ()) -> list[StepTiming]:
    """The run's steps laid end to end (after its queue wait), from its profile, or from the
    journal while the run is still going (the record carries the profile only at the end)."""
    steps: dict[int, StepProfile] = {}
    for _, entry in journal:
        if isinstance(entry, StepRecord | StepCommitted | OutputRejected) and entry.profile:
            steps[entry.profile.step] = entry.profile
    if record.profile is not None:
        steps.update((s.step, s) for s in record.profile.steps)
    start = (record.profile.admit_ns / 1e6) if record.profile is not None else 0.0
    out: list[StepTiming] = []
    for step in sorted(steps):
        p = steps[step]
        wall = tuple(w / 1e6 for w in p.wall_ns) or (0.0,) * len(STEP_PHASES)
        cpu = tuple(min(c, w) / 1e6 for c, w in zip(p.cpu_ns, p.wall_ns, strict=False))
        out.append(StepTiming(
            p.step, round(start, 3), wall, cpu, p.tool_calls, p.ttft_ns / 1e6 or None
        ))
        start += sum(wall)
    return out


async def follow(
    store: RunStore, run_id: str, *, poll_s: float = 0.5
) -> AsyncIterator[JournalItem]:
    """A run's journal entries, the stored ones first, then each as it is written, until the
    run ends. Waits for a run that does not exist yet (it may be about to be created)."""
    after = -1
    while True:
        items = await store.wait_journal(run_id, after, poll_s)
        for item in items:
            after = item[0]
            yield item
            if isinstance(item[1], RunFinished):
                return
        if not items:
            record = await store.get(run_id)
            if record is not None and record.done:
                # Ended without a journaled final entry (e.g. a run that never started).
                rest = await store.journal(run_id, after)
                for item in rest:
                    yield item
                return
            if record is None:
                await asyncio.sleep(poll_s)



def with_progress(record: RunRecord, journal: Sequence[JournalItem]) -> RunRecord:
    """``record`` with its steps, tokens and step profiles so far, from its journal, while
    it has not ended: the record is written with those at the end (a write per step would
    cost every step), so a running run read as stored says 0 steps, 0 ms, 0 tokens."""
    if record.done or not journal:
        return record
    steps = inputs = outputs = cached = requests = 0
    profiles: list[StepProfile] = []
    for _, entry in journal:
        if isinstance(entry, StepRecord | OutputRejected | StepCommitted):
            steps += 1
            if entry.profile is not None:
                profiles.append(entry.profile)
        if isinstance(entry, StepRecord | OutputRejected | ModelTurn):
            u = entry.usage
            inputs, outputs = inputs + u.input_tokens, outputs + u.output_tokens
            cached, requests = cached + u.cached_tokens, requests + u.requests
    admit = record.profile.admit_ns if record.profile is not None else 0
    return msgspec.structs.replace(
        record,
        steps=max(record.steps, steps),
        usage=Usage(inputs, outputs, cached, requests),
        profile=RunProfile(admit, profiles),
    )


async def read_progress(store: RunStore, record: RunRecord) -> RunRecord:
    """:func:`with_progress` of ``record``, its journal read from ``store`` (not read for a
    run that has ended; a run gone since ``record`` was read is as it was)."""
    if record.done:
        return record
    try:
        journal = await store.journal(record.run_id)
    except RunNotFoundError:  # ended and expired, or deleted, since it was read
        return record
    return with_progress(record, journal)
