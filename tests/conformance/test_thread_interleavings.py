"""Runs on one thread started at once, ending every way a run can end, on every store.

Hypothesis draws a thread of runs, each ending one way (an answer, an answer after a
tool call, a model error, ``max_steps``, a cancel in its turn or while it waits for
it, a deadline), starts them all at once in a drawn order, and checks what the docs
promise (docs/threads.md): one run at a time, in the order they joined; every run
settles (none blocks the thread); the history is exactly the completed runs' turns,
each once, in order; a failed or cancelled run contributes nothing. Each run's model
call is held on an event the test controls, so cancels land in the turn, not by timing.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podium import Agent, Engine, FunctionModel, ModelRequest, tool, tool_call_reply
from podium.errors import ModelError
from podium.messages import Message

from .conftest import StoreBackend

pytestmark = pytest.mark.anyio

# One loop: the invariants are the stores' and the thread keeper's; the engine's tests
# run on both loops.


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

OUTCOMES = ("answer", "tool", "model_error", "max_steps", "cancel", "cancel_waiting", "deadline")
ENDS = {
    "answer": "completed", "tool": "completed", "model_error": "failed",
    "max_steps": "failed", "cancel": "cancelled", "cancel_waiting": "cancelled",
    "deadline": "failed",
}


@tool
async def look(n: int) -> str:
    """Look something up.

    Args:
        n: What.
    """
    return f"looked {n}"


class Script:
    """The model of one example: the run's input names how it ends (``q<i>:<outcome>``)."""

    def __init__(self) -> None:
        self.inside = 0
        self.most_inside = 0
        self.order: list[str] = []  # inputs, in the order their first model call came
        self.prompts: dict[str, list[tuple[str, str]]] = {}
        self.entered: dict[str, asyncio.Event] = {}
        self.gate = asyncio.Event()  # set once the cancels of waiting runs have landed

    def entered_event(self, text: str) -> asyncio.Event:
        return self.entered.setdefault(text, asyncio.Event())

    async def reply(self, messages: Sequence[Message], request: ModelRequest) -> object:
        text = [m.content for m in messages if m.role == "user"][-1]
        outcome = text.split(":", 1)[1]
        if request.step == 0:
            self.order.append(text)
            self.prompts[text] = [(m.role, m.content) for m in messages[1:]]
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            self.entered_event(text).set()
            await self.gate.wait()
            if outcome in ("cancel", "deadline"):
                await asyncio.Event().wait()  # ends by the cancel, or at its deadline
            if outcome == "model_error":
                raise ModelError("the model is down")
            if outcome == "max_steps" or (outcome == "tool" and request.step == 0):
                return tool_call_reply(("look", json.dumps({"n": request.step})))
            return f"answer to {text}"
        finally:
            self.inside -= 1


