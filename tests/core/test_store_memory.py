"""The memory store: records, the append-only journal read back in order, listing."""

from __future__ import annotations

import pytest

from podium import Agent, Engine, MemoryRunStore, RunRecord, Scenario, SimulatedModel, tool
from podium.engine.records import RunFinished, StepCommitted
from podium.errors import RunNotFoundError, StoreError

pytestmark = pytest.mark.anyio


async def test_journal_reads_back_in_order() -> None:
    store = MemoryRunStore()
    await store.create(RunRecord("r1", "a", "hi"))
    await store.append("r1", [StepCommitted(0, 1.0), StepCommitted(1, 2.0)])
    await store.append("r1", [StepCommitted(2, 3.0)])
    items = await store.journal("r1")
    assert [seq for seq, _ in items] == [0, 1, 2]
    assert [e.step for _, e in items] == [0, 1, 2]  # type: ignore[union-attr]
    assert [seq for seq, _ in await store.journal("r1", after=0)] == [1, 2]
    assert await store.journal("r1", after=2) == []


async def test_append_with_record_updates_it_atomically() -> None:
    store = MemoryRunStore()
    record = RunRecord("r1", "a", "hi")
    await store.create(record)
    record.status = "completed"
    await store.append("r1", [RunFinished(1.0, "completed", output="x")], record=record)
    got = await store.get("r1")
    assert got is not None and got.status == "completed" and got.version == 1


async def test_errors_and_listing() -> None:
    store = MemoryRunStore()
    await store.create(RunRecord("a", "x", "1", tenant="t1", created_at=1.0))
    await store.create(RunRecord("b", "y", "2", tenant="t2", created_at=2.0))
    with pytest.raises(StoreError):
        await store.create(RunRecord("a", "x", "again"))
    with pytest.raises(RunNotFoundError):
        await store.journal("missing")
    with pytest.raises(RunNotFoundError):
        await store.update(RunRecord("missing", "x", ""))
    assert await store.get("missing") is None
    assert [r.run_id for r in await store.list()] == ["b", "a"]
    assert [r.run_id for r in await store.list(tenant="t1")] == ["a"]
    assert [r.run_id for r in await store.list(agent="y")] == ["b"]
    assert [r.run_id for r in await store.list(limit=1)] == ["b"]


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"found {query}"


async def test_a_run_journal_ends_with_its_final_entry() -> None:
    store = MemoryRunStore()
    agent = Agent(
        "t", SimulatedModel(Scenario.react("lookup", {"query": "q"}, tool_steps=2)), tools=[lookup]
    )
    async with Engine(store) as engine:
        record = await engine.run(agent, "go")
    items = await store.journal(record.run_id)
    assert [seq for seq, _ in items] == list(range(len(items)))
    steps = [e.step for _, e in items if hasattr(e, "step")]  # type: ignore[union-attr]
    assert steps == sorted(steps) and steps[-1] == 2
    final = items[-1][1]
    assert isinstance(final, RunFinished) and final.status == "completed"
    assert store.statistics().runs == 1
    stored = await store.get(record.run_id)
    assert stored is not None and stored.status == "completed" and stored.output == "Done."
