"""The egress policy: every hop and every resolved address is checked; refusals become
observations the model reads."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from typing import Any

import pytest
from _web import serve
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.helpers import is_ip_address
from hypothesis import given, settings
from hypothesis import strategies as st
from yarl import URL

from podium import Agent, ModelRequest, ModelResponse, tool_call_reply
from podium.engine.driver import Engine
from podium.messages import Message
from podium.security import EgressDenied, EgressPolicy
from podium.security.egress import address_kind, parse_ip
from podium.tools.http import HttpClient, ResponseTooLarge, http_tool

pytestmark = pytest.mark.anyio

LOOPBACK = EgressPolicy.loopback()
ANY_PORT_PUBLIC = EgressPolicy(allow_ports=None)


class FixedResolver(AbstractResolver):
    """DNS as an attacker runs it: every name resolves to ``address``."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        fam = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        return [
            {
                "hostname": host,
                "host": self.address,
                "port": port,
                "family": fam,
                "proto": 0,
                "flags": 0,
            }
        ]

    async def close(self) -> None:
        pass


async def refused(client: HttpClient, url: str) -> str:
    with pytest.raises(EgressDenied) as info:
        await client.get(url)
    return str(info.value)


async def test_loopback_allowed_explicitly_fetches() -> None:
    async with serve() as base:
        client = HttpClient(LOOPBACK)
        resp = await client.get(f"{base}/page")
        assert resp.status == 200 and "hello" in resp.text
        await client.aclose()


async def test_loopback_refused_by_default_by_address_and_by_name() -> None:
    async with serve() as base:
        client = HttpClient(ANY_PORT_PUBLIC)
        assert "loopback" in await refused(client, f"{base}/page")
        port = base.rsplit(":", 1)[1]
        # A name that resolves to loopback is refused on the resolved address.
        msg = await refused(client, f"http://localhost:{port}/page")
        assert "127.0.0.1 is loopback (localhost resolves to it)" in msg
        assert client.refused == 2


