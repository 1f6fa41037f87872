"""The run queue on Redis Streams consumer groups: many workers, many machines.

Layout (``podium`` is the configurable prefix)::

    podium:queue:<pool>   stream of queued runs (field d = QueueItem, n = earlier deliveries)
                          with one consumer group, "workers"
    podium:dead:<pool>    dead-letter stream: run_id, agent, reason, deliveries, d (the
                          latest ~``DEAD_LETTERS_KEPT``; older ones are trimmed)
    podium:queue:<pool>:clock  when a worker last spoke to Redis, and from when runs
                          may be reclaimed after an outage (a hash, expires after a day idle)

A claim is an XREADGROUP delivery; its lease is the entry's idle time in the
group's pending list. Heartbeats reset the idle time of the entries a worker
still owns (XCLAIM JUSTID) and report the ones it lost. Entries idle longer
than the lease — their worker crashed, was killed or cut off — are taken over
with XAUTOCLAIM, which also counts the delivery — but not right after Redis was
away (killed, hung, cut off): an outage counts in every lease's idle time, so
nothing is reclaimed until the holders, alive, have had a lease (plus their
reconnect) to heartbeat. Acked entries are deleted, so the stream holds only runs
waiting or in flight.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import count
from typing import Any

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from podium.errors import QueueUnavailableError
from podium.queue.base import (
    VERSION_TTL_S,
    Claim,
    DeadLetter,
    QueueItem,
    QueueStatistics,
    RunQueue,
)
from podium.store.redis_batch import Autopipeline
from podium.store.redis_connect import UNAVAILABLE, connect
from podium.store.redis_keys import clock_key, dead_stream_key, queue_stream_key, unsubmitted_key
from podium.store.redis_replies import is_refusal, refusal_reason

__all__ = ("DeadLetter", "RedisQueue", "dead_stream_key", "queue_stream_key")

_GROUP = "workers"

# The pool's clock (KEYS[2]), touched by every claim and heartbeat: when a worker last
# spoke to Redis, and from when runs whose lease ran out may be taken. Redis counts an
# outage (killed, stopped, cut off) in every lease's idle time, so right after one every
# lease looks expired at once; a silence longer than `gap` ms (no live worker is that
# quiet) opens a window of `window` ms in which nothing is reclaimed, so that the holders
# reconnect and heartbeat first. Measured on Redis's own clock, as the idle times are.
_TOUCH = """
local function touch(clock, gap, window)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local c = redis.call('HMGET', clock, 'seen', 'after')
  local after = tonumber(c[2]) or 0
  if c[1] and now - tonumber(c[1]) > gap then after = now + window end
  redis.call('HSET', clock, 'seen', now, 'after', after)
  redis.call('PEXPIRE', clock, 86400000)
  return now >= after
end
"""

# KEYS: stream, clock. ARGV: group, consumer, min idle ms, count, start id, scan (1|0),
# gap ms, window ms. Returns {next start, {id, fields, deliveries}...}; only the clock is
# touched when not scanning, or while the window after an outage is open.
_RECLAIM = _TOUCH + """
if not touch(KEYS[2], tonumber(ARGV[7]), tonumber(ARGV[8])) or ARGV[6] ~= '1' then
  return {ARGV[5]}
end
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[5], 'COUNT', ARGV[4])
local out = {r[1]}
for _, e in ipairs(r[2]) do
  if type(e) == 'table' then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    local n = 1
    if p[1] then n = p[1][4] end
    table.insert(out, {e[1], e[2], n})
  end
