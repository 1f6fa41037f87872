"""Per-tenant egress: a tenant's policy narrows every outbound request its runs' tools make.

A tenant's :class:`~podium.security.egress.EgressPolicy` (``[keys.egress]`` on its API key
in ``podium.toml``, ``KeyRing.add(..., egress=...)``, or ``Engine.run(..., egress=...)``)
travels with each run in its metadata under :data:`EGRESS_KEY`: the gateway stamps it on
when the run is submitted (whatever the client sent under that key is dropped), and the
engine that executes the run, in the gateway or in a ``podium worker``, decodes it once at
run load and sets it for the run's drive (:func:`enter_egress` / :func:`leave_egress`; or
:func:`run_egress` around an awaitable). Every :class:`~podium.tools.http.
HttpClient` request made from that run (HTTP tools, OpenAPI tools, a tool of your own on the
shared client) then passes the client's policy *and* the tenant's, on the URL and on the
resolved address of every hop: the tenant's policy can only narrow an agent's.

What it does not cover: MCP servers (operator-configured, their pooled sessions shared by
every tenant; see ``[[mcp_servers]]``' own egress policy), and synchronous tools, which run
in a thread pool without the run's context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from contextvars import ContextVar, Token
from typing import TypeVar

import msgspec

from podium.config_schema import EgressConfig
from podium.errors import ConfigError
from podium.security.egress import EgressPolicy

__all__ = (
    "EGRESS_KEY",
    "current_egress",
    "decode_egress",
    "egress_of",
    "encode_egress",
    "enter_egress",
    "leave_egress",
    "policy_from_config",
    "run_egress",
    "with_egress",
)

T = TypeVar("T")

#: The run-metadata key holding the tenant's egress policy (JSON).
EGRESS_KEY = "podium.egress"

_current: ContextVar[EgressPolicy | None] = ContextVar("podium_run_egress", default=None)

#: Allows nothing: what a run whose policy cannot be read gets (fail closed).
_NOTHING = EgressPolicy(schemes=frozenset(), label="an unreadable tenant policy")


def policy_from_config(config: EgressConfig, tenant: str) -> EgressPolicy:
    """The :class:`EgressPolicy` of a tenant's ``[keys.egress]``: each field it sets
    narrows, each it leaves out leaves the tools' own policies as they are on that point.
    :class:`ConfigError` for a network that does not parse, or ``private_ports`` that
    could never be reached."""
    caps = EgressPolicy()
    try:
        _check_private_ports(config)
        return EgressPolicy(
            allow_hosts=frozenset(config.allow_hosts),
            allow_networks=tuple(config.allow_networks),
            allow_private=config.allow_private,
            allow_ports=None if config.allow_ports is None else frozenset(config.allow_ports),
            deny_ports=frozenset(config.deny_ports),
            private_ports=None if config.private_ports is None else frozenset(config.private_ports),
            max_redirects=_or(config.max_redirects, caps.max_redirects),
            max_response_bytes=_or(config.max_response_bytes, caps.max_response_bytes),
            timeout_s=_or(config.timeout_s, caps.timeout_s),
            label=f"tenant {tenant!r}",
        )
    except ValueError as exc:
        raise ConfigError(f"keys: tenant {tenant!r}: egress: {exc}") from exc


def _check_private_ports(config: EgressConfig) -> None:
    """``ValueError`` (one line) for ``private_ports`` that open nothing."""
    ports = config.private_ports
    if ports is None:
        return
    if not ports:
        raise ValueError("private_ports is empty: leave it out, or set allow_private = false")
    if not config.allow_private and not config.allow_networks:
        raise ValueError(
            "private_ports opens ports of non-public addresses, but allow_private = false "
            "and allow_networks is empty: none is reachable"
        )
    closed = sorted(set(ports) & set(config.deny_ports))
    if config.allow_ports is not None:
        closed += sorted(set(ports) - set(config.allow_ports))
    if closed:
        raise ValueError(
            f"private_ports {closed} are refused by allow_ports or deny_ports "
            "(a request must pass both)"
        )


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


class _Wire(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    allow_hosts: list[str] = []
    allow_networks: list[str] = []
    allow_private: bool = False
    allow_ports: list[int] | None = msgspec.field(default_factory=lambda: [80, 443])
    deny_ports: list[int] = []
    schemes: list[str] = msgspec.field(default_factory=lambda: ["http", "https"])
    max_redirects: int = 5
    max_response_bytes: int = 1 << 20
    timeout_s: float = 10.0
    also: list[_Wire] = []
    label: str = ""
    private_ports: list[int] | None = None


def _to_wire(p: EgressPolicy) -> _Wire:
    return _Wire(
        sorted(p.allow_hosts),
        [str(n) for n in p.allow_networks],
        p.allow_private,
        None if p.allow_ports is None else sorted(p.allow_ports),
        sorted(p.deny_ports),
        sorted(p.schemes),
        p.max_redirects,
        p.max_response_bytes,
        p.timeout_s,
        [_to_wire(a) for a in p.also],
        p.label,
        None if p.private_ports is None else sorted(p.private_ports),
    )


def _from_wire(w: _Wire) -> EgressPolicy:
    return EgressPolicy(
        allow_hosts=frozenset(w.allow_hosts),
        allow_networks=tuple(w.allow_networks),
        allow_private=w.allow_private,
        allow_ports=None if w.allow_ports is None else frozenset(w.allow_ports),
        deny_ports=frozenset(w.deny_ports),
        schemes=frozenset(w.schemes),
        max_redirects=w.max_redirects,
        max_response_bytes=w.max_response_bytes,
        timeout_s=w.timeout_s,
        also=tuple(_from_wire(a) for a in w.also),
        label=w.label,
        private_ports=None if w.private_ports is None else frozenset(w.private_ports),
    )


def encode_egress(policy: EgressPolicy) -> str:
    """``policy`` as the JSON that run metadata carries."""
    return msgspec.json.encode(_to_wire(policy)).decode()


def decode_egress(raw: str) -> EgressPolicy:
    """The policy :func:`encode_egress` wrote; one that allows nothing if ``raw`` does not
    read as one (a run never gets wider egress because its metadata was mangled)."""
    try:
        return _from_wire(msgspec.json.decode(raw, type=_Wire))
    except (msgspec.DecodeError, ValueError, TypeError):
        return _NOTHING


def egress_of(metadata: Mapping[str, str]) -> EgressPolicy | None:
    """The tenant policy a run's metadata carries, or ``None``."""
    raw = metadata.get(EGRESS_KEY)
    return None if raw is None else decode_egress(raw)


def with_egress(metadata: dict[str, str], policy: EgressPolicy | None) -> dict[str, str]:
    """``metadata`` carrying ``policy`` (unchanged when ``policy`` is None)."""
    if policy is not None:
        metadata = {**metadata, EGRESS_KEY: encode_egress(policy)}
    return metadata


def current_egress() -> EgressPolicy | None:
    """The tenant policy of the run whose tool is running, or ``None``."""
    return _current.get()


def enter_egress(raw: str) -> Token[EgressPolicy | None]:
    """From now on in this task (and the tool tasks it starts), requests pass the tenant
    policy ``raw`` encodes; :func:`leave_egress` with the token when the run's drive ends."""
    return _current.set(decode_egress(raw))


def leave_egress(token: Token[EgressPolicy | None]) -> None:
    _current.reset(token)


async def run_egress(policy: EgressPolicy, work: Awaitable[T]) -> T:
    """Await ``work`` (a run's drive) with ``policy`` narrowing its outbound requests; tool
    tasks it starts inherit it, and it is gone again when ``work`` ends."""
    token = _current.set(policy)
    try:
        return await work
    finally:
        _current.reset(token)
