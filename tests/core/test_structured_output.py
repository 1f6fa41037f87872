"""Structured output embedded (memory and SQLite stores): ``Agent(output_type=...)`` asks the
model for the type (``response_format`` or the ``final_result`` tool), validates the answer
in one pass, feeds a failed one back within ``output_retries`` and journals every attempt."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TypedDict

import msgspec
import pytest

from podium import (
    Agent,
    ConfigError,
    Engine,
    FunctionModel,
    MemoryRunStore,
    Message,
    ModelRequest,
    ModelResponse,
    OutputValidationError,
    RunError,
    RunStore,
    Scenario,
    SimulatedModel,
    ToolContext,
    tool,
    tool_call_reply,
)
from podium.engine.profile import STEP_PHASES
from podium.engine.records import OutputRejected, RunFinished, StepRecord, ToolOutcome
from podium.factory import with_model
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio

PARSE = STEP_PHASES.index("parse")


class Order(msgspec.Struct):
    """An order's status."""

    order_id: str
    shipped: bool
    items: list[str] = []


@dataclasses.dataclass
class Refund:
    order_id: str
    amount: float


class Flag(TypedDict):
    name: str
    on: bool


GOOD = '{"order_id": "A-1", "shipped": true, "items": ["book"]}'
ORDER = Order("A-1", True, ["book"])


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    s: RunStore = MemoryRunStore() if request.param == "memory" else SQLiteRunStore(
        tmp_path / "runs.sqlite"
    )
    async with s:
        yield s


class Script:
    """A FunctionModel body answering step by step; keeps what each request showed the model
    (``seen``: the messages as they were then; the context itself grows on)."""

    def __init__(self, *replies: str | ModelResponse) -> None:
        self.replies = replies
        self.requests: list[ModelRequest] = []
        self.seen: list[list[Message]] = []
        self.steps: Counter[int] = Counter()

    def __call__(self, messages: Sequence[Message], request: ModelRequest) -> str | ModelResponse:
        self.requests.append(request)
        self.seen.append(list(messages))
        self.steps[request.step] += 1
        return self.replies[min(request.step, len(self.replies) - 1)]


def agent_for(script: Script, mode: str = "native", **options: Any) -> Agent:
    model = FunctionModel(script, structured_output=mode)  # type: ignore[arg-type]
    return Agent("orders", model, output_type=Order, **options)


async def test_a_valid_answer_is_the_typed_output(store: RunStore) -> None:
    script = Script(GOOD)
    async with Engine(store) as engine:
        record = await engine.run(agent_for(script), "Where is A-1?")
    assert record.status == "completed" and record.structured
    assert record.output_as(Order) == ORDER
    assert msgspec.json.decode(record.output or "") == msgspec.to_builtins(ORDER)
    stored = await store.get(record.run_id)
    assert stored is not None and stored.structured and stored.output_as(Order) == ORDER
    # the model was asked natively: the schema rode in the request settings, no extra tool
    output = script.requests[0].settings.output
    assert output is not None and output.mode == "native" and output.name == "Order"
    assert output.schema["required"] == ["order_id", "shipped"] and not script.requests[0].tools
    assert record.profile is not None and record.profile.steps[0].wall_ns[PARSE] > 0


@pytest.mark.parametrize("mode", ["native", "tool"])
@pytest.mark.parametrize(
    ("output_type", "check"),
    [
        (Order, lambda v: isinstance(v, Order)),
        (Refund, lambda v: isinstance(v, Refund)),
        (Flag, lambda v: set(v) == {"name", "on"}),
        (list[Order], lambda v: isinstance(v[0], Order)),
        (int, lambda v: v == 1),
    ],
    ids=["struct", "dataclass", "typeddict", "list", "int"],
)
async def test_the_simulated_model_answers_every_kind_of_type(
    mode: str, output_type: Any, check: Any
) -> None:
    model = SimulatedModel(Scenario(), structured_output=mode)  # type: ignore[arg-type]
    agent = Agent("t", model, output_type=output_type)
    assert agent.output is not None and agent.output.mode == mode
    assert ("final_result" in [t.name for t in agent.prefix.tools]) == (mode == "tool")
    record = (await agent.run("go")).raise_for_status()
    assert record.structured and check(record.output_as(output_type))


async def test_a_scripted_output_value_is_answered_in_both_modes() -> None:
    for mode in ("native", "tool"):
        model = SimulatedModel(
            Scenario(output={"order_id": "B-2", "shipped": False}), structured_output=mode
        )
        record = await Agent("t", model, output_type=Order).run("go")
        assert record.output_as(Order) == Order("B-2", False)
    listed = SimulatedModel(Scenario(output=[1, 2]), structured_output="tool")
    record = await Agent("t", listed, output_type=list[int]).run("go")
    assert record.output_as(list[int]) == [1, 2]