async def test_dns_answer_pointing_at_private_addresses_is_refused_at_connect() -> None:
    for address, kind in [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("169.254.169.254", "metadata"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("fe80::1", "link-local"),
    ]:
        dns = FixedResolver(address)
        client = HttpClient(EgressPolicy(allow_hosts={"rebind.example"}), resolver=dns)
        msg = await refused(client, "http://rebind.example/")
        assert dns.lookups == ["rebind.example"]  # the check ran on the answer, at connect
        assert kind in msg, msg


async def test_redirect_to_private_address_is_refused() -> None:
    async with serve() as base:
        client = HttpClient(LOOPBACK)
        for target, kind in [
            ("http://10.0.0.1/secret", "private"),
            ("http://169.254.169.254/latest/meta-data/", "metadata"),
            ("http://[::ffff:10.0.0.1]/", "private"),
            ("http://0x0a000001/", "non-canonical"),
            ("file:///etc/passwd", "scheme"),
        ]:
            msg = await refused(client, f"{base}/redirect?to={target}")
            assert kind in msg, msg
        # The loopback policy allows loopback on any port, but a redirect to another host
        # than those listed is refused too.
        assert "allow-list" in await refused(client, f"{base}/redirect?to=http://example.com/")
        # A redirect within what is allowed is followed.
        resp = await client.get(f"{base}/redirect?to=/page")
        assert resp.status == 200 and resp.redirects == 1 and resp.url.endswith("/page")
        await client.aclose()


async def test_no_header_the_caller_set_follows_a_redirect_to_another_origin() -> None:
    """Credentials are dropped across origins: an ``X-Api-Key`` an http_tool was given went
    on to whichever host a redirect named (only Authorization, Cookie and
    Proxy-Authorization were dropped; found from the outside)."""
    sent = {"Authorization": "Bearer T0K", "X-Api-Key": "K3Y", "X-Custom-Token": "C0DE"}
    async with serve() as first, serve() as other:
        client = HttpClient(LOOPBACK)
        elsewhere = await client.get(f"{first}/redirect?to={other}/headers", headers=sent)
        assert elsewhere.redirects == 1
        got = elsewhere.json()
        assert not {"Authorization", "X-Api-Key", "X-Custom-Token"} & set(got), got
        same = await client.get(f"{first}/redirect?to=/headers", headers=sent)
        assert {k: same.json()[k] for k in sent} == sent  # the same origin keeps them
        await client.aclose()


async def test_redirect_loops_are_bounded() -> None:
    async with serve() as base:
        client = HttpClient(EgressPolicy.loopback(max_redirects=2))
        loop_url = f"{base}/redirect?to={base}/redirect%3Fto%3D/redirect%253Fto%253D/page"
        assert "more than 2 redirects" in await refused(client, loop_url)
        await client.aclose()


@pytest.mark.parametrize(
    ("url", "meaning"),
    [
        ("http://2130706433/", "127.0.0.1"),
        ("http://0177.0.0.1/", "127.0.0.1"),
        ("http://0x7f.0.0.1/", "127.0.0.1"),
        ("http://127.1/", "127.0.0.1"),
        ("http://017700000001/", "127.0.0.1"),
        ("http://0xa9fea9fe/", "169.254.169.254"),
    ],
)
async def test_numeric_ip_spellings_are_refused(url: str, meaning: str) -> None:
    msg = await refused(HttpClient(ANY_PORT_PUBLIC), url)
    assert "non-canonical" in msg and meaning in msg


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:7f00:1]/", "loopback"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://[64:ff9b::a00:1]/", "private"),
        ("http://[2002:7f00:1::]/", "loopback"),
        ("http://[fe80::1%25eth0]/", "link-local"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://[fc00::1]/", "private"),
        ("http://[::]/", "unspecified"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://100.64.0.1/", "reserved"),
        ("http://192.168.1.1./", "private"),
    ],
)
async def test_ipv6_and_other_non_public_forms_are_refused(url: str, kind: str) -> None:
    assert kind in await refused(HttpClient(ANY_PORT_PUBLIC), url)


