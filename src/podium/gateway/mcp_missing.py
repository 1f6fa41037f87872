"""``/mcp`` where the MCP SDK is not installed (it is the ``mcp`` extra).

The gateway serves everything else as usual; a client that asks for ``/mcp`` gets a
``501`` whose message names the extra to install, in the gateway's error shape, rather
than a ``404`` that would read as a wrong URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from podium.errors import MissingExtraError

__all__ = ("mcp_missing_endpoint",)


def mcp_missing_endpoint(
    error: MissingExtraError,
) -> tuple[Route, Callable[[], AbstractAsyncContextManager[Any]]]:
    """The ``/mcp`` route that says what to install, and a lifespan context that runs
    nothing (there is no MCP transport to run)."""
    body = msgspec.json.encode({"error": {"type": "not_installed", "message": str(error)}})

    async def missing(request: Request) -> Response:
        return Response(body, status_code=501, media_type="application/json")

    return Route("/mcp", endpoint=missing, methods=["POST"]), contextlib.nullcontext
