"""A full disk under PostgreSQL: a write is refused as "unavailable" (a gateway's 503 +
Retry-After) saying the disk is full, a write that waits retries until space is freed,
and nothing written before, during or after is lost or written twice.

Podium's tables live on a small tmpfs (a tablespace; mounting needs root, else skipped)
that the test fills to its last byte with a ballast file."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from distributed.harness import wait_until
from distributed.postgres_server import PostgresServer
from podium.engine.records import ModelTurn, RunRecord
from podium.errors import StoreUnavailableError
from podium.messages import Message
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason, run_sql

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def small_disk(private_postgres: PostgresServer) -> Iterator[Path]:
    """An 8 MiB tmpfs holding every table Podium creates on the private server."""
    disk = private_postgres.root / "space"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        user = pwd.getpwnam("postgres")
        os.chown(disk, user.pw_uid, user.pw_gid)
        run_sql(private_postgres.url, f"CREATE TABLESPACE small LOCATION '{disk}'",
                "ALTER DATABASE postgres SET default_tablespace = small")
        yield disk
    finally:
        private_postgres.stop()  # before the mount goes
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> Path:
    ballast = disk / "ballast"
    with ballast.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):  # ENOSPC: full at this granularity
                while True:
                    f.write(b"\0" * size)
    return ballast


def _turn(step: int) -> ModelTurn:
    # incompressible, larger than a page: each append extends the journal's TOAST table
    return ModelTurn(step, float(step), Message("assistant", os.urandom(12_000).hex()))


async def test_a_full_disk_is_unavailable_then_nothing_is_lost(
    private_postgres: PostgresServer, small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="podium.store")
    async with PostgresRunStore(private_postgres.url, unavailable_s=1.0) as store:
        record = RunRecord("r1", "agent", "x", status="running")
        await store.create(record)
        await store.append("r1", [_turn(0)], record=record)
        ballast = _fill(small_disk)

        # A gateway's store: gives up within unavailable_s, saying why.
        with pytest.raises(StoreUnavailableError, match="disk is full"):
            for step in range(1, 50):  # until a write needs a page the disk has not got
                await store.append("r1", [_turn(step)])
        written = len(await store.journal("r1"))

    # A worker's store: waits, retrying, until space is freed.
    async with PostgresRunStore(private_postgres.url, unavailable_s=120.0) as patient:
        caplog.clear()
        task = asyncio.ensure_future(patient.append("r1", [_turn(100)]))
        await wait_until(lambda: "trying again" in caplog.text or task.done(), 60,
                         "a refused write retrying")
        assert not task.done(), task  # it met the full disk, and waits
        ballast.unlink()
        await task
        assert patient.outages_survived >= 1
        entries = await patient.journal("r1")
        assert [seq for seq, _ in entries] == list(range(written + 1))  # none lost, none twice
        last = entries[-1][1]
        assert isinstance(last, ModelTurn) and last.step == 100
