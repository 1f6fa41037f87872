"""Long-term memory on every store (memory, SQLite, Redis): items by namespace and key,
keyword search with recency, and the remember/recall tools used by an agent across threads."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence

import pytest

from podium import Agent, Engine, FunctionModel, ModelRequest, tool_call_reply
from podium.memory import MemoryItem, StoreMemory, memory_tools, per_run
from podium.messages import Message

from .conftest import StoreBackend

pytestmark = pytest.mark.anyio


def ns() -> str:
    return f"ns-{uuid.uuid4().hex[:10]}"


async def test_put_list_replace_delete(backend: StoreBackend) -> None:
    store = backend.store()
    space, other = ns(), ns()
    now = time.time()
    await store.put_memory(space, MemoryItem("a", "first", now - 2))
    await store.put_memory(space, MemoryItem("b", "second", now - 1, {"src": "chat"}))
    await store.put_memory(other, MemoryItem("a", "elsewhere", now))
    assert [(i.key, i.text) for i in await store.list_memories(space)] == [
        ("b", "second"), ("a", "first")
    ]
    assert (await store.list_memories(space))[0].metadata == {"src": "chat"}
    await store.put_memory(space, MemoryItem("a", "first, corrected", now))  # same key: replaced
    assert [(i.key, i.text) for i in await store.list_memories(space)] == [
        ("a", "first, corrected"), ("b", "second")
    ]
    assert [i.key for i in await store.list_memories(space, limit=1)] == ["a"]
    assert await store.delete_memory(space, "a") is True
    assert await store.delete_memory(space, "a") is False
    assert [i.key for i in await store.list_memories(space)] == ["b"]
    assert [i.text for i in await store.list_memories(other)] == ["elsewhere"]
    assert await store.list_memories(ns()) == []


async def test_keyword_search_ranks_rare_words_then_recency(backend: StoreBackend) -> None:
    memory = StoreMemory(backend.store())
    space = ns()
    now = time.time()
    facts = [
        "The customer is allergic to peanuts.",
        "The customer prefers deliveries after 6 pm.",
        "The customer lives in Lyon.",
        "The customer prefers email over phone.",
    ]
    for i, text in enumerate(facts):
        await memory.put_item(space, MemoryItem(f"k{i}", text, now + i))
    found = await memory.search(space, "Is the customer ALLERGIC to anything?")
    assert found[0].text == facts[0]
    prefers = await memory.search(space, "what does the customer prefer? prefers", limit=2)
    assert [i.text for i in prefers] == [facts[3], facts[1]]  # equal match: newer first
    assert await memory.search(space, "zebra") == []
    assert [i.text for i in await memory.search(space, "", limit=1)] == [facts[3]]
    item = await memory.put(space, "Likes jazz.")
    assert item.key.startswith("mem_")
    assert await memory.delete(space, item.key) is True


async def test_an_agent_remembers_across_threads(backend: StoreBackend) -> None:
    """One thread stores a fact with ``remember``; a run on another thread of the same
    tenant finds it with ``recall`` (the namespace is the tenant)."""
    store = backend.store()
    memory = StoreMemory(store)
    tenant = ns()

    def reply(messages: Sequence[Message], request: ModelRequest) -> object:
        last = messages[-1]
        if last.role == "tool":
            return f"noted: {last.content}"
        if last.content.startswith("remember "):
            text = json.dumps({"text": last.content.removeprefix("remember ")})
            return tool_call_reply(("remember", text))
        return tool_call_reply(("recall", json.dumps({"query": last.content})))

    agent = Agent(
        "assistant",
        FunctionModel(reply),  # type: ignore[arg-type]
        "Use your memory.",
        memory_tools(memory, per_run(store)),
    )
    async with Engine(store) as engine:
        await engine.run(agent, "remember The user's dog is called Rex.", tenant=tenant,
                         thread_id=f"{tenant}-a")
        later = await engine.run(agent, "what is the dog called?", tenant=tenant,
                                 thread_id=f"{tenant}-b")
        stranger = await engine.run(agent, "what is the dog called?", tenant=ns())
    assert later.output == "noted: - The user's dog is called Rex."
    assert stranger.output == "noted: nothing remembered about that"
    (item,) = await store.list_memories(tenant)
    assert item.key.endswith(":0:0")  # the call's idempotency key: a repeat replaces it
