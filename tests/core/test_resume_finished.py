"""A run whose journal already ends it is not driven again, nor ended twice."""

from __future__ import annotations

import pytest

from podium import Agent, Engine, MemoryRunStore, Message, Scenario, SimulatedModel
from podium.engine.records import RunFinished, StepRecord

pytestmark = pytest.mark.anyio


async def test_resume_of_a_journaled_end_only_brings_the_record_level() -> None:
    model = SimulatedModel(Scenario())
    agent = Agent("a", model)
    store = MemoryRunStore()
    async with Engine(store) as engine:
        record = await engine.create(agent, "hi")
        record.status = "running"  # a worker died after journaling the end, before the record
        await store.update(record)
        await store.append(
            record.run_id,
            [
                StepRecord(0, 1.0, Message("assistant", "done")),
                RunFinished(1.0, "completed", "done"),
            ],
        )
        resumed = await engine.resume(agent, record.run_id)
    assert (resumed.status, resumed.output) == ("completed", "done")
    assert (await store.get(record.run_id)).status == "completed"  # type: ignore[union-attr]
    kinds = [type(e).__name__ for _, e in await store.journal(record.run_id)]
    assert kinds == ["StepRecord", "RunFinished"]
    assert model.calls == 0
