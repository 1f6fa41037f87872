"""Fixtures of the backend tests: replay servers and ``podium sim-server`` subprocesses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from backend_servers import ReplayServer, SimServerProcess


@pytest.fixture
async def replay() -> AsyncIterator[ReplayServer]:
    server = ReplayServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def replay_factory() -> AsyncIterator[Callable[[], Any]]:
    servers: list[ReplayServer] = []

    async def make() -> ReplayServer:
        server = ReplayServer()
        await server.start()
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for s in servers:
            await s.stop()


@pytest.fixture(scope="session")
def sim_server() -> Iterator[SimServerProcess]:
    """One fast sim-server shared by the session (capacity 4, 1 ms steps)."""
    server = SimServerProcess("--capacity", "4", "--step-ms", "1", "--output-tokens", "6")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sim_server_factory() -> Iterator[Callable[..., SimServerProcess]]:
    servers: list[SimServerProcess] = []

    def make(*args: str) -> SimServerProcess:
        server = SimServerProcess(*args)
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for s in servers:
            s.stop()
