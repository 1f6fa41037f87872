"""Long-term memory searched by PostgreSQL's full-text search: ranking, namespaces that
never leak into one another however alike, and queries whose characters stay words."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from podium.memory import MemoryItem
from podium.memory.postgres import PostgresMemory
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


@pytest.fixture
async def memory(postgres_url: str) -> AsyncIterator[PostgresMemory]:
    async with PostgresRunStore(postgres_url, schema=f"mem_{uuid.uuid4().hex[:10]}") as store:
        yield PostgresMemory(store)


async def test_search_ranks_matches_then_recency(memory: PostgresMemory) -> None:
    now = time.time()
    facts = [
        "The customer is allergic to peanuts.",
        "The customer prefers deliveries after 6 pm.",
        "Deliveries to Lyon take two days.",
        "The customer prefers email over phone.",
    ]
    for i, text in enumerate(facts):
        await memory.put_item("u1", MemoryItem(f"k{i}", text, now + i))
    found = await memory.search("u1", "customer deliveries", limit=10)
    # k1 has both words, the others one each; nothing else matches.
    assert found[0].key == "k1"
    assert {i.key for i in found} == {"k0", "k1", "k2", "k3"}
    assert [i.key for i in await memory.search("u1", "peanuts")] == ["k0"]
    assert await memory.search("u1", "bicycles") == []
    assert [i.key for i in await memory.search("u1", "", limit=2)] == ["k3", "k2"]
    await memory.put_item("u1", MemoryItem("k0", "No allergies after all.", now + 9))
    assert await memory.search("u1", "peanuts") == []  # replaced, and its words with it
    assert await memory.delete("u1", "k1") is True
    assert "k1" not in {i.key for i in await memory.search("u1", "deliveries")}


LOOK_ALIKES = ["a", "A", "a:b", "a%", "a_", "a*", "a\x00", "a ", "é", "e\u0301", ""]


async def test_namespaces_never_leak_into_one_another(memory: PostgresMemory) -> None:
    for space in LOOK_ALIKES:
        await memory.put_item(space, MemoryItem("secret", f"the secret code of {space!r}"))
    for space in LOOK_ALIKES:
        found = await memory.search(space, "secret code", limit=50)
        assert [i.text for i in found] == [f"the secret code of {space!r}"], space
        assert len(await memory.search(space, "", limit=50)) == 1


@pytest.mark.parametrize("query", [
    "a:b & c | !(d)", "'; DROP TABLE podium_memories; --", "x:* <-> y", "\\", "''", "🙂",
    "secret\x00code",
])
async def test_a_query_is_words_never_syntax(memory: PostgresMemory, query: str) -> None:
    await memory.put_item("q", MemoryItem("k", "a secret code: drop it"))
    found = await memory.search("q", query, limit=5)
    assert [i.key for i in found] in ([], ["k"])
    assert [i.key for i in await memory.search("q", "secret")] == ["k"]  # still there
