"""A PostgreSQL store under faults, with runs in flight: its connections terminated by the
server (``pg_terminate_backend``) again and again, and the server itself stopped at once
(no checkpoint) and started again. The store reconnects; every run completes, none is
lost, no completed tool call is run again and no journal entry is written twice (a write
whose connection died asks whether it landed before it is sent again)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest

from distributed.postgres_server import PostgresServer
from podium import Agent, Engine, Scenario, SimulatedModel, ToolContext, tool
from podium.engine.records import RunFinished, StepCommitted, ToolOutcome
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]

RUNS = 24
STEPS = 4  # tool steps per run, two parallel calls each, then the answer


def _agent(calls: Counter[str], gate: tuple[asyncio.Event, asyncio.Event]) -> Agent:
    """Its tool waits, once ``gate[0]`` is set, for ``gate[1]``: the fault then strikes while
    every run is in flight, and their next writes meet it."""
    armed, struck = gate

    @tool
    async def note(text: str, ctx: ToolContext) -> str:
        """Note something down (counted by idempotency key).

        Args:
            text: What to note.
        """
        if armed.is_set():
            await struck.wait()
        calls[ctx.idempotency_key] += 1
        return f"noted {text}"

    scenario = Scenario.react("note", {"text": "x"}, tool_steps=STEPS, parallel=2)
    return Agent("noter", SimulatedModel(scenario), tools=[note], max_steps=STEPS + 2)


async def _check(store: PostgresRunStore, run_ids: list[str], calls: Counter[str]) -> None:
    """Every run completed, its journal gapless with each step and call once; every call
    ran once."""
    assert len(calls) == RUNS * STEPS * 2 and set(calls.values()) == {1}, calls.most_common(3)
    for run_id in run_ids:
        record = await store.get(run_id)
        assert record is not None and record.status == "completed", record
        items = await store.journal(run_id)
        assert [seq for seq, _ in items] == list(range(len(items)))
        entries = [e for _, e in items]
        steps = Counter(e.step for e in entries if isinstance(e, StepCommitted))
        assert steps == {s: 1 for s in range(STEPS)}, steps  # (the answer ends the run)
        outcomes = Counter((e.step, e.index) for e in entries if isinstance(e, ToolOutcome))
        assert outcomes == {(s, c): 1 for s in range(STEPS) for c in range(2)}, outcomes
        assert sum(isinstance(e, RunFinished) for e in entries) == 1


async def _run_all(engine: Engine, agent: Agent) -> list[str]:
    records = await asyncio.gather(*(engine.run(agent, f"go {i}") for i in range(RUNS)))
    return [r.run_id for r in records]


async def test_terminated_connections_lose_nothing(postgres_url: str) -> None:
    calls: Counter[str] = Counter()
    committed, struck = asyncio.Event(), asyncio.Event()
    agent = _agent(calls, (committed, struck))
    schema = f"faults_{uuid.uuid4().hex[:10]}"
    store = PostgresRunStore(postgres_url, schema=schema, max_connections=4)
    # Another client, the "operator": its connections are named as the store's (one
    # process), and it spares its own.
    killer = PostgresRunStore(postgres_url, schema=schema)
    terminated = 0
    progress = asyncio.Event()

    def observe(run_id: str, entry: object) -> None:
        if isinstance(entry, StepCommitted):
            committed.set()
            progress.set()

    async def terminate_while_running(done: asyncio.Event) -> None:
        nonlocal terminated
        await committed.wait()  # runs are under way: their connections are busy
        while not done.is_set():
            pool = await killer._ready()
            # Every backend of the store under test: its pool's, and its listener's.
            killed = await pool.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = $1"
                " AND pid <> pg_backend_pid()",
                store.application_name,
            )
            terminated += killed
            if killed:
                struck.set()
            # The next cut once a step has been committed since this one: the store got
            # back on its feet (never a sleep: a busy machine reconnects slowly).
            progress.clear()
            waits = [asyncio.ensure_future(e.wait()) for e in (progress, done)]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits:
                w.cancel()

    done = asyncio.Event()
    async with store, killer, Engine(store, observers=[observe]) as engine:
        chaos = asyncio.create_task(terminate_while_running(done))
        try:
            run_ids = await _run_all(engine, agent)
        finally:
            done.set()
            await chaos
        await _check(store, run_ids, calls)
    assert terminated > 0 and store.outages_survived > 0, (terminated, store.outages_survived)


async def test_a_server_restart_mid_load_loses_nothing(private_postgres: PostgresServer) -> None:
    calls: Counter[str] = Counter()
    halfway, killed = asyncio.Event(), asyncio.Event()
    agent = _agent(calls, (halfway, killed))
    store = PostgresRunStore(private_postgres.url, unavailable_s=30.0)
    half = RUNS * STEPS // 2
    seen = 0

    def observe(run_id: str, entry: object) -> None:
        nonlocal seen
        if isinstance(entry, StepCommitted):
            seen += 1
            if seen >= half:
                halfway.set()

    async def restart_halfway() -> None:
        await halfway.wait()
        await asyncio.to_thread(private_postgres.kill)  # immediate: no checkpoint
        killed.set()  # the runs go on, and write to a server that is down, then starting
        await asyncio.to_thread(private_postgres.start)

    async with store, Engine(store, observers=[observe]) as engine:
        restart = asyncio.create_task(restart_halfway())
        run_ids = await _run_all(engine, agent)
        await restart
        await _check(store, run_ids, calls)
    assert store.outages_survived > 0


async def test_a_hanging_statement_is_bounded_by_statement_timeout(postgres_url: str) -> None:
    """A statement stuck behind a lock is cancelled by the server (``statement_timeout``):
    the call fails with StoreUnavailableError (a 503 at the gateway), not a hang, and the
    store answers again once the lock is gone."""
    import asyncpg

    from podium.engine.records import RunRecord
    from podium.errors import StoreUnavailableError

    schema = f"hang_{uuid.uuid4().hex[:10]}"
    async with PostgresRunStore(postgres_url, schema=schema, statement_timeout_s=0.3,
                                unavailable_s=0.5) as store:
        await store.create(RunRecord("h1", "agent", "hi"))
        locker = await asyncpg.connect(postgres_url, server_settings={"search_path": schema})
        try:
            async with locker.transaction():
                await locker.execute("LOCK TABLE podium_runs IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(StoreUnavailableError, match="ran past its timeout"):
                    await store.get("h1")
                assert store.problem() is not None  # what /readyz says meanwhile
        finally:
            await locker.close()
        assert await store.get("h1") is not None
        assert store.problem() is None

