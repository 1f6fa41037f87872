"""Index entries leave with their runs: the expiry set and its reaper.

A finished run's hash and journal expire on their own (Redis deletes them at their TTL);
its members in the listing indexes (sorted sets) would not. So the write that gives a run
its TTL also records it in one more sorted set, ``<prefix>:idx:exp``, scored by the
expiry (unix ms), its member naming what the indexes need: the run id, its tenant and
its status bucket. Threads with an expiry are recorded there too.

The reaper is one Lua script: it takes at most ``limit`` members whose expiry has passed
and, for each whose key is gone, removes the id from every index and the member itself.
It is idempotent (every step is a ZREM or DEL) and atomic, so any number of processes
may run it at once; a member whose key still lives is moved to its key's real expiry
(another writer extended it) or dropped (the key no longer expires), never acted on.
Each gateway and worker runs it every ``reap_every_s`` (see :class:`ExpiryReaper`), and
a listing runs it first, so neither Redis's memory nor a listing pays for dead runs.

Member format (binary-safe, the tenant last so it may hold any byte)::

    <kind>:<bucket>:<len(id)>:<id><tenant>      kind: r (run) or t (thread; no bucket)
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

from podium.errors import StoreUnavailableError
from podium.lifecycle import stop_task

__all__ = ("EXPIRY_MEMBER_LUA", "REAP_LUA", "ExpiryReaper", "expiry_key", "expiry_member")

log = logging.getLogger("podium.store")
#: A reaper that keeps failing (not for an outage) says so once per this many seconds.
_WARN_EVERY_S = 600.0

#: Lua shared by the scripts that write an expiry member: ``expiry_member(kind, bucket,
#: id, tenant)`` and ``now_ms()`` (Redis's clock, the one its TTLs run on).
EXPIRY_MEMBER_LUA = """
local function expiry_member(kind, bucket, id, tenant)
  return kind .. ':' .. bucket .. ':' .. #id .. ':' .. id .. tenant
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

# KEYS: the expiry set. ARGV: key prefix, index prefix, most members to look at.
# Returns {members looked at, runs and threads whose index entries were removed}.
REAP_LUA = EXPIRY_MEMBER_LUA + """
local exp, prefix, idx, limit = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
-- strictly before now: a key expires once Redis's clock is past its expiry
local due = redis.call('ZRANGEBYSCORE', exp, '-inf', '(' .. now, 'LIMIT', 0, limit)
local removed = 0
for _, m in ipairs(due) do
  local kind, bucket, n, rest = string.match(m, '^(%a):(%a*):(%d+):(.*)$')
  if not kind then
    redis.call('ZREM', exp, m)  -- not a member this code writes
  else
    n = tonumber(n)
    local id, tenant = string.sub(rest, 1, n), string.sub(rest, n + 1)
    local key
    if kind == 'r' then key = prefix .. ':{' .. id .. '}:run'
    else key = prefix .. ':{thr:' .. id .. '}:thread' end
    local left = redis.call('PTTL', key)
    if left == -2 then  -- gone (expired, or deleted): so go its index entries
      if kind == 'r' then
        redis.call('ZREM', idx .. 'all', id)
        redis.call('ZREM', idx .. 't:' .. tenant, id)
        redis.call('ZREM', idx .. 's:' .. bucket, id)
        redis.call('ZREM', idx .. 'ts:' .. tenant .. ':' .. bucket, id)
        -- its journal expired with it (a deleted run's too, now); a cancel request is moot
        redis.call('DEL', prefix .. ':{' .. id .. '}:journal', prefix .. ':{' .. id .. '}:cancel')
      else
        redis.call('ZREM', idx .. 'th:' .. tenant, id)
        redis.call('ZREM', idx .. 'thall', id)
      end
      redis.call('ZREM', exp, m)
      removed = removed + 1
    elseif left == -1 then
      redis.call('ZREM', exp, m)  -- it lives on without an expiry: nothing to remove
    else
      redis.call('ZADD', exp, now + left, m)  -- its expiry moved: due then
    end
  end
end
return {#due, removed}
"""


def expiry_key(index_prefix: str) -> str:
    """The sorted set of runs and threads that expire, scored by when (unix ms)."""
    return f"{index_prefix}exp"


def expiry_member(kind: str, bucket: str, item_id: str, tenant: str) -> str:
    """The member ``EXPIRY_MEMBER_LUA`` writes (``len`` counts bytes, as Lua's ``#``)."""
    return f"{kind}:{bucket}:{len(item_id.encode())}:{item_id}{tenant}"


class ExpiryReaper:
    """Runs ``reap`` (one bounded call of the script, returning how many members it
    looked at and how many it removed from the indexes) every ``every_s``, jittered so
    that several processes do not all run it at once, and again at once while a call
    found a full batch. Started lazily by the store's first use in a running loop,
    stopped by :meth:`aclose`; Redis being away is waited out."""

    def __init__(
        self, reap: Callable[[], Awaitable[tuple[int, int]]], *, every_s: float, batch: int
    ) -> None:
        self._reap = reap
        self.every_s = every_s
        self.batch = batch
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._warned = -_WARN_EVERY_S

    def ensure_started(self) -> None:
        """Start the background loop if it is not running in this loop (a no-op when
        disabled or closed)."""
        if self._closed or self.every_s <= 0:
            return
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._loop(), name="podium-store-reaper")

    async def drain(self, rounds: int) -> int:
        """Reap until a call finds less than a full batch, ``rounds`` calls at most;
        returns how many runs and threads left the indexes."""
        removed = 0
        for _ in range(rounds):
            due, gone = await self._reap()
            removed += gone
            if due < self.batch:
                break
        return removed

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every_s * (0.5 + random.random()))
            try:
                await self.drain(rounds=1_000)
            except StoreUnavailableError as exc:  # said elsewhere; tried again next time
                log.debug("expired runs not reaped now: %s", exc)
            except Exception as exc:  # a bug, a read-only replica: said, not every time
                now = time.monotonic()
                if now - self._warned >= _WARN_EVERY_S:
                    self._warned = now
                    log.warning("expired runs not reaped now: %s", exc, exc_info=exc)

    async def aclose(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            await stop_task(task)  # (one left in a loop that has ended went with it)
