"""The PostgreSQL store's threads (conversations): one row per thread, fenced by version."""

from __future__ import annotations

import asyncio
import builtins
import time
from typing import TYPE_CHECKING, Any

from podium.errors import StaleRunError, StoreError, ThreadNotFoundError
from podium.store.postgres_pool import LIVE as _LIVE
from podium.store.postgres_pool import NOT_LANDED as _NOT_LANDED
from podium.store.postgres_pool import PostgresPool
from podium.threads.record import ThreadRecord

if TYPE_CHECKING:
    import asyncpg

__all__ = ("PostgresThreads",)


class PostgresThreads(PostgresPool):
    """Threads in ``podium_threads`` (a part of
    :class:`~podium.store.postgres.PostgresRunStore`)."""

    async def create_thread(self, thread: ThreadRecord) -> None:
        import asyncpg

        thread.updated_at = thread.updated_at or thread.created_at
        blob = self._encoder.encode(thread)
        args = (thread.thread_id, thread.tenant, thread.updated_at, thread.version, blob,
                thread.expires_at)

        async def op(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                # An expired thread's id is free again: it goes first.
                await conn.execute(
                    "DELETE FROM podium_threads WHERE thread_id = $1 AND expires_at <= $2",
                    thread.thread_id, time.time(),
                )
                try:
                    await conn.execute(
                        "INSERT INTO podium_threads VALUES ($1, $2, $3, $4, $5, $6)", *args
                    )
                except asyncpg.UniqueViolationError:
                    raise StoreError(f"thread {thread.thread_id} exists") from None

        await self._call(op)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        async def op(conn: asyncpg.Connection) -> bytes | None:
            blob: bytes | None = await conn.fetchval(
                f"SELECT record FROM podium_threads WHERE thread_id = $1 AND {_LIVE % 2}",
                thread_id, time.time(),
            )
            return blob

        blob = await self._call(op)
        return None if blob is None else self._thread_decoder.decode(blob)

    async def update_thread(self, thread: ThreadRecord) -> None:
        expected = thread.version
        thread.version += 1
        blob = self._encoder.encode(thread)
        thread_id, updated, expires = thread.thread_id, thread.updated_at, thread.expires_at

        async def op(conn: asyncpg.Connection) -> None:
            now = time.time()
            done = await conn.execute(
                "UPDATE podium_threads SET updated_at = $1, version = $2 + 1, record = $3,"
                f" expires_at = $4 WHERE thread_id = $5 AND version = $2 AND {_LIVE % 6}",
                updated, expected, blob, expires, thread_id, now,
            )
            if done != "UPDATE 0":
                return
            version = await conn.fetchval(
                f"SELECT version FROM podium_threads WHERE thread_id = $1 AND {_LIVE % 2}",
                thread_id, now,
            )
            if version is None:
                raise ThreadNotFoundError(thread_id)
            raise StaleRunError(
                f"thread {thread_id} is at version {version}, this writer holds {expected}"
            )

        async def landed(conn: asyncpg.Connection) -> Any:
            stored = await conn.fetchval(
                "SELECT record FROM podium_threads WHERE thread_id = $1", thread_id)
            return None if stored == blob else _NOT_LANDED

        try:
            await self._call(op, landed)
        except asyncio.CancelledError:
            raise
        except BaseException:
            thread.version = expected
            raise

    async def list_threads(
        self, *, tenant: str | None = None, limit: int = 100
    ) -> builtins.list[ThreadRecord]:
        if tenant is None:
            sql = f"SELECT record FROM podium_threads WHERE {_LIVE % 1}"
            params: list[Any] = [time.time()]
        else:
            sql = f"SELECT record FROM podium_threads WHERE tenant = $2 AND {_LIVE % 1}"
            params = [time.time(), tenant]
        sql += f" ORDER BY updated_at DESC LIMIT ${len(params) + 1}"
        params.append(max(limit, 0))

        async def op(conn: asyncpg.Connection) -> list[Any]:
            rows: list[Any] = await conn.fetch(sql, *params)
            return rows

        decode = self._thread_decoder.decode
        return [decode(row[0]) for row in await self._call(op)]

    async def delete_thread(self, thread_id: str) -> bool:
        async def op(conn: asyncpg.Connection) -> bool:
            done = await conn.execute(
                f"DELETE FROM podium_threads WHERE thread_id = $1 AND {_LIVE % 2}",
                thread_id, time.time(),
            )
            return bool(done != "DELETE 0")

        return await self._call(op)
