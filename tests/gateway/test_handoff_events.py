"""A filtered hand-off on a run's event stream: a ``handed_off`` event with the agent and
the history it continues with, between the transfer's step and the receiver's reply."""

from __future__ import annotations

import pytest
from test_api import parse_sse

from conftest import default_agents, gateway_client
from podium import (
    Agent,
    Handoff,
    ModelRequest,
    SimStep,
    SimToolCall,
    SimulatedModel,
    remove_tool_calls,
)
from podium.gateway.service import ServedAgent

pytestmark = pytest.mark.anyio


def triage() -> Agent:
    def route(request: ModelRequest) -> SimStep:
        return SimStep((SimToolCall("transfer_to_billing"),), "Passing you to billing.")

    billing = Agent("billing", SimulatedModel(), "You handle billing.")
    return Agent("triage", SimulatedModel(route), "You route requests.",
                 handoffs=[Handoff(billing, input_filter=remove_tool_calls)])


async def test_the_stream_shows_the_filtered_history_the_receiver_continues_with() -> None:
    async with gateway_client(agents=[*default_agents(), ServedAgent(triage())]) as (_, client):
        r = await client.post("/v1/runs", json={"agent": "triage", "input": "Refund A-1",
                                                "stream": True})
    events = parse_sse(r.text)
    names = [e["event"] for e in events]
    assert "handed_off" in names and names[-1] == "final", names
    handed = events[names.index("handed_off")]["data"]
    assert isinstance(handed, dict)
    assert handed["agent"] == "billing" and handed["step"] == 1
    assert [(m["role"], m["content"]) for m in handed["messages"]] == [
        ("user", "Refund A-1"),
        ("assistant", "Passing you to billing."),
    ]
    assert names.index("handed_off") > names.index("step_finished")  # after the transfer
    assert events[-1]["data"]["status"] == "completed"