end
return out
"""

# KEYS: stream, clock. ARGV: group, consumer, gap ms, window ms, ids... Resets the lease
# of each id still owned by consumer; returns the ids it no longer owns (taken over, acked
# or dead-lettered).
_HEARTBEAT = _TOUCH + """
touch(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
local lost = {}
for i = 5, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    table.insert(lost, ARGV[i])
  end
end
return lost
"""

# KEYS: stream. ARGV: group, consumer, id, item, earlier deliveries.
# Gives a run back only if consumer still owns it: a fresh entry wakes waiting workers.
_RELEASE = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if not p[1] or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
redis.call('XADD', KEYS[1], '*', 'd', ARGV[4], 'n', ARGV[5])
return 1
"""

# KEYS: stream. ARGV: group, consumer. Deletes the consumer only if it holds no entry:
# XGROUP DELCONSUMER drops a consumer's pending entries with it (never to be delivered
# again), so the check and the delete are one script. No stream or group: nothing to do.
_RETIRE = """
local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if not ok or p[1] then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: stream. ARGV: group, min idle ms. Deletes the consumers idle that long holding no
# entry (dead workers whose runs were taken over); returns how many. A live worker that
# holds nothing may be one of them (Redis 7.0 counts only deliveries as activity): that
# costs it nothing, its next delivery lists it again. One holding entries never is.
_FORGET_IDLE = """
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
local gone = 0
for _, c in ipairs(consumers) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['pending'] == 0 and f['idle'] >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    gone = gone + 1
  end
end
return gone
"""

# KEYS: stream. ARGV: submit token, item, entries to look back.
# A submit sent again after its connection dropped: add the item unless the first send
# landed (an entry with its token near the tail; acked entries are gone, and a run
# delivered again after its end is only acked).
_SUBMIT_AGAIN = """
local recent = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[3])
for _, e in ipairs(recent) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 't' and f[i + 1] == ARGV[1] then return e[1] end
  end
