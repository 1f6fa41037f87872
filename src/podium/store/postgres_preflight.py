"""One look at a PostgreSQL store before a command starts serving from it.

A wrong URL, password, user or database, a server that does not answer, or a schema of
another version is one line now (:class:`~podium.errors.ConfigError`,
:class:`~podium.errors.StoreError`), not an error per request or a worker retrying
forever. Connects once, checks (or, on a database without Podium's tables and with
``create``, creates) the schema, and disconnects.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

__all__ = ("check_postgres_store",)


def check_postgres_store(url: str, *, create: bool = True, unavailable_s: float = 5.0) -> None:
    """Raise the one-line error that opening the store at ``url`` would meet, if any."""
    from podium.store.postgres import PostgresRunStore

    async def look() -> None:
        store = PostgresRunStore(url, create_schema=create, unavailable_s=unavailable_s)
        try:
            await store.list(limit=1)
        finally:
            await store.aclose()

    # A loop of its own, in a thread: the caller may be inside one (a test, a notebook).
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, look()).result()
