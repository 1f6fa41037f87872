"""Run Python as an unprivileged uid, from a root test run: the sandbox's non-root path.

A root worker and an ordinary one take different paths through the sandbox (see
podium.security.userns); as root, the tests would only ever see the first. The child made
here starts as root, then becomes a uid no account uses, with no group and no capability
(the kernel clears the permitted and effective sets on setuid; the inheritable and
ambient ones are cleared too), and only then imports podium and runs the sandbox.

The interpreter of a test run may live where an ordinary user cannot reach it (pyenv under
a ``/root`` of mode 0700). A real unprivileged worker has its interpreter readable, so the
child, still root, first gives itself a private mount namespace in which each directory
that blocks the way is covered by an empty tmpfs of mode 0755 that holds only the paths
Python needs, bound from the originals (read-only). Nothing outside the child changes.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys

__all__ = ("free_uid", "run_as")

# Runs as root in the child: private mounts, the blocked directories covered, then setuid.
_BECOME = r"""
import ctypes, json, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
def check(rc, what):
    if rc != 0:
        raise SystemExit(f"setup: {what}: {os.strerror(ctypes.get_errno())}")
uid, covers, code = int(sys.argv[1]), json.loads(sys.argv[2]), sys.stdin.read()
MS_BIND, MS_REC, MS_PRIVATE, MS_RDONLY, MS_REMOUNT = 0x1000, 0x4000, 0x40000, 1, 0x20
check(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
for blocked, keep in covers.items():
    held = [os.open(p, os.O_PATH) for p in keep]  # (reachable through the fds once covered)
    check(libc.mount(b"tmpfs", blocked.encode(), b"tmpfs", 0, b"mode=0755"), "cover " + blocked)
    for path, fd in zip(keep, held):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(path, exist_ok=True)
        else:  # (a file is bound onto an empty file)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
        check(libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None,
                         MS_BIND | MS_REC, None), "bind " + path)
        check(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None),
              "read-only " + path)
        os.close(fd)
os.setgroups([])
os.setgid(uid)
os.setuid(uid)
head = (ctypes.c_uint32 * 2)(0x20080522, 0)  # inheritable set emptied too (capset v3)
check(libc.capset(head, (ctypes.c_uint32 * 6)()), "capset")
os.environ.update(HOME="/", USER="podium-unprivileged")
exec(compile(code, "unprivileged.py", "exec"), {"__name__": "__main__"})
"""


def free_uid() -> int:
    """A uid no account has and no process runs as."""
    running = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            running.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            continue
    for uid in range(61_000, 62_000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in running:
                return uid
    raise RuntimeError("no free uid in 61000-61999")


def _blocked_dirs(paths: list[str]) -> dict[str, list[str]]:
    """For each path an ordinary user cannot reach, the first directory on its way that
    others may not search, and under it the paths to keep visible."""
    covers: dict[str, list[str]] = {}
    for path in sorted(set(paths)):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            d = "/" + "/".join(parts[:i])
            if not os.stat(d).st_mode & stat.S_IXOTH:
                keep = covers.setdefault(d, [])
                # (a path under one already kept is visible through it)
                if not any(path == k or path.startswith(k + "/") for k in keep):
                    keep.append(path)
                break
    return covers


def run_as(
    uid: int, code: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with this interpreter as ``uid`` (no groups, no capabilities), with
    ``env`` added to its environment."""
    assert os.getuid() == 0, "only root can become another uid"
    needed = [os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)]
    needed += [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]
    covers = _blocked_dirs([p for p in needed if p != "/"])
    return subprocess.run(
        [sys.executable, "-c", _BECOME, str(uid), json.dumps(covers)],
        input=code,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )
