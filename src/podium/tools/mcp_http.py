"""The MCP SDK's HTTP client (``httpx2``) behind an :class:`~podium.security.EgressPolicy`.

The SDK's streamable-HTTP transport connects with an ``httpx2.AsyncClient``; the one made
here opens every TCP connection through :class:`GuardedBackend`, which checks the host and
port against the policy, resolves the name itself, checks *every* resolved address (a name
pointing at loopback, a private network or a metadata address is refused there, on the
answer the socket then connects to: no DNS-rebinding window), and connects to the checked
address. Redirects cannot route around it: the SDK follows only same-origin redirects, and
any connection one opens passes the same backend. No proxy from the environment is used
(it would connect on the client's behalf, past the address check).

A hostile or broken server gets a bounded, named failure (:class:`ReplyGuard`): a JSON
answer over ``max_message_bytes`` is cut off there (the SDK would read any size into
memory; its SSE events have their own cap, set to the same size), and an HTTP error
status becomes a JSON-RPC error that says which status (the SDK's stand-in says only
"Server returned an error response"); a 404 or 5xx marks the session lost, so the call
is retried on a fresh one, a 401/403 or another 4xx does not.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any

from podium.errors import MissingExtraError

try:
    import httpcore2
    import httpx2
except ModuleNotFoundError as exc:  # an extra: the base install has no MCP SDK
    raise MissingExtraError("podium.tools.mcp (MCP tools)", "mcp", exc.name or "mcp") from None

from podium.security.egress import EgressDenied, EgressPolicy, parse_ip

__all__ = ("MAX_MESSAGE_BYTES", "GuardedBackend", "ReplyGuard", "guarded_http_client")

# The SDK's own defaults (mcp.shared._httpx_utils): a server may hold a stream open.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
# One MCP message, either transport: far above what a tool result may put in a prompt
# (results are truncated to a few thousand tokens), far below what hurts a worker.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# JSON-RPC codes the SDK reads: -32000 (connection closed) drops the session and retries.
_LOST, _REFUSED = -32000, -32600


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """A network backend whose TCP connections pass ``policy`` on the resolved address."""

    def __init__(self, policy: EgressPolicy, inner: httpcore2.AsyncNetworkBackend) -> None:
        self.policy = policy
        self._inner = inner
        self.refused = 0

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            address = await asyncio.wait_for(self._checked_address(host, port), timeout)
        except EgressDenied:
            self.refused += 1
            raise
        except (OSError, TimeoutError) as exc:
            raise httpcore2.ConnectError(f"could not resolve {host}: {exc}") from exc
        return await self._inner.connect_tcp(
            address, port, timeout, local_address, socket_options
        )

    async def _checked_address(self, host: str, port: int) -> str:
        self.policy.check_endpoint(host, port)
        if parse_ip(host) is not None:
            return host.strip("[]")  # a literal: check_endpoint checked the address
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM
        )
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses:
            raise OSError(f"no address for {host}")
        for answer in addresses:  # one bad answer fails all: the order is the attacker's
            ip = parse_ip(answer)
            if ip is None:
                raise EgressDenied(f"{host} resolved to {answer!r}, not an address")
            self.policy.check_address(ip, host, port)
        return addresses[0]

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise EgressDenied(f"unix socket {path!r}: not allowed by the egress policy")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class MessageTooLarge(httpx2.StreamError):
    """A server's answer went past the size limit (the SDK reports a StreamError as a
    parse error of that one request)."""


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, url: str) -> None:
        self._inner, self._limit, self._url = inner, limit, url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise MessageTooLarge(f"{self._url} answered with over {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class ReplyGuard(httpx2.AsyncBaseTransport):
    """Wraps the MCP client's transport: caps JSON answers, names HTTP error statuses."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int) -> None:
        self._inner = inner
        self.max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").lower()
        if request.method != "POST":
            return response  # the GET stream: SSE, whose events the SDK caps
        if response.status_code >= 400 and not kind.startswith("application/json"):
            return await self._status_error(request, response)
        if kind.startswith("application/json"):
            stream = response.stream
            assert isinstance(stream, httpx2.AsyncByteStream)
            response.stream = _Capped(stream, self.max_bytes, str(request.url))
        return response

    async def _status_error(
        self, request: httpx2.Request, response: httpx2.Response
    ) -> httpx2.Response:
        """The error status as the JSON-RPC error of the request it answered."""
        await response.aclose()  # its body says nothing the status does not
        try:
            rid = json.loads(request.content).get("id")
        except (ValueError, AttributeError):
            rid = None
        status = response.status_code
        lost = status == 404 or status >= 500  # a restarted server, or one failing now
        error = {
            "code": _LOST if lost else _REFUSED,
            "message": f"HTTP {status} {response.reason_phrase} from {request.url}",
        }
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "error": error}).encode()
        return httpx2.Response(
            status, headers={"content-type": "application/json"}, content=body, request=request
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def guarded_http_client(
    policy: EgressPolicy,
    *,
    headers: dict[str, str] | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for the MCP SDK whose every connection passes ``policy``
    and whose answers pass :class:`ReplyGuard`."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    pool = transport._pool  # httpx2 has no argument for the backend; its pool does
    assert isinstance(pool, httpcore2.AsyncConnectionPool)
    pool._network_backend = GuardedBackend(policy, pool._network_backend)
    return httpx2.AsyncClient(
        headers=headers,
        timeout=_TIMEOUT,
        transport=ReplyGuard(transport, max_message_bytes),
        trust_env=False,
    )
