"""Shared fixtures: every async test runs on the default loop and on uvloop; Redis (the
shared server under a prefix, or a private one) comes from :mod:`redis_fixtures`."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from redis_fixtures import prefix, private_redis, redis_url, shared_redis_url

__all__ = ("prefix", "private_redis", "redis_url", "shared_redis_url")  # fixtures

# A suite started in the background by a shell without job control (as a CI runner may
# start it) inherits SIGINT ignored, and every child it starts would too: the Ctrl-C tests
# would see a `podium` that cannot be interrupted (a hung `podium run`, a `podium serve`
# that stops with 0, not 130). The children a test starts get the usual Ctrl-C.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend
