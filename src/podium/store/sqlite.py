"""The embedded default run store: one SQLite file in WAL mode.

All database work happens on one dedicated thread, so the event loop never
blocks on disk. Writes queued while a transaction is in progress are grouped
into the next one (group commit): at thousands of concurrent runs, many
steps' checkpoints share one fsync. Entries are MessagePack-encoded on the
loop (that CPU is booked to the ``checkpoint`` phase), and each checkpoint
inserts only the rows its step added.

``synchronous="NORMAL"`` (the default) survives a killed process; choose
``"FULL"`` to also survive a power cut at the cost of an fsync per commit.

A store opened with ``read_only=True`` only looks (``podium runs``): it opens the file
read-only, writes nothing, and is not counted among the processes that use the file
(see :meth:`SQLiteRunStore.sole_user`), so a server started meanwhile still resumes the
runs an earlier one left. A full disk, an I/O error or a file turned read-only under a
writer is an outage of the store's medium, not a bug: the write is refused with
:class:`~podium.errors.StoreUnavailableError` and :attr:`SQLiteRunStore.write_error`
says so until a write succeeds again; :meth:`SQLiteRunStore.file_problem` tells when
the file was deleted or replaced under the store.

Record writes are fenced like in every store: one whose version is not the
stored one is refused with :class:`~podium.errors.StaleRunError`, and so is a
journal-only append from a store whose record write was overtaken by another
(a second process on the same file). Finished runs expire after
``finished_ttl_s`` if it is set.
"""

from __future__ import annotations

import asyncio
import builtins
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from podium.engine.records import JournalEntry, RunRecord
from podium.errors import (
    RunNotFoundError,
    StaleRunError,
    StoreError,
    ThreadNotFoundError,
)
from podium.memory.item import MemoryItem
from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.listing import list_runs_sql, qmark
from podium.store.sqlite_file import LIVE, MAX_SEQ, SQLiteFile, Timed, read_only_reason
from podium.threads.record import ThreadRecord

__all__ = ("SQLiteRunStore", "read_only_reason")


