"""The HTTP side of an OpenAI-compatible endpoint that is not the model's own logic: its
base URL checked, a kept-alive connection found closed, a body read with a cap or drained
so its connection is reused, a server's OpenAPI title (how its kind is told)."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import msgspec
import yarl

from podium.errors import ConfigError

__all__ = (
    "DONE_DRAIN_S",
    "OpenAPIDoc",
    "drain_after_done",
    "endpoint_url",
    "read_capped",
    "stale_connection",
    "whole_reply",
)

#: after ``data: [DONE]``, how long the rest of the body (its end) is waited for, so the
#: connection can be reused; a server that holds the stream open past it is cut off
DONE_DRAIN_S = 0.5


def endpoint_url(base: str) -> yarl.URL:
    """``base`` as a URL, or :class:`ConfigError` if it cannot be one to POST to."""
    try:
        url = yarl.URL(base)
    except ValueError as exc:
        raise ConfigError(f"invalid base_url {base!r}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(
            f"invalid base_url {base!r}: it needs http:// or https:// and a host,"
            " like 'http://127.0.0.1:8000/v1'"
        )
    return url


def stale_connection(exc: aiohttp.ClientConnectionError) -> bool:
    """Whether ``exc`` is a kept-alive connection the server had already closed: the
    request went out and the connection ended with no answer (not a refused connect)."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and not isinstance(
        exc, aiohttp.ClientConnectorError
    )


class OpenAPIInfo(msgspec.Struct):
    title: str = ""


class OpenAPIDoc(msgspec.Struct):
    info: OpenAPIInfo = msgspec.field(default_factory=OpenAPIInfo)


def whole_reply(resp: aiohttp.ClientResponse) -> bool:
    """A reply that is one JSON completion: what a server that ignores ``"stream": true``
    (or a proxy that buffers) sends to a streamed call. Read as such, not as an event
    stream (where it would be "a stream that ended before finish_reason")."""
    return resp.content_type == "application/json"


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most ``limit`` bytes of the body (the rest is left unread: releasing the
    response then closes its connection instead of reusing it)."""
    parts: list[bytes] = []
    n = 0
    while n < limit:
        part = await resp.content.read(limit - n)
        if not part:
            break
        parts.append(part)
        n += len(part)
    return b"".join(parts)


async def drain_after_done(resp: aiohttp.ClientResponse) -> None:
    """Read what follows ``[DONE]`` (the end of the body, normally at once) so the
    connection goes back to the pool; give up after :data:`DONE_DRAIN_S`."""
    content = resp.content
    if content.at_eof():
        return
    with contextlib.suppress(TimeoutError, aiohttp.ClientError):
        async with asyncio.timeout(DONE_DRAIN_S):
            while await content.readany():
                pass
