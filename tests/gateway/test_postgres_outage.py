"""A gateway on a PostgreSQL store that goes away: 503 with Retry-After, not a 500 or a
hang, and the runs it kept are there once the server is back."""

from __future__ import annotations

import asyncio

import pytest

from conftest import gateway_client
from distributed.postgres_server import PostgresServer
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


async def test_a_gateway_answers_503_while_postgres_is_down(
    private_postgres: PostgresServer,
) -> None:
    store = PostgresRunStore(private_postgres.url, unavailable_s=0.5)
    async with gateway_client(store=store) as (_, client):
        ok = await client.post("/v1/runs", json={"agent": "react", "input": "q", "wait": True})
        assert ok.status_code in (200, 201), ok.text
        await asyncio.to_thread(private_postgres.kill)
        down = await client.post("/v1/runs", json={"agent": "react", "input": "q"})
        assert down.status_code == 503 and int(down.headers["retry-after"]) >= 1, down.text
        await asyncio.to_thread(private_postgres.start)
        again = await client.get(f"/v1/runs/{ok.json()['id']}")
        assert again.status_code == 200 and again.json()["status"] == "completed", again.text
