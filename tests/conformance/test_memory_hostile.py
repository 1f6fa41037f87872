"""Long-term memory under hostile input and concurrency, on every store.

Hypothesis draws namespaces, keys and texts a careless or hostile caller might pass
(empty, ``:`` and ``*`` and other glob or hash-tag characters, NUL, astral and
combining characters, lone surrogates, megabytes of text) and writes them at once
through two handles (two holders, like two worker processes on SQLite and Redis).
Every operation either keeps exactly what it was given or is refused with a
``ValueError`` (a string that cannot be UTF-8), never hangs, and never disturbs the
operations batched with it; a namespace lists its own items and nobody else's, however
alike the names.

Found with it: on Redis a lone surrogate in a namespace raised out of the
autopipeline's flush after the batch was listed as sent, so every command of that
batch hung (and later replies were paired with the wrong commands).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podium.memory import MemoryItem, StoreMemory

from .conftest import StoreBackend

pytestmark = pytest.mark.anyio

ODD = st.sampled_from(
    ["", ":", "*", "a*", "a:", ":a", "?", "[a]", "{x}", "}", "\x00", "\ud800", "\udfff",
     "e\u0301", "🙂", "\u202e", " ", "mem:", "\n"]
)
#: Short strings of odd pieces and any other characters, surrogates included.
HOSTILE = st.lists(
    st.one_of(ODD, st.text(st.characters(exclude_categories=()), max_size=3)), max_size=4
).map("".join)
TEXT = st.one_of(HOSTILE, st.sampled_from([1, 64_000, 2_000_000]).map(lambda n: "x" * n))


def utf8(*values: str) -> bool:
    try:
        for value in values:
            value.encode()
    except UnicodeEncodeError:
        return False
    return True


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=st.lists(st.tuples(HOSTILE, HOSTILE, TEXT), min_size=1, max_size=8))
@example(ops=[("ok", "k", "kept"), ("sur\ud800", "k", "refused"), ("ok*", "k", "kept too")])
async def test_hostile_items_are_kept_exactly_or_refused_and_never_leak(
    backend: StoreBackend, ops: list[tuple[str, str, str]]
) -> None:
    one, two = backend.store(), backend.store()
    run = uuid.uuid4().hex[:8]  # this example's namespaces: a prefix no other example has
    now = time.time()
    items = [
        (f"{run}/{space}", MemoryItem(f"{i}/{key}", text, now + i))
        for i, (space, key, text) in enumerate(ops)
    ]
    results = await asyncio.wait_for(
        asyncio.gather(
            *((one if i % 2 else two).put_memory(space, item)
              for i, (space, item) in enumerate(items)),
            return_exceptions=True,
        ),
        timeout=5,
    )
    kept: dict[str, list[MemoryItem]] = {}
    for (space, item), result in zip(items, results, strict=True):
        if isinstance(result, BaseException):
            # Only what cannot be UTF-8 may be refused, and only as a ValueError.
            assert isinstance(result, ValueError), repr(result)
            assert not utf8(space, item.key, item.text), repr(result)
            continue
        kept.setdefault(space, []).append(item)
    for space, mine in kept.items():
        listed = await asyncio.wait_for(two.list_memories(space), timeout=5)
        assert [(i.key, i.text) for i in listed] == [(i.key, i.text) for i in mine[::-1]]
    memory = StoreMemory(one)
    for space, mine in kept.items():
        found = await memory.search(space, "", limit=100)
        assert {i.key for i in found} == {i.key for i in mine}  # nothing of a look-alike
        for item in mine:
            assert await one.delete_memory(space, item.key) is True
        assert await two.list_memories(space) == []