async def test_bad_json_then_wrong_fields_then_good_is_retried(store: RunStore) -> None:
    script = Script("Sure! The order shipped.", '{"order_id": 1, "shipped": true}', GOOD)
    async with Engine(store) as engine:
        record = await engine.run(agent_for(script), "Where is A-1?")
    assert record.status == "completed" and record.output_as(Order) == ORDER
    assert record.steps == 3 and script.steps == {0: 1, 1: 1, 2: 1}
    # each failed attempt went back to the model: the error and what was expected
    second = script.seen[1]
    assert second[-2].role == "assistant" and second[-2].content == "Sure! The order shipped."
    assert second[-1].role == "user" and "not a valid Order" in second[-1].content
    assert "JSON is malformed" in second[-1].content and '"order_id"' in second[-1].content
    third = script.seen[2][-1].content
    assert "Expected `str`, got `int` - at `$.order_id`" in third
    entries = [e for _, e in await store.journal(record.run_id)]
    rejected = [e for e in entries if isinstance(e, OutputRejected)]
    assert [e.step for e in rejected] == [0, 1] and all(e.profile for e in rejected)
    assert "malformed" in rejected[0].error and "$.order_id" in rejected[1].error
    final = [e for e in entries if isinstance(e, RunFinished)]
    assert len(final) == 1 and final[0].structured and final[0].output == record.output


async def test_a_spent_budget_fails_the_run_with_invalid_output(store: RunStore) -> None:
    script = Script('{"order_id": "A-1"}')
    async with Engine(store) as engine:
        record = await engine.run(agent_for(script, output_retries=1), "go")
    assert record.status == "failed" and record.reason == "invalid_output"
    assert record.error is not None and "no valid Order after 2 attempts" in record.error
    assert "missing required field `shipped`" in record.error
    assert script.steps == {0: 1, 1: 1} and record.output is None
    entries = [e for _, e in await store.journal(record.run_id)]
    assert sum(isinstance(e, OutputRejected) for e in entries) == 2
    with pytest.raises(RunError) as info:
        record.output_as(Order)
    assert info.value.reason == "invalid_output"


async def test_no_retries_fails_at_the_first_bad_answer() -> None:
    record = await agent_for(Script("[]"), output_retries=0).run("go")
    assert record.reason == "invalid_output" and record.steps == 1


async def test_the_final_tool_is_offered_when_the_model_cannot_be_asked_natively(
    store: RunStore,
) -> None:
    """Tool mode: an invalid ``final_result`` call is an observation for that call, a text
    reply is told to use the tool, and a valid call ends the run."""
    script = Script(
        tool_call_reply(("final_result", '{"order_id": "A-1"}')),
        "It shipped.",
        tool_call_reply(("final_result", GOOD)),
    )
    async with Engine(store) as engine:
        record = await engine.run(agent_for(script, "tool"), "go")
    assert record.status == "completed" and record.output_as(Order) == ORDER
    request = script.requests[0]
    assert [t.name for t in request.tools] == ["final_result"]
    assert request.tools[0].parameters["required"] == ["order_id", "shipped"]
    assert request.settings.output is not None and request.settings.output.mode == "tool"
    observation = script.seen[1][-1]
    assert observation.role == "tool" and observation.tool_call_id == "call_0"
    assert "invalid arguments for 'final_result'" in observation.content
    assert "missing required field `shipped`" in observation.content
    told = script.seen[2][-1]
    assert told.role == "user" and "calling the tool final_result" in told.content
    entries = [e for _, e in await store.journal(record.run_id)]
    first = next(e for e in entries if isinstance(e, StepRecord))
    assert first.results[0].error == "invalid_output" and not first.results[0].ok


async def test_a_valid_final_call_ends_the_run_before_other_calls_run() -> None:
    ran: list[str] = []

    @tool
    def lookup(order_id: str) -> str:
        """Look an order up.

        Args:
            order_id: The order.
        """
        ran.append(order_id)
        return "shipped"

    script = Script(tool_call_reply(("lookup", '{"order_id": "A-1"}'), ("final_result", GOOD)))
    agent = Agent("t", FunctionModel(script, structured_output="tool"), tools=[lookup],
                  output_type=Order)
    record = await agent.run("go")
    assert record.output_as(Order) == ORDER and record.steps == 1 and ran == []


async def test_other_calls_run_beside_an_invalid_final_call() -> None:
    @tool
    def lookup(order_id: str) -> str:
        """Look an order up.

        Args:
            order_id: The order.
        """
        return f"{order_id} shipped"

    script = Script(
        tool_call_reply(("lookup", '{"order_id": "A-1"}'), ("final_result", "{")),
        tool_call_reply(("final_result", GOOD)),
    )
    agent = Agent("t", FunctionModel(script, structured_output="tool"), tools=[lookup],
                  output_type=Order, max_invalid_tool_calls=0)
    record = await agent.run("go")
    assert record.status == "completed" and record.output_as(Order) == ORDER
    seen = script.seen[1][-2:]
    assert seen[0].content == "A-1 shipped"
    assert "invalid arguments for 'final_result'" in seen[1].content


async def test_answers_in_a_code_fence_are_read_inside_it() -> None:
    record = await agent_for(Script(f"```json\n{GOOD}\n```")).run("go")
    assert record.output_as(Order) == ORDER


