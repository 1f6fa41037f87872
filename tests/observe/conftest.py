"""Fixtures for the observability tests: a key prefix of each test's own on the shared Redis."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # observe_agents, for in-process tests
REDIS_URL = os.environ.get("PODIUM_TEST_REDIS", "redis://127.0.0.1:6379/0")


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a `podium` subprocess that imports ``observe_agents``."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}


@pytest.fixture(scope="session")
def redis_url() -> str:
    redis = pytest.importorskip("redis")
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5)
        client.ping()
        client.close()
    except redis.exceptions.RedisError:
        pytest.skip(f"no Redis at {REDIS_URL}")
    return REDIS_URL


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    import redis

    name = f"podium-test-{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{name}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
