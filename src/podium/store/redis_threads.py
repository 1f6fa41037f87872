"""Threads and long-term memory in Redis: the part of the Redis run store
(:class:`~podium.store.redis.RedisRunStore`) that keeps conversations and memories rather
than runs. A mixin: the store's constructor sets what it reads."""

from __future__ import annotations

import builtins

import msgspec

from podium.memory.item import MemoryItem
from podium.store.redis_batch import Autopipeline
from podium.store.redis_connect import translate_errors
from podium.store.redis_expiry import ExpiryReaper, expiry_member
from podium.threads.record import ThreadRecord

__all__ = ("RedisThreadStore",)


class RedisThreadStore:
    """Threads (a hash each, indexed by tenant) and memories (a hash per namespace)."""

    prefix: str
    _idx: str
    _exp: str
    _pipe: Autopipeline
    _thread_write: str
    _enc: msgspec.msgpack.Encoder
    _thread_dec: msgspec.msgpack.Decoder[ThreadRecord]
    _memory_dec: msgspec.msgpack.Decoder[MemoryItem]
    _reaper: ExpiryReaper

    def _thread_key(self, thread_id: str) -> str:
        return f"{self.prefix}:{{thr:{thread_id}}}:thread"

    async def _write_thread(self, mode: str, thread: ThreadRecord, expected: int) -> None:
        expires = 0 if thread.expires_at is None else max(1, int(thread.expires_at * 1000))
        async with translate_errors():
            await self._pipe.execute(
                "EVALSHA", self._thread_write, 1, self._thread_key(thread.thread_id),
                mode, expected, self._enc.encode(thread), expires, self._idx, thread.tenant,
                thread.thread_id, repr(thread.updated_at),
            )
        if expires:
            self._reaper.ensure_started()

    async def create_thread(self, thread: ThreadRecord) -> None:
        thread.updated_at = thread.updated_at or thread.created_at
        await self._write_thread("create", thread, thread.version)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        async with translate_errors():
            raw = await self._pipe.execute("HGET", self._thread_key(thread_id), "r")
        return None if raw is None else self._thread_dec.decode(raw)

    async def update_thread(self, thread: ThreadRecord) -> None:
        expected = thread.version
        thread.version += 1
        try:
            await self._write_thread("update", thread, expected)
        except BaseException:
            thread.version = expected
            raise

    async def list_threads(
        self, *, tenant: str | None = None, limit: int = 100
    ) -> builtins.list[ThreadRecord]:
        key = f"{self._idx}thall" if tenant is None else f"{self._idx}th:{tenant}"
        found: list[ThreadRecord] = []
        start, page = 0, max(limit, 50)
        async with translate_errors():
            while len(found) < limit:
                ids: list[bytes] = await self._pipe.execute(
                    "ZREVRANGE", key, start, start + page - 1
                )
                if not ids:
                    break
                start += page
                raws = await self._pipe.execute_all(
                    *[("HGET", self._thread_key(thread_id.decode()), "r") for thread_id in ids]
                )
                gone = [i for i, raw in zip(ids, raws, strict=True) if raw is None]
                if gone:  # expired or deleted threads: tidy the index lazily
                    await self._pipe.execute("ZREM", key, *gone)
                    start -= len(gone)
                found.extend(self._thread_dec.decode(raw) for raw in raws if raw is not None)
        return found[:limit]

    async def delete_thread(self, thread_id: str) -> bool:
        thread = await self.get_thread(thread_id)
        if thread is None:
            return False
        async with translate_errors():
            deleted = await self._pipe.execute("DEL", self._thread_key(thread_id))
            await self._pipe.execute_all(
                ("ZREM", f"{self._idx}th:{thread.tenant}", thread_id),
                ("ZREM", f"{self._idx}thall", thread_id),
                ("ZREM", self._exp, expiry_member("t", "", thread_id, thread.tenant)),
            )
        return bool(deleted)

    # -- long-term memory: one hash per namespace (key -> item) ----------------------------

    def _memory_key(self, namespace: str) -> str:
        return f"{self.prefix}:mem:{namespace}"

    async def put_memory(self, namespace: str, item: MemoryItem) -> None:
        async with translate_errors():
            await self._pipe.execute(
                "HSET", self._memory_key(namespace), item.key, self._enc.encode(item)
            )

    async def list_memories(self, namespace: str, limit: int = 1000) -> builtins.list[MemoryItem]:
        async with translate_errors():
            raws = await self._pipe.execute("HVALS", self._memory_key(namespace))
        items = [self._memory_dec.decode(raw) for raw in raws]
        items.sort(key=lambda i: i.created_at, reverse=True)
        return items[: max(limit, 0)]

    async def delete_memory(self, namespace: str, key: str) -> bool:
        async with translate_errors():
            return bool(await self._pipe.execute("HDEL", self._memory_key(namespace), key))
