"""Gateway test helpers: an in-process gateway over httpx's ASGI transport, and a real
``podium serve`` subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path

import gateway_agents
import httpx
import pytest

from podium.config import load_config
from podium.gateway.app import create_app
from podium.gateway.runtime import build_gateway
from podium.gateway.service import Gateway, ServedAgent
from podium.store.base import RunStore
from podium.store.memory import MemoryRunStore
from serve_process import start_serve

HERE = Path(__file__).parent
KEY_A, KEY_B, KEY_LIMITED = "pk_test_tenant_a", "pk_test_tenant_b", "pk_test_limited"
KEY_ADMIN = "pk_test_operator"  # admin = true: may read /metrics
KEYS_ENV = f"{KEY_A}=tenant-a,{KEY_B}=tenant-b"


def default_agents() -> list[ServedAgent]:
    return [
        ServedAgent(gateway_agents.react()),
        ServedAgent(gateway_agents.slow()),
        ServedAgent(gateway_agents.sleepy()),
    ]


@contextlib.asynccontextmanager
async def gateway_client(
    env: Mapping[str, str] | None = None,
    agents: Sequence[ServedAgent] | None = None,
    key: str = KEY_A,
    store: RunStore | None = None,
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """A started in-process gateway (on ``store``, a new in-memory one by default) and a
    client authenticated as ``key``'s tenant."""
    base = {
        "PODIUM_KEYS": KEYS_ENV,
        "PODIUM_SERVER__DRAIN_GRACE_S": "0.2",
        # Adaptive shedding reads the host's load: on a busy machine the test's own gateway
        # refused its requests with 429 overloaded. The tests of shedding turn it on.
        "PODIUM_LIMITS__ADAPTIVE__ENABLED": "false",
    }
    config = load_config(None, {**base, **(env or {})})
    gw = build_gateway(config, agents or default_agents(), store=store or MemoryRunStore())
    gw.keys.add(KEY_ADMIN, "operator", admin=True)
    await gw.start()
    transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
    try:
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://podium.test",
            headers={"Authorization": f"Bearer {key}"},
        ) as client:
            yield gw, client
    finally:
        await gw.stop()


SERVER_CONFIG = f"""
[server]
store = "memory"
drain_grace_s = 10

[[agents]]
path = "gateway_agents:react"
[[agents]]
path = "gateway_agents:slow"
[[agents]]
path = "gateway_agents:sleepy"

[pools.default]
concurrency = 64

[[keys]]
key = "{KEY_A}"
tenant = "tenant-a"

[[keys]]
key = "{KEY_B}"
tenant = "tenant-b"

[[keys]]
key = "{KEY_ADMIN}"
tenant = "operator"
admin = true

[[keys]]
key = "{KEY_LIMITED}"
tenant = "limited"
rate = 0.5
burst = 2
"""


class ServerProcess:
    """A ``podium serve`` child process; ``url`` is where it listens."""

    def __init__(self, proc: subprocess.Popen[str], url: str, lines: list[str]) -> None:
        self.proc = proc
        self.url = url
        self.lines = lines

    def client(self, key: str = KEY_A) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )


@contextlib.contextmanager
def podium_server(
    tmp: Path,
    config: str = SERVER_CONFIG,
    env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[ServerProcess]:
    """Start ``podium serve`` on a port the OS picks and wait for its start-up line (read,
    not polled); its URL is the one it announces."""
    path = tmp / "podium.toml"
    path.write_text(config)
    child_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    }
    serving = start_serve(
        ["--config", str(path), "--port", "0", "--log-level", "info"],
        cwd=tmp,
        env=child_env,
        preexec_fn=preexec_fn,
    )
    try:
        yield ServerProcess(serving.proc, serving.url, serving.lines)
    finally:
        serving.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One shared real server for the end-to-end tests."""
    with podium_server(tmp_path_factory.mktemp("serve")) as srv:
        yield srv
