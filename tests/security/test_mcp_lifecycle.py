"""``podium serve`` stopped (SIGTERM) while an MCP tool call is in flight: the stdio
server it started goes with it, never left running as an orphan."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serve_process import free_port, sim_server, start_serve

pytestmark = pytest.mark.slow

HOSTILE = str(Path(__file__).with_name("mcp_servers") / "hostile_server.py")


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_server("--step-ms", "1") as url:
        yield url


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it only waits to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(path: Path, within: float) -> None:
    deadline = time.monotonic() + within
    while not path.exists():  # written by another process: nothing to await but the file
        assert time.monotonic() < deadline, f"nothing wrote {path}"
        time.sleep(0.02)


def test_serve_stopped_mid_call_ends_its_stdio_server(sim_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "in-flight.pid"
    (tmp_path / "podium.toml").write_text(f"""
[server]
drain_grace_s = 0.5

[[models]]
name = "sim"
model = "podium-sim"
extra_body = {{ sim = {{ tool_steps = 1, tool = "poke", arguments = {{}} }} }}

[[mcp_servers]]
name = "stuck"
command = {sys.executable!r}
args = [{HOSTILE!r}, "hang", {str(marker)!r}]
timeout = 60
retries = 0

[[agents]]
name = "helper"
model = "sim"
mcp = ["stuck"]

[[keys]]
key = "pk_t"
tenant = "t"
""")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    serving = start_serve(["--port", str(port)], cwd=tmp_path,
                          env={**env, "OPENAI_BASE_URL": sim_url})
    pid = 0
    try:
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/runs",
                           json={"agent": "helper", "input": "go"}, timeout=10,
                           headers={"Authorization": "Bearer pk_t"})
        assert reply.status_code == 202, reply.text
        wait_for(marker, 10)
        pid = int(marker.read_text())
        assert alive(pid)
        serving.proc.send_signal(signal.SIGTERM)
        serving.proc.wait(10)
        deadline = time.monotonic() + 5  # the SDK's own escalation: stdin closed, TERM, KILL
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid), "the MCP server outlived podium serve:\n" + serving.log
        assert "Traceback" not in serving.log, serving.log
    finally:
        serving.stop()
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
