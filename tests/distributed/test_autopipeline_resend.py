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
