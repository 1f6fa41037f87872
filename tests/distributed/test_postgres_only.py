"""A deployment on PostgreSQL alone (``server.queue`` and ``server.store`` on one database,
no Redis anywhere): a real ``podium serve`` queues runs that real ``podium worker``
processes claim; a worker SIGKILLed mid-run leaves its runs to another, which resumes
them from their checkpoints, so no call that had finished runs again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from podium.queue.postgres import PostgresQueue
from podium.store.postgres import PostgresRunStore
from postgres_fixtures import postgres_skip_reason

from .app import TOOL_STEPS
from .harness import ROOT, check_completed_once, effect_lines, wait_until
from .test_one_config import KEY, running_gateway

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(postgres_skip_reason() is not None, reason=postgres_skip_reason() or ""),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the processes run uvloop; the test only watches


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "podium.toml"
    path.write_text(f"""
[server]
store = "{url}"
queue = "{url}"

[[agents]]
path = "tests.distributed.app:effects"

[[keys]]
key = "{KEY}"
tenant = "t1"
""")
    return path


class _Worker:
    """``podium worker --config CONFIG`` (no Redis named anywhere), its output in a log."""

    def __init__(self, tmp_path: Path, name: str, config: Path, effects: Path,
                 tool_delay: float, *extra: str) -> None:
        self.log = tmp_path / f"{name}.log"
        env = dict(os.environ, PODIUM_TEST_EFFECTS=str(effects),
                   PODIUM_TEST_TOOL_DELAY=str(tool_delay), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "podium.cli.main", "worker", "--config", str(config),
               "--concurrency", "8", "--lease", "1.5", "--log-level", "WARNING", *extra]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out)
        self.pid = self.proc.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    async def wait_ready(self) -> None:
        await wait_until(lambda: " ready " in self.text() or self.proc.poll() is not None,
                         90, f"{self.log.name} ready")
        assert self.proc.poll() is None, self.text()

    async def wait_exit(self, within: float = 90) -> int:
        await wait_until(lambda: self.proc.poll() is not None, within, f"{self.log.name} exit")
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


async def test_serve_and_workers_on_postgres_alone_survive_a_killed_worker(
    tmp_path: Path, fresh_postgres: str
) -> None:
    config = _config(tmp_path, fresh_postgres)
    effects = tmp_path / "effects.log"
    workers: list[_Worker] = []
    with running_gateway("--config", str(config)) as gateway:
        ids = []
        for i in range(24):
            reply = await asyncio.to_thread(
                gateway.post, "/v1/runs", json={"agent": "effects", "input": f"go {i}"})
            assert reply.status_code == 202, reply.text
            ids.append(reply.json()["id"])
        try:
            # The victim first, alone and slow (a second a call): it is mid-run when killed.
            victim = _Worker(tmp_path, "victim", config, effects, 1.0)
            workers.append(victim)
            await victim.wait_ready()

            def victim_mid_run() -> bool:
                done = Counter(k.split(":")[0] for k, pid in effect_lines(effects)
                               if pid == victim.pid)
                return any(0 < n < TOOL_STEPS for n in done.values())

            await wait_until(victim_mid_run, 60, "the victim to be mid-run")
            survivor = _Worker(tmp_path, "survivor", config, effects, 0.02, "--burst")
            workers.append(survivor)
            await survivor.wait_ready()
            await wait_until(victim_mid_run, 60, "the victim to be mid-run beside a survivor")
            victim.proc.send_signal(signal.SIGKILL)
            assert await victim.wait_exit() == -signal.SIGKILL
            assert await survivor.wait_exit(120) == 0, survivor.text()
        finally:
            for w in workers:
                w.stop()
        for run_id in ids:  # the gateway reads them back from PostgreSQL
            record = (await asyncio.to_thread(gateway.get, f"/v1/runs/{run_id}")).json()
            assert record["status"] == "completed", record
    async with (
        PostgresRunStore(fresh_postgres, create_schema=False) as store,
        PostgresQueue(fresh_postgres, create_schema=False) as queue,
    ):
        await check_completed_once(store, ids)  # type: ignore[arg-type]
        assert await queue.outstanding() == 0
    lines = effect_lines(effects)
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, pid in lines:
        by_key[key].append(pid)
    assert set(by_key) == {f"{r}:{s}:0" for r in ids for s in range(TOOL_STEPS)}
    # A call runs twice only if it was in flight when the victim died: once by the victim,
    # then by the survivor that resumed the run; never a call whose outcome was checkpointed.
    repeated = {k: pids for k, pids in by_key.items() if len(pids) > 1}
    for key, pids in repeated.items():
        assert len(pids) == 2 and pids[0] == victim.pid != pids[1], (key, pids)
    assert all(n == 1 for n in Counter(k.split(":")[0] for k in repeated).values()), repeated
    taken_over = {k.split(":")[0] for k, pid in lines if pid == victim.pid} & {
        k.split(":")[0] for k, pid in lines if pid != victim.pid}
    assert taken_over, "the survivor resumed none of the victim's runs"


def test_a_worker_refuses_a_postgres_queue_beside_redis(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "worker", "--queue",
         "postgresql://postgres@127.0.0.1:5432/podium", "--redis", "redis://127.0.0.1:6379/0",
         "--agent", "react"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr and "server.redis the queue is Redis's" in out.stderr


async def test_serve_queue_option_queues_in_postgres(tmp_path: Path, fresh_postgres: str) -> None:
    """``--queue URL`` alone: the store is the same database, and no worker runs in the
    gateway (the run waits in the queue for a ``podium worker``)."""
    config = tmp_path / "podium.toml"
    config.write_text(f'[[keys]]\nkey = "{KEY}"\ntenant = "t1"\n')
    with running_gateway("--config", str(config), "--queue", fresh_postgres,
                         "--agent", "react") as gateway:
        reply = await asyncio.to_thread(
            gateway.post, "/v1/runs", json={"agent": "react", "input": "q"})
        assert reply.status_code == 202, reply.text
        async with PostgresQueue(fresh_postgres, create_schema=False) as queue:
            assert await queue.depth() == 1
