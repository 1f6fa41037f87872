"""Loopback servers for backend tests: a replay server and the real ``podium sim-server``.

:class:`ReplayServer` is a tiny aiohttp server on 127.0.0.1 that answers
``/v1/chat/completions`` with scripted :class:`Reply` objects: recorded
bodies and SSE chunk streams from ``tests/fixtures/backends``, error
statuses with ``Retry-After``, a connection killed after N chunks, or a
reply held until the test releases it. No mocks of our own code: the client
under test talks real HTTP.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

FIXTURES = Path(__file__).parent.parent / "fixtures" / "backends"


#: A whole chat completion that says "ok".
OK_BODY = msgspec.json.encode(
    {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "model": "m"}
)
#: A streamed reply that says "hello", in SSE events, ``[DONE]`` last.
HELLO_EVENTS = [
    b'data: {"choices":[{"delta":{"content":"hel"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n',
    b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sse_events(name: str) -> list[bytes]:
    """A recorded SSE stream cut into its events (each with its blank line)."""
    raw = fixture_bytes(name)
    return [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]


@dataclass
class Reply:
    """One scripted answer of the replay server."""

    status: int = 200
    body: bytes = b""
    chunks: list[bytes] | None = None  # SSE events, written one by one
    headers: dict[str, str] = field(default_factory=dict)
    kill_after: int | None = None  # abort the connection after this many chunks
    hold: asyncio.Event | None = None  # wait for this before answering
    content_type: str = "application/json"


class ReplayServer:
    """Serves scripted replies in order; records each request body it got."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.default: Reply | None = None
        self.requests: list[dict[str, Any]] = []
        self.healthy = True
        self.has_health = True  # False: answer /health with 404 like Ollama
        self.health_calls = 0
        self.probed: list[str] = []  # the path of every GET, in order
        self.has_openapi = False  # answer /openapi.json like llama-cpp-python
        self.arrived = asyncio.Event()
        self.chunk_written = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def start(self) -> None:
        app = web.Application(middlewares=[self._record_get])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/openapi.json", self._openapi)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record_get(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method == "GET":
            self.probed.append(request.path)
        return await handler(request)

    async def _openapi(self, request: web.Request) -> web.Response:
        if not self.has_openapi:
            return web.Response(status=404, text='{"detail":"Not Found"}')
        return web.json_response({"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API"}})

    async def _health(self, request: web.Request) -> web.Response:
        self.health_calls += 1
        if not self.has_health:
            return web.Response(status=404, text="404 page not found")
        if self.healthy:
            return web.json_response({"status": "ok"})
        return web.Response(status=503, body=fixture_bytes("llamacpp_loading_503.json"))

    async def _models(self, request: web.Request) -> web.Response:
        self.health_calls += 1
        if not self.healthy:
            return web.Response(status=503, text="down")
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(msgspec.json.decode(await request.read()))
        self.arrived.set()
        reply = self.replies.popleft() if self.replies else self.default
        if reply is None:
            return web.Response(status=500, text="no scripted reply")
        if reply.hold is not None:
            await reply.hold.wait()
        if reply.chunks is None:
            return web.Response(
                status=reply.status,
                body=reply.body,
                headers=reply.headers,
                content_type=reply.content_type,
            )
        resp = web.StreamResponse(
            status=reply.status, headers={"Content-Type": "text/event-stream"}
        )
        await resp.prepare(request)
        for i, chunk in enumerate(reply.chunks):
            if reply.kill_after is not None and i >= reply.kill_after:
                assert request.transport is not None
                request.transport.abort()
                return resp
            await resp.write(chunk)
            self.chunk_written.set()
        await resp.write_eof()
        return resp


class SimServerProcess:
    """A ``podium sim-server`` subprocess on a free loopback port."""

    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "podium.cli.main", "sim-server", "--port", "0", *args]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "listening on http://127.0.0.1:PORT"
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"sim-server did not start: {line!r}")
        self.root = line.split()[-1]
        self.base_url = self.root + "/v1"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A bare TCP server on 127.0.0.1 speaking HTTP by hand, for what aiohttp's server
    will not do: stall between bytes, hold a stream open after ``[DONE]``, drop a
    kept-alive connection when its next request arrives. ``handler(reader, writer)``
    serves one connection; ``connections`` counts those accepted."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.transport.abort()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        if self._server is not None:
            await self._server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP request off ``reader``: its head and its Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


def http_head(status: int = 200, content_type: str = "application/json", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a ``Transfer-Encoding: chunked`` body."""
    return b"%x\r\n%s\r\n" % (len(data), data)
