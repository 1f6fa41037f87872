"""Threads embedded: ``Agent.run(..., thread_id=)``, a SQLite thread that outlives its
process, a thread run cut off mid-step by a shutdown and resumed by another engine, and
the ConfigError a bad thread id gets."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from podium import (
    Agent,
    ConfigError,
    Engine,
    FunctionModel,
    ModelRequest,
    ToolContext,
    tool,
    tool_call_reply,
)
from podium.messages import Message
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio


def counting(messages: Sequence[Message], request: ModelRequest) -> str:
    users = [m.content for m in messages if m.role == "user"]
    return f"{len(users)}: {users[-1]}"


async def test_agent_run_continues_a_thread_from_call_to_call() -> None:
    agent = Agent("counter", FunctionModel(counting), "Count.")
    thread_id = f"agent-run-{uuid.uuid4().hex}"  # one process-wide store: a new thread
    first = await agent.run("hello", thread_id=thread_id)
    second = await agent.run("again", thread_id=thread_id)
    alone = await agent.run("alone")
    assert (first.output, second.output, alone.output) == ("1: hello", "2: again", "1: alone")


async def test_a_sqlite_thread_outlives_its_engine(tmp_path: Path) -> None:
    agent = Agent("counter", FunctionModel(counting), "Count.")
    db = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(db) as store, Engine(store) as engine:
        await engine.run(agent, "one", thread_id="t")
    async with SQLiteRunStore(db) as store, Engine(store) as engine:
        record = await engine.run(agent, "two", thread_id="t")
        thread = await engine.threads.read("t", "default")
    assert record.output == "2: two"
    assert [m.content for m in thread.history] == ["one", "1: one", "two", "2: two"]


@pytest.mark.parametrize("bad", ["", "a b", "x" * 129, "../x", "é"])
async def test_a_bad_thread_id_is_a_config_error(bad: str) -> None:
    agent = Agent("counter", FunctionModel(counting), "Count.")
    async with Engine() as engine:
        with pytest.raises(ConfigError, match="thread id"):
            await engine.run(agent, "x", thread_id=bad)
        assert await engine.store.list() == []


calls: list[str] = []
release = asyncio.Event()  # only tested and set: never bound to a loop
hanging: list[asyncio.Event] = []  # set by the call that hangs (made per test: per loop)


@tool(side_effects=True, timeout=None)
async def step(n: int, ctx: ToolContext) -> str:
    """Do step ``n``; step 2 of the first attempt hangs (the test shuts the engine down).

    Args:
        n: Which step.
    """
    calls.append(ctx.idempotency_key)
    if n == 2 and not release.is_set():
        hanging[0].set()
        await asyncio.Event().wait()
    return f"step {n} done"


def stepper(messages: Sequence[Message], request: ModelRequest) -> object:
    if request.step < 3:
        return tool_call_reply(("step", json.dumps({"n": request.step})))
    users = [m.content for m in messages if m.role == "user"]
    return f"finished {users[-1]} after {len(users)} inputs"


async def test_a_thread_run_cut_off_mid_step_resumes_with_each_turn_once(tmp_path: Path) -> None:
    """The engine driving a thread's run shuts down mid-tool (as a killed worker would
    leave it: ``running``, the thread held). The next run on the thread waits; another
    engine resumes the first from its checkpoint, then the second runs; the thread holds
    each turn once and no finished call ran twice."""
    calls.clear()
    release.clear()
    hanging[:] = [asyncio.Event()]
    agent = Agent("stepper", FunctionModel(stepper), "Step.", [step])  # type: ignore[arg-type]
    db = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(db) as store:
        engine = Engine(store)
        first = await engine.create(agent, "first", thread_id="t")
        task = engine.start(agent, first)
        await hanging[0].wait()  # steps 0 and 1 done, step 2 hanging
        await engine.aclose()  # shutdown: the run stays `running`
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await store.get(first.run_id)).status == "running"  # type: ignore[union-attr]
    release.set()
    async with SQLiteRunStore(db) as store, Engine(store) as engine:
        second = await engine.create(agent, "second", thread_id="t")
        waiting = engine.start(agent, second)
        await asyncio.sleep(0.1)
        assert not waiting.done()  # its turn comes after the first run's
        resumed = await engine.resume(agent, first.run_id)
        ended = await waiting
        thread = await engine.threads.read("t", "default")
    assert resumed.status == ended.status == "completed"
    assert resumed.output == "finished first after 1 inputs"
    assert ended.output == "finished second after 2 inputs"
    first_calls = [c for c in calls if c.startswith(first.run_id)]
    assert first_calls == [f"{first.run_id}:{s}:0" for s in (0, 1, 2, 2)]  # only 2 re-ran
    assert [m.content for m in thread.history if m.role == "user"] == ["first", "second"]
    assert sum(m.content.startswith("finished") for m in thread.history) == 2
    assert thread.runs == [first.run_id, second.run_id] and thread.turns == 2