async def test_output_mode_overrides_the_model_capability() -> None:
    model = SimulatedModel(Scenario(), structured_output="native")
    agent = Agent("t", model, output_type=Order, output_mode="tool")
    assert agent.output is not None and agent.output.mode == "tool"
    assert agent.settings.output is not None and agent.settings.output.name == "final_result"
    assert (await agent.run("go")).output_as(Order).order_id == "podium"


async def test_moving_an_agent_to_another_model_asks_it_that_models_way() -> None:
    agent = Agent("t", SimulatedModel(), output_type=Order)
    assert agent.output is not None and agent.output.mode == "native"
    moved = with_model(agent, SimulatedModel(structured_output="tool"))
    assert moved.output is not None and moved.output.mode == "tool"
    assert "final_result" in [t.name for t in moved.prefix.tools]
    assert agent.output.mode == "native" and "final_result" not in [
        t.name for t in agent.prefix.tools
    ]
    assert (await moved.run("go")).output_as(Order).shipped is True


def test_agent_definition_errors_are_config_errors() -> None:
    @tool
    def final_result(x: int) -> int:
        """Clash.

        Args:
            x: x.
        """
        return x

    with pytest.raises(ConfigError, match="clashes with the final-answer tool"):
        Agent("t", SimulatedModel(), tools=[final_result], output_type=Order)
    with pytest.raises(ConfigError, match="cannot be validated"):
        Agent("t", SimulatedModel(), output_type=asyncio.Event)
    with pytest.raises(ConfigError, match="output_retries"):
        Agent("t", SimulatedModel(), output_type=Order, output_retries=-1)
    with pytest.raises(ConfigError, match="output_mode"):
        Agent("t", SimulatedModel(), output_type=Order, output_mode="json")  # type: ignore[arg-type]


async def test_output_as_checks_the_type() -> None:
    record = await agent_for(Script(GOOD)).run("go")
    with pytest.raises(OutputValidationError, match="not a valid Refund"):
        record.output_as(Refund)
    plain = await Agent("t", SimulatedModel(Scenario(final="hello"))).run("go")
    assert not plain.structured and plain.output_as(str) == "hello"
    with pytest.raises(OutputValidationError):
        plain.output_as(Order)


async def test_agents_without_output_type_are_untouched() -> None:
    agent = Agent("t", SimulatedModel(Scenario(final='{"not": "parsed"}')))
    assert agent.output is None and agent.settings.output is None
    record = await agent.run("go")
    assert record.output == '{"not": "parsed"}' and not record.structured


class _Gate:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.first = True
        self.runs = 0

        @tool(timeout=None, side_effects=True)
        async def gate(ctx: ToolContext) -> str:
            """Blocks the first time."""
            self.runs += 1
            if self.first:
                self.first = False
                self.started.set()
                await asyncio.Event().wait()
            return "open"

        self.tool = gate


async def _crash_then_resume(store: RunStore, agent: Agent, gate: _Gate) -> Any:
    async with Engine(store) as first:
        record = await first.create(agent, "go")
        task = first.start(agent, record)
        await gate.started.wait()
        task.cancel()  # a crash, not a cancel: the run stays `running`
        with pytest.raises(asyncio.CancelledError):
            await task
    async with Engine(store) as second:
        return await second.resume(agent, record.run_id)


async def test_a_resumed_run_does_not_ask_again_for_journaled_attempts(store: RunStore) -> None:
    """Step 0's rejected answer is journaled; the run dies in step 1's tool; the resumed run
    asks the model only for step 2, with step 0's feedback still in its context."""
    gate = _Gate()
    script = Script("no JSON here", tool_call_reply(("gate", "{}")), GOOD)
    model = FunctionModel(script)
    agent = Agent("t", model, tools=[gate.tool], output_type=Order)
    record = await _crash_then_resume(store, agent, gate)
    assert record.status == "completed" and record.output_as(Order) == ORDER
    assert script.steps == {0: 1, 1: 1, 2: 1} and gate.runs == 2
    context = [m.role for m in script.seen[-1]]
    assert context == ["system", "user", "assistant", "user", "assistant", "tool"]


async def test_an_invalid_final_call_cut_off_with_its_step_counts_on_resume(
    store: RunStore,
) -> None:
    """The reply [final_result(invalid), gate] is journaled before the gate runs; after the
    crash the resumed step gives final_result its observation and counts the failure."""
    gate = _Gate()
    script = Script(tool_call_reply(("final_result", "{}"), ("gate", "{}")), GOOD)
    agent = Agent("t", FunctionModel(script, structured_output="tool"), tools=[gate.tool],
                  output_type=Order, output_retries=0)
    record = await _crash_then_resume(store, agent, gate)
    assert record.status == "failed" and record.reason == "invalid_output"
    entries = [e for _, e in await store.journal(record.run_id)]
    outcomes = {e.index: e.result for e in entries if isinstance(e, ToolOutcome)}
    assert outcomes[0].error == "invalid_output" and outcomes[1].content == "open"
    assert script.steps == {0: 1}