async def run_thread(backend: StoreBackend, outcomes: list[str], start_order: list[int]) -> None:
    script = Script()
    agent = Agent("turns", FunctionModel(script.reply), "Take turns.", [look], max_steps=2)
    tid = f"thr-{uuid.uuid4().hex[:12]}"
    store = backend.store()
    async with Engine(store) as engine:
        records = [
            await engine.create(
                agent, f"q{i}:{o}", thread_id=tid, deadline_s=0.3 if o == "deadline" else None
            )
            for i, o in enumerate(outcomes)
        ]
        tasks = {records[i].run_id: engine.start(agent, records[i]) for i in start_order}

        async def cancel_in_turn(i: int) -> None:
            await script.entered_event(records[i].input).wait()
            await script.gate.wait()
            assert engine.cancel(records[i].run_id)

        async def cancel_while_waiting(i: int) -> None:
            # Once the thread's first run is in its model call, every later run waits.
            await script.entered_event(records[0].input).wait()
            fresh = await store.get(records[i].run_id)
            assert fresh is not None
            if not fresh.done:
                await engine.cancel_stored(fresh)

        async def cancel_waiting_runs() -> None:
            # The thread's first run is held in its model call until these have landed.
            await asyncio.gather(
                *(cancel_while_waiting(i) for i, o in enumerate(outcomes)
                  if o == "cancel_waiting" and i > 0)
            )
            script.gate.set()

        cancels = [cancel_in_turn(i) for i, o in enumerate(outcomes) if o == "cancel"]
        ended = await asyncio.wait_for(
            asyncio.gather(*tasks.values(), cancel_waiting_runs(), *cancels), timeout=15
        )
        done = {r.run_id: r for r in ended[: len(tasks)]}
        thread = await engine.threads.read(tid, "default")

    expected = [
        "completed" if o == "cancel_waiting" and i == 0 else ENDS[o]
        for i, o in enumerate(outcomes)
    ]
    assert [done[r.run_id].status for r in records] == expected
    assert script.most_inside == 1  # one run of the thread at a time
    inputs = [r.input for r in records]
    assert script.order == [t for t in inputs if t in script.order]  # in the order they joined
    assert thread.runs == [r.run_id for r in records]
    assert thread.pending == [] and thread.settled == len(records)
    completed = [r.input for r, s in zip(records, expected, strict=True) if s == "completed"]
    assert thread.turns == len(completed)
    # The history: the completed runs' turns, each once, in order, nothing of the others.
    users = [m.content for m in thread.history if m.role == "user"]
    answers = [m.content for m in thread.history if m.role == "assistant" and m.content]
    assert users == completed
    assert answers == [f"answer to {t}" for t in completed]
    # Each run started from exactly the completed turns before it.
    for text, prompt in script.prompts.items():
        before = completed[: completed.index(text)] if text in completed else [
            t for t in completed if inputs.index(t) < inputs.index(text)
        ]
        assert [c for role, c in prompt if role == "user"] == [*before, text]


@st.composite
def threads(draw: st.DrawFn) -> tuple[list[str], list[int]]:
    """How each run of a thread ends, and the order their drivers start in."""
    outcomes = draw(st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=5))
    return outcomes, draw(st.permutations(range(len(outcomes))))


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=threads())
async def test_runs_on_one_thread_take_turns_however_they_end(
    backend: StoreBackend, case: tuple[list[str], list[int]]
) -> None:
    outcomes, start_order = case
    try:
        await run_thread(backend, outcomes, start_order)
    except AssertionError as exc:
        raise AssertionError(f"outcomes={outcomes} start_order={start_order}: {exc}") from exc


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs=st.integers(2, 4), how=st.sampled_from(["delete", "expire"]))
async def test_a_thread_deleted_or_expired_mid_turn_frees_its_runs_and_stays_gone(
    backend: StoreBackend, runs: int, how: str
) -> None:
    """The thread goes (deleted, or its TTL passes) while its first run is in its model
    call and the others wait: every run ends (as docs/threads.md says, the waiting ones
    start a new conversation, from no history), and no settle or join brings the thread
    back."""
    script = Script()
    agent = Agent("turns", FunctionModel(script.reply), "Take turns.", [look], max_steps=2)
    tid = f"thr-{uuid.uuid4().hex[:12]}"
    store = backend.store()
    async with Engine(store) as engine:
        ttl = 0.5 if how == "expire" else None
        await engine.threads.create(tid, "default", ttl_s=ttl)
        records = [await engine.create(agent, f"q{i}:answer", thread_id=tid) for i in range(runs)]
        tasks = [engine.start(agent, r) for r in records]
        await script.entered_event(records[0].input).wait()
        if how == "delete":
            assert await store.delete_thread(tid)
        else:
            while await store.get_thread(tid) is not None:  # noqa: ASYNC110 (its TTL passing)
                await asyncio.sleep(0.05)
        script.gate.set()
        done = await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
        assert [r.status for r in done] == ["completed"] * runs
        assert await store.get_thread(tid) is None
    for text in [r.input for r in records[1:]]:  # each started from no history
        assert [c for role, c in script.prompts[text] if role == "user"] == [text]
