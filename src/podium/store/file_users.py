"""Which processes use a store file: a shared lock each holds, tried exclusive to ask.

A process that drives runs from a store file holds a shared ``flock`` on a lock
file beside it for as long as it has the store open. A process that wants to
know it is alone on the file (so that no other one is driving the runs it finds
unfinished) asks for the lock exclusively, without waiting: that succeeds only
when nobody else holds it. The kernel drops a process's lock when it dies, so a
killed process never leaves the file looking used.

Only processes that drive runs count: one that only looks at the runs (``podium runs``)
opens the store without joining, or a viewer left open would keep a restarted server
from resuming what the last one left.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; nobody can tell whether it is alone
    fcntl = None  # type: ignore[assignment]

__all__ = ("FileUsers",)


class FileUsers:
    """The shared lock this process holds on ``path`` (created if missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def join(self) -> None:
        """Count this process among the file's users (once; blocks only while another
        process is asking whether it is alone, a few system calls)."""
        if self._fd is not None or fcntl is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Read-only is enough to lock, and opens a file another user created too.
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def alone(self) -> bool | None:
        """Whether no other process uses the file now (this one joins first); None where
        the system has no ``flock``."""
        self.join()
        if self._fd is None or fcntl is None:
            return None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            alone = False
        else:
            alone = True
        # Back to shared either way: a refused conversion may have dropped the shared lock
        # (flock converts by unlocking first), and holding it exclusive would block others.
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        return alone

    def others(self) -> list[int]:
        """The ids of the other processes holding the lock now, as Linux lists them in
        ``/proc/locks`` (for a warning that names them); empty where the system does not
        say, or before this process joins. A process in another pid namespace (another
        container) is listed as 0 there, and left out."""
        if self._fd is None:
            return []
        try:
            st = os.fstat(self._fd)
            table = Path("/proc/locks").read_text()
        except OSError:
            return []
        # A line: "1: FLOCK  ADVISORY  READ  1234 fe:00:2146801 0 EOF" (a waiter's has "->"
        # after the number); the file is "major:minor:inode", the device numbers in hex.
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        pids = {
            int(fields[4])
            for fields in map(str.split, table.splitlines())
            if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key
            and fields[4].isdigit()
        }
        return sorted(pids - {0, os.getpid()})

    def leave(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None
