"""Per-tenant tool allow-lists: set on an API key, carried by the run, enforced by the
engine that executes it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from podium import Agent, FunctionModel, ModelRequest, ModelResponse, tool, tool_call_reply
from podium.config import load_config
from podium.engine.driver import Engine
from podium.gateway.auth import KeyRing
from podium.gateway.runtime import build_gateway
from podium.gateway.service import ServedAgent
from podium.messages import Message
from podium.security.allowlist import TOOLS_KEY
from podium.store.memory import MemoryRunStore

pytestmark = pytest.mark.anyio


@tool
def lookup(q: str) -> str:
    """Look up.

    Args:
        q: What.
    """
    return f"found {q}"


@tool(side_effects=True)
def refund(order_id: str) -> str:
    """Refund an order.

    Args:
        order_id: Which.
    """
    return f"refunded {order_id}"


def make_agent(seen: list[Message]) -> Agent:
    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("lookup", '{"q": "A-1"}'), ("refund", '{"order_id": "A-1"}'))
        seen.extend(m for m in messages if m.role == "tool")
        return "done"

    return Agent("shop", FunctionModel(reply), tools=[lookup, refund])


async def test_the_engine_enforces_the_runs_allow_list() -> None:
    seen: list[Message] = []
    async with Engine() as engine:
        record = await engine.run(
            make_agent(seen), "go", tenant="acme", metadata={TOOLS_KEY: "lookup"}
        )
    assert record.status == "completed"
    assert seen[0].content == "found A-1"
    assert "not allowed for tenant 'acme'" in seen[1].content and "lookup" in seen[1].content
    seen.clear()
    async with Engine() as engine:
        await engine.run(make_agent(seen), "go")  # no list: every tool of the agent
    assert [m.content for m in seen] == ["found A-1", "refunded A-1"]


async def test_the_gateway_puts_the_tenants_list_on_its_runs(tmp_path: Path) -> None:
    toml = tmp_path / "podium.toml"
    toml.write_text(
        '[[keys]]\ntenant = "acme"\nkey = "pk_acme"\ntools = ["lookup"]\n'
        '[[keys]]\ntenant = "open"\nkey = "pk_open"\n'
    )
    config = load_config(toml, {})
    keys = KeyRing(config.keys)
    seen: list[Message] = []
    gw = build_gateway(config, [ServedAgent(make_agent(seen))], keys, store=MemoryRunStore())
    await gw.start()
    try:
        acme = keys.authenticate({"authorization": "Bearer pk_acme"})
        opened = keys.authenticate({"authorization": "Bearer pk_open"})
        # A client cannot widen its list through the metadata it sends.
        limited, _ = await gw.submit(acme, "shop", "go", {TOOLS_KEY: "lookup,refund"})
        done = await gw.wait(limited.run_id, 30)
        assert done.metadata[TOOLS_KEY] == "lookup" and done.status == "completed"
        assert "not allowed for tenant 'acme'" in seen[1].content
        seen.clear()
        free = await gw.wait((await gw.submit(opened, "shop", "go", {}))[0].run_id, 30)
        assert TOOLS_KEY not in free.metadata
        assert [m.content for m in seen] == ["found A-1", "refunded A-1"]
    finally:
        await gw.stop()
