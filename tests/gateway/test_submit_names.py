"""The gateway submits each run at its stored version.

A worker's sweep that finds a run stranded (``queued`` in the store, in no queue)
submits it at the version it read; the gateway's own submit must carry the version
as stored, or a run it did submit would be queued a second time and driven twice.
So at every submit (a new run, a run on a thread, a decision that sends a waiting run
back to work), the item's version must be the record's in the store at that moment.
"""

from __future__ import annotations

import pytest

from conftest import gateway_client
from podium.examples import refunds
from podium.gateway.service import ServedAgent
from podium.queue.base import QueueItem
from podium.queue.local import LocalQueue
from podium.store.memory import MemoryRunStore

pytestmark = pytest.mark.anyio


class CheckedQueue(LocalQueue):
    """The in-process queue, checking each submit's version against the store as it is."""

    def __init__(self, store: MemoryRunStore) -> None:
        super().__init__()
        self.store = store
        self.submitted: list[tuple[str, int | None]] = []

    async def submit(self, item: QueueItem) -> bool:
        stored = await self.store.get(item.run_id)
        assert stored is not None and item.version == stored.version, (item, stored)
        self.submitted.append((item.run_id, item.version))
        return await super().submit(item)


async def test_every_submit_carries_the_stored_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryRunStore()
    queue = CheckedQueue(store)
    monkeypatch.setattr("podium.gateway.runtime.open_queue", lambda config: queue)
    agents = [ServedAgent(refunds.agent)]
    async with gateway_client(agents=agents, store=store) as (gw, client):
        plain = (await client.post("/v1/runs", json={"agent": "refunds", "input": "hello"})).json()
        thread = (await client.post("/v1/threads", json={})).json()
        body = {"agent": "refunds", "input": "hi", "thread_id": thread["id"], "wait": True}
        on_thread = (await client.post("/v1/runs", json=body)).json()
        body = {"agent": "refunds", "input": "Refund 250 on order A-1001", "wait": True}
        waiting = (await client.post("/v1/runs", json=body)).json()
        assert waiting["status"] == "waiting"
        (pending,) = (await client.get(f"/v1/runs/{waiting['id']}/approvals")).json()["data"]
        decided = await client.post(
            f"/v1/runs/{waiting['id']}/approvals/{pending['call_id']}",
            json={"decision": "approve"},
        )
        assert decided.status_code == 200, decided.text
        assert (await gw.wait(str(waiting["id"]), 10)).status == "completed"
        for run in (plain, on_thread):
            assert (await gw.wait(str(run["id"]), 10)).status == "completed"
    # Four submits, each at the version stored then (the decision's is a later one).
    assert [run_id for run_id, _ in queue.submitted] == [
        plain["id"], on_thread["id"], waiting["id"], waiting["id"]
    ]
    (_, first), (_, again) = queue.submitted[2:]
    assert first is not None and again is not None and again > first
