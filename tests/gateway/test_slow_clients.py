"""Slow and hostile clients against a real ``podium serve`` (issue 8, item 4), over raw
sockets on loopback: slowloris, half-open connections, over-large heads, a connection
cap, a client that hangs up mid-body."""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import KEY_A, KEY_ADMIN, SERVER_CONFIG, ServerProcess, podium_server

pytestmark = pytest.mark.slow

SLOWLORIS = 2000


def _config(**server: object) -> str:
    lines = "".join(f"{k} = {v!r}\n" for k, v in server.items())
    return SERVER_CONFIG.replace("[server]\n", "[server]\n" + lines, 1)


def _address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = _config(header_timeout_s=1.0, body_timeout_s=1.0, max_connections=64)
    with podium_server(tmp_path_factory.mktemp("guarded"), config) as srv:
        yield srv


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 3 * SLOWLORIS
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"needs {want} file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _limit_fds_to_1024() -> None:  # in the server's child process, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_a_slowloris_of_2000_connections_does_not_stop_the_server(
    tmp_path: Path, many_fds: None
) -> None:
    # The server gets the usual 1,024 descriptors (soft and hard): fewer than the attack.
    with podium_server(tmp_path, preexec_fn=_limit_fds_to_1024) as server:
        attackers: list[socket.socket] = []
        try:
            for _ in range(SLOWLORIS):
                s = socket.create_connection(_address(server), timeout=30)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podium\r\n")  # never finished
                attackers.append(s)
            assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
            with server.client() as client:
                r = client.post("/v1/runs", json={"agent": "react", "input": "q", "wait": True})
                assert r.status_code == 200 and r.json()["status"] == "completed"
        finally:
            for s in attackers:
                s.close()


def test_half_open_connections_are_closed_after_the_header_timeout(
    guarded: ServerProcess,
) -> None:
    with socket.create_connection(_address(guarded), timeout=30) as silent:
        assert _read_all(silent).startswith(b"HTTP/1.1 408 ")
    with socket.create_connection(_address(guarded), timeout=30) as trickle:
        trickle.sendall(b"GET /healthz HTTP/1.1\r\n")
        answer = b""
        for _ in range(50):  # a byte at a time: the head never completes in time
            try:
                trickle.sendall(b"X")
            except OSError:
                break
            trickle.settimeout(0.1)
            try:
                answer += trickle.recv(65536)
            except TimeoutError:
                continue
            break
        trickle.settimeout(30)
        answer += _read_all(trickle)
        assert answer.startswith(b"HTTP/1.1 408 ")


@pytest.mark.parametrize(
    "head",
    [
        b"X-Big: " + b"a" * 20000 + b"\r\n",
        b"X-Huge: " + b"a" * 1_000_000 + b"\r\n",
        b"".join(b"X-H%d: v\r\n" % i for i in range(200)),
    ],
    ids=["one-big-header", "a-megabyte-header", "too-many-headers"],
)
def test_over_large_heads_get_431(guarded: ServerProcess, head: bytes) -> None:
    with socket.create_connection(_address(guarded), timeout=30) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podium\r\n" + head + b"\r\n")
        answer = _read_all(s)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b'"type":"headers_too_large"' in answer


def test_past_the_connection_cap_new_connections_get_a_fast_503(guarded: ServerProcess) -> None:
    idle = [socket.create_connection(_address(guarded), timeout=30) for _ in range(64)]
    try:
        with socket.create_connection(_address(guarded), timeout=30) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podium\r\n\r\n")
            answer = _read_all(s)
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        assert b"retry-after: 1" in answer.lower()
    finally:
        for s in idle:
            s.close()
    for _ in range(200):  # the server notices the closed connections (bounded)
        if httpx.get(f"{guarded.url}/healthz", timeout=30).status_code == 200:
            break
        time.sleep(0.05)
    assert httpx.get(f"{guarded.url}/healthz", timeout=30).status_code == 200


def test_a_body_that_trickles_past_the_body_timeout_gets_408(guarded: ServerProcess) -> None:
    with socket.create_connection(_address(guarded), timeout=30) as s:
        s.sendall(
            b"POST /v1/runs HTTP/1.1\r\nHost: podium\r\nAuthorization: Bearer "
            + KEY_A.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        answer = _read_all(s)  # the rest of the body never comes
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b'"type":"request_timeout"' in answer


def test_a_client_gone_mid_body_is_not_a_500(guarded: ServerProcess) -> None:
    with socket.create_connection(_address(guarded), timeout=30) as s:
        s.sendall(
            b"POST /v1/runs HTTP/1.1\r\nHost: podium\r\nAuthorization: Bearer "
            + KEY_A.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            + b'{"agent": "re'
        )
    admin = {"Authorization": f"Bearer {KEY_ADMIN}"}
    statuses = ""
    for _ in range(200):  # until the server has answered the abandoned request (bounded)
        text = httpx.get(f"{guarded.url}/metrics", headers=admin, timeout=30).text
        statuses = "\n".join(
            line for line in text.splitlines() if 'route="/v1/runs"' in line and "_total" in line
        )
        if 'status="499"' in statuses or 'status="500"' in statuses:
            break
        time.sleep(0.05)
    assert 'status="499"' in statuses and 'status="500"' not in statuses, statuses
    assert not any("Traceback" in line for line in guarded.lines), "".join(guarded.lines)
