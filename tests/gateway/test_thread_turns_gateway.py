"""A thread's run parked on a human, with the runs queued behind it on the thread filling
every worker slot: the decision must still find a slot (POST /v1/runs with a thread id,
the embedded gateway's worker, memory and SQLite stores).

Before the fix the runs waiting for their turn each held a slot, so the parked run,
queued again by the decision, never ran and neither did they: the pool stalled for
good. A run waiting for its turn now lends its slot back (podium.threads.slot).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import gateway_client
from podium.examples import refunds
from podium.gateway.service import ServedAgent
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio

# One loop: what is pinned is the worker's slot accounting, not the loop's (both loops
# run the engine's own tests); each case waits seconds on a parked run.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def parked_head(
    store: RunStore, concurrency: int, behind: int, decision: str, cancel: bool
) -> None:
    env = {"PODIUM_POOLS__DEFAULT__CONCURRENCY": str(concurrency)}
    async with gateway_client(env=env, agents=[ServedAgent(refunds.agent)], store=store) as (
        gw, client,
    ):
        thread_id = (await client.post("/v1/threads", json={})).json()["id"]
        # The first run asks a human (a refund over 100); the ones behind it need no one.
        texts = ["Refund 250 on order A-1001"]
        texts += [f"Refund {10 + i} on order B-{i}" for i in range(behind)]
        ids = []
        for text in texts:
            body = {"agent": "refunds", "input": text, "thread_id": thread_id}
            r = await client.post("/v1/runs", json=body)
            assert r.status_code == 202, r.text
            ids.append(r.json()["id"])
        parked = ids[0]
        assert (await gw.wait(parked, 10.0)).status == "waiting"
        statuses = ["completed"] * len(ids)
        if cancel:  # the last run, cancelled over HTTP while it waits for its turn
            r = await client.post(f"/v1/runs/{ids[-1]}/cancel")
            assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
            statuses[-1] = "cancelled"
        (call,) = (await client.get(f"/v1/runs/{parked}/approvals")).json()["data"]
        url = f"/v1/runs/{parked}/approvals/{call['call_id']}"
        assert (await client.post(url, json={"decision": decision})).status_code == 200
        ended = [await gw.wait(run_id, 5.0) for run_id in ids]
        assert [r.status for r in ended] == statuses, [
            (r.run_id, r.status) for r in ended
        ]
        thread = (await client.get(f"/v1/threads/{thread_id}")).json()
        users = [m["content"] for m in thread["messages"] if m["role"] == "user"]
        # Each completed turn once, in the order the runs were submitted; a cancelled
        # run contributes nothing.
        assert users == [t for t, s in zip(texts, statuses, strict=True) if s == "completed"]
        assert thread["run_ids"] == ids


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["memory", "sqlite"]),
    concurrency=st.integers(1, 2),
    extra=st.integers(0, 2),
    decision=st.sampled_from(["approve", "reject"]),
    cancel=st.booleans(),
)
@example(kind="memory", concurrency=1, extra=0, decision="approve", cancel=False)  # the stall
async def test_a_decision_finds_a_slot_when_runs_wait_behind_the_parked_run(
    kind: str, concurrency: int, extra: int, decision: str, cancel: bool
) -> None:
    with tempfile.TemporaryDirectory(prefix="podium-turns-") as directory:
        store: RunStore = (
            MemoryRunStore() if kind == "memory" else SQLiteRunStore(Path(directory) / "r.db")
        )
        try:
            await parked_head(store, concurrency, concurrency + extra, decision, cancel)
        finally:
            await store.aclose()
