"""The connect-time half of the egress policy: an ``aiohttp`` resolver that checks every
resolved address (see :mod:`podium.security.egress`).

Apart from the policy so that the policy (which every agent imports) does not load
``aiohttp``: only a client that sends HTTP requests (:mod:`podium.tools.http`) needs this.
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from podium.security.egress import EgressDenied, EgressPolicy, parse_ip

__all__ = ("GuardedResolver",)


class GuardedResolver(AbstractResolver):
    """A resolver that refuses names whose answers the policy does not allow.

    Every address of the answer must pass (one bad address fails the lookup: connectors
    try them in order, and an attacker controls the order).
    """

    def __init__(self, policy: EgressPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        for answer in answers:
            ip = parse_ip(answer["host"])
            if ip is None:
                raise EgressDenied(f"{host} resolved to {answer['host']!r}, not an address")
            self.policy.check_address(ip, host, port)
        return answers

    async def close(self) -> None:
        await self._inner.close()
