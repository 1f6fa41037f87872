"""PostgreSQL's faults for ``bench_chaos.py --postgres``: statements on a loop of their
own (the chaos runs inside the bench's loop), a lock held to hang every statement on the
runs' table, a small disk filled to its last byte, and what the server's log says it
cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ("fill_disk", "hold_lock", "small_disk", "sql", "statements_cancelled",
           "with_statement_timeout")

#: What PostgreSQL logs when ``statement_timeout`` ends a statement.
_CANCELLED = "canceling statement due to statement timeout"


def with_statement_timeout(url: str, seconds: float) -> str:
    """``url`` with every statement of the store and queue opened on it bounded by
    ``seconds`` (Podium reads ``?statement_timeout=`` from the URL)."""
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}statement_timeout={round(seconds * 1000)}ms"


def statements_cancelled(log: Path) -> int:
    """How many statements the server cancelled at their ``statement_timeout`` (its log)."""
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace").count(_CANCELLED)
    return 0


def sql(url: str, statement: str) -> None:
    import asyncpg

    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    # A loop of its own on a thread: the caller is inside the chaos's loop.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()


class _Rollback(Exception):
    """Ends the lock's transaction by a rollback."""


def hold_lock(url: str, statement: str) -> Callable[[], None]:
    """Take a lock in a transaction on a thread of its own (a loop of its own); returns
    what releases it (the transaction rolled back, the connection closed)."""
    import asyncpg

    taken, release = threading.Event(), threading.Event()

    async def hold() -> None:
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await conn.execute(statement)
                taken.set()
                await asyncio.to_thread(release.wait)
                raise _Rollback
        except _Rollback:
            pass
        finally:
            await conn.close()

    thread = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    thread.start()
    taken.wait(30)

    def end() -> None:
        release.set()
        thread.join(30)

    return end


def small_disk(root: Path, url: str, size_mb: int) -> Path:
    """Podium's tables on a tmpfs of ``size_mb`` under ``root`` (a tablespace, the
    database's default before any table exists): filling it is a disk full for their
    writes. Mounting needs root."""
    import pwd

    disk = root / "pgspace"  # (a folder the server's user can reach)
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(disk)],
                   check=True)
    user = pwd.getpwnam("postgres")
    os.chown(disk, user.pw_uid, user.pw_gid)
    sql(url, f"CREATE TABLESPACE podium_small LOCATION '{disk}'")
    sql(url, "ALTER DATABASE postgres SET default_tablespace = podium_small")
    return disk


def fill_disk(disk: Path) -> Callable[[], None]:
    """Fill ``disk`` to its last byte; returns what frees it."""
    ballast = disk / "ballast"
    chunk = b"\0" * (1 << 20)
    with ballast.open("wb", buffering=0) as f:
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                f.write(chunk)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
    return lambda: ballast.unlink()
