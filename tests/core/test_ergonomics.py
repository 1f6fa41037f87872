"""Small conveniences for agent developers: scripted test models, a synchronous run,
and clear errors for common mistakes."""

from __future__ import annotations

import logging

import pytest

from podium import Agent, ConfigError, FunctionModel, tool, tool_call_reply


@tool
def get_order(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order.
    """
    return f"{order_id}: shipped"


def scripted_agent() -> Agent:
    model = FunctionModel.script([
        tool_call_reply(("get_order", {"order_id": "A-1"})),
        "Order A-1 has shipped.",
    ])
    return Agent("support", model, "You answer about orders.", [get_order])


def test_a_script_answers_each_step_in_order_and_run_sync_runs_it() -> None:
    agent = scripted_agent()
    for _ in range(2):  # each run starts the script again (it goes by step)
        record = agent.run_sync("Where is A-1?")
        assert (record.status, record.output, record.steps) == (
            "completed", "Order A-1 has shipped.", 2
        )
        assert record.usage.requests == 2


def test_run_sync_keeps_a_thread_across_calls() -> None:
    seen: list[int] = []

    def reply(messages, request):  # type: ignore[no-untyped-def]
        seen.append(sum(m.role == "user" for m in messages))
        return "ok"

    agent = Agent("chat", FunctionModel(reply))
    for _ in range(3):
        assert agent.run_sync("hi", thread_id="sync-thread").status == "completed"
    assert seen == [1, 2, 3]


def test_a_script_too_short_fails_the_run_naming_its_length() -> None:
    agent = Agent("a", FunctionModel.script([tool_call_reply(("get_order", {"order_id": "x"}))]),
                  tools=[get_order], model_retries=0)
    record = agent.run_sync("go")
    assert (record.status, record.reason) == ("failed", "model_error")
    assert "the script has 1 replies; step 1 asked for one more" in (record.error or "")


@pytest.mark.parametrize("bad", ["hello", [1], None])
def test_a_script_of_something_else_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"FunctionModel\.script"):
        FunctionModel.script(bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_run_sync_inside_a_loop_says_to_await_run() -> None:
    with pytest.raises(ConfigError, match=r"use `await agent.run\(...\)`"):
        scripted_agent().run_sync("go")


def test_handoffs_by_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="handoffs takes Agent objects, not 'billing'"):
        Agent("triage", FunctionModel.script(["ok"]), handoffs=["billing"])  # type: ignore[list-item]


def test_a_tool_without_a_description_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="podium.tools"):

        @tool
        def undocumented(x: int) -> int:
            return x

        @tool(description="Doubles x.")
        def described(x: int) -> int:
            return 2 * x

    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "tool 'undocumented' has no description" in warned[0], warned
