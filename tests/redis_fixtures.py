"""Redis for the tests: the machine's shared server (each test under a key prefix of its
own) or a private ``redis-server`` a test may kill and restart. Registered as fixtures by
the root ``conftest.py``; the helpers serve the conformance suite's own fixtures too."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from distributed.redis_server import RedisServer

__all__ = (
    "REDIS_URL",
    "delete_prefix",
    "prefix",
    "private_redis",
    "redis_reachable",
    "redis_url",
    "shared_redis_url",
)

REDIS_URL = os.environ.get("PODIUM_TEST_REDIS", "redis://127.0.0.1:6379/0")


def redis_reachable(url: str = REDIS_URL) -> bool:
    """Whether redis-py is installed and a server answers PING at ``url``. A refused
    connection is a no at once; a slow answer (a busy machine) is waited for and asked
    again, so a present server is never skipped for being slow."""
    try:
        import redis
    except ImportError:
        return False
    for _ in range(3):
        client = redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=10)
        try:
            return bool(client.ping())
        except redis.exceptions.TimeoutError:
            continue
        except redis.exceptions.RedisError:
            return False
        finally:
            client.close()
    return False


def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix:`` (never FLUSHALL: the server is shared)."""
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="session")
def shared_redis_url() -> str:
    if not redis_reachable():
        pytest.skip(f"no Redis at {REDIS_URL}")
    return REDIS_URL


@pytest.fixture(scope="session")
def redis_url(shared_redis_url: str) -> str:
    return shared_redis_url


@pytest.fixture
def prefix(shared_redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own on the shared Redis; its keys are deleted afterwards."""
    name = f"podium-test-{uuid.uuid4().hex[:10]}"
    yield name
    delete_prefix(shared_redis_url, name)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (AOF, fsync always), stopped afterwards."""
    from distributed.redis_server import RedisServer

    server = RedisServer(tmp_path / "redis")
    server.directory.mkdir()
    server.start()
    yield server
    server.stop()
