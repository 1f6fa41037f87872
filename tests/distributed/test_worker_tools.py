"""A ``podium worker`` on Redis runs tools that live outside it, as the gateway's
``podium.toml`` declares them: MCP servers it spawns itself (and a server killed in the
middle of a call: the call is retried or becomes an error observation, the run goes on),
and HTTP tools under each tenant's egress policy."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from podium.engine.records import StepRecord, ToolOutcome
from podium.store.redis import RedisRunStore
from podium.tools import ToolResult
from serve_process import Serving, sim_server, start_serve

from .harness import ROOT
from .redis_server import free_port

pytestmark = pytest.mark.slow

DEMO = ROOT / "tests" / "security" / "mcp_servers" / "demo_server.py"


def config_text(redis_url: str, prefix: str, markers: Path) -> str:
    def sim(name: str, marker: str) -> str:
        return (
            f'[[models]]\nname = "{name}"\nmodel = "podium-sim"\n'
            f"extra_body = {{ sim = {{ tool_steps = 1, tool = \"hang\", "
            f'arguments = {{ marker = "{markers / marker}" }} }} }}\n'
        )

    def server(name: str, retries: int) -> str:
        return (
            f'[[mcp_servers]]\nname = "{name}"\ncommand = "{sys.executable}"\n'
            f'args = ["{DEMO}", "stdio"]\ntimeout = 60\nretries = {retries}\n'
        )

    return f"""
[server]
redis = "{redis_url}"
prefix = "{prefix}"
ttl_s = 600

{sim("sim_keeper", "keeper")}
{sim("sim_fragile", "fragile")}
{server("demo", 1)}
{server("demo0", 0)}

[[agents]]
name = "keeper"
model = "sim_keeper"
tools = ["demo:hang", "demo:add"]

[[agents]]
name = "fragile"
model = "sim_fragile"
mcp = ["demo0"]

[[agents]]
name = "research"
path = "podium.examples.research:agent"

[[keys]]
key = "pk_t1"
tenant = "t1"

[[keys]]
key = "pk_t2"
tenant = "t2"
[keys.egress]
allow_hosts = ["docs.example"]
"""


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with sim_server("--step-ms", "1") as url:
        yield url


def env(sim_url: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return {**clean, "OPENAI_BASE_URL": sim_url, "PYTHONUNBUFFERED": "1"}


def kill_when_waiting(marker: Path, worker: subprocess.Popen[str], within: float) -> int:
    """SIGKILL the MCP server whose ``hang`` call wrote ``marker``; its pid."""
    deadline = time.monotonic() + within
    while not marker.exists():
        assert worker.poll() is None, "the worker exited before the call started"
        assert time.monotonic() < deadline, f"no call of hang wrote {marker}"
        time.sleep(0.05)
    pid = int(marker.read_text())
    os.kill(pid, signal.SIGKILL)
    return pid


async def tool_results(redis_url: str, prefix: str, run_id: str) -> list[ToolResult]:
    async with RedisRunStore(redis_url, prefix=prefix) as store:
        out: list[ToolResult] = []
        for _, entry in await store.journal(run_id):
            if isinstance(entry, StepRecord):
                out.extend(entry.results)
            elif isinstance(entry, ToolOutcome):
                out.append(entry.result)
        return out


def test_a_worker_runs_mcp_tools_from_podium_toml_and_survives_a_killed_server(
    tmp_path: Path, shared_redis_url: str, prefix: str, sim_url: str
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    config = tmp_path / "podium.toml"
    config.write_text(config_text(shared_redis_url, prefix, markers))
    port = free_port()
    gateway: Serving = start_serve(
        ["--config", str(config), "--port", str(port)], cwd=tmp_path, env=env(sim_url), within=60
    )
    worker: subprocess.Popen[str] | None = None
    try:
        runs: dict[str, str] = {}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

            def submit(name: str, agent: str, key: str, text: str = "go") -> None:
                reply = client.post(
                    "/v1/runs",
                    json={"agent": agent, "input": text},
                    headers={"Authorization": f"Bearer {key}"},
                )
                assert reply.status_code == 202, reply.text
                runs[name] = reply.json()["id"]

            submit("keeper", "keeper", "pk_t1")
            submit("fragile", "fragile", "pk_t1")
            submit("open", "research", "pk_t1", "What is Podium?")
            submit("limited", "research", "pk_t2", "What is Podium?")

            worker = subprocess.Popen(
                [sys.executable, "-m", "podium.cli.main", "worker", "--config", str(config),
                 "--burst", "--no-uvloop"],
                cwd=tmp_path, env=env(sim_url), stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True,
            )
            killed = {
                name: kill_when_waiting(markers / name, worker, within=90)
                for name in ("keeper", "fragile")
            }
            _, stderr = worker.communicate(timeout=120)
            assert worker.returncode == 0, stderr
            assert "Traceback" not in stderr, stderr

            records = {name: client.get(f"/v1/runs/{run_id}",
                                        headers={"Authorization": "Bearer pk_t1"}).json()
                       for name, run_id in runs.items() if name != "limited"}
            records["limited"] = client.get(
                f"/v1/runs/{runs['limited']}", headers={"Authorization": "Bearer pk_t2"}
            ).json()
        for name, record in records.items():
            assert record["status"] == "completed", (name, record)

        def results(name: str) -> list[ToolResult]:
            return asyncio.run(tool_results(shared_redis_url, prefix, runs[name]))

        # retries = 1: the call went again to a freshly started server, which answered.
        (kept,) = results("keeper")
        assert kept.ok and kept.content == "answered after a restart" and kept.attempts == 2
        # retries = 0: the model read an error observation and answered anyway.
        (lost,) = results("fragile")
        assert not lost.ok and "MCP server 'demo0' failed during 'hang'" in lost.content
        assert all(pid > 0 for pid in killed.values())
        # The tenant's egress policy, applied by the worker: t2 may reach docs.example only.
        opened = results("open")
        assert opened and all(r.ok for r in opened)
        (refused, *_) = results("limited")
        assert not refused.ok and "not in the egress allow-list (tenant 't2')" in refused.content
        assert "could not read any page" in records["limited"]["output"]
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(10)
        gateway.stop()
