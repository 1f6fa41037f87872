"""``store = "postgresql://…"`` in a real deployment: an embedded ``podium serve`` keeps its
runs in PostgreSQL; a gateway on Redis queues runs that a ``podium worker`` (reading the same
podium.toml) drives and keeps in PostgreSQL, where the gateway reads them back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason

from .test_one_config import KEY, burst_worker, running_gateway

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


def _stored(url: str, run_id: str) -> str | None:
    """The run's status as PostgreSQL holds it (read by a store of this test's own)."""

    async def look() -> str | None:
        async with PostgresRunStore(url, create_schema=False) as store:
            record = await store.get(run_id)
            return None if record is None else record.status

    return asyncio.run(look())


def test_an_embedded_server_keeps_its_runs_in_postgres(
    tmp_path: Path, fresh_postgres: str
) -> None:
    config = tmp_path / "podium.toml"
    config.write_text(f'[server]\nstore = "{fresh_postgres}"\n\n'
                      f'[[keys]]\nkey = "{KEY}"\ntenant = "t1"\n')
    with running_gateway("--config", str(config), "--agent", "react") as gateway:
        reply = gateway.post("/v1/runs", json={"agent": "react", "input": "q", "wait": True})
        record = reply.json()
        assert record["status"] == "completed", record
        again = gateway.get(f"/v1/runs/{record['id']}").json()  # read back from the store
        assert again["status"] == "completed" and again["output"] == record["output"], again
    assert _stored(fresh_postgres, record["id"]) == "completed"


def test_a_worker_keeps_the_gateways_runs_in_postgres(
    tmp_path: Path, fresh_postgres: str, shared_redis_url: str, prefix: str
) -> None:
    config = tmp_path / "podium.toml"
    config.write_text(f"""
[server]
redis = "{shared_redis_url}"
prefix = "{prefix}"
store = "{fresh_postgres}"

[[agents]]
name = "support"
path = "podium.examples.react:agent"

[[keys]]
key = "{KEY}"
tenant = "t1"
""")
    with running_gateway("--config", str(config)) as gateway:
        run = gateway.post("/v1/runs", json={"agent": "support", "input": "What is Podium?"})
        assert run.status_code == 202, run.text
        run_id = run.json()["id"]
        assert _stored(fresh_postgres, run_id) == "queued"
        out = burst_worker("--config", str(config))
        assert out.returncode == 0, out.stderr
        record = gateway.get(f"/v1/runs/{run_id}").json()
        assert record["status"] == "completed" and record["output"], record
    assert _stored(fresh_postgres, run_id) == "completed"
