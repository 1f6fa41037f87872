"""A run ended in the store (cancelled with no driver, dead-lettered) ends its unfinished
child runs with it, theirs too. Only their parent drives children: on Redis, a parent
cancelled while its worker was dead ended `cancelled` and its children stayed `running`
for good (6 of 7 such cancels in an outside probe). Every path that ends a run in the
store (a worker adopting a cancel, the gateway, `podium runs cancel`, a dead letter)
goes through Engine.end_stored; here on a real SQLite store and a memory one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from podium import Engine
from podium.engine.children import child_run_id
from podium.engine.records import ModelTurn, RunRecord
from podium.messages import Message, ToolCall
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio


async def _running(store: RunStore, run_id: str, parent: str | None, calls: int) -> RunRecord:
    """A run left ``running`` in the middle of a step that called ``calls`` sub-agents."""
    record = RunRecord(run_id, "a", "go", status="running", started_at=time.time(),
                       parent_run_id=parent)
    await store.create(record)
    if calls:
        tools = tuple(ToolCall(f"c{i}", "helper", "{}") for i in range(calls))
        await store.append(run_id, [ModelTurn(0, time.time(), Message("assistant", "", tools))])
    return record


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_parent_ended_in_the_store_ends_its_unfinished_children(
    kind: str, tmp_path: Path
) -> None:
    store: RunStore = MemoryRunStore() if kind == "memory" else SQLiteRunStore(tmp_path / "r.db")
    async with store:
        parent = await _running(store, "run_p", None, calls=2)
        child, done = child_run_id("run_p", 0, 0), child_run_id("run_p", 0, 1)
        await _running(store, child, "run_p", calls=1)
        grandchild = child_run_id(child, 0, 0)
        await _running(store, grandchild, child, calls=0)
        finished = await _running(store, done, "run_p", calls=0)
        finished.status = "completed"
        await store.update(finished)
        await Engine(store).end_stored(parent, "cancelled", "cancelled", "cancelled")
        ended = {r: await store.get(r) for r in ("run_p", child, grandchild, done)}
    assert {r: e.status for r, e in ended.items() if e} == {
        "run_p": "cancelled", child: "cancelled", grandchild: "cancelled", done: "completed"}
    assert ended[child] is not None and ended[child].error == "its parent run run_p was cancelled"
    assert ended[grandchild] is not None and child in (ended[grandchild].error or "")