end
return redis.call('XADD', KEYS[1], '*', 'd', ARGV[2], 't', ARGV[1])
"""

# KEYS: stream, the run's version key, the store's unsubmitted runs. ARGV: item, version,
# ttl (s), run id. A versioned submit: added only if the version is above the last one
# submitted for the run (sent again after a dropped connection, it adds nothing either:
# the key says the first send landed). Added, the run leaves the store's index of runs
# whose submit was not seen: an item is queued now, and its worker drives the run as
# stored, whatever its version by then.
_SUBMIT_VERSION = """
local last = redis.call('GET', KEYS[2])
if last and tonumber(last) >= tonumber(ARGV[2]) then return false end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[4])
return redis.call('XADD', KEYS[1], '*', 'd', ARGV[1])
"""

#: How far back a re-sent submit looks for its first send (entries).
_SUBMIT_LOOKBACK = 1000
#: Dead letters kept per pool (about: trimmed by whole stream nodes): one per run that
#: died, and nothing grows with the number of runs ever served.
DEAD_LETTERS_KEPT = 10_000


@asynccontextmanager
async def _translate() -> AsyncIterator[None]:
    try:
        yield
    except UNAVAILABLE as exc:
        reason = refusal_reason(exc)  # a refusal the pipeline gave up resending
        raise QueueUnavailableError(
            f"{reason}: {exc}" if reason else f"redis unavailable: {exc}"
        ) from exc
    except ResponseError as exc:
        if not is_refusal(exc):
            raise
        raise QueueUnavailableError(f"{refusal_reason(exc)}: {exc}") from exc


class _Counters:
    __slots__ = ("acked", "dead", "in_flight", "redelivered", "submitted", "waiting")

    def __init__(self) -> None:
        self.submitted = self.acked = self.redelivered = self.dead = 0
        self.waiting = self.in_flight = 0


class RedisQueue(RunQueue):
    """Runs waiting for workers, one Redis stream per pool, leases of ``lease_s``.

    Example::

        client = connect("redis://redis:6379/0")
        queue = RedisQueue(client, lease_s=30)
        await queue.submit(QueueItem(record.run_id, agent.name, pool="support"))

    A worker must heartbeat more often than ``lease_s`` (the worker does, every
    ``lease_s / 3``); a run whose lease has run out is delivered to the next
    worker that claims, which resumes it from its checkpoint. A pool keeps its
    latest ``dead_letters_kept`` dead letters (about: Redis trims whole nodes).
    """

    shared = True  # outlives its processes: a worker's sweep submits stranded runs

    def __init__(
        self,
        client: aioredis.Redis | str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "podium",
        lease_s: float = 30.0,
        reclaim_every_s: float | None = None,
        reconnect_retries: int = 10,
        unavailable_s: float = 1.5,
        dead_letters_kept: int = DEAD_LETTERS_KEPT,
    ) -> None:
        self._own_client = isinstance(client, str)
        self.client: aioredis.Redis = connect(client) if isinstance(client, str) else client
        self.prefix = prefix
        self.lease_s = lease_s
        self.reclaim_every_s = lease_s / 4 if reclaim_every_s is None else reclaim_every_s
        self.dead_letters_kept = dead_letters_kept
        # A live worker touches the pool's clock at least every lease / 3 (its heartbeats)
        # or claim_block_s (at most 1 s): a longer silence is an outage. After one, runs are
        # reclaimed a lease after Redis answered again, plus the 2 s a holder's reconnect
        # backs off at most: the time its heartbeat needs to land first.
        self._clock_gap_ms = int(max(lease_s / 2, 1.0) * 1000)
        self._clock_window_ms = int((lease_s + 2.0) * 1000)
        # everything but blocking reads goes through one pipelined connection
        self._pipe = Autopipeline(
            self.client, retries=reconnect_retries, unavailable_s=unavailable_s
        )
        self._reclaim = self._pipe.register(_RECLAIM)
        self._heartbeat = self._pipe.register(_HEARTBEAT)
        self._release = self._pipe.register(_RELEASE)
        self._submit_again = self._pipe.register(_SUBMIT_AGAIN)
        self._submit_version = self._pipe.register(_SUBMIT_VERSION)
        self._unsubmitted = unsubmitted_key(prefix)
        self._retire = self._pipe.register(_RETIRE)
        self._forget_idle = self._pipe.register(_FORGET_IDLE)
        self._submitter = f"{os.getpid()}-{os.urandom(6).hex()}"
        self._submits = count(1)
        self._enc = msgspec.msgpack.Encoder()
        self._item_dec = msgspec.msgpack.Decoder(QueueItem)
        self._groups: set[str] = set()
        self._cursor: dict[str, str] = {}
        self._next_reclaim: dict[str, float] = {}
        self._counters: dict[str, _Counters] = {}

    # -- keys and setup ---------------------------------------------------------------------

    def stream_key(self, pool: str) -> str:
        return queue_stream_key(self.prefix, pool)

    def dead_key(self, pool: str) -> str:
        return dead_stream_key(self.prefix, pool)

    def version_key(self, run_id: str) -> str:
        """Where the last version submitted for ``run_id`` is kept (while it is queued,
        in flight or parked on a human)."""
        return f"{self.prefix}:submitted:{run_id}"

    def _stats(self, pool: str) -> _Counters:
        c = self._counters.get(pool)
        if c is None:
            c = self._counters[pool] = _Counters()
        return c

    async def _ensure_group(self, pool: str, *, force: bool = False) -> None:
        if pool in self._groups and not force:
            return
        try:
            await self.client.xgroup_create(self.stream_key(pool), _GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(pool)

    # -- the queue --------------------------------------------------------------------------

    async def submit(self, item: QueueItem) -> bool:
        if not item.enqueued_at:
            item = msgspec.structs.replace(item, enqueued_at=time.time())
        key, data = self.stream_key(item.pool), self._enc.encode(item)
        async with _translate():
            await self._ensure_group(item.pool)
            if item.version is not None:
                added = await self._pipe.execute(
                    "EVALSHA", self._submit_version, 3, key, self.version_key(item.run_id),
                    self._unsubmitted, data, item.version, VERSION_TTL_S, item.run_id,
                )
                if not added:
                    return False
            else:
                # XADD * is not idempotent: if the connection drops before the reply, what
                # is sent again is the script that first looks for this token.
                token = f"{self._submitter}:{next(self._submits)}"
                added = self._pipe.submit(
                    "XADD", key, "*", "d", data, "t", token,
                    resend=("EVALSHA", self._submit_again, 1, key, token, data, _SUBMIT_LOOKBACK),
                )
                # Queued: no sweep submits it again (that one would carry a version). In the
                # same round trip; lost, it is only a sweep's submit more, not a failed one.
                tidied = self._pipe.submit("ZREM", self._unsubmitted, item.run_id)
                try:
                    await added
                finally:
                    with contextlib.suppress(*UNAVAILABLE, ResponseError):
                        await tidied
        self._stats(item.pool).submitted += 1
        return True

    async def claim(
        self, consumer: str, *, pool: str = "default", count: int = 1, block_s: float = 1.0
    ) -> list[Claim]:
        """Runs whose lease expired first (XAUTOCLAIM, every ``reclaim_every_s``), then new ones."""
        async with _translate():
            await self._ensure_group(pool)
            try:
                return await self._claim(consumer, pool, count, block_s)
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):  # Redis lost its data: make the group again
                    raise
                await self._ensure_group(pool, force=True)
                return []

    async def _claim(self, consumer: str, pool: str, count: int, block_s: float) -> list[Claim]:
        key = self.stream_key(pool)
        now = time.time()
        claims: list[Claim] = []
        mono = time.monotonic()
        scan = mono >= self._next_reclaim.get(pool, 0.0) and await self._settled(mono)
        reply: list[Any] = await self._pipe.execute(  # (not scanning: the clock only)
            "EVALSHA", self._reclaim, 2, key, clock_key(self.prefix, pool), _GROUP, consumer,
            int(self.lease_s * 1000), count, self._cursor.get(pool, "0-0"), int(scan),
            self._clock_gap_ms, self._clock_window_ms,
        )
        if scan:
            cursor = reply[0].decode()
            self._cursor[pool] = cursor
            if cursor == "0-0":  # scanned the whole pending list: rest a while
                # jitter so the workers of a pool do not all scan at once
                self._next_reclaim[pool] = time.monotonic() + self.reclaim_every_s * (
                    0.75 + random.random() / 2
                )
            for entry_id, fields, deliveries in reply[1:]:
                claims.append(self._claim_of(consumer, entry_id, fields, int(deliveries), now))
            self._stats(pool).redelivered += len(claims)
        if len(claims) < count:
            block = None if claims or block_s <= 0 else max(1, int(block_s * 1000))
            streams: Any = await self.client.xreadgroup(
                _GROUP, consumer, {key: ">"}, count=count - len(claims), block=block
            )
            # Stamped when the read returns: a run that arrived while it blocked was claimed
            # now, not when the wait began (its queue wait would read as none).
            now = time.time()
            for _, rows in streams or ():
                for entry_id, fields in rows:
                    claims.append(self._claim_of(consumer, entry_id, fields, 1, now))
        return claims

    async def _settled(self, mono: float) -> bool:
        """Whether runs whose lease ran out may be taken now: not within one lease of this
        client's connection coming back after it was lost (a Redis restart loses every
        client's). Redis counts an outage in every lease's idle time, and their holders,
        back too, need a heartbeat to say they are alive; else the calls they finished
        during the outage would run again elsewhere."""
        pipe = self._pipe
        if not pipe.lost_at:
            return True
        if pipe.up_since is None:  # lost, and nothing sent since: connect (and count) now
            await pipe.execute("PING")
        return pipe.up_since is not None and mono >= pipe.up_since + self.lease_s

    def _claim_of(
        self, consumer: str, entry_id: bytes, fields: Any, deliveries: int, now: float
    ) -> Claim:
        if isinstance(fields, list):  # from Lua: a flat [field, value, ...] array
            fields = dict(zip(fields[::2], fields[1::2], strict=True))
        earlier = int(fields.get(b"n", 0))
        item = self._item_dec.decode(fields[b"d"])
        return Claim(item, entry_id.decode(), earlier + deliveries, now, consumer)

    async def heartbeat(self, consumer: str, claims: list[Claim]) -> list[Claim]:
        """Extend the leases ``consumer`` still holds; returns the claims it has lost."""
        by_pool: dict[str, list[Claim]] = {}
        for claim in claims:
            by_pool.setdefault(claim.item.pool, []).append(claim)
        lost: list[Claim] = []
        async with _translate():
            for pool, held in by_pool.items():
                gone: list[bytes] = await self._pipe.execute(
                    "EVALSHA", self._heartbeat, 2, self.stream_key(pool),
                    clock_key(self.prefix, pool), _GROUP, consumer, self._clock_gap_ms,
                    self._clock_window_ms, *(c.receipt for c in held),
                )
                if gone:
                    ids = {g.decode() for g in gone}
                    lost.extend(c for c in held if c.receipt in ids)
        return lost

    async def ack(self, claim: Claim, *, ended: bool = True) -> None:
        key = self.stream_key(claim.item.pool)
        commands: list[tuple[Any, ...]] = [
            ("XACK", key, _GROUP, claim.receipt), ("XDEL", key, claim.receipt)
        ]
        if ended:  # the run will not be queued again
            commands.append(("DEL", self.version_key(claim.item.run_id)))
        async with _translate():
            await self._pipe.execute_all(*commands)
        self._stats(claim.item.pool).acked += 1

    async def forget(self, run_id: str) -> None:
        async with _translate():
            await self._pipe.execute("DEL", self.version_key(run_id))

    async def release(self, claim: Claim) -> None:
        """Hand the run to the next worker now; a release is not counted as a delivery."""
        async with _translate():
            await self._pipe.execute(
                "EVALSHA", self._release, 1, self.stream_key(claim.item.pool), _GROUP,
                claim.consumer, claim.receipt, self._enc.encode(claim.item),
                max(0, claim.deliveries - 1),
            )

    async def retire(self, consumer: str, pool: str = "default") -> bool:
        """Delete ``consumer`` from the pool's group if it holds no entry: the group's
        consumer list does not grow by one name with every worker restart."""
        async with _translate():
            gone = await self._pipe.execute(
                "EVALSHA", self._retire, 1, self.stream_key(pool), _GROUP, consumer
            )
        return bool(gone)

    async def forget_idle_consumers(self, pool: str, idle_s: float) -> int:
        """Delete the pool's consumers idle ``idle_s`` or longer that hold no entry
        (workers killed before they could :meth:`retire`)."""
        async with _translate():
            gone = await self._pipe.execute(
                "EVALSHA", self._forget_idle, 1, self.stream_key(pool), _GROUP,
                int(idle_s * 1000),
            )
        return int(gone)

    async def dead_letter(self, claim: Claim, reason: str) -> None:
        pool = claim.item.pool
        key = self.stream_key(pool)
        async with _translate(), self.client.pipeline(transaction=True) as pipe:
            pipe.xadd(self.dead_key(pool), {
                "run_id": claim.item.run_id, "agent": claim.item.agent, "reason": reason,
                "deliveries": claim.deliveries, "ts": repr(time.time()),
                "d": self._enc.encode(claim.item),
            }, maxlen=self.dead_letters_kept, approximate=True)
            pipe.xack(key, _GROUP, claim.receipt)
            pipe.xdel(key, claim.receipt)
            pipe.delete(self.version_key(claim.item.run_id))
            await pipe.execute()
        self._stats(pool).dead += 1

    async def dead_letters(self, pool: str = "default", limit: int = 100) -> list[DeadLetter]:
        """The dead-letter stream of ``pool``, oldest first."""
        async with _translate():
            rows: Any = await self.client.xrange(self.dead_key(pool), count=limit)
        return [
            DeadLetter(self._item_dec.decode(f[b"d"]), f[b"reason"].decode(),
                       int(f[b"deliveries"]), float(f[b"ts"]))
            for _, f in rows
        ]

    async def depth(self, pool: str = "default") -> int:
        """Runs waiting for a first delivery (not in anyone's pending list)."""
        length, pending = await self._sizes(pool)
        return max(0, length - pending)

    async def outstanding(self, pool: str = "default") -> int:
        """Runs not yet acked: waiting, or in flight on some worker (alive or not)."""
        length, _ = await self._sizes(pool)
        return length

    async def _sizes(self, pool: str) -> tuple[int, int]:
        key = self.stream_key(pool)
        async with _translate():
            await self._ensure_group(pool)
            length, summary = await self._pipe.execute_all(
                ("XLEN", key), ("XPENDING", key, _GROUP)
            )
        pending = int(summary[0]) if summary else 0  # raw XPENDING summary: [count, ...]
        c = self._stats(pool)
        c.waiting, c.in_flight = max(0, length - pending), pending
        return int(length), pending

    def statistics(self, pool: str = "default") -> QueueStatistics:
        """This process's counters; ``waiting``/``in_flight`` as last seen by ``depth``."""
        c = self._stats(pool)
        return QueueStatistics(
            pool, c.waiting, c.in_flight, c.submitted, c.acked, c.redelivered, c.dead
        )

    async def aclose(self) -> None:
        await self._pipe.aclose()
        if self._own_client:
            await self.client.aclose()
