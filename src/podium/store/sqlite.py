"""The embedded default run store: one SQLite file in WAL mode.

All database work happens on one dedicated thread, so the event loop never
blocks on disk. Writes queued while a transaction is in progress are grouped
into the next one (group commit): at thousands of concurrent runs, many
steps' checkpoints share one fsync. Entries are MessagePack-encoded on the
loop (that CPU is booked to the ``checkpoint`` phase), and each checkpoint
inserts only the rows its step added.

``synchronous="NORMAL"`` (the default) survives a killed process; choose
``"FULL"`` to also survive a power cut at the cost of an fsync per commit.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from podium.engine.records import JournalEntry, RunRecord
from podium.errors import RunNotFoundError, StoreError
from podium.store.base import JournalItem, RunStore, StoreStatistics
from podium.store.notify import JournalNotifier

__all__ = ("SQLiteRunStore",)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id     TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    agent      TEXT NOT NULL,
    status     TEXT NOT NULL,
    created_at REAL NOT NULL,
    version    INTEGER NOT NULL,
    record     BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_by_tenant ON runs (tenant, created_at);
CREATE TABLE IF NOT EXISTS journal (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    step   INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"""

_Op = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]"]


class SQLiteRunStore(RunStore):
    """Runs and journals in one SQLite file. Example::

    async with SQLiteRunStore("podium.sqlite") as store:
        async with Engine(store) as engine:
            await engine.run(agent, "hello")
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        busy_timeout_s: float = 5.0,
    ) -> None:
        self.path = Path(path)
        self._synchronous = synchronous
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._encoder = msgspec.msgpack.Encoder()
        self._record_decoder = msgspec.msgpack.Decoder(RunRecord)
        self._entry_decoder = msgspec.msgpack.Decoder(JournalEntry)
        self._ops: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_seq: dict[str, int] = {}  # owned by the database thread
        self._notifier: JournalNotifier | None = JournalNotifier()
        self._appends = 0
        self._entries = 0
        self._bytes = 0
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------------

    def _submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._loop = loop
            self._thread = threading.Thread(target=self._serve, name="podium-sqlite", daemon=True)
            self._thread.start()
        future: asyncio.Future[T] = loop.create_future()
        self._ops.put((fn, future))
        return future

    def _serve(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        conn.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
        conn.executescript(_SCHEMA)
        try:
            while True:
                op = self._ops.get()
                if op is None:
                    return
                batch = [op]
                stop = False
                while True:  # group every op queued meanwhile into this transaction
                    try:
                        more = self._ops.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    batch.append(more)
                self._run_batch(conn, batch)
                if stop:
                    return
        finally:
            conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        seq_before = dict(self._next_seq)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, future in batch:
                conn.execute("SAVEPOINT op")
                try:
                    value = fn(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    outcomes.append((future, None, exc))
                else:
                    outcomes.append((future, value, None))
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._next_seq = seq_before
            error = StoreError(f"{self.path}: {exc}")
            outcomes = [(future, None, error) for _, future in batch]
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._resolve, outcomes)

    def _resolve(
        self, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
    ) -> None:
        for future, value, exc in outcomes:
            if future.done():
                continue
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)

    def _seq(self, conn: sqlite3.Connection, run_id: str) -> int:
        """The next sequence number of the run's journal (looked up once, then cached)."""
        seq = self._next_seq.get(run_id)
        if seq is None:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                raise RunNotFoundError(run_id)
            row = conn.execute(
                "SELECT MAX(seq) FROM journal WHERE run_id = ?", (run_id,)
            ).fetchone()
            seq = 0 if row[0] is None else row[0] + 1
        return seq

    def _write_record(self, conn: sqlite3.Connection, record: RunRecord, blob: bytes) -> None:
        cur = conn.execute(
            "UPDATE runs SET status = ?, version = ?, record = ? WHERE run_id = ?",
            (record.status, record.version, blob, record.run_id),
        )
        if cur.rowcount == 0:
            raise RunNotFoundError(record.run_id)

    # -- RunStore ---------------------------------------------------------------------------

    async def create(self, record: RunRecord) -> None:
        record.updated_at = record.updated_at or record.created_at
        blob = self._encoder.encode(record)

        def op(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
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
            row = conn.execute("SELECT record FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            return None if row is None else bytes(row[0])

        blob = await self._submit(op)
        return None if blob is None else self._record_decoder.decode(blob)

    async def update(self, record: RunRecord) -> None:
        record.version += 1
        record.updated_at = time.time()
        blob = self._encoder.encode(record)
        await self._submit(lambda conn: self._write_record(conn, record, blob))

    async def append(
        self, run_id: str, entries: Sequence[JournalEntry], *, record: RunRecord | None = None
    ) -> None:
        encode = self._encoder.encode
        rows = [(entry, encode(entry)) for entry in entries]
        blob: bytes | None = None
        if record is not None:
            record.version += 1
            record.updated_at = entries[-1].ts if entries else record.updated_at
            blob = encode(record)
        size = sum(len(data) for _, data in rows)

        def op(conn: sqlite3.Connection) -> None:
            seq = self._seq(conn, run_id)
            try:
                conn.executemany(
                    "INSERT INTO journal VALUES (?, ?, ?, ?, ?)",
                    [
                        (run_id, seq + i, getattr(entry, "step", -1), type(entry).__name__, data)
                        for i, (entry, data) in enumerate(rows)
                    ],
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"run {run_id}: journal conflict at seq {seq}") from exc
            self._next_seq[run_id] = seq + len(rows)
            if record is not None and blob is not None:
                self._write_record(conn, record, blob)

        await self._submit(op)
        self._appends += 1
        self._entries += len(rows)
        self._bytes += size
        if self._notifier is not None:
            self._notifier.notify(run_id)

    async def journal(self, run_id: str, after: int = -1) -> list[JournalItem]:
        def op(conn: sqlite3.Connection) -> list[tuple[int, bytes]] | None:
            rows = conn.execute(
                "SELECT seq, data FROM journal WHERE run_id = ? AND seq > ? ORDER BY seq",
                (run_id, after),
            ).fetchall()
            if (
                not rows
                and conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone()
                is None
            ):
                return None
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
    ) -> list[RunRecord]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("tenant", tenant), ("status", status), ("agent", agent)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT record FROM runs {where} ORDER BY created_at DESC LIMIT ?"
        params.append(limit)

        def op(conn: sqlite3.Connection) -> list[bytes]:
            return [bytes(r[0]) for r in conn.execute(sql, params).fetchall()]

        decode = self._record_decoder.decode
        return [decode(blob) for blob in await self._submit(op)]

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(len(self._next_seq), self._appends, self._entries, self._bytes)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._ops.put(None)
            await asyncio.to_thread(self._thread.join)