async def test_a_host_that_looks_like_an_address_but_is_none_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiohttp takes any host with a colon (or of digits and dots only) for an IP literal
    and connects to it without asking the connector's resolver, where the policy checks
    resolved addresses. ``[a:b.rebind.example]`` is no address, so the URL check let it
    through as a name and nothing checked where the system's name resolution (here a
    hosts-file entry, simulated on the loop) sent it: a loopback server answered."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop):
        pytest.skip("the hosts file is simulated on asyncio's loop.getaddrinfo")
    real = loop.getaddrinfo

    async def hosts_file(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and ":" in host and parse_ip_or_none(host) is None:
            host = "::ffff:127.0.0.1"  # the entry: this name is loopback
        return await real(host, *args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", hosts_file)
    async with serve() as base:
        port = base.rsplit(":", 1)[1]
        dns = FixedResolver("127.0.0.1")  # the policy's resolver would refuse loopback
        client = HttpClient(ANY_PORT_PUBLIC, resolver=dns)
        for host in ("[a:b.rebind.example]", "[::ffff:127.1]", "[::127.1]", "1..2"):
            msg = await refused(client, f"http://{host}:{port}/page")
            assert "looks like an IP address but is none" in msg, msg
        await client.aclose()


def parse_ip_or_none(host: str) -> object:
    try:
        return parse_ip(host)
    except EgressDenied:
        return None


_HOSTISH = st.text(alphabet="0123456789abcdefx:.%[]", min_size=1, max_size=24)


@settings(max_examples=400, deadline=None)
@given(_HOSTISH)
def test_every_host_the_url_check_passes_is_checked_again_at_connect(host: str) -> None:
    """Property: a host :meth:`EgressPolicy.check_url` lets through is either an address it
    checked itself or a name aiohttp will hand to the policy's resolver."""
    try:
        url = URL(f"http://{host}/")
    except ValueError:
        return
    try:
        ANY_PORT_PUBLIC.check_url(url)
    except EgressDenied:
        return
    raw = url.raw_host or ""
    assert not is_ip_address(raw) or parse_ip(raw) is not None, raw


def _spellings(ip: ipaddress.IPv4Address) -> st.SearchStrategy[str]:
    """Ways to write ``ip`` that some resolver or URL parser reads as ``ip``."""
    o = ip.packed
    n = int(ip)
    forms = [
        ".".join(map(str, o)),
        ".".join(f"0{b:o}" for b in o),
        ".".join(f"0x{b:x}" for b in o),
        ".".join(f"{b:03d}" for b in o),
        str(n),
        hex(n),
        f"0{n:o}",
        f"{o[0]}.{n & 0xFFFFFF}",
        f"{o[0]}.{o[1]}.{n & 0xFFFF}",
        f"[::ffff:{ip}]",
        f"[::FFFF:{n >> 16:x}:{n & 0xFFFF:X}]",
        f"[0:0:0:0:0:ffff:{ip}]",
        f"[::{ip}]",
        f"[64:ff9b::{ip}]",
        f"[2002:{n >> 16:x}:{n & 0xFFFF:x}::1]",
    ]
    return st.sampled_from(forms).flatmap(
        lambda f: st.sampled_from([f, f + ".", f.upper()] if "[" not in f else [f])
    )


_FORBIDDEN_V4 = st.sampled_from(
    ["127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "0.0.0.0/8"]
).flatmap(
    lambda net: st.integers(0, ipaddress.ip_network(net).num_addresses - 1).map(
        lambda i: ipaddress.ip_network(net)[i]
    )
)


@settings(max_examples=300, deadline=None)
@given(_FORBIDDEN_V4.flatmap(_spellings))
def test_any_spelling_of_a_forbidden_address_is_refused(host: str) -> None:
    with pytest.raises(EgressDenied):
        ANY_PORT_PUBLIC.check_url(f"http://{host}/")


def test_address_classification() -> None:
    assert address_kind(parse_ip("8.8.8.8")) is None  # type: ignore[arg-type]
    assert address_kind(parse_ip("2001:4860:4860::8888")) is None  # type: ignore[arg-type]
    assert parse_ip("example.com") is None
    policy = EgressPolicy(allow_networks=("10.1.0.0/16",), allow_ports=None)
    policy.check_url("http://10.1.2.3/")  # listed: allowed
    policy.check_url("http://[::ffff:10.1.2.3]/")  # the same address in IPv6 form
    with pytest.raises(EgressDenied):
        policy.check_url("http://10.2.0.1/")
    with pytest.raises(EgressDenied, match="port 8080"):
        EgressPolicy().check_url("http://8.8.8.8:8080/")
    with pytest.raises(EgressDenied, match="port 6379"):
        EgressPolicy.loopback(deny_ports={6379}).check_url("http://127.0.0.1:6379/")
    trusting = EgressPolicy(allow_private=True, allow_ports=None)
    trusting.check_url("http://10.2.0.1/")
    trusting.check_url("http://127.0.0.1:8080/")
    with pytest.raises(EgressDenied, match="metadata"):
        trusting.check_url("http://169.254.169.254/")
    wild = EgressPolicy(allow_hosts={"*.example.com"})
    wild.check_url("https://api.example.com/")
    with pytest.raises(EgressDenied):
        wild.check_url("https://example.com.evil.net/")


async def test_oversize_responses_are_refused() -> None:
    async with serve() as base:
        client = HttpClient(EgressPolicy.loopback(max_response_bytes=10_000))
        assert (await client.get(f"{base}/big?n=10000")).body == b"x" * 10_000
        with pytest.raises(ResponseTooLarge, match="10001 bytes, over the limit"):
            await client.get(f"{base}/big?n=10001")
        with pytest.raises(ResponseTooLarge, match="passed the limit of 10000 bytes"):
            await client.get(f"{base}/big?n=50000&chunked=1")
        await client.aclose()


async def test_a_charset_that_is_no_text_encoding_reads_as_utf8() -> None:
    """The server picks the charset: one Python does not know, or a codec that is no text
    encoding, made the tool raise LookupError and lose a body it had read."""
    async with serve() as base:
        page = http_tool("page", base + "/charset?cs={cs}", policy=LOOPBACK)
        assert await page.fn(cs="utf-8") == "héllo"
        for cs in ("bogus", "rot13", "zlib", "base64"):
            assert await page.fn(cs=cs) == "héllo", cs
        assert await page.fn(cs="latin-1") == "hÃ©llo"  # a real one is still honoured


async def test_http_tool_from_a_url_template() -> None:
    async with serve() as base:
        weather = http_tool(
            "weather",
            base + "/data/{city}",
            description="Weather in a city.",
            params={"city": "The city's name."},
            query={"units": "metric or imperial"},
            policy=LOOPBACK,
        )
        assert weather.parameters["required"] == ["city"]
        assert set(weather.parameters["properties"]) == {"city", "units"}
        assert weather.parameters["properties"]["city"]["description"] == "The city's name."
        assert await weather.fn(city="São Paulo/x", units="metric") == {
            "city": "São Paulo/x",
            "units": "metric",
        }


async def test_refusals_reach_the_model_as_observations() -> None:
    """Through the engine: each refused fetch is a tool message the model reads."""
    async with serve() as base:
        fetch = http_tool("fetch", "{url}", policy=ANY_PORT_PUBLIC, params={"url": "A URL."})
        # (a template that is a whole URL: the argument is percent-encoded, so no
        # scheme/host can be smuggled in; use a fixed host in real tools)
        page = http_tool(
            "page", base + "/redirect?to={to}", policy=EgressPolicy.loopback(deny_ports={6379})
        )
        seen: list[Message] = []

        def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
            if request.step == 0:
                return tool_call_reply(
                    ("page", '{"to": "http://10.0.0.1/"}'),
                    ("page", '{"to": "http://127.0.0.1:6379/"}'),
                    ("page", '{"to": "/big?n=5000000"}'),
                )
            seen.extend(m for m in messages if m.role == "tool")
            return "done"

        from podium import FunctionModel

        agent = Agent("egress", FunctionModel(reply), tools=[fetch, page])
        async with Engine() as engine:
            record = await engine.run(agent, "go")
        assert record.status == "completed"
        contents = [m.content for m in seen]
        assert len(contents) == 3
        assert "EgressDenied" in contents[0] and "10.0.0.1 is private" in contents[0]
        assert "EgressDenied" in contents[1] and "port 6379" in contents[1]
        assert "ResponseTooLarge" in contents[2]


async def test_research_fetch_refuses_redirects_to_private_and_service_ports() -> None:
    from podium.examples import research
    from podium.tools import ToolContext, ToolExecutor

    executor = ToolExecutor(max_threads=1)
    try:
        async with serve() as base, serve() as other:
            # Only the first server's port is opened: another loopback service is not.
            fetch = research.make_fetch(loopback_ports=[int(base.rsplit(":", 1)[1])])
            outcomes = [
                await executor.execute(
                    fetch,
                    fetch.decode_arguments(f'{{"url": "{base}/redirect?to={target}"}}'),
                    ToolContext("r", 0, i, f"c{i}"),
                )
                for i, target in enumerate(
                    ["http://10.0.0.1/secret", "http://127.0.0.1:6379/", "/page",
                     f"{other}/page"]
                )
            ]
    finally:
        executor.close()
    private, redis, ok, elsewhere = outcomes
    assert not elsewhere.ok and f"port {other.rsplit(':', 1)[1]}" in elsewhere.content
    assert (
        not private.ok and "refusing to fetch" in private.content and "private" in private.content
    )
    assert not redis.ok and "port 6379" in redis.content
    assert ok.ok and '"title":"ok"' in ok.content


async def test_research_fetch_opens_loopback_on_the_listed_ports_only() -> None:
    """The sample pages' port is the one loopback port open: not 80 or 443 (where a
    machine's own admin pages listen), named as a literal, as a name that resolves to
    loopback, or as a redirect's target."""
    from podium.examples import research
    from podium.tools import ToolContext, ToolExecutor

    executor = ToolExecutor(max_threads=1)
    try:
        async with serve() as base:
            fetch = research.make_fetch(loopback_ports=[int(base.rsplit(":", 1)[1])])
            urls = ["http://127.0.0.1:80/", "http://localhost:443/", "http://[::1]:80/",
                    "http://127.0.0.2/", f"{base}/redirect?to=http://localhost:80/admin",
                    f"{base}/page"]  # fmt: skip
            outcomes = [
                await executor.execute(
                    fetch, fetch.decode_arguments(f'{{"url": "{url}"}}'),
                    ToolContext("r", 0, i, f"c{i}"),
                )
                for i, url in enumerate(urls)
            ]
    finally:
        executor.close()
    *refused, ok = outcomes
    for url, outcome in zip(urls, refused, strict=False):
        port = "443" if ":443" in url else "80"
        assert not outcome.ok, url
        assert "EgressDenied" in outcome.content or "refusing to fetch" in outcome.content, (
            url, outcome.content)  # fmt: skip
        assert f"port {port}" in outcome.content, (url, outcome.content)
    assert ok.ok and '"title":"ok"' in ok.content


async def test_a_timeout_message_names_the_timeout_that_fired() -> None:
    """The egress policy's request timeout and the tool's own are told apart: the model
    (and the operator) read which one fired, and after how long."""
    from podium import tool
    from podium.tools import ToolContext, ToolExecutor

    done = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # accepts, reads, answers nothing until the test ends
        await done.wait()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fetch = http_tool(
        "fetch", f"http://127.0.0.1:{port}/x", policy=EgressPolicy.loopback(timeout_s=0.3),
        timeout=5.0,
    )

    @tool(timeout=0.3)
    async def sleepy() -> str:
        """Sleep past its own timeout."""
        await asyncio.sleep(30)
        return "never"

    executor = ToolExecutor(max_threads=1)
    try:
        call = ToolContext("r", 0, 0, "c0")
        egress = await executor.execute(fetch, fetch.decode_arguments("{}"), call)
        call = ToolContext("r", 0, 1, "c1")
        own = await executor.execute(sleepy, sleepy.decode_arguments("{}"), call)
    finally:
        executor.close()
        done.set()
        server.close()
        await server.wait_closed()
    assert egress.error == "timeout"
    assert "timed out after 0.3s (the egress policy's timeout_s)" in egress.content
    assert "5.0s" not in egress.content
    assert own.error == "timeout" and "tool 'sleepy' timed out after 0.3s" in own.content


def test_private_ports_bound_what_an_allowed_private_address_is_reached_on() -> None:
    from podium.security.tenant_egress import decode_egress, encode_egress

    policy = EgressPolicy.loopback(private_ports=frozenset({8080}), hosts=("example.com",))
    policy.check_url("http://127.0.0.1:8080/")
    policy.check_address(ipaddress.ip_address("127.0.0.1"), "localhost", 8080)
    with pytest.raises(EgressDenied, match=r"port 80 of loopback address 127\.0\.0\.1"):
        policy.check_url("http://127.0.0.1:80/")
    with pytest.raises(EgressDenied, match="localhost resolves to it"):
        policy.check_address(ipaddress.ip_address("127.0.0.1"), "localhost", 443)
    policy.check_url("http://example.com:443/")  # (a public address: allow_ports decides)
    # carried in run metadata without losing it (a tenant's scope must not widen)
    assert decode_egress(encode_egress(policy)) == policy
    narrowed = EgressPolicy(allow_private=True, allow_ports=None).narrowed(policy)
    with pytest.raises(EgressDenied, match="port 9000"):
        narrowed.check_address(ipaddress.ip_address("::1"), "", 9000)
