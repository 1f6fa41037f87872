"""The gateway and its workers read one ``podium.toml``: agent names, pools, the Redis URL
and the key prefix agree, so a run the gateway queues is driven by a worker. A worker that
serves other agents fails the run at once, saying why, and logs the dead letter."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .harness import ROOT
from .redis_server import free_port

pytestmark = pytest.mark.slow

KEY = "pk_one_config"


def config_text(redis_url: str, prefix: str, server: str = "") -> str:
    return f"""
[server]
redis = "{redis_url}"
prefix = "{prefix}"
ttl_s = 600
{server}

[[agents]]
name = "support"
path = "podium.examples.react:agent"
pool = "helpdesk"

[[keys]]
key = "{KEY}"
tenant = "t1"
"""


def podium(*args: str) -> list[str]:
    return [sys.executable, "-m", "podium.cli.main", *args]


ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def config(tmp_path: Path, shared_redis_url: str, prefix: str) -> Path:
    path = tmp_path / "podium.toml"
    path.write_text(config_text(shared_redis_url, prefix))
    return path


@contextlib.contextmanager
def running_gateway(*args: str, env: dict[str, str] | None = None) -> Iterator[httpx.Client]:
    """A real ``podium serve`` with ``args`` (and ``env`` added to its environment), and a
    client holding the test's key."""
    port = free_port()
    proc = subprocess.Popen(
        podium("serve", *args, "--port", str(port)),
        cwd=ROOT, env={**ENV, **(env or {})}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    started = threading.Event()
    lines: list[str] = []

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "Uvicorn running on" in line:
                started.set()
        started.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        # generous: a loaded machine took over 30 s to start it; a death is seen at once
        assert started.wait(90) and proc.poll() is None, "".join(lines)
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=30,
        ) as client:
            yield client
    finally:
        proc.terminate()
        proc.wait(30)
        # Closed once the reader is done with it (it reads to the end once the process
        # has exited): closed under it, its read raised in the thread, failing a later test.
        reader.join(10)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.fixture
def gateway(config: Path) -> Iterator[httpx.Client]:
    with running_gateway("--config", str(config)) as client:
        yield client


def burst_worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        podium("worker", "--burst", "--no-uvloop", *args),
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=90,
    )


def test_gateway_and_worker_share_one_config(gateway: httpx.Client, config: Path) -> None:
    run = gateway.post("/v1/runs", json={"agent": "support", "input": "What is Podium?"})
    assert run.status_code == 202, run.text
    run_id = run.json()["id"]
    assert run.json()["pool"] == "helpdesk"

    out = burst_worker("--config", str(config), "--pool", "helpdesk")
    assert out.returncode == 0, out.stderr
    assert "serves support" in out.stderr

    record = gateway.get(f"/v1/runs/{run_id}").json()
    assert record["status"] == "completed", record
    assert record["output"]
    assert len(record["profile"]["steps"]) == record["steps"]  # server.profile's default


def test_the_profile_switched_off_in_the_file_is_off_in_the_workers(
    tmp_path: Path, shared_redis_url: str, prefix: str
) -> None:
    """``[server] profile = false``: the worker's engine keeps no step timings."""
    path = tmp_path / "podium.toml"
    path.write_text(config_text(shared_redis_url, prefix, "profile = false"))
    with running_gateway("--config", str(path)) as gateway:
        run_id = gateway.post("/v1/runs", json={"agent": "support", "input": "q"}).json()["id"]
        out = burst_worker("--config", str(path), "--pool", "helpdesk")
        assert out.returncode == 0, out.stderr
        record = gateway.get(f"/v1/runs/{run_id}").json()
    assert record["status"] == "completed" and record["steps"] >= 1, record
    assert record["profile"]["steps"] == []


@pytest.mark.parametrize("value", ["false", "true"])
def test_the_profile_switch_in_the_environment_of_the_embedded_gateway(
    tmp_path: Path, value: str
) -> None:
    """``PODIUM_SERVER__PROFILE``: the gateway's own engine (no Redis) keeps step timings
    or not."""
    keys = tmp_path / "podium.toml"
    keys.write_text(f'[server]\nstore = "memory"\n\n[[keys]]\nkey = "{KEY}"\ntenant = "t1"\n')
    with running_gateway(
        "--config", str(keys), "--agent", "react", env={"PODIUM_SERVER__PROFILE": value}
    ) as gateway:
        reply = gateway.post("/v1/runs", json={"agent": "react", "input": "q", "wait": True})
    record = reply.json()
    assert record["status"] == "completed", record
    assert len(record["profile"]["steps"]) == (record["steps"] if value == "true" else 0)


def test_a_worker_for_other_agents_fails_the_run_saying_why(
    gateway: httpx.Client, shared_redis_url: str, prefix: str
) -> None:
    run_id = gateway.post("/v1/runs", json={"agent": "support", "input": "q"}).json()["id"]
    # No config: this worker knows the agent only by its own name, 'react'.
    out = burst_worker(
        "--redis", shared_redis_url, "--prefix", prefix, "--pool", "helpdesk",
        "--agent", "podium.examples.react:agent",
    )
    assert out.returncode == 0, out.stderr
    record = gateway.get(f"/v1/runs/{run_id}").json()
    assert record["status"] == "failed" and record["reason"] == "dead_letter"
    assert "unknown agent 'support'" in record["error"] and "serves react" in record["error"]
    assert f"run {run_id} dead-lettered: unknown agent 'support'" in out.stderr


def test_worker_serves_an_agent_under_the_gateways_name(
    gateway: httpx.Client, shared_redis_url: str, prefix: str
) -> None:
    run_id = gateway.post("/v1/runs", json={"agent": "support", "input": "q"}).json()["id"]
    out = burst_worker(
        "--redis", shared_redis_url, "--prefix", prefix, "--pool", "helpdesk",
        "--agent", "support=podium.examples.react:agent",
    )
    assert out.returncode == 0, out.stderr
    assert gateway.get(f"/v1/runs/{run_id}").json()["status"] == "completed"




def test_redis_and_prefix_given_as_options_on_both_sides(
    shared_redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """`--redis`/`--prefix` on the gateway as on the worker: the run does not stay queued."""
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[[keys]]\nkey = "{KEY}"\ntenant = "t1"\n')
    common = ("--redis", shared_redis_url, "--prefix", prefix, "--ttl", "60")
    agent = ("--agent", "support=podium.examples.react:agent")
    with running_gateway("--config", str(keys), *common, *agent) as gateway:
        run_id = gateway.post("/v1/runs", json={"agent": "support", "input": "q"}).json()["id"]
        out = burst_worker(*common, *agent)
        assert out.returncode == 0, out.stderr
        assert gateway.get(f"/v1/runs/{run_id}").json()["status"] == "completed"
