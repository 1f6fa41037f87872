"""A process SIGKILLed around a thread's settle: the thread stays consistent.

Hypothesis draws the conversation (earlier turns, the shape of the turn that
crashes: a plain answer, a tool call, a compaction of the history before its first
call) and where the process dies: after the run's end is stored but before the
thread's write (the next run settles the turn from its journal), or right after
that write. The same conversation is run again with no crash; the crashed thread
must end exactly like it: the same runs settled, the same turns, the same history
(each turn once, in order, tool calls and summaries included), and the next turn
must have started from that history.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _thread_crash import SHAPES, agent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podium import Engine
from podium.messages import Message
from podium.store.sqlite import SQLiteRunStore
from podium.threads.record import ThreadRecord

pytestmark = pytest.mark.anyio

# One loop: the crash is a child process's, its loop is its own.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

SCRIPT = Path(__file__).with_name("_thread_crash.py")
THREAD = "t-crash"


def shape_of(history: list[Message]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    return [
        (m.role, m.content, [(c.name, c.arguments) for c in m.tool_calls or ()])
        for m in history
    ]


async def conversation(
    db: Path, before: list[str], shape: str, when: str | None
) -> tuple[ThreadRecord, str | None]:
    """Earlier turns, the crashing turn (in a child process, killed ``when``; in this
    process if None), and the turn after; the thread and the last turn's answer."""
    async with SQLiteRunStore(db) as store, Engine(store) as engine:
        for i, turn_shape in enumerate(before):
            done = await engine.run(agent(turn_shape), f"earlier {i}", thread_id=THREAD)
            assert done.status == "completed"
        if when is None:
            await engine.run(agent(shape), "crashing turn", thread_id=THREAD)
    if when is not None:
        child = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(SCRIPT), str(db), THREAD, "crashing turn", shape, when],
            capture_output=True, text=True, timeout=60,
        )
        assert child.returncode == -9, child.stdout + child.stderr
    async with SQLiteRunStore(db) as store, Engine(store) as engine:  # "restarted"
        after = await engine.run(agent("answer"), "next turn", thread_id=THREAD)
        assert after.status == "completed"
        return await engine.threads.read(THREAD, "default"), after.output


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(st.sampled_from(SHAPES), max_size=2),
    shape=st.sampled_from(SHAPES),
    when=st.sampled_from(["before", "after"]),
)
async def test_a_kill_around_the_settle_loses_and_repeats_nothing(
    before: list[str], shape: str, when: str
) -> None:
    with tempfile.TemporaryDirectory(prefix="podium-thread-crash-") as directory:
        crashed, crashed_answer = await conversation(
            Path(directory) / "crashed.db", before, shape, when
        )
        control, control_answer = await conversation(
            Path(directory) / "control.db", before, shape, None
        )
    assert len(crashed.runs) == len(before) + 2
    assert (crashed.settled, crashed.turns, crashed.pending) == (
        control.settled, control.turns, control.pending
    )
    assert shape_of(crashed.history) == shape_of(control.history)
    assert crashed_answer == control_answer  # the next turn started from the same history
    users = [m.content for m in crashed.history if m.role == "user"]
    assert users.count("crashing turn") == 1 and users[-1] == "next turn"
