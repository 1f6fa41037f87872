"""Every step's journal entry carries the step's profile, on every store and path.

An in-memory store keeps the entry objects themselves: a fast-lane step is journaled
first and its entry gets its profile as the step closes, made once with the checkpoint
in it. A store that encodes the entry (SQLite), an engine with observers (they are
shown the entry as it is journaled) and an agent with secret arguments (its entries are
redacted copies) get the profile with the entry, its checkpoint still running then.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podium import Agent, Engine, Scenario, SimulatedModel, tool
from podium.engine.profile import StepProfile
from podium.engine.records import JournalEntry, StepRecord
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"


@tool(secret_args=("token",))
async def fetch(query: str, token: str) -> str:
    """Fetch something with a key.

    Args:
        query: What to fetch.
        token: The key.
    """
    return f"fetched {query}"


def agent(secret: bool) -> Agent:
    if secret:
        scenario = Scenario.react("fetch", {"query": "q", "token": "s3cret-key"}, tool_steps=3)
        return Agent("secret", SimulatedModel(scenario), tools=[fetch])
    scenario = Scenario.react("lookup", {"query": "q"}, tool_steps=3)
    return Agent("plain", SimulatedModel(scenario), tools=[lookup])


@pytest.mark.parametrize("path", ["kept", "sqlite", "observed", "secret"])
async def test_each_step_is_journaled_with_its_profile(path: str, tmp_path: Path) -> None:
    shown: list[StepProfile | None] = []

    def observer(run_id: str, entry: JournalEntry) -> None:
        if isinstance(entry, StepRecord):
            shown.append(entry.profile)

    store = SQLiteRunStore(tmp_path / "runs.db") if path == "sqlite" else MemoryRunStore()
    observers = [observer] if path == "observed" else []
    async with store, Engine(store, observers=observers) as engine:
        record = await engine.run(agent(path == "secret"), "go")
        entries = [e for _, e in await store.journal(record.run_id)]
        stored = await store.get(record.run_id)
    assert record.status == "completed" and record.profile is not None
    # The stored record has the answer's step too (on a store that keeps entries it is
    # filed just after the write).
    assert stored is not None and stored.profile is not None
    assert [p.step for p in stored.profile.steps] == [0, 1, 2, 3]
    closed = record.profile.steps
    journaled = [e.profile for e in entries if isinstance(e, StepRecord)]
    assert [p.step for p in closed] == [0, 1, 2, 3]
    assert all(p is not None for p in journaled), journaled
    assert [p.step for p in journaled if p is not None] == [0, 1, 2, 3]
    for entry, final in zip(journaled, closed, strict=True):
        assert entry is not None
        assert entry.wall_ns[:5] == final.wall_ns[:5]  # over before the step was journaled
        assert entry.tool_calls == final.tool_calls
    if path in ("kept", "observed"):  # the store holds the very entries: final figures
        assert journaled == closed
        assert all(p.wall_ns[5] > 0 for p in closed)  # the checkpoint took some time
    if path == "observed":
        assert len(shown) == 4 and all(p is not None for p in shown)
    if path == "secret":
        assert "s3cret-key" not in repr(entries)


class Overpromising(MemoryRunStore):
    """Says it keeps the entries, then will not append without waiting."""

    @property
    def keeps_entries(self) -> bool:
        return True

    def append_nowait(
        self, run_id: str, entries: object, *, record: object = None
    ) -> bool:
        return False


async def test_a_store_that_will_not_take_a_kept_entry_at_once_still_journals_it() -> None:
    store = Overpromising()
    async with Engine(store) as engine:
        record = await engine.run(agent(False), "go")
        entries = [e for _, e in await store.journal(record.run_id)]
    assert record.status == "completed"
    assert [e.step for e in entries if isinstance(e, StepRecord)] == [0, 1, 2, 3]


@pytest.mark.parametrize("clock", ["sampled", "thread"])
async def test_the_aggregator_hears_every_step_of_instant_runs_once(clock: str) -> None:
    """Instant model and tool (every step one slice, its entry kept by the memory store and
    given its profile as it closes): the aggregator hears each step once, as it closes."""
    from podium import ProfileAggregator

    aggregator = ProfileAggregator()
    async with Engine(aggregator=aggregator, clock=clock) as engine:  # type: ignore[arg-type]
        records = [await engine.run(agent(False), "go") for _ in range(5)]
    assert all(r.status == "completed" for r in records)
    summary = aggregator.summary()
    assert (summary.runs, summary.steps) == (5, 20)
    assert summary.phases["tools"].samples == 15  # three tool steps a run


class OverpromisingAndSlow(Overpromising):
    """As Overpromising, and each append waits 20 ms."""

    async def append(self, run_id: str, entries: object, *, record: object = None) -> None:
        await asyncio.sleep(0.02)
        await super().append(run_id, entries, record=record)  # type: ignore[arg-type]


async def test_a_kept_entry_that_waits_after_all_is_timed_as_waiting() -> None:
    store = OverpromisingAndSlow()
    async with Engine(store) as engine:
        record = await engine.run(agent(False), "go")
    assert record.status == "completed" and record.profile is not None
    for step in record.profile.steps[:3]:  # the tool steps (the answer writes the end too)
        wall, cpu = step.wall_ns[5], step.cpu_ns[5]
        assert wall >= 15_000_000 and cpu < wall / 2, (wall, cpu)
