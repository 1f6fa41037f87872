"""A run store on Redis: records and journals shared by every worker and gateway.

Layout (``podium`` is the configurable prefix; ``{id}`` is a hash tag so a
run's two keys live in one slot)::

    podium:{run_id}:run       hash: r = record (MessagePack), v = version, b = bucket,
                              wp/wc = writer and counter of the last record write
    podium:{run_id}:journal   stream: one entry per append, e = the entries (a
                              MessagePack array), id = <version>-<last seq + 2>
    podium:idx:all            sorted sets of run ids scored by created_at, for
    podium:idx:t:<tenant>     listing by tenant and status; the bucket is the
    podium:idx:s:<bucket>     status, except that queued and running share the
    podium:idx:ts:<tenant>:<bucket>   bucket "active" (starting a run moves nothing);
                              waiting runs have their own (their deadlines' sweep reads it)
    podium:idx:exp            sorted set of the runs and threads that expire, scored by
                              when: their index entries leave with them (redis_expiry.py)
    podium:idx:enq            sorted set of the runs stored ``queued`` (not child runs)
                              whose submit to the queue has not been seen yet, scored by
                              the write's time: the queue's submit removes a run, a write
                              that moves it on too; what is left a while is stranded (see
                              :mod:`podium.queue.stranded`)

Fencing, so two workers can never both advance a run:

- a record write (create, update, a checkpoint with the record) is one Lua
  script that checks the version the writer holds, bumps it, and moves the
  journal stream's last id to ``<new version>-0`` (XSETID);
- a checkpoint without the record is one plain XADD at
  ``<held version>-<seq>``: Redis refuses an id not above the stream's last,
  so a writer whose version was overtaken is refused — no script needed on
  the hot path.

A refused writer gets :class:`~podium.errors.StaleRunError`. Writes are
idempotent, so a batch retried after a lost reply does not apply twice (a
record write carries its writer's id and a growing counter; a refused XADD is
checked against the entry already at its id). Writes and reads of every run a
process drives share one connection through an :class:`Autopipeline`.
Finished runs expire after ``finished_ttl_s``, and their index entries with them: the
terminal write records the run in the expiry set, and a reaper every process runs
(and every listing, first) removes what has expired from every index.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Sequence
from itertools import count
from typing import Any

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from podium.engine.records import TERMINAL_STATUSES, JournalEntry, RunRecord
from podium.errors import (
    RunNotFoundError,
    StaleRunError,
    StoreError,
    StoreUnavailableError,
)
from podium.lifecycle import stop_task
from podium.memory.item import MemoryItem
from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.redis_batch import Autopipeline
from podium.store.redis_connect import UNAVAILABLE, connect, translate_errors, translated
from podium.store.redis_expiry import (
    REAP_LUA,
    ExpiryReaper,
    expiry_key,
)
from podium.store.redis_follow import JournalWaiter
from podium.store.redis_health import RedisHealth
from podium.store.redis_hold import send_held
from podium.store.redis_keys import index_prefix, unsubmitted_key
from podium.store.redis_reads import RedisRunReads, bucket
from podium.store.redis_scripts import FORGET_UNSUBMITTED_LUA, THREAD_WRITE_LUA, WRITE_LUA
from podium.store.redis_tail import PendingWrite, RunTail
from podium.store.redis_threads import RedisThreadStore
from podium.threads.record import ThreadRecord

__all__ = (
    "UNAVAILABLE",
    "RedisRunStore",
    "connect",
    "index_prefix",
    "translate_errors",
    "translated",
    "unsubmitted_key",
)


def _seq_part(stream_id: bytes) -> int:
    return int(stream_id.split(b"-", 1)[1])

_STALE_ID = "equal or smaller"  # Redis's refusal of an XADD id not above the stream's last
_MAX_TAILS = 50_000  # runs whose write position this store remembers at most
#: Expired runs one reaper call removes at most: a bounded, short hold of Redis.
_REAP_BATCH = 500


class RedisRunStore(RedisRunReads, RedisThreadStore, RunStore):
    """Runs, checkpoints and live event streams in Redis.

    Example::

        client = connect("redis://redis:6379/0")
        store = RedisRunStore(client, finished_ttl_s=86_400)
        async with Engine(store) as engine:
            ...

    ``client`` may be shared with a :class:`~podium.queue.redis.RedisQueue`
    (one connection pool per process). ``finished_ttl_s=0`` keeps finished
    runs forever. A command waits ``unavailable_s`` at most (or
    ``reconnect_retries`` reconnects) for Redis before it fails with
    :class:`~podium.errors.StoreUnavailableError`; the next one reconnects.

    Every ``reap_every_s`` (0: never; started by the first write of a finished run, or
    the first listing) the store removes expired runs and threads from the indexes
    (:meth:`reap_expired`); several processes may do so at once.

    ``outage_hold_s`` (a worker's store): a running run's checkpoint write is not given
    up when Redis is away but sent again, unchanged and fenced, until Redis answers or
    this many seconds have passed (see :mod:`podium.store.redis_hold`). 0: fail fast
    like every other command (the gateway's store: a 503 is better than a wait).
    ``allow_evicting``: an evicting ``maxmemory-policy`` does not make :meth:`health`
    report a problem (the operator accepted losing runs to eviction).
    """

    def __init__(
        self,
        client: aioredis.Redis | str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "podium",
        finished_ttl_s: float = 7 * 86_400,
        reconnect_retries: int = 10,
        unavailable_s: float = 1.5,
        reap_every_s: float = 10.0,
        outage_hold_s: float = 0.0,
        allow_evicting: bool = False,
    ) -> None:
        self._own_client = isinstance(client, str)
        self.client: aioredis.Redis = connect(client) if isinstance(client, str) else client
        self.prefix = prefix
        self.outage_hold_s = outage_hold_s
        self._health = RedisHealth(self.client, prefix, allow_evicting=allow_evicting)
        self.finished_ttl_ms = int(finished_ttl_s * 1000)
        self._idx = index_prefix(prefix)
        self._exp = expiry_key(self._idx)
        self._pipe = Autopipeline(
            self.client, retries=reconnect_retries, unavailable_s=unavailable_s
        )
        self._write = self._pipe.register(WRITE_LUA)
        self._thread_write = self._pipe.register(THREAD_WRITE_LUA)
        self._reap = self._pipe.register(REAP_LUA)
        self._reaper = ExpiryReaper(self._reap_once, every_s=reap_every_s, batch=_REAP_BATCH)
        self._forget_unsubmitted = self._pipe.register(FORGET_UNSUBMITTED_LUA)
        self._unsubmitted = unsubmitted_key(prefix)
        self._lost = 0
        self._lost_ids: dict[str, None] = {}  # the last ones reported (insertion order)
        self._waiter = JournalWaiter(self.client)
        self._thread_dec = msgspec.msgpack.Decoder(ThreadRecord)
        self._memory_dec = msgspec.msgpack.Decoder(MemoryItem)
        self._enc = msgspec.msgpack.Encoder()
        self._record_dec = msgspec.msgpack.Decoder(RunRecord)
        self._entries_dec = msgspec.msgpack.Decoder(list[JournalEntry])
        # Per run this store writes: the version it holds, the journal's length and the
        # writes waiting for their turn. Dropped when the run finishes.
        self._tails: dict[str, RunTail] = {}
        self._drains: set[asyncio.Task[None]] = set()
        self._writer = f"{os.getpid()}-{os.urandom(6).hex()}"
        self._ids = count(1)
        self._runs = self._appends = self._entries = self._bytes = 0

    # -- writes -----------------------------------------------------------------------------

    def _payload(self, entries: Sequence[JournalEntry]) -> bytes:
        return self._enc.encode(list(entries)) if entries else b""

    def _record_args(
        self, mode: str, record: RunRecord, expected: int, entries: Sequence[JournalEntry],
        counter: int,
    ) -> tuple[tuple[Any, ...], int]:
        """The record script's command, and the bytes it writes."""
        rec = self._enc.encode(record)
        payload = self._payload(entries)
        terminal = "1" if record.status in TERMINAL_STATUSES else "0"
        run_id = record.run_id
        args = (
            "EVALSHA", self._write, 2, self._run_key(run_id), self._journal_key(run_id),
            mode, expected, f"{self._writer}:{counter}", rec, bucket(record.status),
            record.tenant, repr(record.created_at), self.finished_ttl_ms, self._idx,
            terminal, run_id, payload, len(entries),
            "1" if record.status == "queued" and record.parent_run_id is None else "0",
            repr(record.updated_at),
        )
        return args, len(rec) + len(payload)

    def _count(self, entries: int, size: int) -> None:
        self._appends += 1
        self._entries += entries
        self._bytes += size

    async def create(self, record: RunRecord) -> None:
        record.updated_at = record.updated_at or time.time()
        args, size = self._record_args("create", record, record.version, (), next(self._ids))
        async with translate_errors():
            await self._pipe.execute(*args)
        self._count(0, size)
        self._runs += 1

    async def update(self, record: RunRecord) -> None:
        await self._in_turn(record.run_id, (), record)

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        if record is not None or entries:
            await self._in_turn(run_id, entries, record)

    # -- one write of a run at a time ---------------------------------------------------------

    async def _in_turn(
        self, run_id: str, entries: Sequence[JournalEntry], record: RunRecord | None
    ) -> None:
        """Write when it is this run's turn: now, or with the writes queued behind the one
        in flight (they go out together when it returns)."""
        tail = self._tails.get(run_id)
        if tail is None:
            if len(self._tails) >= _MAX_TAILS:
                self._forget_idle_tails()
            tail = self._tails[run_id] = RunTail()
        if tail.busy:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            tail.waiting.append(PendingWrite(entries, record, fut))
            await fut
            return
        tail.busy = True
        try:
            await self._write_now(run_id, tail, entries, record)
        except StoreUnavailableError as exc:
            self._fail_waiting(tail, exc)
            raise
        finally:
            self._pass_turn(run_id, tail)

    def _forget_idle_tails(self) -> None:
        """Bound the tails kept for runs that never finished here (released, lost):
        the oldest half of the idle ones go (a forgotten run is read again if written)."""
        idle = [k for k, t in self._tails.items() if not t.busy and t.unsettled is None]
        for run_id in idle[: max(1, len(idle) // 2)]:
            del self._tails[run_id]

    @staticmethod
    def _fail_waiting(tail: RunTail, exc: Exception) -> None:
        """Redis is away: the writes queued behind the one that found out fail with it, not
        each after a wait of its own."""
        while tail.waiting:
            pending = tail.waiting.popleft()
            if not pending.fut.done():
                pending.fut.set_exception(exc)

    def _pass_turn(self, run_id: str, tail: RunTail) -> None:
        if tail.waiting:
            task = asyncio.get_running_loop().create_task(self._drain(run_id, tail))
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)
            return
        tail.busy = False
        self._forget_if_done(run_id, tail)

    def _forget_if_done(self, run_id: str, tail: RunTail) -> None:
        """Drop the tail of a run that finished (or that this store never wrote)."""
        idle = tail.unsettled is None and not tail.busy
        if idle and (tail.finished or tail.version < 0) and self._tails.get(run_id) is tail:
            del self._tails[run_id]

    async def _drain(self, run_id: str, tail: RunTail) -> None:
        """Write what queued up during the last write: entry-only appends merged into one,
        up to and including the next record write (which carries them)."""
        try:
            while tail.waiting:
                batch: list[PendingWrite] = []
                entries: list[JournalEntry] = []
                record: RunRecord | None = None
                while tail.waiting and record is None:
                    pending = tail.waiting.popleft()
                    if pending.fut.done():  # its caller gave up before it was sent
                        continue
                    batch.append(pending)
                    entries.extend(pending.entries)
                    record = pending.record
                if not batch:
                    continue
                try:
                    await self._write_now(run_id, tail, entries, record)
                except Exception as exc:
                    for pending in batch:
                        if not pending.fut.done():
                            pending.fut.set_exception(exc)
                    if isinstance(exc, StoreUnavailableError):
                        self._fail_waiting(tail, exc)
                except BaseException:  # closed mid-write: its callers must not wait forever
                    for pending in batch:
                        if not pending.fut.done():
                            pending.fut.set_exception(StoreError("the store was closed"))
                    raise
                else:
                    for pending in batch:
                        if not pending.fut.done():
                            pending.fut.set_result(None)
        finally:
            while tail.waiting:  # only when closed mid-drain
                pending = tail.waiting.popleft()
                if not pending.fut.done():
                    pending.fut.set_exception(StoreError("the store was closed"))
            tail.busy = False
            self._forget_if_done(run_id, tail)

    async def _write_now(
        self, run_id: str, tail: RunTail, entries: Sequence[JournalEntry],
        record: RunRecord | None,
    ) -> None:
        if tail.unsettled is not None or (record is None and not tail.known):
            await self._settle(run_id, tail)
        if record is not None:
            await self._put(tail, record, entries)
        else:
            await self._append_entries(run_id, tail, entries)

    async def _put(
        self, tail: RunTail, record: RunRecord, entries: Sequence[JournalEntry]
    ) -> None:
        """Write ``record`` (and entries) if its version is current; bumps ``record.version``."""
        old = record.version
        record.version = old + 1  # what the stored copy says once written
        record.updated_at = time.time()
        counter = next(self._ids)
        args, size = self._record_args("update", record, old, entries, counter)
        tail.unsettled = (counter, record)  # until the reply says how it went
        try:  # sent again as it is while Redis is away: the script knows its own retry
            reply = await self._send_run_write(record.run_id, args)
        except BaseException as exc:
            record.version = old
            if isinstance(exc, (*UNAVAILABLE, ResponseError)):
                error = translated(exc)
                if not isinstance(error, StoreUnavailableError):
                    tail.unsettled = None  # refused: it did not apply
                    if isinstance(error, StaleRunError):
                        tail.fenced = True
                raise error from exc
            raise
        tail.unsettled = None
        tail.fenced = False
        tail.version, tail.length = int(reply[0]), int(reply[1])
        tail.finished = record.status in TERMINAL_STATUSES
        if tail.finished:
            self._reaper.ensure_started()  # this process writes runs that expire: tidy up
        self._count(len(entries), size)

    async def _append_entries(
        self, run_id: str, tail: RunTail, entries: Sequence[JournalEntry]
    ) -> None:
        """A checkpoint without the record: one XADD at ``<held version>-<last seq + 2>``."""
        if tail.fenced:
            raise StaleRunError(f"{run_id}: another writer advanced it past version {tail.version}")
        version, length = tail.version, tail.length + len(entries)
        entry_id = f"{version}-{length + 1}"
        payload = self._payload(entries)
        key = self._journal_key(run_id)
        tail.length = -1  # unknown until the reply comes: an interrupted write may have landed
        try:  # the hot path: plain try, no context manager
            added = await self._send_run_write(
                run_id, ("XADD", key, "NOMKSTREAM", entry_id, "e", payload)
            )
        except ResponseError as exc:
            if _STALE_ID not in str(exc):
                raise translated(exc) from exc
            # Overtaken — unless this is a retry of our own write that did land.
            async with translate_errors():
                rows = await self._send_run_write(run_id, ("XRANGE", key, entry_id, entry_id))
            if not (rows and rows[0][1][1] == payload):
                tail.fenced = True
                raise StaleRunError(
                    f"{run_id}: another writer advanced it past version {version}"
                ) from None
            added = True
        except UNAVAILABLE as exc:
            raise translated(exc) from exc
        if added is None:
            raise RunNotFoundError(run_id)
        tail.length = length
        self._count(len(entries), len(payload))

    def _send_run_write(self, run_id: str, args: tuple[Any, ...]) -> Awaitable[Any]:
        """Send one command of a run's write: fail fast, or held through an outage when
        ``outage_hold_s`` says so (the command is sent again unchanged: every run write is
        idempotent and fenced)."""
        if self.outage_hold_s <= 0:
            return self._pipe.submit(*args)
        return send_held(lambda: self._pipe.submit(*args), self.outage_hold_s, f"run {run_id}")

    async def _settle(self, run_id: str, tail: RunTail) -> None:
        """Learn where the run stands: its version, whether our interrupted record write
        landed, whether another holder advanced it, and the journal's length."""
        async with translate_errors():
            head, last = await send_held(
                lambda: self._pipe.execute_all(
                    ("HMGET", self._run_key(run_id), "v", "wp", "wc"),
                    ("XREVRANGE", self._journal_key(run_id), "+", "-", "COUNT", 1),
                ),
                self.outage_hold_s, f"run {run_id}",
            )
        raw_version, writer, write_count = head
        if raw_version is None:
            raise RunNotFoundError(run_id)
        version = int(raw_version)
        if tail.unsettled is not None:
            counter, record = tail.unsettled
            tail.unsettled = None
            if writer is not None and writer.decode() == self._writer and int(
                write_count
            ) >= counter:  # it landed: the holder's record is at the version it wrote
                record.version = tail.version = version
                tail.finished = record.status in TERMINAL_STATUSES
        if tail.version < 0:  # not written through this store before: take the run as it is
            tail.version = version
        elif version != tail.version:
            tail.fenced = True
        tail.length = _seq_part(last[0][0]) - 1 if last else 0

    # -- reads ------------------------------------------------------------------------------

    def _cancel_key(self, run_id: str) -> str:
        return f"{self.prefix}:{{{run_id}}}:cancel"

    async def request_cancel(self, run_id: str) -> None:
        """Leave the request where every worker sees it (kept a day, then forgotten)."""
        async with translate_errors():
            await self._pipe.execute("SET", self._cancel_key(run_id), b"1", "EX", 86_400)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        if not run_ids:
            return set()
        async with translate_errors():
            flags = await self._pipe.execute("MGET", *map(self._cancel_key, run_ids))
        return {run_id for run_id, flag in zip(run_ids, flags, strict=True) if flag}

    async def get(self, run_id: str) -> RunRecord | None:
        async with translate_errors():
            raw: bytes | None = await self._pipe.execute("HGET", self._run_key(run_id), "r")
        if raw is None:
            return None
        return self._record_dec.decode(raw)

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        async with translate_errors():
            rows, exists = await self._pipe.execute_all(
                ("XRANGE", self._journal_key(run_id), "-", "+"),
                ("EXISTS", self._run_key(run_id)),
            )
        if not rows and not exists:
            raise RunNotFoundError(run_id)
        items = self._decode_rows(rows)
        return [item for item in items if item[0] > after] if after >= 0 else items

    def _decode_rows(self, rows: list[Any]) -> list[JournalItem]:
        """Raw stream rows ``[id, [b"e", payload]]`` to ``(seq, entry)`` pairs."""
        decode = self._entries_dec.decode
        out: list[JournalItem] = []
        for sid, fields in rows:
            entries = decode(fields[1])
            first = _seq_part(sid) - 1 - len(entries)
            out.extend((first + i, e) for i, e in enumerate(entries))
        return out

    async def wait_journal(
        self, run_id: str, after: int, timeout: float
    ) -> list[JournalItem]:
        """Entries after ``after``, waiting up to ``timeout`` with XREAD BLOCK (any machine).

        The wait is the process's one blocking read of every followed journal (see
        :mod:`podium.store.redis_follow`): a follower holds no connection, and one that
        is cancelled (its client left) costs Redis nothing more. While Redis is away it
        keeps trying (with backoff) until ``timeout`` has passed, then returns nothing:
        a follower rides out an outage instead of being cut at the first failed read.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        failures = 0
        while True:
            try:
                return await self._wait_once(run_id, after, deadline - time.monotonic())
            except StoreUnavailableError:
                left = deadline - time.monotonic()
                if timeout <= 0:
                    raise
                if left <= 0:
                    return []
                failures += 1
                await asyncio.sleep(min(left, 0.05 * 2 ** min(failures, 5)))

    async def _wait_once(self, run_id: str, after: int, timeout: float) -> list[JournalItem]:
        key = self._journal_key(run_id)
        async with translate_errors():
            last = await self._pipe.execute("XREVRANGE", key, "+", "-", "COUNT", 1)
        if (last and _seq_part(last[0][0]) - 2 > after) or timeout <= 0:
            return await self.journal(run_id, after)
        if not last:  # an empty journal, or no such run (that raises RunNotFoundError)
            await self.journal(run_id, after)
        start = last[0][0] if last else b"0-1"
        # Woken by the process's one reader of every followed journal: a follower holds
        # no connection of its own, and one whose client left just stops waiting.
        async with translate_errors():
            if not await self._waiter.wait(key, start, timeout):
                return []
            rows = await self._pipe.execute("XRANGE", key, b"(" + start, "+")
        items = self._decode_rows(rows)
        return [item for item in items if item[0] > after]

    # -- expiry -----------------------------------------------------------------------------

    async def _reap_once(self) -> tuple[int, int]:
        async with translate_errors():
            due, removed = await self._pipe.execute(
                "EVALSHA", self._reap, 1, self._exp, self.prefix, self._idx, _REAP_BATCH
            )
        return int(due), int(removed)

    async def reap_expired(self, *, rounds: int = 1_000) -> int:
        """Remove the runs and threads whose expiry has passed from every index now (the
        background reaper does so every ``reap_every_s``); returns how many left."""
        return await self._reaper.drain(rounds)

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self._runs, self._appends, self._entries, self._bytes, self._lost)

    async def health(self) -> str | None:
        """Whether Redis takes a write now and keeps its keys (see
        :mod:`podium.store.redis_health`); cached a second or two."""
        return await self._health.problem()

    async def aclose(self) -> None:
        await self._reaper.aclose()
        for task in list(self._drains):
            await stop_task(task)
        await self._waiter.aclose()
        await self._health.aclose()
        await self._pipe.aclose()
        if self._own_client:
            await self.client.aclose()
