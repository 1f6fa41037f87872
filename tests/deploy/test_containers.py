"""deploy/Dockerfile and deploy/compose.yaml in real containers (Debian's dockerd, started
here; the base image from debootstrap, Podium from a local wheelhouse; no registry)."""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.chart import REPO
from deploy.docker_env import LABEL, Docker, base_image, build_image, start_docker
from podium._version import __version__
from serve_process import free_port

# One dockerd and one image for all of them: the same xdist worker runs the whole group.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docker"), pytest.mark.timeout(900)]

COMPOSE = REPO / "deploy" / "compose.yaml"
PROJECT = "podiumtest"


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    with start_docker() as d:
        yield d


@pytest.fixture(scope="session")
def base(docker: Docker) -> str:
    return base_image(docker)


@pytest.fixture(scope="session")
def image(docker: Docker, base: str) -> str:
    return build_image(docker, base)


def wait_for(what: str, check: Any, within_s: float = 120, every_s: float = 0.5) -> Any:
    """``check()``'s first truthy value, polled at most ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        if value := check():
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {within_s} s")
        time.sleep(every_s)


def health(docker: Docker, container: str) -> str:
    return docker("inspect", "-f", "{{.State.Health.Status}}", container).stdout.strip()


def exit_state(docker: Docker, container: str) -> tuple[int, bool]:
    out = docker("inspect", "-f", "{{.State.ExitCode}} {{.State.OOMKilled}}", container).stdout
    code, oom = out.split()
    return int(code), oom == "true"


def test_the_image_runs_with_no_network_as_an_unprivileged_user(
    docker: Docker, image: str,
) -> None:
    out = docker("run", "--rm", "--network", "none", "--read-only", "--label", LABEL, image,
                 "--version")
    assert out.stdout.strip() == f"podium {__version__}"
    user = docker("run", "--rm", "--network", "none", "--label", LABEL, "--entrypoint", "id",
                  image, "-u")
    assert user.stdout.strip() == "10001"


def test_a_gateway_becomes_healthy_read_only_and_stops_cleanly(
    docker: Docker, image: str,
) -> None:
    name = f"podium-gw-{secrets.token_hex(4)}"
    docker("run", "-d", "--name", name, "--label", LABEL, "--network", "none", "--read-only",
           "--tmpfs", "/tmp", "--tmpfs", "/var/lib/podium:uid=10001,gid=10001",
           "--health-interval", "1s", image)  # the default command: an embedded gateway
    try:
        wait_for("healthy gateway", lambda: health(docker, name) == "healthy")
        docker("stop", "-t", "60", name, timeout=120)
        assert exit_state(docker, name) == (0, False)  # drained, not killed (137)
    finally:
        docker("rm", "-f", name, check=False)


# -- the compose stack --------------------------------------------------------------------


class Stack:
    def __init__(self, docker: Docker, env: dict[str, str], files: list[Path]) -> None:
        self.docker, self.env, self.files = docker, env, files
        self.key = env["PODIUM_KEYS"].split("=")[0]
        self.gateways = {n: f"http://127.0.0.1:{env[f'GATEWAY_{n}_PORT']}" for n in "AB"}

    def compose(self, *args: str, timeout: float = 300) -> str:
        return self.docker.compose(PROJECT, self.files, *args, env=self.env,
                                   timeout=timeout).stdout

    def container(self, service: str, index: int = 1) -> str:
        return f"{PROJECT}_{service}_{index}"

    def request(self, gateway: str, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(
            self.gateways[gateway] + path, method="POST" if body is not None else "GET",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.key}",
                     "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as reply:
            return json.loads(reply.read())

    def redis(self, *command: str) -> str:
        return self.docker("exec", self.container("redis"), "redis-cli", "--no-auth-warning",
                           *command).stdout


@pytest.fixture(scope="module")
def stack(
    docker: Docker, base: str, image: str, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """deploy/compose.yaml as written, with the test's image for both Podium and Redis and
    an override a test needs: a slower model and a short lease (a killed worker's run is
    taken over in seconds)."""
    override = tmp_path_factory.mktemp("compose") / "override.yaml"
    override.write_text(
        "services:\n"
        "  sim:\n"
        '    command: ["sim-server", "--host", "0.0.0.0", "--port", "8000",'
        ' "--step-ms", "60", "--output-tokens", "24"]\n'
        "  worker:\n"
        '    command: ["worker", "--config", "/etc/podium/podium.toml", "--pool", "default",'
        ' "--grace", "20", "--lease", "4", "--metrics-port", "9100"]\n'
    )
    env = {
        # Redis from the base image (Debian's redis-server), Podium from the one built on it
        "PODIUM_IMAGE": image, "REDIS_IMAGE": base,
        "REDIS_PASSWORD": secrets.token_hex(16),
        "PODIUM_KEYS": f"pk_{secrets.token_hex(12)}=acme",
        "GATEWAY_A_PORT": str(free_port()), "GATEWAY_B_PORT": str(free_port()),
        "WORKERS": "2",
    }
    s = Stack(docker, env, [COMPOSE, override])
    try:
        s.compose("up", "-d", "--no-build", timeout=600)
        for service in ("gateway-a", "gateway-b", "worker"):
            wait_for(f"healthy {service}",
                     lambda svc=service: health(docker, s.container(svc)) == "healthy",
                     within_s=180)
        yield s
    finally:
        s.compose("down", "-v", "-t", "60", timeout=600)


def test_a_run_completes_end_to_end_and_either_gateway_serves_it(stack: Stack) -> None:
    run = stack.request("A", "/v1/runs", {"agent": "react", "input": "hello", "wait": True})
    assert run["status"] == "completed", run
    # the same key on the other replica, which reads the same run from Redis
    again = stack.request("B", f"/v1/runs/{run['id']}")
    assert again["status"] == "completed" and again["output"] == run["output"]


def test_the_same_key_works_on_both_gateways_and_a_wrong_one_on_neither(stack: Stack) -> None:
    for gateway in "AB":
        assert stack.request(gateway, "/v1/agents")["data"][0]["name"] == "react"
        req = urllib.request.Request(stack.gateways[gateway] + "/v1/agents",
                                     headers={"Authorization": "Bearer pk_wrong"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=30)
        assert refused.value.code == 401
        refused.value.close()  # the error holds the response's socket


def test_a_worker_killed_mid_run_has_its_run_finished_by_another(stack: Stack) -> None:
    run = stack.request("A", "/v1/runs", {"agent": "react", "input": "long one"})
    stream = "podium:queue:default"

    def holder() -> str:  # the consumer (hostname-pid-hex) holding the run, once claimed
        rows = stack.redis("XPENDING", stream, "workers", "-", "+", "10").split()
        return rows[1] if len(rows) >= 2 else ""

    consumer = wait_for("a worker claiming the run", holder, every_s=0.05)
    hostname = consumer.rsplit("-", 2)[0]  # HOST-PID-6hex
    workers = {stack.docker("inspect", "-f", "{{.Config.Hostname}}", c).stdout.strip(): c
               for c in (stack.container("worker", 1), stack.container("worker", 2))}
    assert stack.request("A", f"/v1/runs/{run['id']}")["status"] in ("queued", "running")
    killed = workers[hostname]
    stack.docker("kill", killed)  # SIGKILL: no drain, no hand-back
    try:
        done = wait_for("the run completed elsewhere",
                        lambda: (r := stack.request("B", f"/v1/runs/{run['id']}"))["status"]
                        not in ("queued", "running") and r, within_s=180)
        assert done["status"] == "completed", done
    finally:  # the stack as it was, for the tests after this one
        stack.docker("start", killed)
        wait_for("the killed worker back", lambda: health(stack.docker, killed) == "healthy",
                 within_s=180)


def test_stopping_the_stack_drains_every_podium_container(stack: Stack) -> None:
    """`docker stop` (SIGTERM, then SIGKILL after stop_grace_period): each Podium
    container exits 0 on its own, well inside its grace."""
    services = ["gateway-a", "gateway-b", "worker", "sim"]
    names = stack.docker("ps", "--format", "{{.Names}}",
                         "--filter", f"label=com.docker.compose.project={PROJECT}").stdout
    podium = [n for n in names.split() if "_redis_" not in n]
    assert len(podium) == 5  # running: two gateways, two workers, the model
    stack.compose("stop", *services, timeout=300)
    for name in podium:
        assert exit_state(stack.docker, name) == (0, False), name
