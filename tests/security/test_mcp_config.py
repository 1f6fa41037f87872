"""``[[mcp_servers]]`` in podium.toml: declared agents take a real MCP server's tools, and
the mistakes (an unknown server, one that fails to start, an unknown tool) are one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from podium.config import load_config
from podium.errors import ConfigError
from podium.factory import served_agents
from podium.store.sqlite import SQLiteRunStore
from serve_process import sim_server

pytestmark = pytest.mark.slow

DEMO = str(Path(__file__).with_name("mcp_servers") / "demo_server.py")

SERVER = f"""
[[mcp_servers]]
name = "demo"
transport = "stdio"
command = {sys.executable!r}
args = [{DEMO!r}, "stdio"]
timeout = 20
retries = 1
"""

MODEL = """
[[models]]
name = "sim"
model = "podium-sim"
# The simulated model calls the MCP tool once, then answers.
extra_body = { sim = { tool_steps = 1, tool = "add", arguments = { a = 2, b = 40 } } }
"""


def write(tmp_path: Path, agents: str, server: str = SERVER) -> Path:
    path = tmp_path / "podium.toml"
    path.write_text(MODEL + server + agents)
    return path


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_server("--step-ms", "1") as url:
        yield url


def podium(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return subprocess.run(
        [sys.executable, "-m", "podium.cli.main", *args],
        env={**clean, **(env or {})}, cwd=cwd, capture_output=True, text=True, timeout=90,
    )


def test_podium_run_calls_the_declared_mcp_tool(sim_url: str, tmp_path: Path) -> None:
    write(tmp_path, '\n[[agents]]\nname = "helper"\nmodel = "sim"\ntools = ["demo:add"]\n')
    out = podium("run", "helper", "What is 2 + 40?", "--json", "--store", "runs.sqlite",
                 cwd=tmp_path, env={"OPENAI_BASE_URL": sim_url})
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    run = msgspec.json.decode(out.stdout)
    assert run["status"] == "completed" and run["steps"] == 2, run

    async def journal() -> bytes:
        store = SQLiteRunStore(str(tmp_path / "runs.sqlite"))
        try:
            return msgspec.json.encode(await store.journal(run["run_id"]))
        finally:
            await store.aclose()

    items = asyncio.run(journal())
    assert b'"add"' in items and b"42" in items  # the MCP server's answer, journaled


@pytest.mark.parametrize(
    "agents",
    [
        '\n[[agents]]\nname = "a"\nmodel = "sim"\nmcp = ["demo"]\n',
        '\n[[agents]]\nname = "a"\nmodel = "sim"\ntools = ["demo:*"]\n',
        '\n[[agents]]\nname = "a"\nmodel = "sim"\ntools = ["demo:add", "demo:*"]\n',
    ],
)
def test_all_of_a_servers_tools(tmp_path: Path, agents: str) -> None:
    (served,) = served_agents(load_config(write(tmp_path, agents), environ={}))
    assert {"add", "echo", "fail", "crash", "pid", "grow"} <= set(served.agent.tools)


def test_prefix_names_the_tools(tmp_path: Path) -> None:
    server = SERVER + 'prefix = "demo_"\n'
    agents = '\n[[agents]]\nname = "a"\nmodel = "sim"\ntools = ["demo:echo"]\n'
    (served,) = served_agents(load_config(write(tmp_path, agents, server), environ={}))
    assert list(served.agent.tools) == ["demo_echo"]


BROKEN = f"""
[[mcp_servers]]
name = "demo"
command = {sys.executable!r}
args = ["-c", "import sys; sys.exit(2)"]
timeout = 20
"""

MISSING = """
[[mcp_servers]]
name = "demo"
command = "/nonexistent/mcp-server"
"""


@pytest.mark.parametrize(
    ("server", "agents", "message"),
    [
        (SERVER, '\n[[agents]]\nname = "a"\nmodel = "sim"\nmcp = ["docs"]\n',
         "uses MCP server 'docs', which no [[mcp_servers]] entry names (known: demo)"),
        (SERVER, '\n[[agents]]\nname = "a"\nmodel = "sim"\ntools = ["demo:nope"]\n',
         "has no such tool"),
        (BROKEN, '\n[[agents]]\nname = "a"\nmodel = "sim"\nmcp = ["demo"]\n',
         "'demo' (stdio: "),
        (MISSING, '\n[[agents]]\nname = "a"\nmodel = "sim"\nmcp = ["demo"]\n',
         "could not be started or listed"),
        ('\n[[mcp_servers]]\nname = "demo"\n', "", "'demo' (stdio) needs a 'command'"),
        ('\n[[mcp_servers]]\nname = "demo"\ntransport = "http"\n', "", "needs a 'url'"),
        (SERVER + SERVER, "", "two servers are named 'demo'"),
        (SERVER, '\n[[agents]]\npath = "react"\nmcp = ["demo"]\n', "only a declared agent"),
    ],
)
def test_mistakes_are_one_config_error(
    tmp_path: Path, server: str, agents: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=r"mcp|agents") as info:
        served_agents(load_config(write(tmp_path, agents, server), environ={}))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_server_that_fails_to_start_is_one_line_from_the_cli(tmp_path: Path) -> None:
    write(tmp_path, '\n[[agents]]\nname = "helper"\nmodel = "sim"\nmcp = ["demo"]\n', BROKEN)
    out = podium("run", "helper", "hi", cwd=tmp_path)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    assert "'demo' (stdio:" in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.anyio
async def test_the_gateway_loads_the_declared_mcp_tools(
    sim_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from podium.gateway.auth import Tenant
    from podium.gateway.runtime import build_gateway
    from podium.store.memory import MemoryRunStore

    path = write(tmp_path, '\n[[agents]]\nname = "helper"\nmodel = "sim"\nmcp = ["demo"]\n')
    config = load_config(path, environ={"OPENAI_BASE_URL": sim_url})
    monkeypatch.setenv("OPENAI_BASE_URL", sim_url)  # read when the model is built
    gw = build_gateway(config, store=MemoryRunStore())
    assert {"add", "echo"} <= set(gw.agents["helper"].agent.tools)
    await gw.start()
    try:
        record, _ = await gw.submit(Tenant("t"), "helper", "2 + 40?", {})
        record = await gw.wait(record.run_id, 60)
        assert record.status == "completed", record
        items = msgspec.json.encode(await gw.store.journal(record.run_id))
        assert b"42" in items
    finally:
        await gw.stop()


@pytest.fixture(scope="module")
def demo_http() -> Iterator[str]:
    """The demo server on streamable HTTP, reached by the name ``localhost``."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, DEMO, "http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                assert proc.poll() is None, "the demo server died"
                time.sleep(0.05)
        yield f"http://localhost:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_http_server_on_a_private_address_needs_allow_private(
    tmp_path: Path, demo_http: str
) -> None:
    agents = '\n[[agents]]\nname = "a"\nmodel = "sim"\nmcp = ["web"]\n'
    server = f'\n[[mcp_servers]]\nname = "web"\ntransport = "http"\nurl = "{demo_http}"\n'
    with pytest.raises(ConfigError) as info:
        served_agents(load_config(write(tmp_path, agents, server), environ={}))
    message = str(info.value)
    assert "could not be started or listed" in message and "\n" not in message
    assert "127.0.0.1 is loopback (localhost resolves to it)" in message
    allowed = server + "allow_private = true\n"
    (served,) = served_agents(load_config(write(tmp_path, agents, allowed), environ={}))
    assert {"add", "echo"} <= set(served.agent.tools)
    # An IP literal is refused before anything is sent; a bad network is a ConfigError.
    literal = server.replace("localhost", "127.0.0.1")
    with pytest.raises(ConfigError, match=r"'web': address 127\.0\.0\.1 is loopback"):
        served_agents(load_config(write(tmp_path, agents, literal), environ={}))
    with pytest.raises(ConfigError, match=r"'web': .*does not appear to be an IPv4 or IPv6"):
        load_config(write(tmp_path, agents, server + 'allow_networks = ["10.0.0.300/8"]\n'), {})
