"""A Podium fleet on network namespaces: a Redis host, two gateway hosts, worker hosts and
a client host (see :mod:`.netns`), with real ``redis-server``, ``podium serve --redis``
and ``podium worker`` processes in them. Used by the tests in this folder and by
``bench/bench_fleet.py``.

Every wait is bounded and reads a process's own output (a ready line) or Redis, never a
guess of how long something takes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .netns import ROOT, Fleet

__all__ = ("GATEWAYS", "KEY", "WORKERS", "PodiumFleet", "Worker", "wait_for")

KEY, ADMIN = "pk_fleet_user", "pk_fleet_admin"
AGENT = "tests.fleet.fleet_app:effects"
GATEWAYS = ("gw1", "gw2")
WORKERS = ("w1", "w2", "w3")
PREFIX = "fleet"
PORT = 8000
CLIENT = Path(__file__).with_name("client.py")


def wait_for(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Worker:
    host: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def statistics(self) -> dict[str, Any]:
        """What the worker said when it stopped (``podium worker NAME done {...}``)."""
        match = re.search(r" done (\{.*\})", self.text())
        assert match, self.text()
        stats: dict[str, Any] = json.loads(match.group(1))
        return stats

    @property
    def consumer(self) -> str:
        match = re.search(r"podium worker (\S+) ready", self.text())
        assert match, self.text()
        return match.group(1)


class PodiumFleet:
    """Hosts: ``redis``, ``gw1``, ``gw2``, ``workers`` (names), ``client``."""

    def __init__(
        self,
        directory: Path,
        workers: Sequence[str] = WORKERS,
        *,
        lease_s: float = 1.0,
        tool_delay_s: float = 0.05,
        agent: str = AGENT,
        concurrency: int = 8,
    ) -> None:
        self.dir = directory
        self.worker_hosts = tuple(workers)
        self.lease_s = lease_s
        self.tool_delay_s = tool_delay_s
        self.agent = agent
        self.concurrency = concurrency
        self.net = Fleet(["redis", *GATEWAYS, *self.worker_hosts, "client"])
        self.workers: dict[str, Worker] = {}
        self.gateways: dict[str, subprocess.Popen[bytes]] = {}
        self._starts = 0

    # -- addresses -----------------------------------------------------------------------

    @property
    def redis_url(self) -> str:
        return f"redis://{self.net.ip('redis')}:6379/0"

    @property
    def effects_url(self) -> str:
        return f"redis://{self.net.ip('redis')}:6379/1"

    def url(self, gateway: str) -> str:
        return f"http://{self.net.ip(gateway)}:{PORT}"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT),
            "PODIUM_FLEET_EFFECTS": self.effects_url,
            "PODIUM_FLEET_TOOL_DELAY": str(self.tool_delay_s), **extra,
        }

    # -- starting ------------------------------------------------------------------------

    def start(self) -> PodiumFleet:
        self.net.start()
        try:
            self._start_redis()
            config = self.dir / "podium.toml"
            config.write_text(
                f'[server]\nredis = "{self.redis_url}"\nprefix = "{PREFIX}"\n'
                f'\n[[agents]]\npath = "{self.agent}"\n'
                f'\n[[keys]]\nkey = "{KEY}"\ntenant = "t1"\n'
                f'\n[[keys]]\nkey = "{ADMIN}"\ntenant = "ops"\nadmin = true\n'
            )
            for gw in GATEWAYS:
                self.gateways[gw] = self.net.spawn(
                    gw, [sys.executable, "-m", "podium.cli.main", "serve", "--config",
                         str(config), "--host", "0.0.0.0", "--port", str(PORT)],
                    self.dir / f"{gw}.log", self.env(),
                )
            self.ensure_workers()
            for gw in GATEWAYS:
                self._wait_listening(gw)
        except BaseException:
            self.close()
            raise
        return self

    def _wait_listening(self, gateway: str) -> None:
        log, proc = self.dir / f"{gateway}.log", self.gateways[gateway]

        def listening() -> bool:
            return "Uvicorn running on" in log.read_text(errors="replace") or (
                proc.poll() is not None
            )

        wait_for(listening, 60, f"{gateway} to listen")
        assert proc.poll() is None, log.read_text()

    def _start_redis(self) -> None:
        ip = self.net.ip("redis")
        self.redis = self.net.spawn(
            "redis", ["redis-server", "--bind", ip, "--port", "6379", "--save", "",
                      "--appendonly", "no", "--protected-mode", "no", "--dir", str(self.dir)],
            self.dir / "redis.log",
        )
        wait_for(lambda: self.redis_cli("PING") == "PONG", 20, "redis-server to answer")

    def start_worker(
        self, host: str, *extra: str, wrap: Sequence[str] = (), name: str | None = None
    ) -> Worker:
        """``podium worker`` in ``host`` (``wrap``: a command line in front of it, e.g.
        ``unshare ...``); ready once it printed its ready line."""
        self._starts += 1
        log = self.dir / f"{name or host}-{self._starts}.log"
        argv = [*wrap, sys.executable, "-m", "podium.cli.main", "worker",
                "--redis", self.redis_url, "--prefix", PREFIX, "--agent", self.agent,
                "--lease", str(self.lease_s), "--concurrency", str(self.concurrency),
                "--grace", "3", "--log-level", "WARNING", *extra]
        proc = self.net.spawn(host, argv, log, self.env(PODIUM_FLEET_HOST=name or host))
        return Worker(host, proc, log)

    def wait_ready(self, worker: Worker, within: float = 60) -> None:
        wait_for(lambda: " ready " in worker.text() or worker.proc.poll() is not None,
                 within, f"worker on {worker.host} to be ready")
        assert worker.proc.poll() is None, worker.text()

    def ensure_workers(self) -> None:
        """A running worker on every worker host (started again where one ended)."""
        started = []
        for host in self.worker_hosts:
            w = self.workers.get(host)
            if w is None or w.proc.poll() is not None:
                self.workers[host] = w = self.start_worker(host)
                started.append(w)
        for w in started:
            self.wait_ready(w)

    def stop_worker(self, host: str, sig: int = signal.SIGTERM, within: float = 30) -> int:
        w = self.workers.pop(host)
        if w.proc.poll() is None:
            os.kill(w.proc.pid, sig)
        try:
            return w.proc.wait(within)
        except subprocess.TimeoutExpired:
            self.net.kill(w.proc)
            why = f"worker on {host} still running {within:g}s after signal {sig}"
            raise AssertionError(why) from None

    # -- reading -------------------------------------------------------------------------

    def redis_cli(self, *args: str, db: int = 0) -> str:
        done = self.net.run("redis", ["redis-cli", "-h", self.net.ip("redis"), "-n", str(db),
                                      "--raw", *args], timeout=10)
        return done.stdout.strip()

    def effects(self) -> dict[str, int]:
        """Executions per idempotency key (``run:step:call``), counted on the Redis host."""
        lines = self.redis_cli("HGETALL", "fleet-effects", db=1).splitlines()
        return {k: int(v) for k, v in zip(lines[::2], lines[1::2], strict=True)}

    def pending(self, consumer: str) -> int:
        """Runs ``consumer`` holds now (its entries in the group's pending list)."""
        lines = self.redis_cli("XPENDING", "fleet:queue:default", "workers", "-", "+", "1000",
                               consumer).splitlines()
        return len(lines) // 4  # id, consumer, idle ms, deliveries per entry

    def set_tool_delay(self, seconds: float) -> None:
        """How long the ``effects`` tool waits before its effect, from its next call."""
        self.redis_cli("SET", "fleet-tool-delay", repr(seconds), db=1)

    def effect_hosts(self) -> dict[str, str]:
        lines = self.redis_cli("HGETALL", "fleet-effect-hosts", db=1).splitlines()
        return dict(zip(lines[::2], lines[1::2], strict=True))

    def client(
        self, runs: int, *, gateways: Sequence[str] = GATEWAYS, tag: str, deadline_s: float = 60,
        concurrency: int = 32, rate: float = 0,
    ) -> dict[str, Any]:
        """Run :mod:`.client` in the client host to its end; its JSON report."""
        done = self.net.run("client", self.client_argv(
            runs, gateways=gateways, tag=tag, deadline_s=deadline_s,
            concurrency=concurrency, rate=rate), timeout=deadline_s + 30)
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    def client_argv(
        self, runs: int, *, gateways: Sequence[str] = GATEWAYS, tag: str,
        deadline_s: float = 60, concurrency: int = 32, rate: float = 0,
    ) -> list[str]:
        spec = {"gateways": [self.url(g) for g in gateways], "key": KEY,
                "agent": self.agent.rpartition(":")[2],
                "runs": runs, "concurrency": concurrency, "rate": rate,
                "deadline_s": deadline_s, "tag": tag}
        return [sys.executable, str(CLIENT), json.dumps(spec)]

    def post_once(self, gateway: str, timeout: float = 20) -> tuple[int, dict[str, str]]:
        """One ``POST /v1/runs`` from the client host, no retry: (status, headers)."""
        script = (
            "import httpx, json, sys\n"
            "r = httpx.post(sys.argv[1] + '/v1/runs', json={'agent': 'effects', 'input': 'x'},"
            f" headers={{'Authorization': 'Bearer {KEY}'}}, timeout={timeout - 5})\n"
            "print(json.dumps([r.status_code, dict(r.headers)]))\n"
        )
        done = self.net.run("client", [sys.executable, "-c", script, self.url(gateway)],
                            timeout=timeout)
        assert done.returncode == 0, done.stderr
        status, headers = json.loads(done.stdout)
        return int(status), headers

    def close(self) -> None:
        self.net.close()

    def __enter__(self) -> PodiumFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
