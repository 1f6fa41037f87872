"""The image's HEALTHCHECK: probe whatever role the container's main process runs.

One image runs ``podium serve``, ``podium worker`` and ``podium sim-server``, and a
Dockerfile has one HEALTHCHECK, so this reads the main process's command line
(``/proc/1/cmdline``, or the pid in ``PODIUM_HEALTH_PID``) and probes that role:

    serve        GET /readyz on --port (default 8000): 200 when it can take runs
    sim-server   GET /health on --port (default 8000)
    worker       GET /readyz on --metrics-port (/metrics where /readyz is not served);
                 with no metrics port, the process being alive is the check

``PODIUM_HEALTH_URL`` replaces the probe (a port set only in podium.toml or the
environment, say). Exit 0: healthy; 1: not. Standard library only, one request, bounded.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

TIMEOUT_S = 3.0
DEFAULT_PORT = 8000


def option(args: Sequence[str], name: str) -> str | None:
    """The value of ``--name V`` or ``--name=V`` in ``args`` (the last one wins)."""
    found = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def probe_host(args: Sequence[str]) -> str:
    """Where to reach a server listening on ``--host``: loopback for the wildcards."""
    host = option(args, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", "", "127.0.0.1", "localhost"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def role_of(args: Sequence[str]) -> str | None:
    for role in ("serve", "worker", "sim-server"):
        if role in args:
            return role
    return None


def probe_urls(args: Sequence[str]) -> list[str]:
    """The URLs to try, in order; the first answering anything but 404 decides."""
    role = role_of(args)
    if role is None:  # `podium --version`, a shell: no server to ask
        return []
    if role == "worker":
        port = option(args, "--metrics-port")
        if port is None:
            return []
        base = f"http://127.0.0.1:{port}"
        return [f"{base}/readyz", f"{base}/metrics"]
    port = option(args, "--port") or str(DEFAULT_PORT)
    path = "/health" if role == "sim-server" else "/readyz"
    return [f"http://{probe_host(args)}:{port}{path}"]


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def cmdline(pid: str) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def main() -> int:
    url = os.environ.get("PODIUM_HEALTH_URL")
    try:
        urls = [url] if url else probe_urls(cmdline(os.environ.get("PODIUM_HEALTH_PID", "1")))
        for candidate in urls:
            status = status_of(candidate)
            if status == 404 and candidate is not urls[-1]:
                continue  # an older worker: no /readyz, try /metrics
            if status != 200:
                print(f"unhealthy: {candidate} answered {status}", file=sys.stderr)
            return 0 if status == 200 else 1
    except OSError as exc:  # refused, timed out, no such process
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0  # nothing to ask (a worker without a metrics port): the process is up


if __name__ == "__main__":
    sys.exit(main())
