"""Fixtures for tests against a real Redis (the machine's, or a private one)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

redis = pytest.importorskip("redis")

from .redis_server import RedisServer  # noqa: E402

SHARED_URL = os.environ.get("PODIUM_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _reachable(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
        ok = bool(client.ping())
        client.close()
        return ok
    except redis.exceptions.RedisError:
        return False


@pytest.fixture(scope="session")
def shared_redis_url() -> str:
    if not _reachable(SHARED_URL):
        pytest.skip(f"no Redis at {SHARED_URL}")
    return SHARED_URL


@pytest.fixture
def prefix(shared_redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own on the shared Redis; its keys are deleted afterwards."""
    name = f"podium-test-{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(shared_redis_url)
    keys = list(client.scan_iter(match=f"{name}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (AOF, fsync always), stopped afterwards."""
    server = RedisServer(tmp_path / "redis")
    server.directory.mkdir()
    server.start()
    yield server
    server.stop()
