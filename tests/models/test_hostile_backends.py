"""OpenAIChatModel against servers that misbehave on the wire.

Each server is a real one on loopback (:class:`RawServer` speaks HTTP by hand where
aiohttp's server would not misbehave): headers only after the whole generation, a
stream held open after ``[DONE]``, a stream that stalls after its headers, an error
answer of endless HTML, a kept-alive connection dropped when the next request
arrives. Nothing of Podium is mocked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from backend_servers import (
    HELLO_EVENTS,
    OK_BODY,
    Handler,
    RawServer,
    http_chunk,
    http_head,
    read_request,
)

from podium.errors import (
    ConfigError,
    ModelHTTPError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from podium.messages import Message
from podium.models import (
    CircuitBreaker,
    ModelRequest,
    OpenAIChatModel,
    RetryPolicy,
    Timeouts,
)

pytestmark = pytest.mark.anyio

REQ = ModelRequest(messages=[Message("user", "hi")])
NO_RETRY = RetryPolicy(attempts=1)
BODY, EVENTS = OK_BODY, HELLO_EVENTS
SSE_HEAD = http_head(200, "text/event-stream", Transfer_Encoding="chunked")

Serve = Callable[[Handler], Awaitable[RawServer]]


@pytest.fixture
async def raw() -> AsyncIterator[Serve]:
    servers: list[RawServer] = []

    async def serve(handler: Handler) -> RawServer:
        server = RawServer(handler)
        await server.start()
        servers.append(server)
        return server

    try:
        yield serve
    finally:
        for s in servers:
            await s.stop()


async def collect(model: OpenAIChatModel) -> str:
    async for d in model.stream(REQ):
        if d.response is not None:
            return d.response.content
    raise AssertionError("no final delta")


async def test_headers_after_read_s_but_within_first_byte_s(raw: Serve) -> None:
    # vLLM sends a non-streamed reply's headers after the whole generation: that wait is
    # first_byte_s's, not read_s's (aiohttp's sock_read used to cut it at read_s)
    released = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(0.5)
        writer.write(http_head(200, Content_Length=str(len(BODY))) + BODY)
        await writer.drain()
        released.set()
        await reader.read()

    server = await raw(slow)
    t = Timeouts(read_s=0.1, first_byte_s=5)
    async with OpenAIChatModel(server.base_url, "m", timeouts=t, retry=NO_RETRY) as m:
        assert (await m.request(REQ)).content == "ok"
    assert released.is_set()


async def test_read_s_still_bounds_the_gaps_of_a_body(raw: Serve) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + http_chunk(EVENTS[0]))
        await writer.drain()
        await reader.read()  # and nothing more

    server = await raw(stall)
    t = Timeouts(read_s=0.2, token_idle_s=30, total_s=30)
    async with OpenAIChatModel(server.base_url, "m", timeouts=t, retry=NO_RETRY) as m:
        start = time.monotonic()
        with pytest.raises(ModelTimeoutError, match="no stream data in time"):
            await collect(m)
        assert time.monotonic() - start < 5


async def held_open_after_done(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Streams a whole reply, [DONE] included, then neither ends the body nor closes."""
    while True:
        await read_request(reader)
        writer.write(SSE_HEAD + b"".join(http_chunk(e) for e in EVENTS))
        await writer.drain()


@pytest.mark.parametrize("how", ["request", "stream"])
async def test_stream_held_open_after_done_is_complete(raw: Serve, how: str) -> None:
    server = await raw(held_open_after_done)
    t = Timeouts(read_s=30, token_idle_s=30, total_s=30)
    async with OpenAIChatModel(server.base_url, "m", stream=True, timeouts=t) as m:
        start = time.monotonic()
        for _ in range(2):
            if how == "request":
                assert (await m.request(REQ)).content == "hello"
            else:
                assert await collect(m) == "hello"
        assert time.monotonic() - start < 5  # not the 30 s of token_idle_s


async def test_stream_stalled_after_its_headers_ends_at_the_total_deadline(raw: Serve) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        await writer.drain()
        await reader.read()

    server = await raw(stall)
    t = Timeouts(read_s=30, token_idle_s=30, total_s=0.3)
    async with OpenAIChatModel(server.base_url, "m", timeouts=t, retry=NO_RETRY) as m:
        start = time.monotonic()
        with pytest.raises(ModelTimeoutError, match="not complete in time"):
            await collect(m)
        assert time.monotonic() - start < 5


async def test_an_error_answer_is_read_only_as_far_as_its_message(raw: Serve) -> None:
    # a 500 announcing a gigabyte of HTML: the client keeps the first 64 KiB (all the
    # message it reports) instead of reading (and holding) the whole body
    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(http_head(500, "text/html", Content_Length=str(1 << 30)))
        writer.write(b"<html>" + b"x" * (128 * 1024))
        await writer.drain()
        await reader.read()  # the rest never comes

    server = await raw(huge)
    t = Timeouts(first_byte_s=3)
    async with OpenAIChatModel(server.base_url, "m", timeouts=t, retry=NO_RETRY) as m:
        with pytest.raises(ModelHTTPError) as info:
            await m.request(REQ)
    assert info.value.status == 500 and info.value.body.startswith("<html>xxx")
    assert len(info.value.body) <= 64 * 1024


@pytest.mark.parametrize(
    "url", ["localhost:8000/v1", "127.0.0.1:8000", "http:///v1", "ftp://host/v1", "http://[::1/v1"]
)
def test_a_base_url_that_cannot_be_posted_to_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIChatModel(url, "m")


async def one_reply_per_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answers one request with ``Connection: keep-alive``, then drops the connection
    when the next request arrives (a keep-alive timeout that raced the client's)."""
    await read_request(reader)
    writer.write(http_head(200, Connection="keep-alive", Content_Length=str(len(BODY))) + BODY)
    await writer.drain()
    await read_request(reader)


async def test_a_stale_kept_alive_connection_is_resent_once_for_free(raw: Serve) -> None:
    server = await raw(one_reply_per_connection)
    async with OpenAIChatModel(server.base_url, "m", retry=NO_RETRY) as m:
        for _ in range(4):
            assert (await m.request(REQ)).content == "ok"
        assert m.retries == 0 and m.breaker.consecutive_failures == 0
    assert server.connections == 4


async def test_a_stale_connection_resent_as_a_half_open_breaker_s_probe(raw: Serve) -> None:
    server = await raw(one_reply_per_connection)
    breaker = CircuitBreaker(failures=1, reset_s=0.0)
    async with OpenAIChatModel(server.base_url, "m", retry=NO_RETRY, breaker=breaker) as m:
        assert (await m.request(REQ)).content == "ok"
        breaker.failure()  # open; half-open at once: the next call is its probe
        assert breaker.state == "half_open"
        assert (await m.request(REQ)).content == "ok"  # on the stale connection, then anew
        assert breaker.state == "closed"


async def test_a_server_that_always_drops_is_resent_only_once(raw: Serve) -> None:
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    server = await raw(drop)
    async with OpenAIChatModel(server.base_url, "m", retry=NO_RETRY) as m:
        with pytest.raises(ModelUnavailableError, match="Server disconnected"):
            await m.request(REQ)
        assert m.breaker.consecutive_failures == 1
    assert server.connections == 2
