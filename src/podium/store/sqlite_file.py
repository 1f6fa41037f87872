"""The file under :class:`~podium.store.sqlite.SQLiteRunStore`: one SQLite database in
WAL mode, every statement run on one dedicated thread (the loop never blocks on disk),
writes queued meanwhile grouped into the next transaction (group commit), and the file's
health (its other users, a refused write, a file deleted or replaced underneath).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import queue
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from podium.engine.records import TERMINAL_STATUSES, JournalEntry, RunRecord
from podium.errors import (
    ConfigError,
    RunNotFoundError,
    StaleRunError,
    StoreError,
    StoreUnavailableError,
)
from podium.memory.item import MemoryItem
from podium.store.file_users import FileUsers
from podium.store.notify import JournalNotifier
from podium.threads.record import ThreadRecord

__all__ = ("SQLiteFile", "read_only_reason")

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id     TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    agent      TEXT NOT NULL,
    status     TEXT NOT NULL,
    created_at REAL NOT NULL,
    version    INTEGER NOT NULL,
    record     BLOB NOT NULL,
    expires_at REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_by_tenant ON runs (tenant, created_at);
-- Waiting runs (parked on a human) are found by status: the sweep of their deadlines.
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, created_at);
-- The newest runs, and runs within a time window, found without a scan of every run.
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at);
CREATE TABLE IF NOT EXISTS journal (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    step   INTEGER NOT NULL,
    kind   TEXT NOT NULL,
    data   BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS threads (
    thread_id  TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    updated_at REAL NOT NULL,
    version    INTEGER NOT NULL,
    record     BLOB NOT NULL,
    expires_at REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS threads_by_tenant ON threads (tenant, updated_at);
CREATE TABLE IF NOT EXISTS memories (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    created_at REAL NOT NULL,
    item       BLOB NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memories_by_age ON memories (namespace, created_at);
CREATE TABLE IF NOT EXISTS cancels (
    run_id TEXT PRIMARY KEY,
    at     REAL NOT NULL
) WITHOUT ROWID;
"""

_EXPIRY_INDEX = (
    "CREATE INDEX IF NOT EXISTS runs_expiry ON runs (expires_at) WHERE expires_at IS NOT NULL"
)
LIVE = "(expires_at IS NULL OR expires_at > ?)"
_PURGE_EVERY_S = 1.0
_FRESH_FAILURE_S = 10.0  # how long a refused write keeps readiness down (see problem())
MAX_SEQ = 2**63 - 1  # SQLite's largest integer: a larger ``after`` asks for nothing

_Op = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]"]


def read_only_reason(path: str | Path) -> str | None:
    """Why this process cannot write the SQLite database at ``path`` (or create it there),
    or None. SQLite writes its ``-wal`` and ``-shm`` files beside the database, so its
    directory must be writable too. (``os.access`` answers for root as well: root may
    write any file, but not on a read-only file system.)"""
    p = Path(path)
    if sys.platform != "win32":
        with contextlib.suppress(OSError):  # a missing directory is said elsewhere
            if os.statvfs(p if p.exists() else p.parent).f_flag & os.ST_RDONLY:
                return "it is on a read-only file system"
    if p.exists() and not os.access(p, os.W_OK):
        return "this process may not write the file"
    if p.parent.is_dir() and not os.access(p.parent, os.W_OK):
        return (
            f"this process may not write its directory {str(p.parent)!r}, where SQLite "
            "keeps its -wal and -shm files"
        )
    for suffix in ("-wal", "-shm"):
        side = p.with_name(p.name + suffix)
        if side.exists() and not os.access(side, os.W_OK):
            return f"this process may not write its {suffix} file"
    return None


