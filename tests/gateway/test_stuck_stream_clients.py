"""Clients of event streams that stop reading (an outside probe's hostile clients).

- A follower's queue between the journal, the token deltas and its socket is bounded:
  a client that stops reading stops the pumps, its deltas back up into its subscription,
  which drops them past its own bound. Unbounded, the server held every delta of the
  run for it (17 MB for one sleeping client), and the subscription's bound never applied.
- The frames of a large journal entry are encoded once for all the run's followers (200
  followers of a 2 MB answer held the loop 4.2 s encoding the same entry 200 times).
- A client that reads nothing while its socket is full is disconnected after
  ``server.write_timeout_s`` (it was never, each pinning megabytes).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import KEY_A, SERVER_CONFIG, ServerProcess, podium_server
from podium.engine.records import RunFinished, RunRecord, StepCommitted
from podium.gateway.live import follow_live, live_events
from podium.store.memory import MemoryRunStore
from podium.streaming.base import DEFAULT_BUFFER, TokenDelta
from podium.streaming.local import LocalTokenChannel

pytestmark = pytest.mark.anyio


async def test_a_follower_that_stops_reading_holds_a_bounded_number_of_deltas() -> None:
    store = MemoryRunStore()
    await store.create(RunRecord("run_x", "a", "go", status="running"))
    channel = LocalTokenChannel()
    sub = await channel.subscribe("run_x")
    events = live_events(store, "run_x", -1, sub, heartbeat_s=60)
    published = 20 * DEFAULT_BUFFER
    try:
        channel.publish("run_x", TokenDelta(0, content="x", offset=0))
        assert isinstance(await anext(events), list)  # following, then not reading any more
        for i in range(1, published):
            channel.publish("run_x", TokenDelta(0, content="x", offset=i))
            if i % 1000 == 0:
                await asyncio.sleep(0)  # the pumps run, as the loop would let them
        got = 0
        async with asyncio.timeout(5):
            while True:  # reading again: what was held for it
                try:
                    async with asyncio.timeout(0.2):
                        item = await anext(events)
                except TimeoutError:
                    break
                if isinstance(item, list):
                    got += len(item)
    finally:
        await events.aclose()
    # The subscription's bound applied (it held all 81,920 before), give or take the few
    # batches the bounded queue holds.
    assert got < published // 2, got


async def test_the_frames_of_a_large_entry_are_encoded_once_for_its_followers() -> None:
    store = MemoryRunStore()
    record = RunRecord("run_big", "a", "go", status="completed")
    await store.create(record)
    await store.append("run_big", [RunFinished(time.time(), "completed", output="w " * 100_000)],
                       record=record)
    frames = []
    for _ in range(2):
        follower = follow_live(store, "run_big")
        frames.append([f async for f in follower if f.startswith(b"id:") or b"event" in f])
    (first,), (second,) = frames
    assert first is second and len(first) > 200_000  # one object, shared


@contextlib.contextmanager
def _verbose_events(tmp_path: Path, rcvbuf: int | None = None) -> Iterator[
    tuple[ServerProcess, socket.socket]
]:
    """A server with a 1 s write timeout, a finished run of the 5 MB-answer agent, and a
    raw socket (``rcvbuf``: its receive buffer) that has asked for the run's events."""
    config = SERVER_CONFIG.replace('"gateway_agents:react"', '"gateway_agents:verbose"')
    with podium_server(tmp_path, config, {"PODIUM_SERVER__WRITE_TIMEOUT_S": "1"}) as server:
        with server.client(KEY_A) as client:
            run = client.post("/v1/runs", json={"agent": "verbose", "input": "go", "wait": True,
                                                "wait_timeout_s": 30}).json()
            assert run["status"] == "completed", run
        host, port = server.url.removeprefix("http://").split(":")
        with socket.socket() as sock:
            if rcvbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.connect((host, int(port)))
            sock.sendall(f"GET /v1/runs/{run['id']}/events HTTP/1.1\r\nHost: x\r\n"
                         f"Authorization: Bearer {KEY_A}\r\n\r\n".encode())
            yield server, sock


def test_a_client_that_reads_nothing_is_disconnected_after_the_write_timeout(
    tmp_path: Path,
) -> None:
    with _verbose_events(tmp_path, rcvbuf=4096) as (server, stuck):
        said = "closing a connection whose client read nothing for 1s"
        deadline = time.monotonic() + 30
        while said not in "".join(server.lines):  # the server's timer, not ours
            assert time.monotonic() < deadline, "".join(server.lines)[-3000:]
            time.sleep(0.1)
        got = 0
        with contextlib.suppress(ConnectionError):  # what was sent before the cut,
            while chunk := stuck.recv(1 << 20):  # then EOF or a reset
                got += len(chunk)
        assert got < 4_000_000  # cut off: the whole stream is two 5 MB copies of the answer
        assert httpx.get(f"{server.url}/healthz").status_code == 200



class CountingReads(MemoryRunStore):
    """The real store, remembering from where each journal read started."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    async def journal(self, run_id: str, after: int = -1):  # type: ignore[no-untyped-def]
        self.reads.append(after)
        return await super().journal(run_id, after)


async def test_a_reconnect_after_the_final_event_reads_only_the_journals_tail() -> None:
    """It read and decoded the whole journal each time (25 ms a reconnect on a long run:
    four reconnecting loops saturated the server)."""
    store = CountingReads()
    record = RunRecord("run_long", "a", "go", status="completed")
    await store.create(record)
    steps = [StepCommitted(i, time.time()) for i in range(5)]
    await store.append("run_long", [*steps, RunFinished(time.time(), "completed", output="ok")],
                       record=record)
    store.reads.clear()
    assert [f async for f in follow_live(store, "run_long", after=5)] == []  # the final's id
    assert store.reads == [5, 4], store.reads  # what follows 5, then the entry at 5


def test_a_slow_but_steady_reader_is_not_cut(tmp_path: Path) -> None:
    """The write timeout is for a client that reads nothing: one that takes a stream of 5 MB
    frames at about a megabyte a second (each frame longer than the timeout to drain)
    keeps reading (it was cut at 5 MB: the timer ran from the socket filling up until the
    whole frame had drained, progress or not)."""
    with _verbose_events(tmp_path) as (server, slow):
        got = 0
        started = time.monotonic()
        while got < 6_000_000:  # past the first 5 MB frame
            chunk = slow.recv(65536)
            assert chunk, f"cut after {got:,} bytes"
            got += len(chunk)
            time.sleep(0.05)  # the slow reader's own pace (the test is its client)
        assert time.monotonic() - started > 2  # longer than the timeout, twice over
        assert "closing a connection" not in "".join(server.lines)
