"""Several hosts on one machine: Linux network namespaces on a bridge.

Layout (``TAG`` is unique per builder, ``X`` picks a free /24)::

    TAG-net      the "switch": bridge br0, one veth end per host (h-NAME)
    TAG-NAME     one namespace per host: lo, eth0 = 10.231.X.N/24

The bridge lives in a namespace of its own, so the root namespace holds nothing of the
fleet but one route: ``blackhole 10.231.X.0/24``, so that nothing in it ever sends to
the fleet's subnet (traffic stays inside the namespaces; clients run in them too).
:meth:`Fleet.cut` takes a host's link down at the switch (its packets vanish, as when a
machine or its network dies: connections hang, they are not refused); :meth:`Fleet.mend`
brings it back.

Needs root and ``ip`` (iproute2). Every command is bounded; :meth:`Fleet.close` kills
the processes it started (their process groups), deletes namespaces and route, and is
safe to call twice or after a half-built start. A fleet whose builder was killed before
it could close (a SIGKILLed test run) is swept by the next builder: each fleet writes
what it made to ``/run/podium-fleet/TAG.json`` with its builder's PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ("Fleet", "Host", "fleet_unavailable")

ROOT = Path(__file__).resolve().parents[2]
STATE = Path("/run/podium-fleet")


def fleet_unavailable() -> str | None:
    """Why namespaces cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    # Made and deleted for real: a container without CAP_SYS_ADMIN lists namespaces
    # but cannot make one.
    name = f"pfprobe{os.getpid()}"
    probe = _ip("netns", "add", name, check=False)
    _ip("netns", "delete", name, check=False)
    if probe.returncode != 0:
        return f"cannot make a network namespace: {probe.stderr.decode().strip()}"
    if shutil.which("unshare") is None:
        return "needs util-linux (unshare)"
    if shutil.which("redis-server") is None:
        return "needs redis-server"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(["ip", *args], capture_output=True, timeout=10)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.decode().strip()}")
    return done


@dataclass(frozen=True)
class Host:
    name: str
    ns: str
    ip: str


