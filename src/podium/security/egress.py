"""Where outbound HTTP may go: an :class:`EgressPolicy` and the resolver that enforces it.

The policy is checked twice for every hop of a request:

1. on the URL, before anything is sent (:meth:`EgressPolicy.check_url`): scheme, host
   allow-list, port, and the address itself when the host is an IP literal. Legacy
   numeric spellings (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``) are refused
   outright: every resolver reads them differently, which is what makes them bypasses;
2. on the *resolved* addresses, at connect time
   (:class:`~podium.security.resolver.GuardedResolver`, installed in the connector): a name
   that resolves to a loopback, private, link-local or metadata address is
   refused there, on the very answer the socket connects to, so a DNS answer that changes
   between a check and the connect (rebinding) cannot slip through. The resolver lives in
   :mod:`podium.security.resolver`, which loads ``aiohttp``; this module does not.

Redirects are followed by hand (see :mod:`podium.tools.http`) so that each ``Location``
passes both checks again.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from yarl import URL

from podium.errors import PodiumError

__all__ = (
    "EgressDenied",
    "EgressPolicy",
    "IPAddress",
    "IPNetwork",
    "address_kind",
    "parse_ip",
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Addresses cloud providers serve instance metadata (and credentials) on.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Digits, hex and dots only, and not the canonical dotted quad: a legacy IPv4 spelling.
_NUMERIC_HOST = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+))*$", re.I)
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_CANONICAL_V4 = re.compile(rf"^{_OCTET}(?:\.{_OCTET}){{3}}$")


class EgressDenied(PodiumError):
    """A request the egress policy refused. The message says which rule and why."""


def parse_ip(host: str) -> IPAddress | None:
    """The address ``host`` spells, or ``None`` for a name. IPv6 zone ids are dropped.

    Raises :class:`EgressDenied` for legacy numeric IPv4 spellings (decimal, octal, hex,
    short forms): ``socket`` would map them onto an address this check never saw; and for
    a host that looks like an address to ``aiohttp`` (a colon, or digits and dots only) but
    is none (``a:b.example``, ``::ffff:127.1``, ``1..2``): ``aiohttp`` connects to such a
    host without asking its resolver, so the connect-time check would never see where the
    system's ``getaddrinfo`` (a hosts file, an NSS module) sends it.
    """
    host = host.strip("[]").rstrip(".")
    if _NUMERIC_HOST.match(host) and not _CANONICAL_V4.match(host):
        try:
            meant = socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            meant = "no valid address"
        raise EgressDenied(f"host {host!r} is a non-canonical IP spelling (means {meant})")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        if ":" in host or host.replace(".", "").isdigit():  # aiohttp's is_ip_address
            raise EgressDenied(f"host {host!r} looks like an IP address but is none") from None
        return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, compatible, 6to4, Teredo, NAT64)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    packed = int(ip)
    if packed >> 32 == 0 and packed > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(packed)
    return None


def address_kind(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address (``loopback``, ``private``, ``metadata``...), or None."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            kind = address_kind(inner)
            return None if kind is None else f"{kind} ({inner} in IPv6 form)"
    if ip in _METADATA:
        return "metadata"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        return "reserved"
    return None


def _host_matches(host: str, patterns: frozenset[str]) -> bool:
    if host in patterns:
        return True
    # "*.example.com" allows every subdomain (not example.com itself: list it too).
    parts = host.split(".")
    return any(f"*.{'.'.join(parts[i:])}" in patterns for i in range(1, len(parts)))


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """What outbound requests may reach.

    - ``allow_hosts``: host names (``"api.example.com"``, ``"*.example.com"``) or IP
      literals a request may name; empty means any host — the address checks still apply.
    - ``allow_networks``: non-public networks that are allowed anyway
      (``"127.0.0.0/8"``, ``"10.1.0.0/16"``); every loopback, private, link-local,
      metadata, multicast and reserved address is refused unless listed here (checked on
      IPv4-mapped and other IPv6 forms too).
    - ``allow_private``: allow every non-public address (loopback, private, link-local...)
      except cloud-metadata ones — for services on a trusted network.
    - ``allow_ports``: ports a request may use; ``None`` allows any port but ``deny_ports``.
    - ``private_ports``: the only ports a non-public address that ``allow_networks`` or
      ``allow_private`` lets through may be reached on (checked on the address a name
      resolves to as well); ``None``: those of ``allow_ports``. Loopback opened per port.
    - ``schemes``: ``http``/``https`` by default.
    - ``max_redirects``, ``max_response_bytes``, ``timeout_s``: per request.
    - ``also``: more policies each request must pass too (see :meth:`narrowed`);
      ``label`` names a policy in its refusals (``"tenant 'acme'"``).

    Example: the public web on 80/443 only (the default), or a local service::

        EgressPolicy.loopback()  # 127.0.0.0/8 and ::1, any port
    """

    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[IPNetwork | str, ...] = ()
    allow_private: bool = False
    allow_ports: frozenset[int] | None = frozenset({80, 443})
    deny_ports: frozenset[int] = frozenset()
    private_ports: frozenset[int] | None = None
    schemes: frozenset[str] = frozenset({"http", "https"})
    max_redirects: int = 5
    max_response_bytes: int = 1 << 20
    timeout_s: float = 10.0
    also: tuple[EgressPolicy, ...] = ()
    label: str = ""  # whose policy this is, in refusals ("tenant 'acme'")
    _nets: tuple[IPNetwork, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "allow_hosts", frozenset(h.lower().rstrip(".") for h in self.allow_hosts)
        )
        nets = tuple(ipaddress.ip_network(n) for n in self.allow_networks)
        object.__setattr__(self, "allow_networks", nets)
        object.__setattr__(self, "_nets", nets)
        if self.allow_ports is not None:
            object.__setattr__(self, "allow_ports", frozenset(self.allow_ports))
        object.__setattr__(self, "deny_ports", frozenset(self.deny_ports))
        if self.private_ports is not None:
            object.__setattr__(self, "private_ports", frozenset(self.private_ports))
        object.__setattr__(self, "schemes", frozenset(self.schemes))
        object.__setattr__(self, "also", tuple(self.also))

    def narrowed(self, other: EgressPolicy) -> EgressPolicy:
        """This policy, further limited by ``other``: a request must pass both (hosts,
        ports, schemes, addresses), under the smaller of their redirect, size and time
        caps. Never wider than either: how a tenant's policy applies to an agent's tools."""
        if other is self or other in self.also:
            return self
        return replace(
            self,
            also=(*self.also, other),
            max_redirects=min(self.max_redirects, other.max_redirects),
            max_response_bytes=min(self.max_response_bytes, other.max_response_bytes),
            timeout_s=min(self.timeout_s, other.timeout_s),
        )

    @classmethod
    def loopback(cls, *, hosts: Iterable[str] = (), **kwargs: object) -> EgressPolicy:
        """Loopback only (``localhost``, ``127.0.0.0/8``, ``::1``), any port — plus ``hosts``."""
        allow = {"localhost", "127.0.0.1", "::1", *hosts}
        kwargs.setdefault("allow_ports", None)
        return cls(
            allow_hosts=frozenset(allow),
            allow_networks=("127.0.0.0/8", "::1/128"),
            **kwargs,  # type: ignore[arg-type]
        )

    def check_address(self, ip: IPAddress, host: str = "", port: int | None = None) -> None:
        """Raise :class:`EgressDenied` unless a connection to ``ip`` (on ``port``, where
        known) is allowed."""
        for other in self.also:
            try:
                other.check_address(ip, host, port)
            except EgressDenied as exc:
                raise other._refusal(exc) from None
        kind = address_kind(ip)
        if kind is None:
            return
        via = f" ({host} resolves to it)" if host and host != str(ip) else ""
        if self.allow_private and not kind.startswith("metadata"):
            return self._check_private_port(ip, kind, via, port)
        inner = _embedded_v4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
        for net in self._nets:
            if ip in net or (inner is not None and inner in net):
                return self._check_private_port(ip, kind, via, port)
        raise EgressDenied(f"address {ip} is {kind}{via}: not allowed by the egress policy")

    def _check_private_port(
        self, ip: IPAddress, kind: str, via: str, port: int | None
    ) -> None:
        if self.private_ports is not None and port is not None and port not in self.private_ports:
            raise EgressDenied(
                f"port {port} of {kind} address {ip}{via} is not allowed by the egress "
                f"policy (open there: {', '.join(map(str, sorted(self.private_ports)))})"
            )

    def _refusal(self, exc: EgressDenied) -> EgressDenied:
        return EgressDenied(f"{exc} ({self.label})") if self.label else exc

    def check_url(self, url: URL | str) -> URL:
        """Check what can be checked before connecting; return the parsed URL."""
        u = URL(url) if isinstance(url, str) else url
        for other in self.also:
            try:
                other.check_url(u)
            except EgressDenied as exc:
                raise other._refusal(exc) from None
        scheme = u.scheme.lower()
        if scheme not in self.schemes:
            raise EgressDenied(f"scheme {scheme or '(none)'!r} is not allowed: {u}")
        if not u.raw_host:
            raise EgressDenied(f"no host in {str(u)!r}")
        self._check_endpoint(u.raw_host, u.port)
        return u

    def check_endpoint(self, host: str, port: int | None) -> None:
        """The checks of :meth:`check_url` but the scheme's, for a connection to
        ``host:port`` (a transport that is not a URL's: MCP's HTTP client)."""
        for other in self.also:
            try:
                other.check_endpoint(host, port)
            except EgressDenied as exc:
                raise other._refusal(exc) from None
        self._check_endpoint(host, port)

    def _check_endpoint(self, raw_host: str, port: int | None) -> None:
        host = raw_host.lower().rstrip(".")
        if not host:
            raise EgressDenied("no host to connect to")
        ip = parse_ip(host)
        if (
            port is None
            or port in self.deny_ports
            or (self.allow_ports is not None and port not in self.allow_ports)
        ):
            raise EgressDenied(f"port {port} of {host} is not allowed by the egress policy")
        if ip is not None:  # a literal: no resolver runs, so this is the connect-time check
            self.check_address(ip, host, port)
        if self.allow_hosts and not _host_matches(
            str(ip) if ip is not None else host, self.allow_hosts
        ):
            raise EgressDenied(f"host {host!r} is not in the egress allow-list")
