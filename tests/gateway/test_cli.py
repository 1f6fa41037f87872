"""``podium serve`` refuses bad set-ups with a clear message (exit 2), and hashes keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from podium.gateway.auth import hash_key

HERE = Path(__file__).parent


def serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    return subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "serve", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hash_key_prints_what_goes_in_the_config(tmp_path: Path) -> None:
    out = serve("--hash-key", "pk_secret", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == hash_key("pk_secret")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ("--agent", "gateway_agents:react", "--redis", "rediss://127.0.0.1:1/0"),
            "use a redis:// TCP URL",
        ),
        (("--agent", "no_such_module:agent"), "cannot import"),
        (("--store", "mysql://x", "--agent", "gateway_agents:react"), "--store: use 'sqlite:"),
        (("--store", "postgres://x", "--agent", "gateway_agents:react"), "names no database"),
    ],
)
def test_bad_setups_exit_2_saying_why(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    out = serve(*args, cwd=tmp_path)
    assert out.returncode == 2 and needle in out.stderr