class Timed:
    """An op whose result is its share of its batch's CPU on the database thread (the
    statements, the commit's write of the WAL): what a journal write cost off the loop."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[sqlite3.Connection], None]) -> None:
        self.fn = fn

    def __call__(self, conn: sqlite3.Connection) -> None:
        self.fn(conn)


def _give_cpu_shares(
    batch: list[_Op],
    outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]],
    spent: int,
) -> None:
    """The batch's CPU split evenly among its ops (one commit serves them all): each
    successful timed op is answered its share."""
    share = spent // len(batch)
    for i, (fn, _) in enumerate(batch):
        if type(fn) is Timed and outcomes[i][2] is None:
            outcomes[i] = (outcomes[i][0], share, None)


class SQLiteFile:
    """The database thread and its file; :class:`~podium.store.sqlite.SQLiteRunStore`
    adds the run store's methods, each one function submitted to the thread."""

    #: Another process on the same file appends without waking us: look this often.
    _notify_poll_s: float | None = 0.25

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        busy_timeout_s: float = 5.0,
        finished_ttl_s: float | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if self.path.is_dir():
            raise ConfigError(
                f"{self.path} is a directory: SQLiteRunStore takes the database file's path, "
                f"e.g. {str(self.path / 'runs.sqlite')!r}"
            )
        self.finished_ttl_s = finished_ttl_s
        self._next_purge = 0.0  # owned by the database thread
        self._synchronous = synchronous
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        self._encoder = msgspec.msgpack.Encoder()
        self._record_decoder = msgspec.msgpack.Decoder(RunRecord)
        self._entry_decoder = msgspec.msgpack.Decoder(JournalEntry)
        self._thread_decoder = msgspec.msgpack.Decoder(ThreadRecord)
        self._memory_decoder = msgspec.msgpack.Decoder(MemoryItem)
        self._ops: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_seq: dict[str, int] = {}  # owned by the database thread
        self._held: dict[str, int] = {}  # run -> version this store wrote last (db thread)
        self._notifier: JournalNotifier | None = JournalNotifier()
        self._appends = 0
        self._entries = 0
        self._bytes = 0
        self._closed = False
        # (sqlite3 is not opened with uri=True, so ":memory:" is the one private database.)
        self._private = str(path) == ":memory:"
        # Every process driving runs from the file holds a shared lock beside it (see
        # sole_user). A read-only store drives nothing: counted, a `podium runs tail` left
        # open kept a restarted server from resuming the runs an earlier one left.
        lock = self.path.with_name(f"{self.path.name}.lock")
        self._users = None if self._private or read_only else FileUsers(lock)
        # Written by the database thread, read by readiness checks (one assignment each).
        self._write_error: str | None = None
        self._write_error_at = 0.0  # time.monotonic() of that failure
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened

    def sole_user(self) -> bool | None:
        """Whether no other process has this file open as a store now (a private
        ``:memory:`` database has no other user; None where the system cannot tell, and
        for a read-only store, which drives no runs to resume)."""
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        if self.read_only:
            return None
        if self._users is None:
            return True
        self._join_users()
        return self._users.alone()

    def other_users(self) -> builtins.list[int]:
        """The process ids of the other processes using this file as a store now, where
        the system tells (Linux); empty where it cannot, or for a read-only store."""
        return [] if self._users is None else self._users.others()

    @property
    def write_error(self) -> str | None:
        """Why the last write to the file failed for want of its medium (the disk is full,
        an I/O error, the file turned read-only; a read's I/O error too), or None: before
        any such failure, and again once a later write has committed (a read does not
        clear it: it proves nothing about the room left). A readiness check reads it:
        while it is set, writes are likely refused with :class:`StoreUnavailableError`."""
        return self._write_error

    def problem(self) -> str | None:
        """What readiness reports: the file gone or replaced, or a write its medium refused
        in the last :data:`_FRESH_FAILURE_S` with none committed since. A failure ages out:
        a server that takes no traffic while it is not ready would write nothing to prove
        the disk has room again, and stay not ready for good; the next refused write says
        so again."""
        moved = self.file_problem()
        if moved is not None:
            return moved
        failed = self._write_error
        if failed is not None and time.monotonic() - self._write_error_at < _FRESH_FAILURE_S:
            return failed
        return None

    def file_problem(self) -> str | None:
        """Why the store's file is no longer the one at its path, or None while it is.

        The store keeps the file it opened: deleted or replaced under it (a clean-up
        script, a restore), it goes on answering from the old one, and what it writes is
        lost once it closes. A few microseconds (one ``stat``): fit for a readiness check.
        None too before the file is first opened, and for ``:memory:``."""
        opened = self._identity
        if opened is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return (
                f"{self.path} was deleted while the store had it open: what it writes now "
                "is lost when it closes (restart on the file)"
            )
        except OSError as exc:
            return f"{self.path}: cannot look at the store's file: {exc.strerror or exc}"
        if (st.st_dev, st.st_ino) != opened:
            return (
                f"{self.path} was replaced by another file while the store had it open: "
                "what it writes now is lost when it closes (restart on the file)"
            )
        return None

    def _join_users(self) -> None:
        """Count this process among the file's users: a lock file that cannot be created
        (a read-only directory) is one line that says why, not an OSError's traceback."""
        assert self._users is not None
        try:
            self._users.join()
        except OSError as exc:
            raise self._cannot_open(exc) from None

    def _cannot_open(self, exc: sqlite3.Error | OSError) -> StoreError:
        why = None if self._private else read_only_reason(self.path)
        if why is not None:
            return StoreError(f"{self.path} is read-only: {why}")
        return StoreError(f"{self.path}: cannot open as a SQLite database: {exc}")

    # -- plumbing ---------------------------------------------------------------------------

    def _submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._closed:
            raise StoreError(f"{self.path}: store is closed")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
        future: asyncio.Future[T] = loop.create_future()
        self._ops.put((fn, future))
        return future

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve ``loop``: the first one, or the next once it has closed (a script calling
        ``asyncio.run`` twice); the database thread answers on the loop bound now."""
        if self._loop is not None and not self._loop.is_closed():
            raise StoreError(
                f"{self.path}: this store serves another event loop, still open; "
                "open one SQLiteRunStore per loop"
            )
        if self._thread is None and self._users is not None:
            self._join_users()  # first: refused, the store is left unbound, as it was
        self._loop = loop
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="podium-sqlite", daemon=True)
            self._thread.start()

    def _answer(
        self, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
    ) -> None:
        """Hand ``outcomes`` to the loop (from the database thread). A loop closed since
        has nobody left to hear them."""
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # "Event loop is closed"
            self._loop.call_soon_threadsafe(self._resolve, outcomes)

    def _open(self) -> sqlite3.Connection:
        conn = self._open_read_only() if self.read_only else self._open_writable()
        if not self._private:
            with contextlib.suppress(OSError):  # (gone already: file_problem cannot tell)
                st = os.stat(self.path)
                self._identity = (st.st_dev, st.st_ino)
        return conn

    def _open_read_only(self) -> sqlite3.Connection:
        """Open the file to look, never to write: a viewer changes nothing, and works on a
        file it may not write where SQLite can (the -shm file beside it exists, or can
        be created)."""
        conn = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode=ro",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=self._busy_timeout_ms / 1000,
        )
        try:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
        except sqlite3.Error as exc:
            conn.close()
            why = read_only_reason(self.path)
            if why is None:
                raise
            raise StoreError(
                f"{self.path} is read-only: {why}, and SQLite cannot read a WAL database "
                f"there without the -shm file beside it ({exc}); copy the file to a "
                "writable directory to look at it"
            ) from None
        if "expires_at" not in columns:  # another application's file, or a very old one
            conn.close()
            raise StoreError(
                f"{self.path}: not a Podium run store of this version (open it once with "
                "`podium serve` or `podium run`, which upgrade it)"
            )
        return conn

    def _open_writable(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self._private and (why := read_only_reason(self.path)) is not None:
            raise StoreError(f"{self.path} is read-only: {why}")
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self._busy_timeout_ms / 1000,  # the busy timeout, from the first statement
        )
        try:
            self._enter_wal(conn)
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.executescript(_SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
            if "expires_at" not in columns:  # a file from before expiry existed
                conn.execute("ALTER TABLE runs ADD COLUMN expires_at REAL")
            conn.execute(_EXPIRY_INDEX)
        except BaseException:
            conn.close()
            raise
        return conn

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL. Two handles opening a new file at once (a server and a
        CLI, two workers) race to change its journal mode, and SQLite answers the loser
        "database is locked" at once, calling no busy handler: so it is retried here, on
        the database thread, within the busy timeout."""
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.002)

    def _refuse(self, error: StoreError) -> None:
        """Fail every call with ``error`` until closed: a store that cannot open its file
        (not a SQLite database, no permission) answers at once instead of never."""
        assert self._loop is not None
        while True:
            op = self._ops.get()
            if op is None:
                return
            outcome: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
            outcome = [(op[1], None, error)]
            self._answer(outcome)

    def _serve(self) -> None:
        try:
            conn = self._open()
        except StoreError as exc:
            self._refuse(exc)
            return
        except (sqlite3.Error, OSError) as exc:
            self._refuse(self._cannot_open(exc))
            return
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
        held_before = dict(self._held)
        changes = conn.total_changes
        committed = False
        started = time.thread_time_ns()  # this thread's CPU: its writes' share goes back
        try:
            # A viewer reads in a deferred transaction: it never queues for the write lock.
            conn.execute("BEGIN" if self.read_only else "BEGIN IMMEDIATE")
            if not self.read_only:
                self._purge(conn)
            for fn, future in batch:
                conn.execute("SAVEPOINT op")
                try:
                    value = fn(conn)
                except sqlite3.Error as exc:
                    if not conn.in_transaction:  # SQLite rolled it all back (a full disk…)
                        raise
                    conn.execute("ROLLBACK TO op")
                    outcomes.append((future, None, self._store_error(exc)))
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    outcomes.append((future, None, exc))
                else:
                    outcomes.append((future, value, None))
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
            committed = True
        except sqlite3.Error as exc:
            # On a failing disk the rollback may fail too: the thread must go on answering.
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            self._next_seq = seq_before
            self._held = held_before
            error = self._store_error(exc)
            outcomes = [(future, None, error) for _, future in batch]
        self._note_medium(outcomes, wrote=committed and conn.total_changes > changes)
        if committed:
            _give_cpu_shares(batch, outcomes, time.thread_time_ns() - started)
        self._answer(outcomes)

    def _store_error(self, exc: sqlite3.Error) -> StoreError:
        """The store's error for SQLite's ``exc``: an outage of the file's medium is a
        :class:`StoreUnavailableError` (answered 503, retried by workers), anything else
        a :class:`StoreError`."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = None if code is None else code & 0xFF  # the extended code's primary part
        if primary == sqlite3.SQLITE_READONLY and self.read_only:
            return StoreError(f"{self.path}: this store was opened read-only ({exc})")
        if primary == sqlite3.SQLITE_FULL:
            what = "the disk is full"
        elif primary == sqlite3.SQLITE_IOERR:
            what = "its disk failed a read or write"
        elif primary == sqlite3.SQLITE_READONLY:
            what = "it has turned read-only (a file system remounted read-only after errors?)"
        else:
            return StoreError(f"{self.path}: {exc}")
        return StoreUnavailableError(
            f"{self.path}: {what} ({exc}); nothing of this write was stored"
        )

    def _note_medium(
        self, outcomes: list[tuple[asyncio.Future[Any], Any, BaseException | None]], wrote: bool
    ) -> None:
        """Keep :attr:`write_error` up to date: set by a write its medium refused, cleared
        by one that committed changes (a read proves nothing about the disk)."""
        for _, _, exc in outcomes:
            if isinstance(exc, StoreUnavailableError):
                self._write_error = str(exc)
                self._write_error_at = time.monotonic()
                return
        if wrote:
            self._write_error = None

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

    def _purge(self, conn: sqlite3.Connection) -> None:
        """Delete expired finished runs (at most once a second, inside a write batch)."""
        now = time.time()
        if self.finished_ttl_s is None or now < self._next_purge:
            return
        self._next_purge = now + _PURGE_EVERY_S
        expired = [r[0] for r in conn.execute(
            "SELECT run_id FROM runs WHERE expires_at <= ?", (now,)
        ).fetchall()]
        for run_id in expired:
            conn.execute("DELETE FROM journal WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM cancels WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            self._next_seq.pop(run_id, None)
            self._held.pop(run_id, None)

    def _seq(self, conn: sqlite3.Connection, run_id: str) -> int:
        """The next sequence number of the run's journal (looked up once, then cached).

        A run whose record this store wrote is fenced: if another store has written
        the record since, the append is refused as stale.
        """
        held = self._held.get(run_id)
        seq = self._next_seq.get(run_id)
        if held is not None or seq is None:
            row = conn.execute("SELECT version FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            if held is not None and row[0] != held:
                raise StaleRunError(f"{run_id}: another writer advanced it past version {held}")
        return self._max_seq(conn, run_id) if seq is None else seq

    def _max_seq(self, conn: sqlite3.Connection, run_id: str) -> int:
        row = conn.execute("SELECT MAX(seq) FROM journal WHERE run_id = ?", (run_id,)).fetchone()
        return 0 if row[0] is None else int(row[0]) + 1

    def _write_record(
        self, conn: sqlite3.Connection, run_id: str, status: str, blob: bytes, expected: int
    ) -> None:
        """Store a record encoded at submit time (the caller's object may have moved on)."""
        done = status in TERMINAL_STATUSES
        expires = None
        if done and self.finished_ttl_s is not None:
            expires = time.time() + self.finished_ttl_s
        cur = conn.execute(
            "UPDATE runs SET status = ?, version = ?, record = ?, expires_at = ?"
            " WHERE run_id = ? AND version = ?",
            (status, expected + 1, blob, expires, run_id, expected),
        )
        if cur.rowcount == 0:
            row = conn.execute("SELECT version FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            raise StaleRunError(f"{run_id} is at version {row[0]}, this writer holds {expected}")

    def _hold(self, run_id: str, status: str, version: int) -> None:
        """After a record write committed: the version this store's appends are fenced by."""
        if status in TERMINAL_STATUSES:
            self._held.pop(run_id, None)
        else:
            self._held[run_id] = version

    # -- RunStore ---------------------------------------------------------------------------
