"""Fixtures for the observability tests (Redis ones come from the root conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # observe_agents, for in-process tests


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a `podium` subprocess that imports ``observe_agents``."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}


@contextlib.asynccontextmanager
async def serving(config: str, tmp_path: Path) -> AsyncIterator[str]:
    """A real ``podium serve`` on a free port with ``config`` (TOML); yields its base URL."""
    path = tmp_path / "podium.toml"
    path.write_text(config)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "podium.cli.main", "serve", "--config", str(path),
        "--host", "127.0.0.1", "--port", "0", "--log-level", "info",
        env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    url = None
    seen = []
    while url is None:
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        seen.append(line)
        assert line, "".join(seen)
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found and "Uvicorn running" in line:
            url = found[1]
    drain = asyncio.create_task(proc.stderr.read())
    try:
        yield url
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        await drain
