"""The probes the chart renders and the image's HEALTHCHECK, asked of real processes:
``podium serve`` on Redis, ``podium worker`` and ``podium sim-server`` on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.chart import REPO, container, render
from serve_process import free_port, sim_server, start_serve

pytestmark = pytest.mark.slow

HEALTHCHECK = REPO / "deploy" / "healthcheck.py"


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def wait_for_port(port: int, proc: subprocess.Popen[Any], within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:  # bounded; each try is one connect
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        assert proc.poll() is None, "the process exited before it listened"
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on {port} within {within_s} s")


def healthcheck(pid: int) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK command, told to read ``pid``'s command line, not PID 1's."""
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK)], capture_output=True, text=True, timeout=30,
        env={**os.environ, "PODIUM_HEALTH_PID": str(pid)},
    )


@pytest.fixture(scope="module")
def probes() -> dict[str, dict[str, Any]]:
    """The rendered probes, by component."""
    rendered = render({"redis": {"cidrs": ["10.0.0.0/8"]}})
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: container(d)
            for d in rendered.of("Deployment")}


@pytest.fixture
def worker(redis_url: str, prefix: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podium.cli.main", "worker", "--redis", redis_url,
         "--prefix", prefix, "--agent", "react=podium.examples.react:agent",
         "--metrics-port", str(port), "--grace", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        wait_for_port(port, proc)
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(30)


def test_gateway_probes_answer(
    probes: dict[str, dict[str, Any]], redis_url: str, prefix: str, tmp_path: Path,
) -> None:
    gateway = probes["gateway"]
    serving = start_serve(
        ["--redis", redis_url, "--prefix", prefix, "--port", str(free_port())],
        cwd=tmp_path, env=os.environ,
    )
    try:
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            path = gateway[probe]["httpGet"]["path"]
            assert status(serving.url + path) == 200, probe
        result = healthcheck(serving.proc.pid)
        assert result.returncode == 0, result.stderr
    finally:
        serving.stop()
    assert healthcheck(os.getpid()).returncode == 0  # pytest: no role, so nothing to probe


def test_gateway_healthcheck_fails_when_redis_is_gone(tmp_path: Path) -> None:
    """Readiness is Redis's: a gateway whose Redis never answers is unhealthy, not up."""
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    serving = start_serve(["--redis", dead_redis, "--port", str(free_port())], cwd=tmp_path,
                          env=os.environ)
    try:
        result = healthcheck(serving.proc.pid)
        assert result.returncode == 1
        assert "503" in result.stderr
        assert status(serving.url + "/healthz") == 200  # liveness does not ask Redis
    finally:
        serving.stop()


def test_worker_probes_answer(
    probes: dict[str, dict[str, Any]], worker: tuple[subprocess.Popen[str], int],
) -> None:
    proc, port = worker
    spec = probes["worker"]
    assert spec["livenessProbe"]["httpGet"]["port"] == "metrics"
    assert spec["ports"][0]["name"] == "metrics"
    result = healthcheck(proc.pid)  # /readyz where served, else /metrics
    assert result.returncode == 0, result.stderr
    for probe in ("readinessProbe", "livenessProbe"):
        path = spec[probe]["httpGet"]["path"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            body = reply.read().decode()
        assert "# HELP" not in body, f"{path} answered with the metrics, not a probe"


def test_sim_server_probes_answer(probes: dict[str, dict[str, Any]]) -> None:
    with sim_server() as base:
        root = base.removesuffix("/v1")
        assert status(root + probes["sim"]["readinessProbe"]["httpGet"]["path"]) == 200


def test_healthcheck_probes_the_port_of_the_role() -> None:
    """A sim-server on a port of its own: the HEALTHCHECK reads it from the command line."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podium.cli.main", "sim-server", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        assert healthcheck(proc.pid).returncode == 0
    finally:
        proc.terminate()
        proc.wait(10)
    result = healthcheck(proc.pid)  # gone: no such process is unhealthy, never a crash
    assert result.returncode == 1


def test_the_redis_password_stays_out_of_the_gateway_log(tmp_path: Path) -> None:
    """The chart and compose put the password in the Redis URL; the log shows no secret."""
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"
    serving = start_serve(["--redis", url, "--port", str(free_port())], cwd=tmp_path,
                          env=os.environ)
    serving.stop()
    assert "distributed (redis://:***@127.0.0.1:" in serving.log
    assert "hunter2" not in serving.log
