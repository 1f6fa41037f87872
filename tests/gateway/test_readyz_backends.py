"""/readyz reports a model backend whose health probe answers "not healthy" (a real
``podium sim-server`` that is still loading its model: 503 on /health)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from conftest import gateway_client
from podium import Agent
from podium.gateway.service import ServedAgent
from podium.models import Backend, BackendPool, OpenAIChatModel

pytestmark = pytest.mark.anyio


@pytest.fixture
def loading_server() -> Iterator[str]:
    cmd = [sys.executable, "-m", "podium.cli.main", "sim-server", "--port", "0"]
    proc = subprocess.Popen(
        [*cmd, "--loading-s", "600"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        assert line.startswith("listening on "), line
        yield line.split()[-1] + "/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


async def test_readyz_is_not_ok_when_a_backend_probe_says_unhealthy(loading_server: str) -> None:
    direct = OpenAIChatModel(loading_server, "podium-sim")
    pool = BackendPool([Backend(OpenAIChatModel(loading_server, "podium-sim"))], healthy_wait_s=0)
    agents = [
        ServedAgent(Agent("direct", direct, "You answer.")),
        ServedAgent(Agent("pooled", pool, "You answer.")),
    ]
    try:
        async with gateway_client(agents=agents) as (_, client):
            r = await client.get("/readyz")
    finally:
        await direct.aclose()
        await pool.aclose()
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable"
    # each says what its probe saw: the loading server's 503 on its health path
    health = loading_server.removesuffix("/v1") + "/health"
    assert body["checks"]["model:direct"] == f"unhealthy: GET {health}: HTTP 503"
    pooled = body["checks"]["model:pooled"]
    assert pooled.startswith("unhealthy: podium-sim@") and f"GET {health}: HTTP 503" in pooled
    assert body["checks"]["store"] == "ok"
