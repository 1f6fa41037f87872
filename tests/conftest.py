"""Shared fixtures: every async test runs on the default loop and on uvloop; Redis (the
shared server under a prefix, or a private one) comes from :mod:`redis_fixtures`."""

from __future__ import annotations

import compileall
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import podium
from deploy import docker_env, prefetch
from postgres_fixtures import fresh_postgres, postgres_url, private_postgres
from redis_fixtures import prefix, private_redis, redis_url, shared_redis_url

__all__ = (  # fixtures
    "fresh_postgres", "postgres_url", "prefix", "private_postgres", "private_redis",
    "redis_url", "shared_redis_url",
)

_PREFETCH = pytest.StashKey[subprocess.Popen[bytes]]()

# A suite started in the background by a shell without job control (as a CI runner may
# start it) inherits SIGINT ignored, and every child it starts would too: the Ctrl-C tests
# would see a `podium` that cannot be interrupted (a hung `podium run`, a `podium serve`
# that stops with 0, not 130). The children a test starts get the usual Ctrl-C.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    # Where bytecode caching is off (PYTHONDONTWRITEBYTECODE=1, as some containers set it),
    # each of the several hundred `podium` processes the suite starts would compile
    # Podium's sources again: about 0.2 s of CPU apiece, a minute or more of the suite.
    # Compile them once, before the xdist workers start, as an ordinary install would
    # (the caches are git-ignored; Python still checks each against its source).
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        compileall.compile_dir(Path(podium.__file__).parent, quiet=2)  # a speed-up, or nothing
    # The container tests' base root filesystem (minutes of debootstrap, mostly network
    # waits) is made in the background from the start, not on a worker that would run
    # nothing else meanwhile; the tests wait for it through the cache's lock.
    if not hasattr(config, "workerinput") and prefetch.wanted(config.args, config.rootpath):
        config.stash[_PREFETCH] = prefetch.start(docker_env.CACHE)


def pytest_unconfigure(config: pytest.Config) -> None:
    if (proc := config.stash.get(_PREFETCH, None)) is not None:
        prefetch.stop(proc)


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    backend: tuple[str, dict[str, Any]] = request.param
    return backend


@pytest.fixture(autouse=True)
def _recursion_limit_restored() -> Iterator[None]:
    """Put back the interpreter's recursion limit after each test: mypy's API (the typing
    test) and mkdocstrings (the docs site build) raise it for the rest of the process, and
    the gateway's refusal of deeply nested JSON is msgspec's RecursionError at the usual
    limit, so a test after them in the same worker would see a 2,000-deep body decode."""
    limit = sys.getrecursionlimit()
    yield
    sys.setrecursionlimit(limit)
