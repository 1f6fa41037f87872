"""Start a private ``redis-server`` on a free port (for tests that kill or restart Redis)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ("RedisServer", "free_port")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """A redis-server child with an append-only file that fsyncs every write.

    ``kill()`` is SIGKILL (nothing flushed on the way out); ``start()`` again
    reuses the same port and directory, so the AOF is replayed.
    """

    def __init__(
        self, directory: Path, port: int | None = None, extra: Sequence[str] = ()
    ) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.extra = tuple(extra)  # more redis-server options, e.g. --enable-debug-command
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        binary = shutil.which("redis-server") or "redis-server"
        self.proc = subprocess.Popen(
            [
                binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.directory), "--appendonly", "yes",
                "--appendfsync", "always", "--save", "", "--protected-mode", "no",
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def pause(self) -> None:
        """SIGSTOP: connections are still accepted (by the kernel) and never answered, as
        with a hung server or a link that drops packets."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()  # a paused server would not act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None
