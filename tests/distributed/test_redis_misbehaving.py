"""A Redis that misbehaves without dying: full (OOM), resetting connections, refusing new
ones, or not the server Podium expects. Real ``podium serve`` / ``podium worker``
processes where the symptom shows there; the store and queue in-process where the load
needs thousands of commands."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from podium.engine.records import RunRecord
from podium.errors import StoreUnavailableError
from podium.queue.base import QueueItem
from podium.queue.redis import RedisQueue
from podium.store.redis import RedisRunStore

from .harness import (
    ROOT,
    WorkerProcess,
    check_completed_once,
    effect_lines,
    redis_config,
    serving,
    submit_runs,
    wait_until,
)
from .redis_server import RedisServer, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

KEY = "pk_misbehaving"
SLOW = "tests.distributed.app:effects"
HEADERS = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_full_redis_is_a_503_and_runs_resume_without_repeating_a_call(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """maxmemory reached (noeviction): writes are refused, not applied. The gateway says
    503; the worker holds its checkpoints and sends them again once memory is freed, so
    no finished tool call runs twice, and it logs the condition, not a traceback per run."""
    admin = redis.Redis.from_url(private_redis.url)
    effects = tmp_path / "effects.log"
    config = redis_config(tmp_path, private_redis.url, [SLOW], {KEY: "t1"})
    worker = WorkerProcess(tmp_path, "worker", private_redis.url, "podium", SLOW, effects,
                           "--lease", "6", tool_delay=0.3)
    try:
        with serving(config, tmp_path / "serve.log") as url:
            await worker.wait_ready()
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
                ids = [(await client.post("/v1/runs", json={"agent": "effects", "input": f"{i}"})
                        ).json()["id"] for i in range(3)]
                await wait_until(lambda: len(effect_lines(effects)) >= 2, 10, "calls under way")
                admin.config_set("maxmemory-policy", "noeviction")
                admin.config_set("maxmemory", 1)  # every write refused from now on
                start = time.monotonic()
                refused = await client.post("/v1/runs", json={"agent": "effects", "input": "x"})
                assert refused.status_code == 503, refused.text
                assert time.monotonic() - start < 2.5
                assert refused.json()["error"]["type"] == "unavailable"
                assert int(refused.headers["retry-after"]) >= 1
                # the worker meets the refusal too (a checkpoint after a call), then memory frees
                await wait_until(lambda: "refuses commands" in worker.text(), 10, "the refusal")
                admin.config_set("maxmemory", 0)
                for run_id in ids:
                    async def done(run_id: str = run_id) -> bool:
                        got = (await client.get(f"/v1/runs/{run_id}")).json()
                        assert got["status"] not in ("failed", "cancelled"), got
                        return bool(got["status"] == "completed")
                    await wait_until(done, 20, f"{run_id} to complete")
        calls = Counter(k for k, _ in effect_lines(effects))
        assert set(calls) == {f"{r}:{s}:0" for r in ids for s in range(4)}
        assert all(n == 1 for n in calls.values()), calls  # no finished call ran again
        log = worker.text()
        assert "Traceback" not in log, log[-3000:]
        assert log.count("refuses commands") == 1 and log.count("takes commands again") == 1
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
    finally:
        worker.stop()
        admin.close()


async def test_connections_reset_under_load_lose_nothing_and_add_nothing(
    private_redis: RedisServer,
) -> None:
    """CLIENT KILL while runs are created and queued: the commands whose replies were lost
    are sent again, and that neither refuses a create as a duplicate ("run exists") nor
    queues a run twice (XADD * is re-sent as a lookup for its first send)."""
    admin = redis.Redis.from_url(private_redis.url)
    # What is tested is the resending, not the 1.5 s after which a caller is told Redis
    # is unavailable: 2,000 creates on an fsync-always server take longer than that to
    # answer on a loaded machine, and that failed this test without any lost reply.
    store = RedisRunStore(private_redis.url, unavailable_s=60)
    queue = RedisQueue(private_redis.url, unavailable_s=60)
    await queue.submit(QueueItem("warm-up", "agent"))  # the consumer group exists
    stop = asyncio.Event()
    kills = 0

    async def killer() -> None:
        nonlocal kills
        while not stop.is_set():
            await asyncio.to_thread(admin.client_kill_filter, _type="normal", skipme=True)
            kills += 1
            await asyncio.sleep(0.01)

    async def one(i: int) -> None:
        await store.create(RunRecord(f"k{i}", "agent", "x"))
        await queue.submit(QueueItem(f"k{i}", "agent"))

    n = 2000
    task = asyncio.create_task(killer())
    try:
        try:
            for batch in range(0, n, 200):  # in waves, so that kills land mid-wave
                await asyncio.gather(*(one(i) for i in range(batch, batch + 200)))
        finally:
            stop.set()
            await task
        assert kills > 5
        rows = admin.xrange("podium:queue:default")
        queued = Counter(queue._item_dec.decode(fields[b"d"]).run_id for _, fields in rows)
        assert len(queued) == n + 1 and set(queued.values()) == {1}, queued.most_common(3)
        assert admin.zcard("podium:idx:all") == n
    finally:
        # Closed whatever happened: connections left to the collector fail the next test
        # on this worker with their ResourceWarnings (a failure that moved with test order).
        await store.aclose()
        await queue.aclose()
        admin.close()


async def test_a_full_server_is_unavailable_not_an_answer(private_redis: RedisServer) -> None:
    """maxclients reached: the server's refusal comes in place of the first reply; it is a
    connection that failed (an outage, a 503), never the answer to a command."""
    admin = redis.Redis.from_url(private_redis.url)
    admin.config_set("maxclients", 1)  # admin holds the one slot
    store = RedisRunStore(private_redis.url)
    try:
        start = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="max number of clients"):
            await store.get("r1")
        assert time.monotonic() - start < 2.5
        admin.config_set("maxclients", 100)
        assert await store.get("r1") is None  # the next command connects
    finally:
        await store.aclose()
        admin.close()


async def test_a_wrong_password_or_a_peer_not_redis_fails_fast_with_a_reason(
    private_redis: RedisServer,
) -> None:
    """At run time (the server changed under a running process): each command fails
    within the outage bound with the reason, instead of hanging (a refused AUTH) or
    being read as garbage."""
    admin = redis.Redis.from_url(private_redis.url)
    admin.config_set("requirepass", "s3cret")
    wrong = private_redis.url.replace("redis://", "redis://:wrong@")
    try:
        with http_server() as http_port:
            for url, reason in ((wrong, "WRONGPASS"), (private_redis.url, "NOAUTH"),
                                (f"redis://127.0.0.1:{http_port}/0", "Redis protocol")):
                store = RedisRunStore(url)
                try:
                    start = time.monotonic()
                    with pytest.raises(StoreUnavailableError, match=reason):
                        await asyncio.wait_for(store.get("r1"), 10)
                    assert time.monotonic() - start < 2.5
                finally:
                    await store.aclose()
    finally:
        authed = redis.Redis.from_url(private_redis.url.replace("redis://", "redis://:s3cret@"))
        authed.config_set("requirepass", "")
        authed.close()
        admin.close()


@contextlib.contextmanager
def http_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _podium(*args: str, extra_env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podium.cli.main", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(extra_env or {})})


def _podiums(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Each ``podium`` command in a process of its own, all at once: they are independent
    (each reads the server's state as this phase of the test set it), and one after the
    other they were most of the test's time."""
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda command: _podium(*command), commands))


def test_a_wrong_server_is_one_line_at_start(private_redis: RedisServer, tmp_path: Path) -> None:
    """A password that is missing, a peer that is not Redis, another application's keys
    under Podium's prefix: ``podium worker`` and ``podium serve`` say so in one line and
    exit 2, instead of retrying forever, a traceback, or a 500 per request."""
    admin = redis.Redis.from_url(private_redis.url)
    admin.set("podium:queue:default", "another application's value")
    # A password this Redis does not have: redis-py lets it pass, Podium's own connections
    # do not (the worker then retried its claims forever): refused at start, both commands.
    stray = private_redis.url.replace("redis://", "redis://:n0pass@")
    with http_server() as http_port:
        urls = {
            "not a stream": private_redis.url,
            "does not speak the Redis protocol": f"redis://127.0.0.1:{http_port}/0",
            "refused the credentials": stray,
        }
        cases = [(expected, command) for expected, url in urls.items()
                 for command in (["worker", "--redis", url, "--agent", SLOW, "--burst"],
                                 ["serve", "--redis", url, "--port", str(free_port())])]
        for (expected, _), done in zip(cases, _podiums(*(c for _, c in cases)), strict=True):
            assert done.returncode == 2, done.stderr[-2000:]
            assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr
            assert done.stderr.strip().count("\n") <= 1, done.stderr  # the pool line, the error
            assert "n0pass" not in done.stderr, done.stderr
    admin.delete("podium:queue:default")
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.config_set("requirepass", "s3cret")
    with_password = private_redis.url.replace("redis://", "redis://:s3cret@")
    no_password, *evicting = _podiums(
        ["worker", "--redis", private_redis.url, "--agent", SLOW, "--burst"],
        # An evicting policy: refused at start (runs would vanish without a word)...
        ["worker", "--redis", with_password, "--agent", SLOW, "--burst"],
        ["serve", "--redis", with_password, "--port", str(free_port())],
    )
    done = no_password
    assert done.returncode == 2 and "refused the credentials" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    for done in evicting:
        assert done.returncode == 2, done.stderr[-2000:]
        assert "maxmemory-policy is allkeys-lru" in done.stderr, done.stderr
        assert "allow_evicting_redis" in done.stderr and "Traceback" not in done.stderr
        assert "s3cret" not in done.stderr
    # ... unless the operator accepts it, by flag or variable: then warned once at start
    # (an empty queue in burst mode: done, exit 0)
    with ThreadPoolExecutor(2) as pool:
        accepted = [
            pool.submit(_podium, "worker", "--redis", with_password, "--agent", SLOW, "--burst",
                        "--allow-evicting-redis"),
            pool.submit(_podium, "worker", "--redis", with_password, "--agent", SLOW, "--burst",
                        extra_env={"PODIUM_SERVER__ALLOW_EVICTING_REDIS": "1"}),
        ]
        flag, variable = (f.result() for f in accepted)
    assert flag.returncode == 0, flag.stderr
    assert "maxmemory-policy is allkeys-lru" in flag.stderr
    assert "s3cret" not in flag.stderr
    assert variable.returncode == 0, variable.stderr
    authed = redis.Redis.from_url(with_password)
    authed.config_set("requirepass", "")
    authed.close()
    admin.close()


async def test_a_run_whose_keys_vanish_ends_with_a_reason_and_the_worker_serves_on(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """What eviction does to a live run, made deterministic: its record and journal go,
    or its journal alone. Neither is resumed (that would repeat its calls) nor retried
    per delivery with a traceback: the run ends failed with a reason saying so, or is
    dead-lettered when even its record is gone, and the worker serves the next run."""
    admin = redis.Redis.from_url(private_redis.url)
    effects = tmp_path / "effects.log"
    config = redis_config(tmp_path, private_redis.url, [SLOW], {KEY: "t1"})
    worker = WorkerProcess(tmp_path, "worker", private_redis.url, "podium", SLOW, effects,
                           "--lease", "6", tool_delay=0.3)
    try:
        with serving(config, tmp_path / "serve.log") as url:
            await worker.wait_ready()
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
                gone, half, kept = [
                    (await client.post("/v1/runs", json={"agent": "effects", "input": f"{i}"})
                     ).json()["id"] for i in range(3)]
                await wait_until(lambda: len(effect_lines(effects)) >= 3, 10, "calls under way")
                admin.delete(f"podium:{{{gone}}}:run", f"podium:{{{gone}}}:journal")
                admin.delete(f"podium:{{{half}}}:journal")

                async def status(run_id: str) -> str:
                    return str((await client.get(f"/v1/runs/{run_id}")).json()["status"])

                async def ended() -> bool:
                    return await status(half) == "failed" and await status(kept) == "completed"

                await wait_until(ended, 10, "the runs to end")
                failed = (await client.get(f"/v1/runs/{half}")).json()
                assert failed["reason"] == "dead_letter" and "evicted" in failed["error"], failed
                assert (await client.get(f"/v1/runs/{gone}")).status_code == 404
                dead = {f[b"run_id"].decode(): f[b"reason"].decode()
                        for _, f in admin.xrange("podium:dead:default")}
                assert set(dead) == {gone, half} and "evicted" in dead[gone], dead
                after = await client.post(
                    "/v1/runs", json={"agent": "effects", "input": "after", "wait": True}
                )
                assert after.json()["status"] == "completed", after.text
        calls = Counter(k for k, _ in effect_lines(effects))
        assert all(n == 1 for n in calls.values()), calls
        assert "Traceback" not in worker.text(), worker.text()[-3000:]
    finally:
        worker.stop()
        admin.close()


@pytest.fixture
def debuggable_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server that takes DEBUG (SLEEP) from loopback."""
    server = RedisServer(tmp_path / "redis", extra=("--enable-debug-command", "local"))
    server.directory.mkdir()
    server.start()
    yield server
    server.stop()


async def test_a_slow_redis_loses_no_lease_and_the_gateway_keeps_answering(
    debuggable_redis: RedisServer, tmp_path: Path
) -> None:
    """DEBUG SLEEP (everything stalls) and CLIENT PAUSE WRITE, each shorter than a third
    of the lease, under load: no run changes hands, no call runs twice, and /healthz
    answers promptly throughout (it needs no Redis)."""
    private_redis = debuggable_redis
    admin = redis.Redis.from_url(private_redis.url)
    effects = tmp_path / "effects.log"
    config = redis_config(tmp_path, private_redis.url, [SLOW], {KEY: "t1"})
    worker = WorkerProcess(tmp_path, "worker", private_redis.url, "podium", SLOW, effects,
                           "--lease", "6", tool_delay=0.1)
    try:
        with serving(config, tmp_path / "serve.log") as url:
            await worker.wait_ready()
            async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as client:
                ids = [(await client.post("/v1/runs", json={"agent": "effects", "input": f"{i}"})
                        ).json()["id"] for i in range(20)]
                await wait_until(lambda: len(effect_lines(effects)) >= 10, 10, "calls under way")
                for stall in (lambda: admin.execute_command("DEBUG", "SLEEP", "1.5"),
                              lambda: admin.client_pause(1500, all=False)):
                    stalled = asyncio.create_task(asyncio.to_thread(stall))
                    await asyncio.sleep(0.2)  # inside the stall
                    # it answers (how fast is a busy machine's business: that it needs no
                    # Redis is shown with Redis down, in test_gateway_outage)
                    assert (await client.get("/healthz")).status_code == 200
                    await stalled

                async def all_done() -> bool:
                    listed = (await client.get("/v1/runs", params={"limit": 100})).json()["data"]
                    return all(r["status"] == "completed" for r in listed) and len(listed) == 20

                await wait_until(all_done, 20, "every run to complete")
        calls = Counter(k for k, _ in effect_lines(effects))
        assert len(calls) == len(ids) * 4 and set(calls.values()) == {1}, calls.most_common(3)
        assert "lease lost" not in worker.text() and "another worker" not in worker.text()
    finally:
        worker.stop()
        admin.close()


async def test_connections_reset_under_a_worker_repeat_no_call(
    private_redis: RedisServer, tmp_path: Path
) -> None:
    """CLIENT KILL of every connection, again and again, while a podium worker drives
    runs: it reconnects, every run completes once, and no finished call runs again."""
    admin = redis.Redis.from_url(private_redis.url)
    effects = tmp_path / "effects.log"
    store = RedisRunStore(private_redis.url)
    queue = RedisQueue(private_redis.url)
    worker = WorkerProcess(tmp_path, "worker", private_redis.url, "podium", SLOW, effects,
                           "--lease", "6", "--concurrency", "8", "--burst", tool_delay=0.1)
    ids = [f"run-{i:03d}" for i in range(40)]
    try:
        await worker.wait_ready()
        await submit_runs(store, queue, "effects", ids)
        await store.aclose()  # killed along with the rest: reopened for the checks
        await queue.aclose()
        kills = 0
        while worker.proc.poll() is None and kills < 40:
            await asyncio.to_thread(admin.client_kill_filter, _type="normal", skipme=True)
            kills += 1
            await asyncio.sleep(0.05)
        assert kills >= 10  # the runs outlasted several resets
        assert await worker.wait_exit(30) == 0, worker.text()
        store = RedisRunStore(private_redis.url)
        queue = RedisQueue(private_redis.url)
        await check_completed_once(store, ids)
        assert await queue.outstanding() == 0
        calls = Counter(k for k, _ in effect_lines(effects))
        assert len(calls) == len(ids) * 4 and set(calls.values()) == {1}, calls.most_common(3)
        assert "Traceback" not in worker.text(), worker.text()[-3000:]
    finally:
        worker.stop()
        await store.aclose()
        await queue.aclose()
        admin.close()
