"""Request bodies are bounded on every route (issue 29): a declared length over
``server.max_body_bytes`` is a 413 before anything is read, a body that passes the limit
while it arrives is a 413 with no more than the limit (and one chunk) ever read, whatever
``Content-Length`` claimed; in-process (raw ASGI) and against a real ``podium serve``."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from conftest import KEY_A, SERVER_CONFIG, ServerProcess, gateway_client, podium_server
from podium.gateway.app import create_app

pytestmark = pytest.mark.anyio

LIMIT = 1000
CHUNK = 256
SMALL = {"PODIUM_SERVER__MAX_BODY_BYTES": str(LIMIT)}
JSON = {"content-type": "application/json"}


def _too_large(r: httpx.Response) -> None:
    assert r.status_code == 413, r.text
    error = r.json()["error"]
    assert error["type"] == "payload_too_large" and f"limit of {LIMIT} bytes" in error["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/runs"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/threads"),
        ("POST", "/v1/runs/run_none/cancel"),  # reads no body: refused all the same
        ("POST", "/v1/runs/run_none/approvals/c1"),
        ("GET", "/v1/runs"),
        ("GET", "/healthz"),
        ("POST", "/mcp"),
    ],
)
async def test_a_declared_length_over_the_limit_is_a_413_on_every_route(
    method: str, path: str
) -> None:
    async with gateway_client(SMALL) as (gw, client):
        r = await client.request(method, path, content=b"x" * (LIMIT + 1), headers=JSON)
        _too_large(r)
        assert await gw.store.list() == []


async def test_a_body_at_the_limit_is_read() -> None:
    async with gateway_client(SMALL) as (_, client):
        body = b'{"agent": "react", "input": "' + b"q" * (LIMIT - 31) + b'"}'
        assert len(body) == LIMIT
        r = await client.post("/v1/runs", content=body, headers=JSON)
        assert r.status_code == 202, r.text


class EndlessBody:
    """An ASGI ``receive`` that sends a body forever, counting what the app read."""

    def __init__(self) -> None:
        self.read = 0

    async def __call__(self) -> dict[str, Any]:
        self.read += CHUNK
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": True}


async def _call_raw(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes, int]:
    """POST an endless body to the in-process app: (status, body, bytes the app read)."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with gateway_client(SMALL) as (gw, _):
        app = create_app(gw, manage_lifecycle=False)
        body = EndlessBody()
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
            "server": ("podium.test", 80),
            "headers": [
                (b"host", b"podium.test"), (b"authorization", f"Bearer {KEY_A}".encode()),
                (b"content-type", b"application/json"), *headers,
            ],
        }
        await app(scope, body, send)
        assert await gw.store.list() == []
    start, *chunks = sent
    return start["status"], b"".join(c.get("body", b"") for c in chunks), body.read


@pytest.mark.parametrize(
    "headers",
    [
        [],  # chunked: no length at all
        [(b"content-length", b"10")],  # a lie: far more follows than it declared
        [(b"content-length", str(LIMIT).encode())],  # a lie at the limit itself
    ],
    ids=["chunked", "lying-small", "lying-at-limit"],
)
@pytest.mark.parametrize("path", ["/v1/runs", "/v1/chat/completions", "/mcp"])
async def test_an_endless_body_is_cut_at_the_limit(
    path: str, headers: list[tuple[bytes, bytes]]
) -> None:
    status, body, read = await _call_raw(path, headers)
    assert status == 413, body
    assert msgspec.json.decode(body)["error"]["type"] == "payload_too_large"
    assert read <= LIMIT + CHUNK


# -- a real server, raw sockets ---------------------------------------------------------------


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = SERVER_CONFIG.replace("[server]\n", f"[server]\nmax_body_bytes = {LIMIT}\n", 1)
    with podium_server(tmp_path_factory.mktemp("small"), config) as srv:
        yield srv


def _exchange(server: ServerProcess, head: bytes, body: bytes) -> bytes:
    """Send ``head`` and as much of ``body`` as the server takes; its answer (head and
    body, read as far as its Content-Length)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head)
        # The server may answer and close before taking it all: the answer is what counts.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(body)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while b"\r\n\r\n" not in answer and (chunk := s.recv(65536)):
                answer += chunk
            top, _, rest = answer.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", top)
            while length and len(rest) < int(length.group(1)) and (chunk := s.recv(65536)):
                rest += chunk
                answer += chunk
        return answer


def _head(path: str, *extra: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: podium\r\nAuthorization: Bearer {KEY_A}\r\n".encode()
        + b"Content-Type: application/json\r\n"
        + b"".join(h + b"\r\n" for h in extra)
        + b"\r\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/v1/runs", "/v1/runs/run_none/cancel"])
def test_a_10_mb_body_gets_a_413_over_http(small_server: ServerProcess, path: str) -> None:
    body = b"x" * (10 << 20)
    answer = _exchange(small_server, _head(path, f"Content-Length: {len(body)}".encode()), body)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert b'"payload_too_large"' in answer


@pytest.mark.slow
def test_a_chunked_body_over_the_limit_gets_a_413_over_http(small_server: ServerProcess) -> None:
    piece = b"x" * 4096
    chunks = (b"%x\r\n" % len(piece) + piece + b"\r\n") * 64 + b"0\r\n\r\n"  # 256 KiB
    answer = _exchange(small_server, _head("/v1/runs", b"Transfer-Encoding: chunked"), chunks)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert b'"payload_too_large"' in answer
    health = httpx.get(f"{small_server.url}/healthz", timeout=30)
    assert health.status_code == 200


@pytest.mark.slow
def test_a_length_that_lies_small_never_reaches_the_app_as_more(
    small_server: ServerProcess, tmp_path: Path
) -> None:
    # 20 bytes declared, 2 MB sent: the server reads 20 (not JSON: 400), and what follows
    # is no request; the gateway keeps serving.
    answer = _exchange(small_server, _head("/v1/runs", b"Content-Length: 20"), b"{" * (2 << 20))
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert httpx.get(f"{small_server.url}/healthz", timeout=30).status_code == 200
