"""Vector search of long-term memories with pgvector, against the real extension: found by
meaning within a namespace and never across, a table of another size or an embedding of
the wrong size refused in one line, and a server without the extension (or a role that
may not create it) said in one line that names what to install or run.

The tests that need pgvector skip, saying why, on a server without it (Debian bookworm
does not package it: docs/postgres.md says how to build it)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from podium.errors import ConfigError
from podium.memory import MemoryItem, postgres_vectors
from podium.memory.postgres import PostgresMemory
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import count_sql, postgres_skip_reason, run_sql, with_database

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]

NO_PGVECTOR = ("the server has no pgvector extension (apt.postgresql.org: postgresql-<major>-"
               "pgvector; Debian bookworm has none: build it, see docs/postgres.md)")

#: A toy embedding: each text's direction, by hand (the nearest is the one that shares it).
_VECTORS = {
    "The customer is allergic to peanuts.": [1.0, 0.0, 0.0],
    "The customer prefers deliveries after 6 pm.": [0.0, 1.0, 0.1],
    "Parcels to Lyon arrive on Tuesdays.": [0.0, 0.2, 1.0],
    "food that makes them ill": [0.9, 0.1, 0.0],
    "when to bring the goods": [0.1, 1.0, 0.0],
}


async def _embed(text: str) -> list[float]:
    return _VECTORS.get(text, [0.5, 0.5, 0.5])


def _needs_pgvector(url: str) -> None:
    found = count_sql(url, "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
    if not found:
        pytest.skip(NO_PGVECTOR)


@pytest.fixture
async def vectors(postgres_url: str) -> AsyncIterator[PostgresMemory]:
    """A memory searched by meaning, in a schema of its own."""
    _needs_pgvector(postgres_url)
    async with PostgresRunStore(postgres_url, schema=f"vec_{uuid.uuid4().hex[:10]}") as store:
        memory = PostgresMemory(store, embed=_embed, dimensions=3)
        try:
            yield memory
        finally:
            await memory.aclose()


async def test_vector_search_finds_by_meaning_within_the_namespace(
    vectors: PostgresMemory,
) -> None:
    memory = vectors
    assert await memory.vector_search() is True
    for i, text in enumerate(list(_VECTORS)[:3]):
        await memory.put_item("u1", MemoryItem(f"k{i}", text))
    await memory.put_item("u2", MemoryItem("other", "The customer is allergic to peanuts."))
    # No word in common with the item it finds: only its meaning.
    assert [i.key for i in await memory.search("u1", "food that makes them ill",
                                               limit=1)] == ["k0"]
    assert [i.key for i in await memory.search("u1", "when to bring the goods",
                                               limit=1)] == ["k1"]
    found = await memory.search("u2", "food that makes them ill", limit=5)
    assert [i.key for i in found] == ["other"]  # never another namespace's items
    assert await memory.delete("u1", "k0") is True
    assert "k0" not in {i.key for i in await memory.search("u1", "food that makes them ill",
                                                            limit=5)}


LOOK_ALIKES = ["a", "A", "a:b", "a%", "a_", "a*", "a\x00", "a ", "é", "e\u0301", ""]


async def test_vector_queries_never_cross_namespaces(vectors: PostgresMemory) -> None:
    """Every tenant has the same item under the same key, all at the query's own direction:
    each finds its own one, however alike the names, and an empty namespace finds none."""
    memory = vectors
    for space in LOOK_ALIKES:
        await memory.put_item(space, MemoryItem("secret", "The customer is allergic to peanuts.",
                                                metadata={"owner": space}))
    for n in range(40):  # a crowd nearer the query than any other tenant's item
        await memory.put_item("crowd", MemoryItem(f"c{n}", "food that makes them ill"))
    for space in LOOK_ALIKES:
        found = await memory.search(space, "food that makes them ill", limit=50)
        assert [(i.key, i.metadata) for i in found] == [("secret", {"owner": space})], space
    assert await memory.search("nobody", "food that makes them ill", limit=50) == []
    assert len(await memory.search("crowd", "food that makes them ill", limit=50)) == 40


async def test_a_table_of_another_size_is_refused_in_one_line(postgres_url: str) -> None:
    _needs_pgvector(postgres_url)
    schema = f"vec_{uuid.uuid4().hex[:10]}"
    async with PostgresRunStore(postgres_url, schema=schema) as store:
        three = PostgresMemory(store, embed=_embed, dimensions=3)
        await three.put_item("u1", MemoryItem("k", "Parcels to Lyon arrive on Tuesdays."))
        await three.aclose()
        four = PostgresMemory(store, embed=_embed, dimensions=4)
        with pytest.raises(ConfigError) as refused:
            await four.vector_search()
        await four.aclose()
    message = str(refused.value)
    assert "\n" not in message and "3 numbers" in message and "makes 4" in message, message


async def test_an_embedding_of_the_wrong_size_stores_nothing(vectors: PostgresMemory) -> None:
    async def two(text: str) -> list[float]:
        return [1.0, 0.0]

    memory = vectors
    assert await memory.vector_search() is True
    memory._embed = two
    with pytest.raises(ValueError, match=r"^embed gave 2 numbers, this memory's dimensions "
                       r"are 3$"):
        await memory.put_item("u1", MemoryItem("k", "Parcels to Lyon arrive on Tuesdays."))
    assert await memory.store.list_memories("u1", 10) == []  # not half stored


async def test_without_pgvector_memory_says_what_to_install_and_searches_by_words(
    postgres_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The machine's server may have pgvector: an extension name it has not stands in.
    monkeypatch.setattr(postgres_vectors, "EXTENSION", "podium_no_such_extension")
    schema = f"vec_{uuid.uuid4().hex[:10]}"
    async with PostgresRunStore(postgres_url, schema=schema) as store:
        memory = PostgresMemory(store, embed=_embed, dimensions=3)
        await memory.put_item("u1", MemoryItem("k0", "The customer is allergic to peanuts."))
        assert await memory.vector_search() is False
        assert [i.key for i in await memory.search("u1", "peanuts")] == ["k0"]
        await memory.aclose()
    lines = [r.getMessage() for r in caplog.records if "no pgvector extension" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "postgresql-<major>-pgvector" in lines[0] and "github.com/pgvector" in lines[0]


async def test_a_role_that_may_not_create_it_is_told_who_must(fresh_postgres: str) -> None:
    """pgvector is not a trusted extension: a database where nobody created it, opened by
    a role that is not a superuser, is refused in one line that names the statement."""
    _needs_pgvector(fresh_postgres)
    role = f"podium_vec_{uuid.uuid4().hex[:8]}"
    database = fresh_postgres.rsplit("/", 1)[1]
    run_sql(fresh_postgres, f"CREATE ROLE {role} LOGIN",
            f"GRANT CREATE ON DATABASE {database} TO {role}",
            f"GRANT ALL ON SCHEMA public TO {role}")
    parts = urlsplit(fresh_postgres)
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))
    try:
        async with PostgresRunStore(url, schema="mine") as store:
            memory = PostgresMemory(store, embed=_embed, dimensions=3)
            with pytest.raises(ConfigError) as refused:
                await memory.vector_search()
            await memory.aclose()
    finally:
        run_sql(fresh_postgres, f"DROP OWNED BY {role} CASCADE")
        run_sql(with_database(fresh_postgres, "postgres"), f"DROP ROLE {role}")
    message = str(refused.value)
    assert "\n" not in message and "CREATE EXTENSION vector" in message, message


async def test_a_search_for_more_than_the_index_keeps_finds_them_all(
    vectors: PostgresMemory,
) -> None:
    """HNSW returns at most ``hnsw.ef_search`` rows; a larger limit raises it for its query."""
    memory = vectors
    many = postgres_vectors.EF_SEARCH + 20
    for n in range(many):
        await memory.put_item("u1", MemoryItem(f"k{n}", "The customer is allergic to peanuts."))
    found = await memory.search("u1", "food that makes them ill", limit=many + 5)
    assert len(found) == many


async def test_an_extension_an_administrator_put_in_another_schema_serves(
    fresh_postgres: str,
) -> None:
    """pgvector is relocatable: created by hand in a schema of its own (neither public nor
    the store's), its type and operators are still found."""
    _needs_pgvector(fresh_postgres)
    run_sql(fresh_postgres, "CREATE SCHEMA ext", "CREATE EXTENSION vector SCHEMA ext")
    async with PostgresRunStore(fresh_postgres, schema="mine") as store:
        memory = PostgresMemory(store, embed=_embed, dimensions=3)
        try:
            assert await memory.vector_search() is True
            for i, text in enumerate(list(_VECTORS)[:3]):
                await memory.put_item("u1", MemoryItem(f"k{i}", text))
            for _ in range(7):  # past the five custom plans: the generic one too
                found = await memory.search("u1", "food that makes them ill", limit=1)
                assert [i.key for i in found] == ["k0"]
        finally:
            await memory.aclose()
