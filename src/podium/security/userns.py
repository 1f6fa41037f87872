"""A user namespace for a root worker's sandbox, made before bubblewrap starts.

bubblewrap run as root with ``--unshare-user`` maps its one inside uid to root outside,
and run as an unprivileged uid it cannot bind an interpreter under ``/root``. So a root
worker makes the namespace itself: a helper process unshares one, and the worker (root
outside, so free to write any mapping) maps root to root — bubblewrap sets the sandbox
up as it, binding what only root can reach — and nobody (65534) to the sandbox's own
uid. bubblewrap joins it (``--userns FD``); the launcher drops to nobody, which holds no
capability here or outside and whose processes count against the sandbox's uid.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ("NOBODY", "UserNamespace")

NOBODY = 65534
# Unshares a user namespace, says so, and holds it until its stdin closes.
_HELPER = (
    "import ctypes, os, sys\n"
    "if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:\n"
    "    sys.exit(os.strerror(ctypes.get_errno()))\n"
    "sys.stdout.write('x'); sys.stdout.flush(); sys.stdin.read()\n"
)


class UserNamespace:
    """A user namespace mapping root to root and :data:`NOBODY` to ``uid``; :attr:`fd`
    is open on it until :meth:`close` (blocking: call it from a thread)."""

    def __init__(self, uid: int) -> None:
        self._helper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.fd = -1
        try:
            assert self._helper.stdout is not None
            if self._helper.stdout.read(1) != b"x":
                self._helper.wait()
                why = (self._helper.stderr.read() if self._helper.stderr else b"").decode()
                raise OSError(f"cannot make a user namespace: {why.strip() or '?'}")
            proc = f"/proc/{self._helper.pid}"
            for name in ("uid_map", "gid_map"):
                with open(f"{proc}/{name}", "w") as f:
                    f.write(f"0 0 1\n{NOBODY} {uid} 1\n")
            self.fd = os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the descriptor and let the helper go (a started sandbox keeps the
        namespace alive by itself)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._helper.poll() is None:
            self._helper.kill()
        self._helper.wait()
        for stream in (self._helper.stdin, self._helper.stdout, self._helper.stderr):
            if stream is not None:
                stream.close()
