"""``podium serve`` from the command line: the key it prints works, the URL it announces
answers (with ``--port 0`` too, and on IPv6), Ctrl-C ends it cleanly."""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import httpx
import pytest

from serve_process import sim_server, start_serve

pytestmark = pytest.mark.slow


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback (::1)")


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


@pytest.mark.parametrize(
    ("host", "url_host"),
    [("127.0.0.1", "127.0.0.1"), pytest.param("::1", "[::1]", marks=needs_ipv6)],
    ids=["ipv4", "ipv6"],
)
def test_port_0_announces_the_url_it_answers_on(host: str, url_host: str, tmp_path: Path) -> None:
    serving = start_serve(
        ["--agent", "react", "--store", "memory", "--host", host, "--port", "0"],
        cwd=tmp_path, env=os.environ,
    )
    try:
        url = serving.url
        match = re.fullmatch(rf"http://{re.escape(url_host)}:(\d+)", url)
        assert match and int(match.group(1)) != 0, url
        assert f"Uvicorn running on {url} " in serving.log, serving.log  # the same port
        r = httpx.get(f"{url}/healthz", timeout=5)
        assert r.status_code == 200, r.text
    finally:
        serving.stop()
    assert "Traceback" not in serving.log, serving.log


@needs_ipv6
def test_sim_server_announces_an_ipv6_url_in_brackets() -> None:
    with sim_server("--host", "::1") as base:
        assert re.fullmatch(r"http://\[::1\]:[1-9]\d*/v1", base), base
        assert httpx.get(base.removesuffix("/v1") + "/health", timeout=5).status_code == 200
