"""Start a private PostgreSQL server on a free port (for tests that kill or restart it).

``initdb`` refuses to run as root: as root, the cluster is made and run as the
``postgres`` user (``runuser``), in a directory of its own under /tmp (pytest's
temporary directories are root's alone).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from distributed.redis_server import free_port

__all__ = ("PostgresServer", "postgres_binaries")


def postgres_binaries() -> Path | None:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    """A postmaster child with trust auth on 127.0.0.1:``port`` (fsync on).

    ``kill()`` is ``pg_ctl stop -m immediate`` (no checkpoint: the next start replays the
    WAL, as after a crash); ``start()`` again reuses the same port and data directory.
    """

    def __init__(self, port: int | None = None, *, password: str | None = None) -> None:
        bin_dir = postgres_binaries()
        if bin_dir is None:
            raise RuntimeError("no initdb/pg_ctl installed")
        self.bin = bin_dir
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="podium-pg-"))
        self.data = self.root / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        auth = ["-A", "trust"]
        if password is not None:  # password auth over TCP (scram), for wrong-password tests
            pwfile = self.root / "pw"
            pwfile.write_text(password)
            if self._as:
                os.chown(pwfile, user.pw_uid, user.pw_gid)
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        self.password = password
        self._sh([str(self.bin / "initdb"), "-D", str(self.data), *auth, "-U",
                  "postgres", "--no-sync"])

    @property
    def url(self) -> str:
        who = "postgres" if self.password is None else f"postgres:{self.password}"
        return f"postgresql://{who}@127.0.0.1:{self.port}/postgres"

    def _sh(self, argv: list[str]) -> None:
        subprocess.run([*self._as, *argv], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, cwd=self.root)

    def start(self, timeout: float = 30.0) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories='{self.root}' -c max_connections=50")
        self._sh([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.root / "log"), "-o", options, "-w", "-t", str(int(timeout)),
                  "start"])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # pg_ctl -w waited for it; the port is open
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"postgres did not start on port {self.port}")

    def kill(self) -> None:
        """Stop at once, as a crash would (connections cut, no checkpoint)."""
        self._sh([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                  "stop"])

    def stop(self) -> None:
        subprocess.run([*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m",
                        "immediate", "-w", "stop"], check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(self.root, ignore_errors=True)
