"""Measuring processes ahead of the machine's other work: what a plan's dedicated core is,
on a host shared with others.

A plan is for dedicated cores. On a machine shared with other work (a laptop, a CI
runner, a development host several people load), a measured worker gets what the
scheduler leaves it, and that share moves from one second to the next as the others
start and stop: a load at 85 % of a saturation measured seconds before can meet a host
that now leaves it 70 % of what it had, and is then an overload. Linux divides the CPUs
between *autogroups* (one per session) before it divides a group's share between its
processes, so a process's own nice value does not reach past its group; a process started
in a session of its own (its own autogroup) whose group's nice is lowered is served ahead
of the other groups, and holds its core nearly as if it were its own.

:func:`spawn` starts a process so (``priority``: the nice value, -10 holding a core about
99 % of a busy process's ready time on a host whose other work is at 0); it needs the
right to raise priority (root, or ``CAP_SYS_NICE``) and says whether it got it; without
it, the process runs as it would have.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import Any

__all__ = ("set_priority", "spawn")


def set_priority(pid: int, nice: int) -> bool:
    """Set ``pid``'s nice value and its autogroup's (Linux) to ``nice``; True where the
    autogroup's was set (the one that counts against other sessions' work), or, where
    the kernel has no autogroups, the process's own."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        own = True
    except (OSError, AttributeError):
        own = False
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
        return True
    except OSError:
        return own and not _autogroups_on()


def _autogroups_on() -> bool:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def spawn(cmd: Sequence[str], priority: int | None = None,
          **popen: Any) -> tuple[subprocess.Popen[bytes], bool]:
    """``subprocess.Popen(cmd, **popen)``; with ``priority``, in a session of its own (its
    own autogroup) at that nice value. The process, and whether it got that priority
    (False where none was asked for)."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        list(cmd), start_new_session=priority is not None, **popen)
    return proc, priority is not None and set_priority(proc.pid, priority)
