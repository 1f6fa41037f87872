"""A run store on Redis: records and journals shared by every worker and gateway.

Layout (``podium`` is the configurable prefix; ``{id}`` is a hash tag so a
run's two keys live in one slot)::

    podium:{run_id}:run       hash: r = record (MessagePack), v = version,
                              n = journal length, w = id of the last write
    podium:{run_id}:journal   stream: entry seq k has id 0-(k+1), field e = entry
    podium:idx:all            sorted sets of run ids scored by created_at, for
    podium:idx:t:<tenant>     listing by tenant and status
    podium:idx:s:<status>
    podium:idx:ts:<tenant>:<status>

Every write (create, update, a checkpoint) is one Lua script: one round trip,
atomic, and fenced by the run's version — a writer whose version is stale gets
:class:`~podium.errors.StaleRunError`, so two workers can never both advance a
run. Journal-only appends are fenced by the version this store last wrote or
read for the run. Each write carries a unique id, so a write retried after a
lost reply is recognised as already applied instead of applied twice.
Finished runs expire after ``finished_ttl_s``.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from itertools import count
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from podium.engine.records import TERMINAL_STATUSES, JournalEntry, RunRecord
from podium.errors import RunNotFoundError, StaleRunError, StoreError, StoreUnavailableError
from podium.store.base import JournalItem, RunStore, StoreStatistics

__all__ = ("RedisRunStore", "connect")

#: Errors that mean "Redis is away"; redis-py retries these with backoff first.
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)


def connect(
    url: str = "redis://127.0.0.1:6379/0",
    *,
    retries: int = 8,
    socket_timeout: float = 10.0,
    max_connections: int | None = None,
) -> aioredis.Redis:
    """A redis-py asyncio client tuned for Podium: hiredis, jittered exponential retries.

    With the defaults a command survives about ten seconds of Redis being away
    (a restart) before the error reaches the caller.
    """
    return aioredis.Redis.from_url(
        url,
        retry=Retry(ExponentialWithJitterBackoff(cap=2.0, base=0.05), retries),
        retry_on_error=[RedisConnectionError, RedisTimeoutError, ConnectionResetError],
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        health_check_interval=30,
        max_connections=max_connections,
    )


@asynccontextmanager
async def translate_errors() -> AsyncIterator[None]:
    """Redis's errors become Podium's at this boundary."""
    try:
        yield
    except UNAVAILABLE as exc:
        raise StoreUnavailableError(f"redis unavailable: {exc}") from exc
    except ResponseError as exc:
        message = str(exc)
        if message.startswith("PODIUM_STALE"):
            raise StaleRunError(message.removeprefix("PODIUM_STALE ")) from None
        if message.startswith("PODIUM_NOTFOUND"):
            raise RunNotFoundError(message.removeprefix("PODIUM_NOTFOUND ")) from None
        if message.startswith("PODIUM_EXISTS"):
            raise StoreError(f"run {message.removeprefix('PODIUM_EXISTS ')} exists") from None
        raise StoreError(message) from exc


# KEYS: run hash, journal stream.
# ARGV: mode, expected version (-1: unchecked), write id, record ('' = none), status, tenant,
#       created_at, ttl_ms (applied when terminal = '1'), index prefix, terminal, run id,
#       entries...
_WRITE = """
local run, journal = KEYS[1], KEYS[2]
local mode, expected, wid, rec = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local status, tenant, created = ARGV[5], ARGV[6], ARGV[7]
local ttl, idx, terminal, id = tonumber(ARGV[8]), ARGV[9], ARGV[10], ARGV[11]
local cur = redis.call('HMGET', run, 'v', 'n', 'w', 's')
local v, n, old
if mode == 'create' then
  if cur[1] then return redis.error_reply('PODIUM_EXISTS ' .. id) end
  v, n, old = expected, 0, false
else
  if not cur[1] then return redis.error_reply('PODIUM_NOTFOUND ' .. id) end
  v, n, old = tonumber(cur[1]), tonumber(cur[2]), cur[4]
  if cur[3] == wid then return {v, n} end
  if expected >= 0 and v ~= expected then
    return redis.error_reply('PODIUM_STALE ' .. id .. ' is at version ' .. v ..
      ', this writer holds ' .. expected)
  end
end
for i = 12, #ARGV do
  n = n + 1
  redis.call('XADD', journal, '0-' .. n, 'e', ARGV[i])
end
if rec ~= '' then
  if mode ~= 'create' then v = v + 1 end
  redis.call('HSET', run, 'r', rec, 'v', v, 'n', n, 'w', wid, 's', status)
  if old ~= status then
    local score = tonumber(created)
    if old then
      redis.call('ZREM', idx .. 's:' .. old, id)
      redis.call('ZREM', idx .. 'ts:' .. tenant .. ':' .. old, id)
    else
      redis.call('ZADD', idx .. 'all', score, id)
      redis.call('ZADD', idx .. 't:' .. tenant, score, id)
    end
    redis.call('ZADD', idx .. 's:' .. status, score, id)
    redis.call('ZADD', idx .. 'ts:' .. tenant .. ':' .. status, score, id)
  end
  if terminal == '1' and ttl > 0 then
    redis.call('PEXPIRE', run, ttl)
    redis.call('PEXPIRE', journal, ttl)
  end
else
  redis.call('HSET', run, 'n', n, 'w', wid)
end
return {v, n}
"""


class RedisRunStore(RunStore):
    """Runs, checkpoints and live event streams in Redis.

    Example::

        client = connect("redis://redis:6379/0")
        store = RedisRunStore(client, finished_ttl_s=86_400)
        async with Engine(store) as engine:
            ...

    ``client`` may be shared with a :class:`~podium.queue.redis.RedisQueue`
    (one connection pool per process). ``finished_ttl_s=0`` keeps finished
    runs forever.
    """

    def __init__(
        self,
        client: aioredis.Redis | str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "podium",
        finished_ttl_s: float = 7 * 86_400,
    ) -> None:
        self._own_client = isinstance(client, str)
        self.client: aioredis.Redis = connect(client) if isinstance(client, str) else client
        self.prefix = prefix
        self.finished_ttl_ms = int(finished_ttl_s * 1000)
        self._idx = f"{prefix}:idx:"
        self._write = self.client.register_script(_WRITE)
        self._enc = msgspec.msgpack.Encoder()
        self._record_dec = msgspec.msgpack.Decoder(RunRecord)
        self._entry_dec = msgspec.msgpack.Decoder(JournalEntry)
        # The version this store last wrote or read per run it drives: the fence for
        # journal-only appends. Dropped when the run finishes.
        self._held: dict[str, int] = {}
        self._writer = f"{os.getpid()}-{os.urandom(4).hex()}-"
        self._write_ids = count(1)
        self._runs = self._appends = self._entries = self._bytes = 0

    # -- keys -------------------------------------------------------------------------------

    def _run_key(self, run_id: str) -> str:
        return f"{self.prefix}:{{{run_id}}}:run"

    def _journal_key(self, run_id: str) -> str:
        return f"{self.prefix}:{{{run_id}}}:journal"

    # -- writes -----------------------------------------------------------------------------

    async def _exec(
        self,
        mode: str,
        run_id: str,
        expected: int,
        record: RunRecord | None,
        entries: Sequence[JournalEntry],
    ) -> int:
        """Run the write script; returns the run's version after it."""
        encode = self._enc.encode
        payload = [encode(e) for e in entries]
        status: str
        if record is not None:
            rec = encode(record)
            status, tenant, created = record.status, record.tenant, repr(record.created_at)
            terminal = "1" if record.status in TERMINAL_STATUSES else "0"
        else:
            rec, status, tenant, created, terminal = b"", "", "", "0", "0"
        args: list[Any] = [
            mode, expected, f"{self._writer}{next(self._write_ids)}", rec, status, tenant,
            created, self.finished_ttl_ms, self._idx, terminal, run_id, *payload,
        ]
        async with translate_errors():
            reply = await self._write(keys=[self._run_key(run_id), self._journal_key(run_id)],
                                      args=args)
        self._appends += 1
        self._entries += len(payload)
        self._bytes += len(rec) + sum(len(p) for p in payload)
        return int(cast(list[Any], reply)[0])

    async def create(self, record: RunRecord) -> None:
        record.updated_at = record.updated_at or time.time()
        await self._exec("create", record.run_id, record.version, record, ())
        self._runs += 1

    async def update(self, record: RunRecord) -> None:
        await self._put(record, ())

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        if record is not None:
            await self._put(record, entries)
        elif entries:
            try:
                await self._exec("append", run_id, self._held.get(run_id, -1), None, entries)
            except StaleRunError:
                self._held.pop(run_id, None)
                raise

    async def _put(self, record: RunRecord, entries: Sequence[JournalEntry]) -> None:
        """Write ``record`` (and entries) if its version is current; bumps ``record.version``."""
        old = record.version
        record.version = old + 1  # what the stored copy says once written
        record.updated_at = time.time()
        try:
            await self._exec("update", record.run_id, old, record, entries)
        except BaseException as exc:
            record.version = old
            if isinstance(exc, StaleRunError):
                self._held.pop(record.run_id, None)
            raise
        if record.status in TERMINAL_STATUSES:
            self._held.pop(record.run_id, None)
        else:
            self._held[record.run_id] = record.version

    # -- reads ------------------------------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord | None:
        async with translate_errors():
            raw: bytes | None = await cast(Any, self.client.hget(self._run_key(run_id), "r"))
        if raw is None:
            return None
        return self._record_dec.decode(raw)

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        async with translate_errors(), self.client.pipeline(transaction=False) as pipe:
            pipe.xrange(self._journal_key(run_id), f"0-{after + 2}", "+")
            pipe.exists(self._run_key(run_id))
            rows, exists = await pipe.execute()
        if not rows and not exists:
            raise RunNotFoundError(run_id)
        return self._decode_rows(rows)

    def _decode_rows(self, rows: list[tuple[bytes, dict[bytes, bytes]]]) -> list[JournalItem]:
        decode = self._entry_dec.decode
        return [(int(sid.split(b"-", 1)[1]) - 1, decode(fields[b"e"])) for sid, fields in rows]

    async def wait_journal(
        self, run_id: str, after: int, timeout: float  # noqa: ASYNC109 (the interface's)
    ) -> list[JournalItem]:
        """Entries after ``after``, waiting up to ``timeout`` with XREAD BLOCK (any machine)."""
        if timeout <= 0:
            return await self.journal(run_id, after)
        block_ms = max(1, int(timeout * 1000))
        async with translate_errors():
            reply: Any = await self.client.xread(
                {self._journal_key(run_id): f"0-{after + 1}"}, block=block_ms
            )
        if not reply:
            return []
        _, rows = reply[0]
        return self._decode_rows(rows)

    async def list(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        if tenant is not None and status is not None:
            key = f"{self._idx}ts:{tenant}:{status}"
        elif tenant is not None:
            key = f"{self._idx}t:{tenant}"
        elif status is not None:
            key = f"{self._idx}s:{status}"
        else:
            key = f"{self._idx}all"
        found: list[RunRecord] = []
        start, page = 0, max(limit, 50)
        async with translate_errors():
            while len(found) < limit:
                ids: list[bytes] = await cast(Any, self.client).zrevrange(
                    key, start, start + page - 1
                )
                if not ids:
                    break
                start += page
                async with self.client.pipeline(transaction=False) as pipe:
                    for run_id in ids:
                        pipe.hget(self._run_key(run_id.decode()), "r")
                    raws = await pipe.execute()
                expired = [i for i, raw in zip(ids, raws, strict=True) if raw is None]
                if expired:  # finished runs whose TTL passed: tidy the index lazily
                    await self.client.zrem(key, *expired)
                    start -= len(expired)
                for raw in raws:
                    if raw is None:
                        continue
                    record = self._record_dec.decode(raw)
                    if (status is None or record.status == status) and (
                        agent is None or record.agent == agent
                    ):
                        found.append(record)
        return found[:limit]

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self._runs, self._appends, self._entries, self._bytes)

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()
