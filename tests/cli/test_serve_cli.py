"""``podium serve`` from the command line: the key it prints works, Ctrl-C ends it cleanly."""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import httpx
import pytest

from serve_process import start_serve

pytestmark = pytest.mark.slow


def test_printed_key_works_and_ctrl_c_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serving = start_serve(
        ["--agent", "support=react", "--store", "memory", "--port", str(port)],
        cwd=tmp_path, env=os.environ,
    )
    try:
        match = re.search(r"use: (pk_\S+)", serving.log)
        assert match, serving.lines
        headers = {"Authorization": f"Bearer {match.group(1)}"}
        r = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=headers, timeout=5)
        assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["support"]
        serving.proc.send_signal(signal.SIGINT)
        assert serving.proc.wait(30) == 130
    finally:
        serving.stop()
    lines = serving.lines
    assert "Traceback" not in "".join(lines)
    assert lines[-1].strip() == "podium serve: stopped (interrupted)", lines
