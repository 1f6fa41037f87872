"""The engine's observer hook: asked once per run what to call at each step, so a run the
observer does not follow costs it nothing per step, and several observers are each told."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from podium import Agent, FunctionModel, tool, tool_call_reply
from podium.engine.driver import Engine
from podium.engine.hook import StepHook, TokenCounts, combine
from podium.engine.profile import StepProfile
from podium.engine.records import RunRecord
from podium.tools.executor import ToolResult

pytestmark = pytest.mark.anyio


@tool
async def lookup(order: str) -> str:
    """Look up an order.

    Args:
        order: The order id.
    """
    return f"order {order}: shipped"


def _agent() -> Agent:
    model = FunctionModel(lambda messages, request: "shipped" if request.step else
                          tool_call_reply(("lookup", '{"order": "A-1"}')), name="m")
    return Agent("support", model, tools=[lookup])


class _Observer:
    """Follows the runs whose input says so; notes what it is told."""

    def __init__(self, name: str, log: list[tuple[Any, ...]]) -> None:
        self.name = name
        self.log = log

    def run_started(self, agent: Agent, record: RunRecord) -> StepHook | None:
        self.log.append((self.name, "started", record.input))
        return self.step if self.name in record.input else None

    def step(self, agent: Agent, record: RunRecord, profile: StepProfile, usage: TokenCounts,
             results: Sequence[tuple[int, ToolResult]]) -> None:
        self.log.append((self.name, "step", record.input, profile.step, usage.input_tokens > 0,
                         [(i, r.name, r.ok) for i, r in results]))

    def run_finished(self, record: RunRecord) -> None:
        self.log.append((self.name, "finished", record.input, record.status))


async def test_each_observer_hears_the_steps_of_the_runs_it_follows_only() -> None:
    log: list[tuple[Any, ...]] = []
    async with Engine() as engine:
        engine.hook = combine(_Observer("a", log), None, _Observer("b", log))
        for text in ("a b", "a", "none"):
            assert (await engine.run(_agent(), text)).status == "completed"
    steps = [entry for entry in log if entry[1] == "step"]
    assert steps == [
        ("a", "step", "a b", 0, True, [(0, "lookup", True)]),
        ("b", "step", "a b", 0, True, [(0, "lookup", True)]),
        ("a", "step", "a b", 1, True, []),
        ("b", "step", "a b", 1, True, []),
        ("a", "step", "a", 0, True, [(0, "lookup", True)]),
        ("a", "step", "a", 1, True, []),
    ]
    # every run is announced to both, and its end too, followed or not
    for name in ("a", "b"):
        assert [e[2] for e in log if e[:2] == (name, "started")] == ["a b", "a", "none"]
        assert [e[2:] for e in log if e[:2] == (name, "finished")] == [
            ("a b", "completed"), ("a", "completed"), ("none", "completed")]


def test_combine_keeps_one_hook_as_it_is_and_none_as_none() -> None:
    only = _Observer("a", [])
    assert combine(None, only, None) is only
    assert combine(None, None) is None
    log: list[tuple[Any, ...]] = []
    three = combine(_Observer("a", log), _Observer("b", log), _Observer("c", log))
    assert three is not None
    record = RunRecord("run_1", "support", "a c")
    on_step = three.run_started(_agent(), record)
    assert on_step is not None
    on_step(_agent(), record, StepProfile(0, (), ()), record.usage, ())
    assert [e[0] for e in log if e[1] == "step"] == ["a", "c"]
    assert three.run_started(_agent(), RunRecord("run_2", "support", "none")) is None


class _Broken:
    """A hook with a bug: it raises as a run starts."""

    def run_started(self, agent: Agent, record: RunRecord) -> StepHook | None:
        raise RuntimeError("hook bug")

    def run_finished(self, record: RunRecord) -> None:
        pass


async def test_a_run_whose_start_raises_is_not_left_registered() -> None:
    """A fresh run's start (no journal read, no await) that raises lets go of the run's
    task as a loaded run's start does: the engine drives nothing after it."""
    async with Engine() as engine:
        engine.hook = _Broken()
        with pytest.raises(RuntimeError, match="hook bug"):
            await engine.run(_agent(), "a b")
        assert engine.active_runs == 0
