"""API keys → tenants. Keys are kept only as SHA-256 digests, in memory and at rest.

A key arrives as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. API
keys are long random tokens, so one unsalted SHA-256 is enough to make a leaked
config file useless (unlike passwords, they cannot be guessed from a list).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import replace

import msgspec

from podium.config import KeyConfig
from podium.gateway.errors import ApiError
from podium.security.egress import EgressPolicy
from podium.security.tenant_egress import policy_from_config

__all__ = ("KeyRing", "Tenant", "generate_key", "hash_key")


class Tenant(msgspec.Struct, frozen=True):
    """Who a request is for, and the tenant's own rate (None: the default from ``[limits]``).

    ``admin``: the key is an operator's, which may also read the process-wide ``/metrics``.
    """

    name: str
    rate: float | None = None
    burst: float | None = None
    admin: bool = False
    tools: frozenset[str] | None = None  # the tools its runs may call (None: all)
    egress: EgressPolicy | None = None  # narrows where its runs' tools may connect


def hash_key(key: str) -> str:
    """``sha256:<hex>`` of an API key: what goes in ``podium.toml``."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    """A new random API key (``pk_`` + 32 url-safe characters)."""
    return "pk_" + secrets.token_urlsafe(24)


class KeyRing:
    """Looks up the tenant of a request's key."""

    def __init__(self, keys: Iterable[KeyConfig]) -> None:
        self._tenants: dict[str, Tenant] = {}
        for k in keys:
            digest = k.hash if k.hash is not None else hash_key(k.key or "")
            tools = None if k.tools is None else frozenset(k.tools)
            egress = None if k.egress is None else policy_from_config(k.egress, k.tenant)
            self._tenants[digest.lower()] = Tenant(
                k.tenant, k.rate, k.burst, k.admin, tools, egress
            )

    def __len__(self) -> int:
        return len(self._tenants)

    def add(
        self,
        key: str,
        tenant: str,
        *,
        admin: bool = False,
        tools: Iterable[str] | None = None,
        egress: EgressPolicy | None = None,
    ) -> None:
        """Accept ``key`` for ``tenant``; ``tools`` limits the tools its runs may call,
        ``egress`` narrows where they may connect (see :mod:`podium.security.tenant_egress`)."""
        if egress is not None and not egress.label:
            egress = replace(egress, label=f"tenant {tenant!r}")
        allowed = None if tools is None else frozenset(tools)
        self._tenants[hash_key(key)] = Tenant(tenant, admin=admin, tools=allowed, egress=egress)

    def add_digest(self, digest: str, tenant: str, *, admin: bool = False) -> None:
        """Accept the key whose :func:`hash_key` is ``digest`` for ``tenant`` (a key kept
        only as its digest: see :mod:`podium.gateway.first_key`)."""
        self._tenants[digest.lower()] = Tenant(tenant, admin=admin)

    @staticmethod
    def key_from(headers: Mapping[str, str]) -> str | None:
        auth = headers.get("authorization")
        if auth:
            scheme, _, value = auth.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
            return None
        key = headers.get("x-api-key")
        return key.strip() if key else None

    def authenticate(self, headers: Mapping[str, str]) -> Tenant:
        """The request's tenant, or a 401 (the same for a missing and an unknown key)."""
        key = self.key_from(headers)
        if key is not None:
            # Looked up by digest: the timing of a dict probe says nothing about the secret.
            tenant = self._tenants.get(hash_key(key))
            if tenant is not None:
                return tenant
        raise ApiError(
            401,
            "unauthorized",
            "a valid API key is required (Authorization: Bearer <key>)",
            field="authorization",
            headers={"WWW-Authenticate": "Bearer"},
        )

    def authenticate_admin(self, headers: Mapping[str, str]) -> Tenant:
        """An operator's key, or a 401 (no valid key) / 403 (a tenant's key)."""
        tenant = self.authenticate(headers)
        if not tenant.admin:
            raise ApiError(
                403,
                "forbidden",
                "this endpoint needs an operator key (admin = true in podium.toml)",
                field="authorization",
            )
        return tenant
