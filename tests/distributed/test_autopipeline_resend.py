"""A command whose reply was lost with its connection is sent again in its safe form.

A loopback server that speaks just enough RESP stands in for a Redis that applied a
command and then dropped the connection before answering: the pipeline must send the
``resend`` form (which checks whether the first send landed), not the original again.
"""

from __future__ import annotations

import asyncio

import hiredis
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from podium.store.redis_batch import Autopipeline

pytestmark = pytest.mark.anyio


async def test_a_command_lost_with_its_connection_is_sent_again_in_its_resend_form() -> None:
    received: list[list[bytes]] = []
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    if command[0].upper() == b"PING":  # the pipeline's handshake
                        writer.write(b"+PONG\r\n")
                        continue
                    received.append(command)
                    if first:  # "applied", then the connection goes before the reply
                        writer.transport.abort()
                        return
                    writer.write(b"$3\r\n1-1\r\n")
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = aioredis.Redis(host="127.0.0.1", port=port)
    pipe = Autopipeline(client)
    try:
        reply = await pipe.submit("XADD", "s", "*", "d", "x", resend=("SAFE", "s", "x"))
    finally:
        await pipe.aclose()
        await client.aclose()
        server.close()
        await server.wait_closed()
    assert reply == b"1-1"
    assert received == [[b"XADD", b"s", b"*", b"d", b"x"], [b"SAFE", b"s", b"x"]]


async def test_closing_while_the_handshake_waits_leaves_no_connection_behind() -> None:
    """aclose() while a connection is being set up (the server has not answered the
    handshake's PING yet) stops that set-up and hangs up before it returns: no task left
    pending for the loop's end, no socket left open."""
    accepted = asyncio.Event()
    hung_up = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()  # never answers; b"" once the client hangs up
        hung_up.set()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = aioredis.Redis(host="127.0.0.1", port=port)
    pipe = Autopipeline(client, timeout=30, unavailable_s=30)
    try:
        call = pipe.submit("GET", "k")
        await accepted.wait()
        await pipe.aclose()
        assert pipe._connecting is None  # the set-up has ended, not just been asked to
        with pytest.raises(RedisConnectionError, match="closed"):
            await call
        async with asyncio.timeout(5):
            await hung_up.wait()
    finally:
        await pipe.aclose()
        await client.aclose()
        server.close()
        async with asyncio.timeout(5):  # uvloop's waits for a connection left open
            await server.wait_closed()
