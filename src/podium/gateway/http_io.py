"""Bodies in and out of the HTTP API: a JSON request's body read under the server's limits
and decoded, a JSON or Server-Sent Events response. Kept apart from the routes
(:mod:`podium.gateway.app`) so that other endpoints (the MCP one) share them without
importing the app that mounts them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from podium.gateway.body_limit import body_too_large
from podium.gateway.errors import ApiError, error_from_validation
from podium.gateway.live import LiveFrames

__all__ = ("json_response", "read_body", "read_json", "sse_response")

T = TypeVar("T")

_encode = msgspec.json.Encoder().encode
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def json_response(
    body: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        _encode(body), status, headers=dict(headers or {}), media_type="application/json"
    )


def sse_response(
    frames: AsyncIterator[bytes] | LiveFrames, headers: Mapping[str, str] | None = None
) -> Response:
    return StreamingResponse(
        frames, media_type="text/event-stream", headers={**_SSE_HEADERS, **(headers or {})}
    )


async def read_json(
    request: Request, type_: type[T], max_bytes: int, body_timeout_s: float = 30.0
) -> T:
    """Decode the body into ``type_``: 415 if not JSON, 413 if too big, 400/422 if invalid,
    408 if it takes longer than ``body_timeout_s`` to arrive."""
    body = await read_body(request, max_bytes, body_timeout_s)
    try:
        return msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError as exc:
        raise error_from_validation(exc) from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "the body's JSON is nested too deeply") from None


async def read_body(request: Request, max_bytes: int, body_timeout_s: float = 30.0) -> bytes:
    """A JSON request's body, undecoded: 415 if not JSON, 413 if too big, 408 if it takes
    longer than ``body_timeout_s`` to arrive."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise ApiError(
            415,
            "unsupported_media_type",
            f"expected Content-Type: application/json, got {content_type or 'none'!r}",
            field="content-type",
        )
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise body_too_large(max_bytes)
    body = bytearray()
    try:
        # A client that trickles its body holds a connection and a task: bound the read.
        async with asyncio.timeout(body_timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    raise body_too_large(max_bytes)
    except TimeoutError:
        raise ApiError(
            408,
            "request_timeout",
            f"the body did not arrive within {body_timeout_s:g}s",
            headers={"Connection": "close"},
        ) from None
    return bytes(body)
