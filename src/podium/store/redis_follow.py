"""One blocking read per process for every follower of every run's journal on Redis.

A follower (an SSE client, a ``wait``) that blocked in an ``XREAD`` of its own held a
connection of the process's pool for its whole block: a thousand followers wanted a
thousand connections (the pool has a hundred: the rest spun on "too many
connections"), and a client that went away left its read blocked in Redis until the
block ended. Here followers only register what they wait for; one reader per process
sends one ``XREAD BLOCK`` over every stream followed (each from the lowest id a
follower of it holds) and wakes the followers whose stream moved, which then read the
new entries through the store's pipeline. A follower that leaves just unregisters:
it held no connection, and the reader stops within one block (at most ``block_s``)
once nobody follows anything.

A follower that arrives while the read is blocked is not in it, and a read that nobody
waits for any more should not hold its connection: the reader is woken at once with
``CLIENT UNBLOCK`` (where the server allows it; otherwise the follower
waits out the block, ``block_s`` at most), after ``batch_s`` so that a crowd arriving
together costs one new read, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from podium.lifecycle import stop_task

__all__ = ("JournalWaiter",)

log = logging.getLogger("podium.redis")

StreamId = tuple[int, int]


def _parse_id(raw: bytes | str) -> StreamId:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class _Follower:
    __slots__ = ("fut", "since")

    def __init__(self, since: StreamId, fut: asyncio.Future[None]) -> None:
        self.since = since
        self.fut = fut


class JournalWaiter:
    """Wakes followers of Redis streams when their stream has an entry past theirs.

    ``wait(key, since, timeout)`` returns True once ``key`` holds an entry after
    ``since`` (the follower then reads it), False after ``timeout``; an error of the
    shared read (Redis away) is raised to every follower waiting on it.
    """

    def __init__(
        self, client: aioredis.Redis, *, block_s: float = 1.0, batch_s: float = 0.01
    ) -> None:
        self.client = client
        self.block_ms = max(1, int(block_s * 1000))
        self.batch_s = batch_s
        self._followers: dict[str, list[_Follower]] = {}
        self._reading: dict[str, StreamId] = {}  # what the read in flight waits on
        self._task: asyncio.Task[None] | None = None
        self._reader: Any = None  # the reader's own connection (a single-connection client)
        self._reader_id: int | None = None
        self._can_unblock = True
        self._kick: asyncio.Task[None] | None = None

    async def wait(self, key: str, since: bytes, timeout: float) -> bool:
        """Whether ``key`` got an entry after ``since`` within ``timeout`` seconds."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        follower = _Follower(_parse_id(since), fut)
        self._followers.setdefault(key, []).append(follower)
        self._ensure_reader(key, follower.since)
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            followers = self._followers.get(key)
            if followers is not None:
                with contextlib.suppress(ValueError):
                    followers.remove(follower)
                if not followers:
                    del self._followers[key]
                    if not self._followers:  # the last one left: end the read now
                        self._unblock_soon()

    def _ensure_reader(self, key: str, since: StreamId) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._read_loop(), name="podium-journal-reader"
            )
            return
        if not self._covers(key, since):  # the read in flight does not: wake it
            self._unblock_soon()

    def _covers(self, key: str, since: StreamId) -> bool:
        reading = self._reading.get(key)
        return reading is not None and reading <= since

    def _unblock_soon(self) -> None:
        if not self._can_unblock or self._reader_id is None:
            return
        if self._kick is None or self._kick.done():
            self._kick = asyncio.get_running_loop().create_task(self._unblock())

    async def _unblock(self) -> None:
        # Until the read in flight has every follower (or there is none): one arriving
        # while an unblock was on its way is taken in by the next turn.
        while True:
            await asyncio.sleep(self.batch_s)  # the others arriving now come in the same read
            reader_id = self._reader_id
            if reader_id is None or not self._reading:
                return
            if self._followers and all(  # the read in flight has them all: let it be
                self._covers(key, f.since) for key, fs in self._followers.items() for f in fs
                if not f.fut.done()
            ):
                return
            try:
                await self.client.client_unblock(reader_id)
            except ResponseError as exc:  # CLIENT refused (managed Redis, ACLs): wait
                self._can_unblock = False
                log.info("cannot unblock the journal reader (%s): new followers wait up to "
                         "%gs", exc, self.block_ms / 1000)
                return
            except (RedisError, OSError):
                return  # Redis away: the read fails too, and its followers hear of it

    async def _read_loop(self) -> None:
        failures = 0
        try:
            while self._followers:
                try:
                    await self._read_once()
                    failures = 0
                except (RedisError, OSError) as exc:
                    failures += 1
                    self._fail_all(exc)
                    await self._drop_reader()
                    await asyncio.sleep(min(1.0, 0.05 * 2 ** min(failures, 5)))
        finally:
            self._reading = {}
            await self._drop_reader()

    async def _connect(self) -> Any:
        if self._reader is None:
            reader = self.client.client()  # one connection of the pool, kept while reading
            try:
                self._reader_id = int(await reader.client_id())
            except ResponseError:
                self._can_unblock = False
            except BaseException:
                await reader.aclose()
                raise
            self._reader = reader
        return self._reader

    async def _drop_reader(self) -> None:
        reader, self._reader, self._reader_id = self._reader, None, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.aclose()

    async def _read_once(self) -> None:
        reader = await self._connect()
        streams = {}
        for key, followers in self._followers.items():
            waiting = [f.since for f in followers if not f.fut.done()]  # (woken: leaving)
            if waiting:
                streams[key] = min(waiting)
        if not streams:  # all woken, not yet gone
            await asyncio.sleep(self.batch_s)
            return
        self._reading = streams
        try:
            reply = await reader.xread(
                {key: f"{ms}-{seq}" for key, (ms, seq) in streams.items()},
                count=1, block=self.block_ms,
            )
        finally:
            self._reading = {}
        moved = 0
        for key, rows in reply or ():
            name = key.decode() if isinstance(key, bytes) else key
            if not rows:
                continue
            newest = _parse_id(rows[-1][0])
            for follower in self._followers.get(name, ()):
                if follower.since < newest and not follower.fut.done():
                    follower.fut.set_result(None)
                    moved += 1
        if moved:
            await asyncio.sleep(self.batch_s)  # let the woken read; their next waits batch

    def _fail_all(self, exc: BaseException) -> None:
        for followers in self._followers.values():
            for follower in followers:
                if not follower.fut.done():
                    follower.fut.set_exception(exc)

    async def aclose(self) -> None:
        for task in (self._kick, self._task):
            if task is not None:
                await stop_task(task)
        await self._drop_reader()
