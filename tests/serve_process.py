"""``podium serve`` and ``podium sim-server`` as real child processes, started and stopped
the same way by every test.

Its stderr is read by a thread into ``lines``; start-up is the line uvicorn prints once it
listens (read, not polled), so a test never guesses how long start-up takes.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

__all__ = ("Serving", "free_port", "mcp_http_server", "sim_server", "start_serve")

READY = "Uvicorn running on"
ANNOUNCED = re.compile(r"^podium: serving .* on (http://\S+) in ")


class Serving:
    """A started ``podium serve``: its process and every stderr line so far."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if READY in line:
                self._ready.set()
        self._ready.set()  # exited

    @property
    def log(self) -> str:
        return "".join(self.lines)

    @property
    def url(self) -> str:
        """Where it said it serves (``http://HOST:PORT``), read from its log."""
        for line in self.lines:
            if match := ANNOUNCED.match(line):
                return match.group(1)
        raise AssertionError("podium serve announced no URL:\n" + self.log)

    def stop(self, timeout: float = 15) -> None:
        """Terminate it if it still runs (kill past ``timeout``); read its last lines."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def start_serve(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    preexec_fn: Callable[[], None] | None = None,
    within: float = 90,  # a loaded machine's start-up; a death is seen at once
) -> Serving:
    """Run ``podium serve ARGS`` and return once it listens (RuntimeError with its log if
    it exits or stays silent for ``within`` seconds)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "podium.cli.main", "serve", *args],
        cwd=cwd,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    serving = Serving(proc)
    if not serving._ready.wait(within) or proc.poll() is not None:
        serving.stop()
        raise RuntimeError("podium serve did not start:\n" + serving.log)
    return serving


@contextlib.contextmanager
def sim_server(*args: str) -> Iterator[str]:
    """A ``podium sim-server ARGS`` child on a free port; yields its ``/v1`` base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "podium.cli.main", "sim-server", "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "listening on http://127.0.0.1:PORT"
    try:
        assert line.startswith("listening on "), line
        yield line.split()[-1] + "/v1"
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def mcp_http_server(script: str, *args: str) -> Iterator[str]:
    """``python script http PORT ARGS``, an MCP server over streamable HTTP: its URL once
    it accepts connections (it prints nothing reliable to wait for), stopped on exit."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, script, "http", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(1200):  # bounded: 60 s (a loaded machine's start-up)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    why = proc.stderr.read().decode() if proc.stderr else "died"
                    raise RuntimeError(why) from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr:
            proc.stderr.close()