class Fleet:
    """Hosts ``names`` on one bridge. ``start()`` builds them; use as a context manager."""

    def __init__(self, names: Sequence[str], tag: str | None = None) -> None:
        self.tag = tag or f"pf{os.getpid()}"
        self.net = f"{self.tag}-net"
        self.names = list(names)
        self.hosts: dict[str, Host] = {}
        self.subnet = ""
        self._route = False
        self._procs: list[subprocess.Popen[bytes]] = []

    # -- building --------------------------------------------------------------------------

    def start(self) -> Fleet:
        sweep_abandoned()
        try:
            self._claim_subnet()
            self._record()
            _ip("netns", "add", self.net)
            _ip("-n", self.net, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.net, "link", "set", "br0", "up")
            for n, name in enumerate(self.names, start=2):
                self._add_host(name, f"{self.subnet_prefix}.{n}")
        except BaseException:
            self.close()
            raise
        return self

    def _claim_subnet(self) -> None:
        """A /24 of 10.231.0.0/16 no other fleet on this machine routes (its blackhole
        route is the claim: adding it fails if another fleet holds that subnet)."""
        first = os.getpid() % 250
        for i in range(250):
            octet = (first + i) % 250 + 1
            subnet = f"10.231.{octet}.0/24"
            if _ip("route", "add", "blackhole", subnet, check=False).returncode == 0:
                self.subnet, self.subnet_prefix, self._route = subnet, f"10.231.{octet}", True
                return
        raise RuntimeError("no free /24 in 10.231.0.0/16")

    def _record(self) -> None:
        """What this fleet made, for a later builder to sweep if this one dies unclosed."""
        STATE.mkdir(mode=0o700, exist_ok=True)
        namespaces = [self.net, *(f"{self.tag}-{n}" for n in self.names)]
        state = {"pid": os.getpid(), "subnet": self.subnet, "namespaces": namespaces}
        (STATE / f"{self.tag}.json").write_text(json.dumps(state))

    def _add_host(self, name: str, ip: str) -> None:
        ns = f"{self.tag}-{name}"
        _ip("netns", "add", ns)
        self.hosts[name] = Host(name, ns, ip)
        _ip("-n", self.net, "link", "add", f"h-{name}", "type", "veth",
            "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.net, "link", "set", f"h-{name}", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")

    # -- using -----------------------------------------------------------------------------

    def ip(self, name: str) -> str:
        return self.hosts[name].ip

    def argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in host ``name``'s namespace."""
        return ["ip", "netns", "exec", self.hosts[name].ns, *argv]

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in host ``name`` (its own process group), output to ``log``."""
        with log.open("ab") as out:
            proc = subprocess.Popen(
                self.argv(name, argv), cwd=ROOT, stdout=out, stderr=out,
                stdin=subprocess.DEVNULL, env=dict(env or os.environ), start_new_session=True,
            )
        self._procs.append(proc)
        return proc

    def run(
        self, name: str, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in host ``name`` to its end (killed past ``timeout``)."""
        return subprocess.run(
            self.argv(name, argv), cwd=ROOT, capture_output=True, text=True,
            timeout=timeout, env=dict(env or os.environ),
        )

    def cut(self, name: str) -> None:
        """Take host ``name``'s link down at the switch: its packets vanish."""
        _ip("-n", self.net, "link", "set", f"h-{name}", "down")

    def mend(self, name: str) -> None:
        _ip("-n", self.net, "link", "set", f"h-{name}", "up")

    def replace(self, name: str) -> None:
        """Host ``name`` dies and a new one takes its address: its processes killed, its
        namespace deleted (with its sockets: a request it had sent into a cut link is
        never delivered once the link is back) and made again."""
        host = self.hosts.pop(name)
        self._kill_left_in(host.ns)
        # Its link first: the kernel keeps a namespace while closed sockets in it still
        # retransmit, and those now have no device to send on.
        _ip("-n", self.net, "link", "del", f"h-{name}")
        _ip("netns", "delete", host.ns)
        self._add_host(name, host.ip)

    # -- tearing down ----------------------------------------------------------------------

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL ``proc``'s process group (it and what it started) and reap it."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def close(self) -> None:
        for proc in self._procs:
            self.kill(proc)
        self._procs.clear()
        for host in list(self.hosts.values()):
            self._kill_left_in(host.ns)
            _ip("netns", "delete", host.ns, check=False)
        self.hosts.clear()
        _ip("netns", "delete", self.net, check=False)  # and the bridge and veth ends in it
        if self._route:
            _ip("route", "del", "blackhole", self.subnet, check=False)
            self._route = False
        with contextlib.suppress(FileNotFoundError):
            (STATE / f"{self.tag}.json").unlink()

    @staticmethod
    def _kill_left_in(ns: str) -> None:
        """Processes still in ``ns`` (a child that left its group): by id, ours only."""
        _kill_left_in(ns)

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def sweep_abandoned() -> None:
    """Tear down the fleets whose builder died without closing them (their state files
    name a PID that is gone): their processes, namespaces and route."""
    for path in STATE.glob("pf*.json") if STATE.is_dir() else ():
        try:
            state = json.loads(path.read_text())
            os.kill(int(state["pid"]), 0)
            continue  # its builder lives: not ours to touch
        except ProcessLookupError:
            pass
        except (ValueError, KeyError, OSError):
            continue
        for ns in state.get("namespaces", ()):
            _kill_left_in(ns)
            _ip("netns", "delete", ns, check=False)
        if state.get("subnet"):
            _ip("route", "del", "blackhole", state["subnet"], check=False)
        path.unlink(missing_ok=True)


def _kill_left_in(ns: str) -> None:
    """SIGKILL what still runs in ``ns`` (a namespace of a fleet of ours), by id."""
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, timeout=10)
    for pid in done.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, timeout=10)
        if not left.stdout.strip():
            return
        time.sleep(0.05)
