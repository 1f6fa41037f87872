"""Shared fixtures: every async test runs on the default loop and on uvloop; Redis (the
shared server under a prefix, or a private one) comes from :mod:`redis_fixtures`."""

from __future__ import annotations

from typing import Any

import pytest

from redis_fixtures import prefix, private_redis, redis_url, shared_redis_url

__all__ = ("prefix", "private_redis", "redis_url", "shared_redis_url")  # fixtures


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend
