"""An embedded server resumes the runs a killed (or stopped) one left unfinished.

In the embedded mode the queue lives in the server's process. Killed mid-run, it leaves
the run ``running`` in the SQLite file with nothing to drive it; the next server on the
file queues it again at start-up, and the run resumes from its last checkpoint: a call
that had finished is not made again, the one cut short is. A server that is not the
file's only user resumes nothing (another process may be driving those runs).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gateway_agents
import httpx
import pytest

from conftest import KEY_A, SERVER_CONFIG, gateway_client, podium_server
from podium import Engine
from podium.engine.records import RunFinished, StepRecord
from podium.gateway.service import ServedAgent
from podium.messages import Message, Usage
from podium.store.sqlite import SQLiteRunStore

pytestmark = pytest.mark.anyio

CONFIG = SERVER_CONFIG.replace('store = "memory"', 'store = "sqlite:runs.sqlite"').replace(
    'path = "gateway_agents:react"', 'path = "gateway_agents:effects"'
)


def _wait_for(path: Path, text: str, within: float = 30.0) -> None:
    """Until ``path`` (written by the server's tool) holds ``text``."""
    deadline = time.monotonic() + within
    while text not in (path.read_text() if path.exists() else ""):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never said {text!r}")
        time.sleep(0.02)


def _final(client: httpx.Client, run_id: str, within: float = 30.0) -> dict[str, object]:
    """The run once its event stream has said it ended (or as it stands after ``within``
    seconds: the stream's keep-alives keep the loop turning)."""
    deadline = time.monotonic() + within
    with client.stream("GET", f"/v1/runs/{run_id}/events") as events:
        for line in events.iter_lines():
            if line == "event: final" or time.monotonic() > deadline:
                break
    reply: dict[str, object] = client.get(f"/v1/runs/{run_id}").json()
    return reply


def _gone_from_postgres(url: str, pid: int) -> None:
    """Until the server has ended the backends of the killed process ``pid`` (a moment
    after the kernel closed its sockets): until then it counts as another user."""
    from postgres_fixtures import count_sql

    deadline = time.monotonic() + 30
    while count_sql(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name "
                    f"LIKE 'podium:%:{pid}'"):
        assert time.monotonic() < deadline, f"backends of pid {pid} never ended"
        time.sleep(0.05)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_run_cut_short_by_a_killed_server_is_resumed_by_the_next(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    config = CONFIG
    if store == "postgres":
        url = request.getfixturevalue("fresh_postgres")
        config = CONFIG.replace('store = "sqlite:runs.sqlite"', f'store = "{url}"')
    effects, hold = tmp_path / "effects.log", tmp_path / "hold"
    hold.touch()
    env = {"PODIUM_TEST_EFFECTS": str(effects), "PODIUM_TEST_HOLD": str(hold)}
    with podium_server(tmp_path, config, env) as first, first.client(KEY_A) as client:
        run = client.post("/v1/runs", json={"agent": "effects", "input": "go"}).json()
        _wait_for(effects, "start 1")  # the first call finished, the second is under way
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
    if store == "postgres":
        _gone_from_postgres(url, first.proc.pid)
    hold.unlink()
    with podium_server(tmp_path, config, env) as second, second.client(KEY_A) as client:
        ended = _final(client, str(run["id"]))
        log = "".join(second.lines)
    assert ended["status"] == "completed" and ended["output"] == "done", ended
    # The finished call is not made again; the one the kill cut short is, once.
    assert effects.read_text().splitlines() == ["start 0", "end 0", "start 1", "start 1", "end 1"]
    assert "resuming 1 run(s) an earlier server left unfinished" in log


async def test_a_store_another_process_uses_is_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.sqlite"
    effects, hold = tmp_path / "effects.log", tmp_path / "hold"
    monkeypatch.setenv("PODIUM_TEST_EFFECTS", str(effects))
    monkeypatch.setenv("PODIUM_TEST_HOLD", str(hold))
    agents = [ServedAgent(gateway_agents.effects())]
    other = SQLiteRunStore(path)  # another user of the file (its own lock, as a process has)
    record = await Engine(other).create(agents[0].agent, "go", tenant="tenant-a")
    caplog.set_level(logging.WARNING, "podium.queue")
    async with gateway_client(agents=agents, store=SQLiteRunStore(path)) as (gw, client):
        assert gw.queue.statistics().submitted == 0
        stored = (await client.get(f"/v1/runs/{record.run_id}")).json()
        assert stored["status"] == "queued"
    assert "another process uses it: this server does not resume any" in caplog.text
    await other.aclose()
    caplog.clear()
    async with gateway_client(agents=agents, store=SQLiteRunStore(path)) as (gw, client):
        ended = await gw.wait(record.run_id, 30)
        assert ended is not None and ended.status == "completed"
    assert "resuming 1 run(s) an earlier server left unfinished" in caplog.text
    assert effects.read_text().splitlines() == ["start 0", "end 0", "start 1", "end 1"]


async def test_a_left_run_of_an_agent_no_longer_served_ends_with_the_reason(
    tmp_path: Path,
) -> None:
    """The clumsy restart: the config changed and the agent a run was left in is gone. The
    run does not stay ``running`` nor take the server down: it ends ``failed``, saying
    which agent is missing and which ones this server has, and its journal says so too
    (a final entry: what waiting clients and event streams hear)."""
    path = tmp_path / "runs.sqlite"
    async with SQLiteRunStore(path) as first:
        record = await Engine(first).create(gateway_agents.react(), "go", tenant="tenant-a")
        record.status, record.started_at = "running", record.created_at  # then it died
        await first.update(record)
    agents = [ServedAgent(gateway_agents.effects())]
    async with gateway_client(agents=agents, store=SQLiteRunStore(path)) as (gw, client):
        ended = await gw.wait(record.run_id, 30)
        assert ended.status == "failed" and ended.reason == "dead_letter", ended
        assert ended.error is not None and "unknown agent 'react'" in ended.error
        assert "effects" in ended.error
        assert (await client.get("/healthz")).status_code == 200
        (_, last), *_ = reversed(await gw.store.journal(record.run_id))
        assert isinstance(last, RunFinished) and last.reason == "dead_letter"


def test_a_run_that_kills_every_server_is_dead_lettered_after_max_deliveries(
    tmp_path: Path,
) -> None:
    """A tool that ends the process (os._exit here; an out-of-memory kill is the same death)
    took down every server started on the file, for ever: each resumed the run at start-up.
    Each start counts the run's restarts in its record; past the worker's ``max_deliveries``
    (3) it is dead-lettered instead, and the server stays up."""
    effects = tmp_path / "effects.log"
    config = CONFIG.replace('"gateway_agents:effects"', '"gateway_agents:dies"')
    env = {"PODIUM_TEST_EFFECTS": str(effects)}
    with podium_server(tmp_path, config, env) as first, first.client(KEY_A) as client:
        run = client.post("/v1/runs", json={"agent": "dies", "input": "go"}).json()
        assert first.proc.wait(30) == 3  # the tool ended it
    child_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(sys.path)}
    serve = [sys.executable, "-m", "podium.cli.main", "serve", "--config", "podium.toml"]
    for _ in range(2):  # each start resumes the run, and dies of it again
        died = subprocess.run(
            [*serve, "--port", "0"], cwd=tmp_path, env=child_env, capture_output=True, timeout=60
        )
        assert died.returncode == 3, died.stderr.decode()[-2000:]
    with podium_server(tmp_path, config, env) as last, last.client(KEY_A) as client:
        ended = _final(client, str(run["id"]))
        assert last.proc.poll() is None  # up, and serving
    assert ended["status"] == "failed" and ended["reason"] == "dead_letter", ended
    assert "stopped 3 times before it finished" in str(ended["error"])
    assert effects.read_text().splitlines() == ["start"] * 3  # driven three times, as on Redis


async def _left_running(path: Path) -> str:
    """A run a dead server left ``running`` on ``path`` after one step (its record holds
    no counts yet: they are written at a run's end)."""
    async with SQLiteRunStore(path) as store:
        record = await Engine(store).create(gateway_agents.effects(), "go", tenant="tenant-a")
        record.status, record.started_at = "running", record.created_at
        await store.update(record)
        step = StepRecord(0, time.time(), Message("assistant", "hm"), usage=Usage(120, 29, 0, 1))
        await store.append(record.run_id, (step,))
    return record.run_id


async def _another_driver(path: Path) -> SQLiteRunStore:
    """Another process driving runs on ``path`` (its own store: its own lock, as a process
    has), which has written a run of its own."""
    other = SQLiteRunStore(path)
    await Engine(other).create(gateway_agents.react(), "mine", tenant="tenant-b")
    return other


async def test_a_cancel_of_a_run_nobody_drives_ends_it_at_once(tmp_path: Path) -> None:
    """The run was left by a server that died while another process had the file open, so
    the server started after it did not resume it. Once it is the file's only user, a cancel
    ends the run in the store (it waited 10 s, then answered 200 with the run `running`)."""
    path = tmp_path / "runs.sqlite"
    run_id = await _left_running(path)
    other = await _another_driver(path)  # open at the server's start
    agents = [ServedAgent(gateway_agents.effects())]
    async with gateway_client(agents=agents, store=SQLiteRunStore(path)) as (gw, client):
        await other.aclose()  # it went away: the run has no driver anywhere
        gw.cancel_wait_s = 30.0  # a wait would fail the test's own timeout, not pass
        r = await client.post(f"/v1/runs/{run_id}/cancel")
        assert r.status_code == 200, r.text
        ended = r.json()
    assert ended["status"] == "cancelled"
    # its counts so far, read from its journal (the record said 0 steps and no tokens)
    assert ended["steps"] == 1 and ended["usage"]["input_tokens"] == 120, ended


async def test_a_cancel_another_process_may_drive_is_requested_and_honoured_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process has the file open: it may be driving the run, so the request is left
    for its driver. Not ended within the wait: 202 with the run as it stands; the next
    server that takes the run up ends it, with none of its calls made."""
    path, effects = tmp_path / "runs.sqlite", tmp_path / "effects.log"
    monkeypatch.setenv("PODIUM_TEST_EFFECTS", str(effects))
    monkeypatch.setenv("PODIUM_TEST_HOLD", str(tmp_path / "hold"))
    run_id = await _left_running(path)
    other = await _another_driver(path)
    agents = [ServedAgent(gateway_agents.effects())]
    async with gateway_client(agents=agents, store=SQLiteRunStore(path)) as (gw, client):
        gw.cancel_wait_s = 0.2
        r = await client.post(f"/v1/runs/{run_id}/cancel")
        assert r.status_code == 202, r.text
        assert r.json()["status"] == "running"
    await other.aclose()
    async with gateway_client(agents=agents, store=SQLiteRunStore(path)) as (gw, client):
        ended = await gw.wait(run_id, 30)
    assert ended is not None and ended.status == "cancelled", ended
    assert not effects.exists()  # no call started
