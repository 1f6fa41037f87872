"""The MCP SDK's HTTP client (``httpx2``) behind an :class:`~podium.security.EgressPolicy`.

The SDK's streamable-HTTP transport connects with an ``httpx2.AsyncClient``; the one made
here opens every TCP connection through :class:`GuardedBackend`, which checks the host and
port against the policy, resolves the name itself, checks *every* resolved address (a name
pointing at loopback, a private network or a metadata address is refused there, on the
answer the socket then connects to: no DNS-rebinding window), and connects to the checked
address. Redirects cannot route around it: the SDK follows only same-origin redirects, and
any connection one opens passes the same backend. No proxy from the environment is used
(it would connect on the client's behalf, past the address check).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from podium.security.egress import EgressDenied, EgressPolicy, parse_ip

__all__ = ("GuardedBackend", "guarded_http_client")

# The SDK's own defaults (mcp.shared._httpx_utils): a server may hold a stream open.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


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
            self.policy.check_address(ip, host)
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


def guarded_http_client(
    policy: EgressPolicy, *, headers: dict[str, str] | None = None
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for the MCP SDK whose every connection passes ``policy``."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    pool = transport._pool  # httpx2 has no argument for the backend; its pool does
    assert isinstance(pool, httpcore2.AsyncConnectionPool)
    pool._network_backend = GuardedBackend(policy, pool._network_backend)
    return httpx2.AsyncClient(
        headers=headers, timeout=_TIMEOUT, transport=transport, trust_env=False
    )
