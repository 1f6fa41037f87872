"""Helpers for tests that run ``podium worker`` subprocesses against Redis."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import httpx

from podium.engine.records import RunFinished, StepCommitted
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One ``podium worker`` subprocess; its stderr goes to a log file we can wait on."""

    def __init__(
        self,
        log_dir: Path,
        name: str,
        redis_url: str,
        prefix: str,
        agent: str,
        effects: Path,
        *extra: str,
        tool_delay: float = 0.02,
        starts: Path | None = None,
    ) -> None:
        self.log = log_dir / f"{name}.log"
        env = dict(os.environ, PODIUM_TEST_EFFECTS=str(effects),
                   PODIUM_TEST_TOOL_DELAY=str(tool_delay), PYTHONUNBUFFERED="1")
        if starts is not None:  # each call's start too, not only its effect
            env["PODIUM_TEST_STARTS"] = str(starts)
        cmd = [sys.executable, "-m", "podium.cli.main", "worker", "--redis", redis_url,
               "--prefix", prefix, "--agent", agent, "--log-level", "WARNING", *extra]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out)
        self.pid = self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    # Bounds on start-up are generous: a loaded machine took over 20 s to import and
    # start a worker; a process that dies is seen at once all the same.
    async def wait_ready(self, within: float = 90.0) -> None:
        await wait_until(lambda: " ready " in self.text() or self.proc.poll() is not None,
                         within, f"{self.log.name} ready")
        assert self.proc.poll() is None, self.text()

    async def wait_exit(self, within: float = 60.0) -> int:
        await wait_until(lambda: self.proc.poll() is not None, within, f"{self.log.name} exit")
        return self.proc.returncode

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait()


async def burst_until_clean(
    log_dir: Path,
    redis_url: str,
    prefix: str,
    agent: str,
    effects: Path,
    attempts: int = 5,
    max_deliveries: int | None = 2,
) -> list[int]:
    """Start ``--burst`` workers one after another (0.5 s leases; ``max_deliveries``
    before a run is dead-lettered, None: the worker's default) until one exits 0; their
    exit codes, in order."""
    codes: list[int] = []
    limit = () if max_deliveries is None else ("--max-deliveries", str(max_deliveries))
    for attempt in range(attempts):
        w = WorkerProcess(log_dir, f"w{attempt}", redis_url, prefix, agent, effects,
                          "--lease", "0.5", *limit, "--burst")
        try:
            codes.append(await w.wait_exit(30))
        finally:
            w.stop()
        if codes[-1] == 0:
            break
    return codes


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], within: float, what: str
) -> None:
    """Poll ``predicate`` until true, failing after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def effect_lines(path: Path) -> list[tuple[str, int]]:
    """``(idempotency key, pid)`` per executed tool call, in order."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        key, pid = line.split()
        out.append((key, int(pid)))
    return out


async def submit_runs(
    store: RedisRunStore, queue: RedisQueue, agent: str, ids: Iterable[str], pool: str = "default"
) -> None:
    from podium.engine.records import RunRecord

    for run_id in ids:
        await store.create(RunRecord(run_id, agent, "go", pool=pool))
        await queue.submit(QueueItem(run_id, agent, pool=pool))


async def check_completed_once(store: RedisRunStore, ids: Iterable[str]) -> None:
    """Every run completed, with exactly one final entry and one commit per step."""
    for run_id in ids:
        record = await store.get(run_id)
        assert record is not None and record.status == "completed", (run_id, record)
        entries = [e for _, e in await store.journal(run_id)]
        assert sum(isinstance(e, RunFinished) for e in entries) == 1, run_id
        steps = Counter(e.step for e in entries if isinstance(e, StepCommitted))
        assert all(n == 1 for n in steps.values()), (run_id, steps)


def redis_config(
    directory: Path, redis_url: str, agents: Sequence[str], keys: Mapping[str, str]
) -> Path:
    """``directory/podium.toml``: a server on ``redis_url`` serving ``agents`` (import
    paths), with one API key per entry of ``keys`` (key → tenant)."""
    text = f'[server]\nredis = "{redis_url}"\n'
    text += "".join(f'\n[[agents]]\npath = "{agent}"\n' for agent in agents)
    text += "".join(f'\n[[keys]]\nkey = "{k}"\ntenant = "{t}"\n' for k, t in keys.items())
    config = directory / "podium.toml"
    config.write_text(text)
    return config


@contextlib.contextmanager
def serving(config: Path, log_path: Path, within: float = 90.0) -> Iterator[str]:
    """``podium serve --config CONFIG`` on a free port, its output in ``log_path``; yields
    its base URL once ``/healthz`` answers, and terminates it after the block. A port
    taken by another test's server between ``free_port()`` and the bind is tried again on
    a new one (three times at most)."""
    for attempt in range(3):
        port = free_port()
        log = log_path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "podium.cli.main", "serve", "--config", str(config),
             "--port", str(port)],
            cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=log, stderr=log,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            if _listening(proc, url, log_path, within, last=attempt == 2):
                yield url
                return
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            log.close()


def _listening(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, within: float, *, last: bool
) -> bool:
    """Whether ``proc`` answers ``/healthz`` within ``within`` s; False when it exited for
    a port already in use (and ``last`` is not set); raises with its log otherwise."""
    with httpx.Client(base_url=url, timeout=5) as client:
        deadline = time.monotonic() + within
        while True:  # until it listens (bounded)
            try:
                if client.get("/healthz").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log_path.read_text()
                if proc.returncode is not None and "already in use" in text and not last:
                    return False
                raise AssertionError(text)
            time.sleep(0.05)
