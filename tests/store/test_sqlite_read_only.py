"""A SQLite store on a file this process may not write: one line that says so.

A server on a read-only file system failed at start-up with a traceback and SQLite's
"unable to open database file"; ``podium runs list`` said the same. A driver (a server,
``podium run``) is refused with "… is read-only: …" (exit 2 from the CLI); a viewer
(``podium runs``) reads the file read-only where SQLite can, and says why where not.

Root may write any file, so a chmod reproduces nothing as root: a read-only file system
does, a read-only bind mount in a mount namespace of the command's own (``unshare``, as
root or as an unprivileged user where user namespaces are allowed).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from podium.engine.records import RunRecord
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.slow

_MOUNT_RO = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'

#: Opens the store as a driver and prints what each call answers.
_DRIVER = """
import asyncio, sys
from podium.store.sqlite import SQLiteRunStore

async def main() -> None:
    store = SQLiteRunStore(sys.argv[1])
    for name, call in (("sole_user", store.sole_user), ("list", store.list)):
        try:
            result = call()
            if asyncio.iscoroutine(result):
                result = await result
            print(name, "answered", result)
        except Exception as exc:
            print(name, type(exc).__name__, exc)
    await store.aclose()

asyncio.run(main())
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODIUM_")}
    return {**env, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


def _podium(*args: str) -> list[str]:
    return [sys.executable, "-m", "podium.cli.main", *args]


def _on_read_only(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run where ``directory`` is a read-only file system."""
    return subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", _MOUNT_RO, str(directory), *argv],
        capture_output=True, text=True, timeout=60, env=_env(),
    )


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A directory for the store, and a read-only mount of it possible (or a skip)."""
    directory = tmp_path / "data"
    directory.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: cannot make a read-only file system")
    probe = _on_read_only(directory, "true")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a read-only file system here: {probe.stderr.strip()}")
    return directory


def _store_with_a_run(path: Path) -> None:
    async def create() -> None:
        async with SQLiteRunStore(path) as store:
            await store.create(RunRecord("run_left", "agent", "hi"))

    asyncio.run(create())


def _one_line(out: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_a_driver_on_a_read_only_file_system_is_refused_in_one_line(data: Path) -> None:
    path = data / "runs.sqlite"
    _store_with_a_run(path)
    said = f"{path} is read-only: it is on a read-only file system"
    out = _on_read_only(data, sys.executable, "-c", _DRIVER, str(path))
    assert out.returncode == 0, out.stderr
    assert f"list StoreError {said}" in out.stdout, out.stdout
    (data / "runs.sqlite.lock").unlink()  # nobody can create it there either
    out = _on_read_only(data, sys.executable, "-c", _DRIVER, str(path))
    assert f"sole_user StoreError {said}" in out.stdout, out.stdout


def test_serve_and_run_on_a_read_only_store_exit_2_with_one_line(data: Path) -> None:
    path = data / "runs.sqlite"
    _store_with_a_run(path)
    said = f"store {str(path)!r} is read-only: it is on a read-only file system"
    out = _on_read_only(data, *_podium("serve", "--store", f"sqlite:{path}", "--port", "0"))
    _one_line(out, said)
    _one_line(_on_read_only(data, *_podium("run", "react", "hi", "--store", str(path))), said)
    new = data / "new.sqlite"  # a store to be created there: refused the same way
    _one_line(_on_read_only(data, *_podium("run", "react", "hi", "--store", str(new))),
              f"store {str(new)!r} is read-only")


def test_a_viewer_reads_a_read_only_store_where_sqlite_can(data: Path) -> None:
    path = data / "runs.sqlite"
    _store_with_a_run(path)
    listing = _podium("runs", "list", "--store", str(path), "--json")
    # Closed cleanly, the file has no -shm beside it, and SQLite cannot make one there.
    _one_line(_on_read_only(data, *listing), f"{path} is read-only: it is on a read-only")
    server = sqlite3.connect(path)  # a server has it open: its -shm is there
    try:
        server.execute("SELECT COUNT(*) FROM runs").fetchall()
        out = _on_read_only(data, *listing)
        assert out.returncode == 0, out.stderr
        assert [r["status"] for r in json.loads(out.stdout)] == ["queued"]
    finally:
        server.close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes files whatever their mode")
def test_a_driver_on_files_it_may_not_write_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = data / "runs.sqlite"
    _store_with_a_run(path)
    try:
        data.chmod(0o555)
        out = subprocess.run([sys.executable, "-c", _DRIVER, str(path)], capture_output=True,
                             text=True, timeout=60, env=_env())
        assert f"{path} is read-only: this process may not write its directory" in out.stdout
        data.chmod(0o755)
        path.chmod(0o444)
        out = subprocess.run(_podium("serve", "--store", f"sqlite:{path}", "--port", "0"),
                             capture_output=True, text=True, timeout=60, env=_env())
        _one_line(out, "is read-only: this process may not write the file")
    finally:
        data.chmod(0o755)
        path.chmod(0o644)
