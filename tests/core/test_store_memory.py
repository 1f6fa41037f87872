"""The memory store: records, the append-only journal read back in order, listing."""

from __future__ import annotations

import pytest

from podium import Agent, Engine, MemoryRunStore, RunRecord, Scenario, SimulatedModel, tool
from podium.engine.records import RunFinished
from podium.errors import RunNotFoundError

pytestmark = pytest.mark.anyio


async def test_finished_runs_are_kept_up_to_a_bound() -> None:
    """Past ``max_finished`` the runs that finished first are forgotten; running ones stay."""
    store = MemoryRunStore(max_finished=3, finished_ttl_s=None)
    await store.create(RunRecord("live", "a", "x"))
    for i in range(5):
        record = RunRecord(f"r{i}", "a", "x")
        await store.create(record)
        record.status = "completed"
        await store.append(f"r{i}", [RunFinished(1.0, "completed", "ok")], record=record)
    assert {r.run_id for r in await store.list()} == {"live", "r2", "r3", "r4"}
    assert await store.get("r0") is None
    with pytest.raises(RunNotFoundError):
        await store.journal("r1")
    assert store.statistics().runs == 4


async def test_finished_runs_expire_after_their_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished run is readable for ``finished_ttl_s``, then gone, however often it was
    read meanwhile (reads remember when the first expiry is due)."""
    now = [100.0]
    monkeypatch.setattr("podium.store.memory.time.monotonic", lambda: now[0])
    store = MemoryRunStore(finished_ttl_s=10.0)

    async def finish(run_id: str) -> None:
        record = RunRecord(run_id, "a", "x")
        await store.create(record)
        record.status = "completed"
        await store.append(run_id, [RunFinished(1.0, "completed", "ok")], record=record)

    await finish("r0")
    now[0] = 105.0
    await finish("r1")
    assert await store.get("r0") is not None  # due at 110
    now[0] = 109.9
    assert await store.get("r0") is not None
    now[0] = 110.0
    assert await store.get("r0") is None
    assert await store.get("r1") is not None  # due at 115
    now[0] = 115.5
    assert [r.run_id for r in await store.list()] == []
    with pytest.raises(RunNotFoundError):
        await store.journal("r1")
    await finish("r2")  # expiries start over once none is left
    now[0] = 125.4
    assert await store.get("r2") is not None
    now[0] = 125.5
    assert await store.get("r2") is None


async def test_default_retention_is_bounded() -> None:
    store = MemoryRunStore()
    assert store.max_finished is not None and store.finished_ttl_s is not None


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