class SQLiteRunStore(SQLiteFile, RunStore):
    """Runs and journals in one SQLite file. Example::

    async with SQLiteRunStore("podium.sqlite") as store:
        async with Engine(store) as engine:
            await engine.run(agent, "hello")
    """

    async def create(self, record: RunRecord) -> None:
        record.updated_at = record.updated_at or record.created_at
        blob = self._encoder.encode(record)

        def op(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO runs (run_id, tenant, agent, status, created_at, version, record)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.run_id,
                        record.tenant,
                        record.agent,
                        record.status,
                        record.created_at,
                        record.version,
                        blob,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"run {record.run_id} exists") from exc
            self._next_seq[record.run_id] = 0

        await self._submit(op)

    async def get(self, run_id: str) -> RunRecord | None:
        def op(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                f"SELECT record FROM runs WHERE run_id = ? AND {LIVE}", (run_id, time.time())
            ).fetchone()
            return None if row is None else bytes(row[0])

        blob = await self._submit(op)
        return None if blob is None else self._record_decoder.decode(blob)

    async def update(self, record: RunRecord) -> None:
        expected = record.version
        record.version += 1
        record.updated_at = time.time()
        blob = self._encoder.encode(record)
        run_id, status = record.run_id, record.status

        def op(conn: sqlite3.Connection) -> None:
            self._write_record(conn, run_id, status, blob, expected)
            self._hold(run_id, status, expected + 1)

        try:
            await self._submit(op)
        except asyncio.CancelledError:
            raise  # the op is queued and applies in order: the caller's version is right
        except BaseException:
            record.version = expected  # a refused write leaves the caller's version alone
            raise

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> int | None:
        encode = self._encoder.encode
        rows = [(entry, encode(entry)) for entry in entries]
        blob: bytes | None = None
        expected = -1
        status = ""
        if record is not None:
            expected, status = record.version, record.status
            record.version += 1
            record.updated_at = entries[-1].ts if entries else record.updated_at
            blob = encode(record)
        size = sum(len(data) for _, data in rows)

        def op(conn: sqlite3.Connection) -> None:
            if record is not None and blob is not None:  # fenced first: a refused one adds nothing
                self._write_record(conn, run_id, status, blob, expected)
                seq = self._next_seq.get(run_id)
                if seq is None:
                    seq = self._max_seq(conn, run_id)
            else:
                seq = self._seq(conn, run_id)
            try:
                conn.executemany(
                    "INSERT INTO journal VALUES (?, ?, ?, ?, ?)",
                    [
                        (run_id, seq + i, getattr(entry, "step", -1), type(entry).__name__, data)
                        for i, (entry, data) in enumerate(rows)
                    ],
                )
            except sqlite3.IntegrityError as exc:  # another store appended to it meanwhile
                self._next_seq.pop(run_id, None)
                raise StaleRunError(f"run {run_id}: another writer appended at seq {seq}") from exc
            self._next_seq[run_id] = seq + len(rows)
            if record is not None:
                self._hold(run_id, status, expected + 1)

        try:
            spent: int | None = await self._submit(Timed(op))  # answered its CPU share
        except asyncio.CancelledError:
            raise  # the op is queued and applies in order: the caller's version is right
        except BaseException:
            if record is not None:
                record.version = expected
            raise
        self._appends += 1
        self._entries += len(rows)
        self._bytes += size
        if self._notifier is not None:
            self._notifier.notify(run_id)
        return spent

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        def op(conn: sqlite3.Connection) -> list[tuple[int, bytes]] | None:
            live = conn.execute(
                f"SELECT 1 FROM runs WHERE run_id = ? AND {LIVE}", (run_id, time.time())
            ).fetchone()
            if live is None:
                return None
            rows = conn.execute(
                "SELECT seq, data FROM journal WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, max(-1, min(after, MAX_SEQ))),
            ).fetchall()
            return [(seq, bytes(data)) for seq, data in rows]

        rows = await self._submit(op)
        if rows is None:
            raise RunNotFoundError(run_id)
        decode = self._entry_decoder.decode
        return [(seq, decode(data)) for seq, data in rows]

    async def list(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 100,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        sql, params = list_runs_sql(
            "runs", qmark, tenant=tenant, status=status, agent=agent, since=since,
            until=until, now=time.time(), limit=limit,
        )

        def op(conn: sqlite3.Connection) -> list[bytes]:
            return [bytes(r[0]) for r in conn.execute(sql, params).fetchall()]

        decode = self._record_decoder.decode
        return [decode(blob) for blob in await self._submit(op)]

    async def request_cancel(self, run_id: str) -> None:
        """Leave the request in the file, where every process on it (and a restart) sees it."""

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO cancels VALUES (?, ?)", (run_id, time.time())
            )

        await self._submit(op)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        if not run_ids:
            return set()
        ids = list(run_ids)

        def op(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(ids), 500):  # under SQLite's bound-parameter limit
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found.update(
                    r[0] for r in conn.execute(
                        f"SELECT run_id FROM cancels WHERE run_id IN ({marks})", chunk
                    )
                )
            return found

        return await self._submit(op)

    # -- threads ----------------------------------------------------------------------------

    async def create_thread(self, thread: ThreadRecord) -> None:
        thread.updated_at = thread.updated_at or thread.created_at
        blob = self._encoder.encode(thread)
        row = (thread.thread_id, thread.tenant, thread.updated_at, thread.version, blob,
               thread.expires_at)

        def op(conn: sqlite3.Connection) -> None:
            now = time.time()
            conn.execute("DELETE FROM threads WHERE expires_at <= ?", (now,))  # tidy, rarely
            try:
                conn.execute("INSERT INTO threads VALUES (?, ?, ?, ?, ?, ?)", row)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"thread {thread.thread_id} exists") from exc

        await self._submit(op)

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        def op(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                f"SELECT record FROM threads WHERE thread_id = ? AND {LIVE}",
                (thread_id, time.time()),
            ).fetchone()
            return None if row is None else bytes(row[0])

        blob = await self._submit(op)
        return None if blob is None else self._thread_decoder.decode(blob)

    async def update_thread(self, thread: ThreadRecord) -> None:
        expected = thread.version
        thread.version += 1
        blob = self._encoder.encode(thread)
        thread_id, updated, expires = thread.thread_id, thread.updated_at, thread.expires_at

        def op(conn: sqlite3.Connection) -> None:
            now = time.time()
            cur = conn.execute(
                "UPDATE threads SET updated_at = ?, version = ?, record = ?, expires_at = ?"
                f" WHERE thread_id = ? AND version = ? AND {LIVE}",
                (updated, expected + 1, blob, expires, thread_id, expected, now),
            )
            if cur.rowcount == 0:
                row = conn.execute(
                    f"SELECT version FROM threads WHERE thread_id = ? AND {LIVE}",
                    (thread_id, now),
                ).fetchone()
                if row is None:
                    raise ThreadNotFoundError(thread_id)
                raise StaleRunError(
                    f"thread {thread_id} is at version {row[0]}, this writer holds {expected}"
                )

        try:
            await self._submit(op)
        except asyncio.CancelledError:
            raise
        except BaseException:
            thread.version = expected
            raise

    async def list_threads(
        self, *, tenant: str | None = None, limit: int = 100
    ) -> builtins.list[ThreadRecord]:
        where = f"{LIVE}" if tenant is None else f"tenant = ? AND {LIVE}"
        params: list[Any] = [] if tenant is None else [tenant]
        params += [time.time(), max(limit, 0)]
        sql = f"SELECT record FROM threads WHERE {where} ORDER BY updated_at DESC LIMIT ?"

        def op(conn: sqlite3.Connection) -> builtins.list[bytes]:
            return [bytes(r[0]) for r in conn.execute(sql, params).fetchall()]

        decode = self._thread_decoder.decode
        return [decode(blob) for blob in await self._submit(op)]

    async def delete_thread(self, thread_id: str) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                f"DELETE FROM threads WHERE thread_id = ? AND {LIVE}", (thread_id, time.time())
            )
            return cur.rowcount > 0

        return await self._submit(op)

    # -- long-term memory -------------------------------------------------------------------

    async def put_memory(self, namespace: str, item: MemoryItem) -> None:
        row = (namespace, item.key, item.created_at, self._encoder.encode(item))

        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO memories VALUES (?, ?, ?, ?)", row)

        await self._submit(op)

    async def list_memories(self, namespace: str, limit: int = 1000) -> builtins.list[MemoryItem]:
        def op(conn: sqlite3.Connection) -> builtins.list[bytes]:
            rows = conn.execute(
                "SELECT item FROM memories WHERE namespace = ? ORDER BY created_at DESC LIMIT ?",
                (namespace, max(limit, 0)),
            ).fetchall()
            return [bytes(r[0]) for r in rows]

        decode = self._memory_decoder.decode
        return [decode(blob) for blob in await self._submit(op)]

    async def delete_memory(self, namespace: str, key: str) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM memories WHERE namespace = ? AND key = ?", (namespace, key)
            )
            return cur.rowcount > 0

        return await self._submit(op)

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(len(self._next_seq), self._appends, self._entries, self._bytes)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._ops.put(None)
            await asyncio.to_thread(self._thread.join)
        if self._users is not None:
            self._users.leave()
