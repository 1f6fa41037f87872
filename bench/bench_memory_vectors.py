"""Long-term memory on PostgreSQL: words (tsvector) and meaning (pgvector), in one run.

Puts ``--items`` memories with ``--dims``-number embeddings into ``--namespaces``
tenants, then times searches: by words (PostgreSQL full-text search) and by meaning
(pgvector's HNSW index, cosine), in a tenant of the crowd and in a small tenant beside
one huge one (the case where an index that ignores the tenant would find too few). Every
vector search is checked against the exact answer (the tenant's items ranked in Python):
recall@10. The embeddings are random unit vectors (a model's cost is not measured).

    python bench/bench_memory_vectors.py [--items 5000] [--dims 384] [--namespaces 50]

Needs the pgvector extension on the server (docs/postgres.md says how to get it). The
database is created for the run and dropped after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from podium.memory import MemoryItem
from podium.memory.postgres import PostgresMemory
from podium.store.postgres import PostgresRunStore

WORDS = ("parcel", "delivery", "invoice", "refund", "allergy", "evening", "morning",
         "address", "lyon", "paris", "phone", "email", "weekend", "courier", "damaged",
         "late", "early", "gift")


def _unit(rng: random.Random, dims: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dims)]
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def _timed(n: int, one: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(n):
        began = time.perf_counter()
        await one(i)
        out.append((time.perf_counter() - began) * 1000)
    return out


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2)}


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    vectors: dict[str, list[float]] = {}

    def embed(text: str) -> list[float]:
        return vectors.setdefault(text, _unit(rng, args.dims))

    out: dict[str, Any] = {"items": args.items, "dims": args.dims,
                           "namespaces": args.namespaces}
    async with PostgresRunStore(url) as store:
        memory = PostgresMemory(store, embed=embed, dimensions=args.dims)
        assert await memory.vector_search(), "the server has no pgvector"
        kept: dict[str, list[tuple[str, str]]] = {}
        began = time.perf_counter()
        sem = asyncio.Semaphore(8)

        async def put(i: int, space: str) -> None:
            text = " ".join(rng.sample(WORDS, 4)) + f" #{i}"
            kept.setdefault(space, []).append((f"k{i}", text))
            async with sem:
                await memory.put_item(space, MemoryItem(f"k{i}", text))

        crowd = args.items - args.items // 2
        await asyncio.gather(*(put(i, f"t{i % args.namespaces}") for i in range(crowd)))
        await asyncio.gather(*(put(i, "huge") for i in range(crowd, args.items - 20)))
        await asyncio.gather(*(put(i, "small") for i in range(args.items - 20, args.items)))
        out["puts_per_s"] = round(args.items / (time.perf_counter() - began))
        await store._call(lambda conn: conn.execute("ANALYZE"))

        async def recall(space: str, query: str) -> float:
            found = [i.key for i in await memory.search(space, query, limit=10)]
            q = embed(query)
            exact = sorted(kept[space], key=lambda kt: -_cosine(vectors[kt[1]], q))[:10]
            return len(set(found) & {k for k, _ in exact}) / max(1, min(10, len(kept[space])))

        for label, space in (("crowd_tenant", "t0"), ("huge_tenant", "huge"),
                             ("small_tenant", "small")):
            queries = [f"query {label} {n}" for n in range(args.searches)]
            out[f"vector_{label}"] = _ms(await _timed(
                args.searches, lambda n, s=space, q=queries: memory.search(s, q[n], limit=10)))
            out[f"vector_{label}"]["recall_at_10"] = round(statistics.mean(
                [await recall(space, q) for q in queries]), 3)
        words = PostgresMemory(store)
        out["words_crowd_tenant"] = _ms(await _timed(
            args.searches, lambda n: words.search("t0", f"{WORDS[n % len(WORDS)]} parcel")))
        out["words_huge_tenant"] = _ms(await _timed(
            args.searches, lambda n: words.search("huge", f"{WORDS[n % len(WORDS)]} parcel")))
        await memory.aclose()
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    name = f"podium_bench_vec_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(args.postgres)
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        url = args.postgres.rsplit("/", 1)[0] + f"/{name}"
        return await measure(url, args)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--items", type=int, default=5000)
    p.add_argument("--dims", type=int, default=384)
    p.add_argument("--namespaces", type=int, default=50)
    p.add_argument("--searches", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:24} {value}")


if __name__ == "__main__":
    main()
