"""A cancel at any moment of a run's life ends it ``cancelled`` (or leaves its finished status).

The run is held in a chosen phase by a store, a model and a tool that stop on an
event the test controls (no sleeps); the cancel goes through the embedded
gateway's path (:meth:`Gateway.cancel`) as ``POST /v1/runs/{id}/cancel`` does.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from _held import HeldStore, Hold
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from podium import Agent, Engine, FunctionModel, ModelRequest, ModelResponse, tool, tool_call_reply
from podium.config import load_config
from podium.engine.records import RunFinished, RunRecord
from podium.gateway.auth import Tenant
from podium.gateway.errors import ApiError
from podium.gateway.runtime import build_gateway
from podium.gateway.service import ServedAgent
from podium.messages import Message
from podium.queue.base import QueueItem
from podium.queue.local import LocalQueue
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from podium.store.sqlite import SQLiteRunStore
from podium.worker.worker import Worker

pytestmark = pytest.mark.anyio

TENANT = Tenant("tenant-a")
PHASES = ("queued", "claimed", "loading", "model", "tool", "checkpoint", "finished")


def held_agent(hold: Hold, tool_steps: int) -> Agent:
    @tool(timeout=None)
    async def work(n: int) -> str:
        """Do one piece of work.

        Args:
            n: Which piece.
        """
        await hold.at("tool")
        return f"done {n}"

    async def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        await hold.at("model")
        if request.step < tool_steps:
            return tool_call_reply(("work", f'{{"n": {request.step}}}'))
        return "finished"

    return Agent("held", FunctionModel(reply), tools=[work], max_steps=tool_steps + 2)


def open_store(kind: str, directory: str) -> RunStore:
    return MemoryRunStore() if kind == "memory" else SQLiteRunStore(Path(directory) / "runs.db")


async def finals(store: RunStore, run_id: str) -> list[RunFinished]:
    journal = await store.journal(run_id)
    ends = [e for _, e in journal if isinstance(e, RunFinished)]
    assert ends and isinstance(journal[-1][1], RunFinished), "the run's end is journaled last"
    return ends


async def cancel_in_phase(
    kind: str, phase: str, tool_steps: int, nth: int, after: bool, release_first: bool
) -> None:
    hold = Hold()
    directory = tempfile.mkdtemp(prefix="podium-cancel-")
    store = HeldStore(open_store(kind, directory))
    store.hold = hold
    config = load_config(None, {"PODIUM_KEYS": "pk_test_a=tenant-a"})
    gw = build_gateway(config, [ServedAgent(held_agent(hold, tool_steps))], store=store)
    await gw.start()
    try:
        if phase == "finished":
            record, _ = await gw.submit(TENANT, "held", "go", {})
            assert (await gw.wait(record.run_id, 60)).status == "completed"
            with pytest.raises(ApiError) as refused:
                await gw.cancel(TENANT, record.run_id)
            assert refused.value.status == 409
            expected = {"completed"}
        else:
            where = {"claimed": "get", "loading": "update", "checkpoint": "append"}
            hold.where, hold.nth, hold.after = where.get(phase, phase), nth, after
            record, _ = await gw.submit(TENANT, "held", "go", {})
            if phase != "queued":
                await hold.entered.wait()
            # Too late only when the run was already writing its answer, or when it was let go
            # before the cancel could land.
            last_write = phase == "checkpoint" and nth == tool_steps
            late = release_first or last_write
            expected = {"cancelled", "completed"} if late else {"cancelled"}
            cancelling = asyncio.create_task(gw.cancel(TENANT, record.run_id))
            if last_write and not release_first:
                # A run writing its answer cannot be interrupted: let that write go once the
                # cancel has parked its request (then the run ends as it was writing).
                while not cancelling.done() and not await store.inner.cancel_requests(  # noqa: ASYNC110
                    [record.run_id]
                ):
                    await asyncio.sleep(0)
            elif not release_first:
                await asyncio.wait([cancelling])  # held, the run can only end by the cancel
            hold.released.set()
            try:
                status = (await cancelling).status
            except ApiError as exc:  # it ended before the cancel read it
                assert late and exc.status == 409
                status = (await gw.wait(record.run_id, 60)).status
            assert status in expected
            assert (await gw.wait(record.run_id, 60)).status == status
    finally:
        hold.released.set()
        await gw.stop()
    # What the store keeps (read afresh from the file for SQLite): one end, as reported.
    reopened = store.inner if kind == "memory" else open_store(kind, directory)
    try:
        stored = await reopened.get(record.run_id)
        assert stored is not None and stored.status in expected
        ends = await finals(reopened, record.run_id)
        assert [e.status for e in ends] == [stored.status]
    finally:
        await reopened.aclose()
        shutil.rmtree(directory, ignore_errors=True)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.sampled_from(["memory", "sqlite"]),
    phase=st.sampled_from(PHASES),
    tool_steps=st.integers(0, 2),
    nth=st.integers(0, 2),
    after=st.booleans(),
    release_first=st.booleans(),
)
async def test_cancel_lands_in_any_phase(
    kind: str, phase: str, tool_steps: int, nth: int, after: bool, release_first: bool
) -> None:
    passages = {"model": tool_steps + 1, "tool": tool_steps, "checkpoint": tool_steps + 1}
    assume(nth < passages.get(phase, 1))
    case = dict(kind=kind, phase=phase, tool_steps=tool_steps, nth=nth, after=after)
    try:
        await cancel_in_phase(kind, phase, tool_steps, nth, after, release_first)
    except AssertionError as exc:
        raise AssertionError(f"{case} release_first={release_first}: {exc}") from exc


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize(
    ("phase", "after"), [("claimed", True), ("loading", False), ("loading", True)]
)
async def test_cancel_while_the_run_starts(kind: str, phase: str, after: bool) -> None:
    """The reported bug: a cancel right after submission, while a worker starts the run."""
    await cancel_in_phase(kind, phase, 1, 0, after, release_first=False)


async def test_engine_cancel_while_loading_ends_the_run(tmp_path: Path) -> None:
    hold = Hold("update")
    store = HeldStore(SQLiteRunStore(tmp_path / "runs.db"))
    agent = held_agent(Hold(), 1)
    async with Engine(store) as engine:
        record = await engine.create(agent, "go")
        task = engine.start(agent, record)
        store.hold = hold
        await hold.entered.wait()
        assert engine.cancel(record.run_id)
        finished = await task
        assert (finished.status, finished.reason) == ("cancelled", "cancelled")
        stored = await store.get(record.run_id)
        assert stored is not None and stored.status == "cancelled"
        assert engine.active_runs == 0


async def test_cancel_stored_is_adopted_by_a_driver_that_read_the_run_before(
    tmp_path: Path,
) -> None:
    """A driver holding a stale ``queued`` copy does not run a run cancelled meanwhile."""
    agent = held_agent(Hold(), 1)
    async with Engine(SQLiteRunStore(tmp_path / "runs.db")) as engine:
        record = await engine.create(agent, "go")
        stale = await engine.store.get(record.run_id)
        assert stale is not None and stale.status == "queued"
        fresh = await engine.store.get(record.run_id)
        assert fresh is not None
        assert await engine.cancel_stored(fresh)
        ended: RunRecord = await engine.execute(agent, stale)
        assert ended.status == "cancelled"
        ends = await finals(engine.store, record.run_id)
        assert len(ends) == 1


async def test_a_released_claim_redelivered_to_the_same_worker_is_driven() -> None:
    """A driver stopped mid-run releases its claim; the re-delivery is not taken for it."""
    hold = Hold("model")
    agent = held_agent(hold, 1)
    ended = asyncio.Event()

    def observe(run_id: str, entry: object) -> None:
        if isinstance(entry, RunFinished):
            ended.set()

    engine = Engine(MemoryRunStore(), observers=[observe])
    queue = LocalQueue()
    worker = Worker(queue, engine, {"held": agent}, claim_block_s=0.05)
    record = await engine.create(agent, "go")
    await queue.submit(QueueItem(record.run_id, "held"))
    working = asyncio.create_task(worker.run())
    try:
        await hold.entered.wait()
        _, driver = worker._active[record.run_id]
        driver.cancel()  # as a shutdown would: the run stays `running`, its claim released
        hold.released.set()
        await ended.wait()
        stored = await engine.store.get(record.run_id)
        assert stored is not None and stored.status == "completed"
    finally:
        await worker.drain(1.0)
        working.cancel()
        await asyncio.gather(working, return_exceptions=True)
        await engine.aclose()
    assert worker.statistics().released == 1
