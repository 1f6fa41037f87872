"""``podium serve`` from the command line: the key it prints works, Ctrl-C ends it cleanly."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow


def test_printed_key_works_and_ctrl_c_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "podium.cli.main", "serve", "--agent", "support=react",
         "--store", "memory", "--port", str(port)],
        cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "Uvicorn running on" in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert ready.wait(30) and proc.poll() is None, "".join(lines)
        match = re.search(r"use: (pk_\S+)", "".join(lines))
        assert match, lines
        headers = {"Authorization": f"Bearer {match.group(1)}"}
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=headers, timeout=5)
        assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["support"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(10)
        if proc.stderr is not None:
            proc.stderr.close()
    assert "Traceback" not in "".join(lines)
    assert lines[-1].strip() == "podium serve: stopped (interrupted)", lines
