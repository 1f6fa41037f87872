"""Stores filled with a few known runs, for the `podium runs` tests."""

from __future__ import annotations

from observe_agents import support

from podium.engine.driver import Engine
from podium.engine.records import RunRecord
from podium.store.base import RunStore

#: (tenant, executed) of the runs put in every store: three completed, one still queued.
RUNS = (("acme", True), ("acme", True), ("globex", True), ("acme", False))


async def fill(store: RunStore) -> list[RunRecord]:
    agent = support()
    records = []
    async with Engine(store) as engine:
        for i, (tenant, executed) in enumerate(RUNS):
            record = await engine.create(agent, f"where is order A-{i}?", tenant=tenant)
            if executed:
                record = await engine.execute(agent, record)
            records.append(record)
    return records
