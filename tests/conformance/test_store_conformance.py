"""The RunStore contract, one suite for every store (memory, SQLite, Redis, PostgreSQL).

A store passes all of it or it is not shipped; a new store is a new parameter
of the ``backend`` fixture (conftest.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podium import (
    Agent,
    Engine,
    FunctionModel,
    ModelRequest,
    Scenario,
    SimulatedModel,
    ToolContext,
    tool,
)
from podium.engine.records import (
    JournalEntry,
    ModelTurn,
    OutputRejected,
    RunFinished,
    RunRecord,
    StepCommitted,
    ToolOutcome,
)
from podium.errors import RunNotFoundError, StaleRunError, StoreError
from podium.messages import Message
from podium.store.base import RunStore

from .conftest import StoreBackend

pytestmark = pytest.mark.anyio


def turn(step: int, text: str = "") -> ModelTurn:
    return ModelTurn(step, 1.0, Message("assistant", text or f"step {step}"))


def new_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"


async def started(store: RunStore, run_id: str | None = None, **fields: object) -> RunRecord:
    """A created run that its holder has started (status running, version 1)."""
    record = RunRecord(run_id or new_id(), "agent", "hi", **fields)  # type: ignore[arg-type]
    await store.create(record)
    record.status = "running"
    await store.update(record)
    return record


async def test_create_get_update(backend: StoreBackend) -> None:
    store = backend.store()
    record = RunRecord("r1", "agent", "hello", tenant="t1", metadata={"k": "v"})
    await store.create(record)
    with pytest.raises(StoreError):
        await store.create(RunRecord("r1", "agent", "again"))
    got = await store.get("r1")
    assert got is not None
    assert (got.run_id, got.input, got.status, got.tenant, got.metadata, got.version) == (
        "r1", "hello", "queued", "t1", {"k": "v"}, 0
    )
    got.status = "failed"  # a record read is a snapshot: changing it stores nothing
    again = await store.get("r1")
    assert again is not None and again.status == "queued"
    record.status = "running"
    await store.update(record)
    assert record.version == 1
    got = await store.get("r1")
    assert got is not None and (got.status, got.version) == ("running", 1)
    assert await store.get("nope") is None
    with pytest.raises(RunNotFoundError):
        await store.update(RunRecord("nope", "agent", "x"))


async def test_journal_sequence_and_after(backend: StoreBackend) -> None:
    store = backend.store()
    record = await started(store, "j1")
    assert await store.journal("j1") == []
    await store.append("j1", [turn(0), StepCommitted(0, 1.0)])
    record.steps = 1
    await store.append("j1", [turn(1)], record=record)
    items = await store.journal("j1")
    assert [seq for seq, _ in items] == [0, 1, 2]
    assert [e for _, e in items] == [turn(0), StepCommitted(0, 1.0), turn(1)]
    assert [seq for seq, _ in await store.journal("j1", after=1)] == [2]
    assert await store.journal("j1", after=2) == []
    assert await store.journal("j1", after=2**64) == []  # an absurd position asks for nothing
    got = await store.get("j1")
    assert got is not None and got.steps == 1 and got.version == record.version == 2
    with pytest.raises(RunNotFoundError):
        await store.journal("missing")
    with pytest.raises(RunNotFoundError):
        await store.append("missing", [turn(0)])


async def test_append_nowait_appends_exactly_as_append_or_not_at_all(
    backend: StoreBackend,
) -> None:
    """The engine journals through append_nowait first: a store that takes the entries
    there must store them (and the record) as append would; one that cannot must change
    nothing, so the awaited append that follows stores them once."""
    store = backend.store()
    record = await started(store, "n1")
    record.steps = 1
    took = store.append_nowait("n1", [turn(0)], record=record)
    if not took:
        assert await store.journal("n1") == []
        await store.append("n1", [turn(0)], record=record)
    assert [e for _, e in await store.journal("n1")] == [turn(0)]
    got = await store.get("n1")
    assert got is not None and got.steps == 1 and got.version == record.version == 2
    stale = await store.get("n1")
    assert stale is not None
    await store.append("n1", [turn(1)], record=record)  # the holder moves on
    with pytest.raises(StaleRunError):  # a stale record is refused either way, appending nothing
        store.append_nowait("n1", [turn(2)], record=stale) or await store.append(
            "n1", [turn(2)], record=stale
        )
    assert [e for _, e in await store.journal("n1")] == [turn(0), turn(1)]
    with pytest.raises(RunNotFoundError):
        store.append_nowait("missing", [turn(0)]) or await store.append("missing", [turn(0)])


# One example: groups of appends issued together (as parallel tool calls are); each append
# has 1-3 entries and may carry the record.
_appends = st.lists(
    st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=6),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=15, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(groups=_appends)
async def test_concurrent_appends_all_land_once_in_order(
    backend: StoreBackend, groups: list[list[tuple[int, bool]]]
) -> None:
    store = backend.store()
    record = await started(store)
    run_id = record.run_id
    expected: list[list[JournalEntry]] = []
    record_writes = 0
    for g, group in enumerate(groups):
        calls = []
        for a, (size, with_record) in enumerate(group):
            entries: list[JournalEntry] = [turn(g, f"{g}.{a}.{i}") for i in range(size)]
            expected.append(entries)
            if with_record:
                record_writes += 1
            calls.append(store.append(run_id, entries, record=record if with_record else None))
        await asyncio.gather(*calls)
    items = await store.journal(run_id)
    assert [seq for seq, _ in items] == list(range(len(items)))
    got = [e for _, e in items]
    assert Counter(map(repr, got)) == Counter(repr(e) for es in expected for e in es)
    for entries in expected:  # one append's entries stay together and in order
        start = got.index(entries[0])
        assert got[start : start + len(entries)] == entries
    stored = await store.get(run_id)
    assert stored is not None and stored.version == record.version == 1 + record_writes


async def test_a_second_holder_fences_the_first(backend: StoreBackend) -> None:
    a, b = backend.store(), backend.store()
    await a.create(RunRecord("f1", "agent", "hi"))
    mine, theirs = await a.get("f1"), await b.get("f1")
    assert mine is not None and theirs is not None
    mine.status = theirs.status = "running"
    await a.update(mine)
    await a.append("f1", [turn(0)])
    with pytest.raises(StaleRunError):  # b's copy is older than what a wrote
        await b.update(theirs)
    assert theirs.version == 0  # a refused write leaves the caller's version alone
    taken = await b.get("f1")  # b takes the run over properly: it reads it again
    assert taken is not None
    await b.update(taken)
    with pytest.raises(StaleRunError):
        await a.append("f1", [turn(1)], record=mine)
    assert mine.version == 1
    if backend.separate_holders:  # a's journal-only appends are fenced off too
        with pytest.raises(StaleRunError):
            await a.append("f1", [turn(1)])
    await b.append("f1", [turn(2)])
    assert [e for _, e in await b.journal("f1")] == [turn(0), turn(2)]
    stored = await b.get("f1")
    assert stored is not None and stored.version == taken.version == 2


_calls: list[str] = []


@tool
async def note(text: str, ctx: ToolContext) -> str:
    """Note something down (counted, to see which calls ran).

    Args:
        text: What to note.
    """
    _calls.append(ctx.idempotency_key)
    return f"noted {text}"


def _note_agent() -> Agent:
    return Agent(
        "noter",
        SimulatedModel(Scenario.react("note", {"text": "x"}, tool_steps=3, parallel=2)),
        tools=[note],
        max_steps=6,
    )


async def test_resume_from_the_journal(backend: StoreBackend) -> None:
    """A run stopped after its first step is resumed through another handle: the steps
    already journaled are not done again."""
    _calls.clear()
    agent = _note_agent()
    async with Engine(backend.store()) as first:
        record = await first.create(agent, "go")
        first.observers.append(
            lambda run_id, entry: isinstance(entry, StepCommitted) and first.pause(run_id)
        )
        paused = await first.execute(agent, record)
    assert paused.status == "running" and len(_calls) == 2
    second = backend.store()
    again = await second.get(record.run_id)
    assert again is not None and again.status == "running"
    async with Engine(second) as engine:
        done = await engine.execute(agent, again)
    assert done.status == "completed" and done.output == "Done."
    assert Counter(_calls) == {f"{record.run_id}:{s}:{c}": 1 for s in range(3) for c in range(2)}
    entries = [e for _, e in await second.journal(record.run_id)]
    assert Counter(e.step for e in entries if isinstance(e, StepCommitted)) == {0: 1, 1: 1, 2: 1}
    assert Counter(
        (e.step, e.index) for e in entries if isinstance(e, ToolOutcome)
    ) == {(s, c): 1 for s in range(3) for c in range(2)}
    assert sum(isinstance(e, RunFinished) for e in entries) == 1


class _Answer(msgspec.Struct):
    order_id: str
    refund: bool


async def test_a_structured_run_resumes_after_its_rejected_answer(backend: StoreBackend) -> None:
    """A rejected answer (journaled as its own step) survives the store round trip: the run
    paused after it resumes through another handle without asking for it again, and the
    record and final entry keep the output structured."""
    asked: list[int] = []

    def reply(messages: object, request: ModelRequest) -> str:
        asked.append(request.step)
        return "prose" if request.step == 0 else '{"order_id": "A-1", "refund": true}'

    agent = Agent("judge", FunctionModel(reply), output_type=_Answer)
    async with Engine(backend.store()) as first:
        record = await first.create(agent, "go")
        first.observers.append(
            lambda run_id, entry: isinstance(entry, OutputRejected) and first.pause(run_id)
        )
        paused = await first.execute(agent, record)
    assert paused.status == "running" and asked == [0]
    second = backend.store()
    again = await second.get(record.run_id)
    assert again is not None
    async with Engine(second) as engine:
        done = await engine.execute(agent, again)
    assert asked == [0, 1] and done.output_as(_Answer) == _Answer("A-1", True)
    stored = await second.get(record.run_id)
    assert stored is not None and stored.structured and stored.output == done.output
    entries = [e for _, e in await second.journal(record.run_id)]
    rejected = [e for e in entries if isinstance(e, OutputRejected)]
    assert len(rejected) == 1 and rejected[0].feedback.role == "user" and rejected[0].profile
    final = entries[-1]
    assert isinstance(final, RunFinished) and final.structured


async def test_follow_a_run_with_wait_journal(backend: StoreBackend) -> None:
    writer, reader = backend.store(), backend.store()
    record = await started(writer, "w1")
    assert await reader.wait_journal("w1", -1, 0.05) == []
    waiting = asyncio.create_task(reader.wait_journal("w1", -1, 10.0))
    await asyncio.sleep(0.05)
    await writer.append("w1", [turn(0)])
    assert [seq for seq, _ in await waiting] == [0]
    waiting = asyncio.create_task(reader.wait_journal("w1", 0, 10.0))
    record.status = "completed"
    await writer.append("w1", [RunFinished(2.0, "completed", "ok")], record=record)
    assert [(seq, type(e)) for seq, e in await waiting] == [(1, RunFinished)]
    # entries already there come back at once, with no waiting
    assert [seq for seq, _ in await reader.wait_journal("w1", -1, 10.0)] == [0, 1]
    with pytest.raises(RunNotFoundError):
        await reader.wait_journal("no-such-run", -1, 10.0)


async def _six_runs(store: RunStore, prefix: str) -> None:
    """Runs ``{prefix}0`` to ``{prefix}5``, created a second apart from 1000.0: agents b,
    a alternating; tenant t1 for the first four, t2 after; 0 and 3 completed, 4 running."""
    for i in range(6):
        r = RunRecord(f"{prefix}{i}", "a" if i % 2 else "b", "x",
                      tenant="t1" if i < 4 else "t2", created_at=1000.0 + i)
        await store.create(r)
        if i % 3 == 0 or i == 4:
            r.status = "completed" if i % 3 == 0 else "running"
            await store.update(r)


async def test_list_by_tenant_status_and_agent(backend: StoreBackend) -> None:
    store = backend.store()
    await _six_runs(store, "l")
    assert [r.run_id for r in await store.list()] == [f"l{i}" for i in range(5, -1, -1)]
    assert [r.run_id for r in await store.list(tenant="t1")] == ["l3", "l2", "l1", "l0"]
    assert [r.run_id for r in await store.list(status="completed")] == ["l3", "l0"]
    assert [r.run_id for r in await store.list(status="running")] == ["l4"]
    assert [r.run_id for r in await store.list(tenant="t2", status="queued")] == ["l5"]
    assert [r.run_id for r in await store.list(agent="a", limit=2)] == ["l5", "l3"]
    assert [r.run_id for r in await store.list(tenant="t3")] == []


async def test_list_within_a_time_window(backend: StoreBackend) -> None:
    """``since``/``until`` bound ``created_at`` (both inclusive) in the store, before the
    limit: the window reaches runs however many newer ones there are."""
    store = backend.store()
    await _six_runs(store, "w")

    async def ids(**kwargs: object) -> list[str]:
        return [r.run_id for r in await store.list(**kwargs)]  # type: ignore[arg-type]

    assert await ids(since=1002.0, until=1004.0) == ["w4", "w3", "w2"]
    assert await ids(since=1003.5) == ["w5", "w4"]
    assert await ids(until=1001.0) == ["w1", "w0"]
    assert await ids(until=1003.0, limit=2) == ["w3", "w2"]  # the newest two in the window
    assert await ids(since=1001.0, tenant="t1") == ["w3", "w2", "w1"]
    assert await ids(since=1000.0, until=1003.0, status="completed") == ["w3", "w0"]
    assert await ids(tenant="t2", status="completed", until=1004.0) == []
    assert await ids(agent="a", until=1004.0) == ["w3", "w1"]
    assert await ids(since=1000.5, until=1000.9) == []
    assert await ids(since=1004.0, until=1002.0) == []  # an empty window, not an error
    assert await ids(since=None, until=None) == [f"w{i}" for i in range(5, -1, -1)]


# The finished run's TTL; a starved host may take longer than the shortest to read the
# run back, and then the next is tried (a bounded retry, not a timing assertion).
FINISHED_TTLS_S = (0.2, 1.5, 6.0)


async def test_finished_runs_expire(backend: StoreBackend) -> None:
    for attempt, ttl in enumerate(FINISHED_TTLS_S):
        store = backend.store(finished_ttl_s=ttl)
        done_id, live_id = f"e1-{attempt}", f"e2-{attempt}"
        done = await started(store, done_id)
        live = await started(store, live_id)
        done.status = "completed"
        begun = time.monotonic()
        await store.append(done_id, [RunFinished(1.0, "completed", "ok")], record=done)
        if await store.get(done_id) is not None:
            break
        assert time.monotonic() - begun >= ttl, "the run was gone before its TTL"
    else:
        pytest.fail(f"no finished run was read back within {FINISHED_TTLS_S[-1]} s")
    await asyncio.sleep(ttl + 0.2)  # the TTL is time passing: nothing to await instead
    await store.append(live_id, [turn(0)])  # stores may tidy up on their next write
    assert await store.get(done_id) is None
    with pytest.raises(RunNotFoundError):
        await store.journal(done_id)
    listed = [r.run_id for r in await store.list()]
    assert done_id not in listed and live_id in listed
    assert set(listed) <= {f"e2-{i}" for i in range(attempt + 1)}  # live runs only
    assert [e for _, e in await store.journal(live_id)] == [turn(0)]
    assert live.version == 1


async def test_cancel_requests_are_seen_by_every_handle(backend: StoreBackend) -> None:
    a, b = backend.store(), backend.store()
    await started(a, "c1")
    await started(a, "c2")
    assert await b.cancel_requests(["c1", "c2"]) == set()
    await a.request_cancel("c1")
    assert await b.cancel_requests(["c1", "c2"]) == {"c1"}
    assert await b.cancel_requests([]) == set()


async def test_runs_survive_a_restart_of_the_backing_service(
    backend: StoreBackend, request: pytest.FixtureRequest
) -> None:
    if not backend.restartable:
        pytest.skip(f"{backend.name}: no backing service (its runs live as long as it does)")
    if backend.name == "redis":
        backend.use_private_redis(request.getfixturevalue("private_redis"))
    if backend.name == "postgres":
        backend.use_private_postgres(request.getfixturevalue("private_postgres"))
    store = backend.store()
    record = await started(store, "s1")
    await store.append("s1", [turn(0)])
    await store.request_cancel("s1")
    await backend.restart()
    after = backend.store() if backend.name == "sqlite" else store  # the same handle reconnects
    got = await after.get("s1")
    assert got is not None and got.status == "running" and got.version == 1
    assert [e for _, e in await after.journal("s1")] == [turn(0)]
    assert await after.cancel_requests(["s1"]) == {"s1"}
    # the holder goes on where it was
    await after.append("s1", [turn(1)], record=got if after is not store else record)
    await after.append("s1", [turn(2)])
    assert [seq for seq, _ in await after.journal("s1")] == [0, 1, 2]


# One example: appends issued together, each maybe cancelled after a few loop turns.
_cancelled_appends = st.lists(
    st.tuples(st.integers(1, 2), st.booleans(), st.none() | st.integers(0, 3)),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=20, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(appends=_cancelled_appends)
async def test_cancelled_appends_never_fence_their_own_holder(
    backend: StoreBackend, appends: list[tuple[int, bool, int | None]]
) -> None:
    """A cancelled write may or may not have landed, but the holder goes on writing: its
    next writes are accepted and the journal stays gapless."""
    store = backend.store()
    record = await started(store)
    run_id = record.run_id

    async def cancel_after(task: asyncio.Task[None], turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()

    tasks, cancellers = [], []
    for i, (size, with_record, cancel_at) in enumerate(appends):
        entries: list[JournalEntry] = [turn(i, f"{i}.{k}") for k in range(size)]
        task = asyncio.create_task(
            store.append(run_id, entries, record=record if with_record else None)
        )
        tasks.append(task)
        if cancel_at is not None:
            cancellers.append(cancel_after(task, cancel_at))
    await asyncio.gather(*cancellers)
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        assert task.cancelled() or task.exception() is None
    record.steps = 99
    await store.append(run_id, [turn(100)], record=record)
    await store.append(run_id, [turn(101)])
    items = await store.journal(run_id)
    assert [seq for seq, _ in items] == list(range(len(items)))
    assert [e for _, e in items][-2:] == [turn(100), turn(101)]
    stored = await store.get(run_id)
    assert stored is not None and stored.version == record.version and stored.steps == 99


async def test_a_waiting_run_is_listed_decided_once_and_resumed(backend: StoreBackend) -> None:
    """A run parked on a human: listed by status ``waiting`` (the deadline sweep's read),
    two holders racing to decide write one decision (the record fences them), and a third
    resumes it from the journal with no completed call repeated."""
    from podium.engine import decisions
    from podium.engine.records import ApprovalDecided
    from podium.errors import DecisionError

    ran: Counter[str] = Counter()

    @tool
    async def look(q: str) -> str:
        """Look.

        Args:
            q: What.
        """
        ran["look"] += 1
        return "seen"

    @tool(requires_approval=True)
    async def act(q: str) -> str:
        """Act.

        Args:
            q: What.
        """
        ran["act"] += 1
        return "acted"

    from podium import SimStep, SimToolCall

    both = (SimToolCall("look", {"q": "x"}), SimToolCall("act", {"q": "y"}))
    agent = Agent(
        "gate", SimulatedModel(Scenario(steps=(SimStep(tool_calls=both),))), tools=[look, act]
    )
    async with Engine(backend.store()) as first:
        record = await first.run(agent, "go", tenant=f"t-{new_id()}")
    assert record.status == "waiting"
    one, two = backend.store(), backend.store()
    listed = await one.list(tenant=record.tenant, status="waiting")
    assert [r.run_id for r in listed] == [record.run_id]
    assert await one.list(tenant=record.tenant, status="running") == []
    outcomes = await asyncio.gather(
        decisions.decide(one, record.run_id, "call_0_1", "approve", by="a"),
        decisions.decide(two, record.run_id, "call_0_1", "reject", by="b"),
        return_exceptions=True,
    )
    assert sum(isinstance(o, tuple) for o in outcomes) == 1, outcomes
    assert all(isinstance(o, tuple | DecisionError) for o in outcomes), outcomes
    entries = [e for _, e in await one.journal(record.run_id)]
    assert sum(isinstance(e, ApprovalDecided) for e in entries) == 1
    third = backend.store()
    stored = await third.get(record.run_id)
    assert stored is not None and stored.status == "queued"
    async with Engine(third) as engine:
        done = await engine.execute(agent, stored)
    assert done.status == "completed"
    assert ran["look"] == 1 and ran["act"] <= 1
    assert await third.list(tenant=record.tenant, status="waiting") == []
