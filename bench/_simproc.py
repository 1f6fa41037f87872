"""Start ``podium sim-server`` in its own process (so its CPU is not the client's)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence


class SimServer:
    """A sim-server subprocess on a free loopback port, optionally pinned to one CPU."""

    def __init__(self, args: Sequence[str], cpu: int | None = None) -> None:
        cmd = [sys.executable, "-m", "podium.cli.main", "sim-server", "--port", "0", "--uvloop"]
        self.proc = subprocess.Popen(
            [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"sim-server did not start: {line!r}")
        self.root = line.split()[-1]
        self.base_url = self.root + "/v1"
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(self.proc.pid, {cpu})

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def pin_self(cpu: int) -> None:
    """Pin this process to one CPU (Linux), so 'CPU per call' is measured on one core."""
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})
