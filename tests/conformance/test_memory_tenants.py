"""Tenants never read each other's long-term memory through ``per_run`` namespaces.

Hypothesis draws tenants with look-alike names (``a``, ``a:b``, ``default``, ``*``)
the namespace template, runs on a thread or on none, called directly or as a child
run (an agent tool), and whether the memory lives in the engine's store or in a
store of its own; each
tenant's run remembers a secret, then each tenant's run recalls. A run recalls its
own tenant's secret and no other's, on every store.

Found with it: ``per_run`` fell back to the ``default`` tenant's namespace when the
calling run was not in the store it was given (memory kept in a store of its own,
``per_run(memory.store)``), so every tenant wrote to and read from one namespace:
tenant B recalled tenant A's secret. It now refuses (the tool call fails, the model
reads why) rather than guess a namespace.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podium import Agent, Engine, FunctionModel, ModelRequest, tool_call_reply
from podium.memory import StoreMemory, memory_tools, per_run
from podium.messages import Message
from podium.store.memory import MemoryRunStore

from .conftest import StoreBackend

pytestmark = pytest.mark.anyio

TENANTS = st.lists(
    st.sampled_from(["a", "a:b", "b", "default", "*", "a*", "t-1", "T-1", "é"]),
    min_size=2, max_size=4, unique=True,
)


def reply(messages: Sequence[Message], request: ModelRequest) -> object:
    last = messages[-1]
    if last.role == "tool":
        return f"tool said: {last.content}"
    if last.content.startswith("remember "):
        return tool_call_reply(("remember", json.dumps({"text": last.content[9:]})))
    return tool_call_reply(("recall", json.dumps({"query": "secret"})))


def delegate(messages: Sequence[Message], request: ModelRequest) -> object:
    """A parent that hands its input to the memory agent (a child run, on no thread)."""
    last = messages[-1]
    if last.role == "tool":
        return f"child said: {last.content}"
    return tool_call_reply(("keeper", json.dumps({"input": last.content})))


@settings(
    max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tenants=TENANTS,
    own_store=st.booleans(),
    template=st.sampled_from(["{tenant}", "{thread}", "{tenant}:{thread}"]),
    threaded=st.booleans(),
    child=st.booleans(),
)
@example(tenants=["a", "b"], own_store=True, template="{tenant}", threaded=False, child=False)
@example(tenants=["a", "b"], own_store=False, template="{thread}", threaded=False, child=False)
@example(tenants=["a", "b"], own_store=False, template="{thread}", threaded=True, child=True)
async def test_a_tenant_recalls_only_its_own_memories(
    backend: StoreBackend,
    tenants: list[str],
    own_store: bool,
    template: str,
    threaded: bool,
    child: bool,
) -> None:
    store = backend.store()
    memory_store = MemoryRunStore() if own_store else store
    memory = StoreMemory(memory_store)
    keeper = Agent(
        "keeper",
        FunctionModel(reply),  # type: ignore[arg-type]
        "Remember.",
        memory_tools(memory, per_run(memory_store, template)),
    )
    agent = keeper
    if child:
        agent = Agent(
            "lead", FunctionModel(delegate), "Delegate.",  # type: ignore[arg-type]
            [keeper.as_tool("keeper")],
        )
    run = uuid.uuid4().hex[:8]
    secrets = {t: f"secret of {t!r} {run}" for t in tenants}
    threads = {t: f"th-{i}-{run}" if threaded else None for i, t in enumerate(tenants)}
    found_own = not own_store and (threaded or "{thread" not in template)
    try:
        async with Engine(store) as engine:
            for tenant in tenants:
                await engine.run(
                    agent, f"remember {secrets[tenant]}", tenant=tenant, thread_id=threads[tenant]
                )
            for tenant in tenants:
                record = await engine.run(
                    agent, "what is the secret?", tenant=tenant, thread_id=threads[tenant]
                )
                output = record.output or ""
                others = [s for t, s in secrets.items() if t != tenant and s in output]
                assert others == [], f"tenant {tenant!r} recalled {others}"
                assert (secrets[tenant] in output) == found_own, output
    finally:
        for item in await memory_store.list_memories("", 1000):  # the shared one, if any
            if run in item.text:
                await memory_store.delete_memory("", item.key)
        for tenant in tenants:
            for space in {tenant, threads[tenant] or "", f"{tenant}:{threads[tenant] or ''}"}:
                for item in await memory_store.list_memories(space):
                    await memory_store.delete_memory(space, item.key)
        if own_store:
            await memory_store.aclose()
