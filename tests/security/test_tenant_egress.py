"""Per-tenant egress: a tenant's policy narrows (never widens) where its runs' HTTP tools
may connect, on the URL and on the resolved address, in the engine and through the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from _web import serve

from podium import Agent, FunctionModel, ModelRequest, ModelResponse, tool_call_reply
from podium.config import load_config
from podium.engine.driver import Engine
from podium.errors import ConfigError
from podium.gateway.auth import KeyRing
from podium.gateway.runtime import build_gateway
from podium.gateway.service import ServedAgent
from podium.messages import Message
from podium.security import EgressDenied, EgressPolicy
from podium.security.tenant_egress import (
    EGRESS_KEY,
    current_egress,
    decode_egress,
    encode_egress,
    run_egress,
)
from podium.store.memory import MemoryRunStore
from podium.tools.http import HttpClient, http_tool

pytestmark = pytest.mark.anyio

LOOPBACK = EgressPolicy.loopback()
ACME = EgressPolicy(
    allow_hosts={"api.acme.example"}, allow_ports=None, allow_private=True, label="tenant 'acme'"
)


def test_narrowed_needs_both_policies_and_takes_the_smaller_caps() -> None:
    public = EgressPolicy(allow_ports=None, max_response_bytes=10_000, timeout_s=3)
    tenant = EgressPolicy(allow_private=True, allow_ports={443}, timeout_s=5, label="tenant 't'")
    both = public.narrowed(tenant)
    assert both.check_url("https://example.com/x")
    with pytest.raises(EgressDenied, match=r"port 8443 .*\(tenant 't'\)"):
        both.check_url("https://example.com:8443/x")  # the tool's policy would allow it
    with pytest.raises(EgressDenied, match=r"10\.0\.0\.1 is private"):
        both.check_url("https://10.0.0.1/")  # the tenant's would allow it: no widening
    assert (both.timeout_s, both.max_response_bytes) == (3, 10_000)
    assert both.narrowed(tenant) is both and LOOPBACK.narrowed(LOOPBACK) is LOOPBACK


def test_the_policy_travels_as_json_and_a_mangled_one_allows_nothing() -> None:
    assert decode_egress(encode_egress(ACME)) == ACME
    both = LOOPBACK.narrowed(ACME)
    assert decode_egress(encode_egress(both)) == both
    nothing = decode_egress('{"allow_hosts": 7}')
    with pytest.raises(EgressDenied, match="scheme 'https' is not allowed"):
        nothing.check_url("https://example.com/")


async def test_a_request_made_inside_a_runs_scope_passes_the_tenants_policy_too() -> None:
    async with serve() as base:
        client = HttpClient(LOOPBACK)
        assert (await client.get(f"{base}/page")).status == 200

        async def fetch() -> str:
            assert current_egress() is ACME
            return (await client.get(f"{base}/page")).text

        with pytest.raises(EgressDenied, match=r"not in the egress allow-list \(tenant 'acme'\)"):
            await run_egress(ACME, fetch())
        assert current_egress() is None  # the scope ended with the run
        # Checked on the resolved address too: a name the URL check cannot judge.
        port = base.rsplit(":", 1)[1]
        no_private = EgressPolicy(allow_ports=None, label="tenant 'strict'")
        with pytest.raises(EgressDenied, match=r"localhost resolves to it.*\(tenant 'strict'\)"):
            await run_egress(no_private, client.get(f"http://localhost:{port}/page"))
        await client.aclose()


def page_agent(base: str, seen: list[Message]) -> Agent:
    page = http_tool("page", base + "/page", policy=LOOPBACK, description="Read the page.")

    def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
        if request.step == 0:
            return tool_call_reply(("page", "{}"))
        seen.extend(m for m in messages if m.role == "tool")
        return "done"

    return Agent("reader", FunctionModel(reply), tools=[page])


async def test_the_engine_narrows_a_runs_tools_by_its_tenants_policy() -> None:
    async with serve() as base:
        seen: list[Message] = []
        agent = page_agent(base, seen)
        async with Engine() as engine:
            limited = await engine.run(agent, "go", tenant="acme", egress=ACME)
            assert limited.status == "completed" and EGRESS_KEY in limited.metadata
            assert "EgressDenied" in seen[0].content and "tenant 'acme'" in seen[0].content
            seen.clear()
            free = await engine.run(agent, "go")  # no tenant policy: the tool's own
            assert "hello" in seen[0].content and EGRESS_KEY not in free.metadata


async def test_the_gateway_stamps_each_tenants_policy_from_podium_toml(tmp_path: Path) -> None:
    async with serve() as base:
        toml = tmp_path / "podium.toml"
        toml.write_text(
            '[[keys]]\ntenant = "acme"\nkey = "pk_acme"\n'
            '[keys.egress]\nallow_hosts = ["api.acme.example"]\n'
            '[[keys]]\ntenant = "open"\nkey = "pk_open"\n'
        )
        config = load_config(toml, {})
        keys = KeyRing(config.keys)
        seen: list[Message] = []
        agent = page_agent(base, seen)
        gw = build_gateway(config, [ServedAgent(agent)], keys, store=MemoryRunStore())
        await gw.start()
        try:
            acme = keys.authenticate({"authorization": "Bearer pk_acme"})
            opened = keys.authenticate({"authorization": "Bearer pk_open"})
            assert acme.egress is not None and acme.egress.label == "tenant 'acme'"
            # What a client sends under the key is dropped: its tenant's policy applies.
            wide = encode_egress(EgressPolicy(allow_private=True, allow_ports=None))
            record, _ = await gw.submit(acme, "reader", "go", {EGRESS_KEY: wide})
            done = await gw.wait(record.run_id, 30)
            assert done.status == "completed"
            assert decode_egress(done.metadata[EGRESS_KEY]) == acme.egress
            assert "not in the egress allow-list (tenant 'acme')" in seen[0].content
            seen.clear()
            record, _ = await gw.submit(opened, "reader", "go", {EGRESS_KEY: "garbage"})
            done = await gw.wait(record.run_id, 30)
            assert EGRESS_KEY not in done.metadata and "hello" in seen[0].content
        finally:
            await gw.stop()


def test_keyring_add_takes_a_policy_and_mistakes_in_the_file_are_config_errors(
    tmp_path: Path,
) -> None:
    keys = KeyRing([])
    keys.add("pk_x", "x", egress=EgressPolicy(allow_hosts={"a.example"}), tools=["lookup"])
    tenant = keys.authenticate({"x-api-key": "pk_x"})
    assert tenant.egress is not None and tenant.egress.label == "tenant 'x'"
    assert tenant.tools == frozenset({"lookup"})
    toml = tmp_path / "podium.toml"
    for body, message in [
        ("allow_networks = ['10.0.0.0/33']", "tenant 'acme': egress"),
        ("allow_hostz = ['a']", "egress.allow_hostz: unknown key"),
        ("allow_ports = [0]", "allow_ports"),
        ("private_ports = [70000]", "private_ports"),
        ("private_ports = []", "private_ports is empty"),
        ("allow_private = false\nprivate_ports = [8080]", "none is reachable"),
        ("allow_ports = [443]\nprivate_ports = [8080]", r"private_ports \[8080\] are refused"),
        ("deny_ports = [8080]\nprivate_ports = [8080]", r"private_ports \[8080\] are refused"),
    ]:
        toml.write_text(f'[[keys]]\ntenant = "acme"\nkey = "k"\n[keys.egress]\n{body}\n')
        with pytest.raises(ConfigError, match=message) as caught:
            load_config(toml, {})
        assert "\n" not in str(caught.value), body  # one line


async def test_a_tenants_private_ports_open_one_loopback_port_and_no_other(
    tmp_path: Path,
) -> None:
    """``private_ports`` in podium.toml: the tenant's tool reaches the loopback service on
    the port it opens, not one on another loopback port; another tenant reaches neither."""
    async with serve() as opened, serve() as other_port:
        port = opened.rsplit(":", 1)[1]
        toml = tmp_path / "podium.toml"
        toml.write_text(
            '[[keys]]\ntenant = "local"\nkey = "pk_local"\n[keys.egress]\n'
            f'allow_private = false\nallow_networks = ["127.0.0.1/32"]\nprivate_ports = [{port}]\n'
            '[[keys]]\ntenant = "other"\nkey = "pk_other"\n[keys.egress]\n'
            "allow_private = false\n"
        )
        config = load_config(toml, {})
        keys = KeyRing(config.keys)
        tools = [
            http_tool("opened", f"{opened}/page", policy=LOOPBACK, description="Read it."),
            http_tool("closed", f"{other_port}/page", policy=LOOPBACK, description="Read it."),
        ]
        seen: dict[str, dict[str, str]] = {}

        def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
            if request.step == 0:
                return tool_call_reply(("opened", "{}"), ("closed", "{}"))
            seen[request.run_id] = {m.name or "": m.content for m in messages if m.role == "tool"}
            return "done"

        agent = Agent("reader", FunctionModel(reply), tools=tools)
        gw = build_gateway(config, [ServedAgent(agent)], keys, store=MemoryRunStore())
        await gw.start()
        try:
            results = {}
            for key in ("pk_local", "pk_other"):
                tenant = keys.authenticate({"authorization": f"Bearer {key}"})
                record, _ = await gw.submit(tenant, "reader", "go", {})
                assert (await gw.wait(record.run_id, 30)).status == "completed"
                results[key] = seen[record.run_id]
        finally:
            await gw.stop()
        local, other = results["pk_local"], results["pk_other"]
        assert "hello" in local["opened"], local
        other_no = other_port.rsplit(":", 1)[1]
        assert f"port {other_no} of loopback address 127.0.0.1" in local["closed"], local
        assert f"(open there: {port})" in local["closed"] and "tenant 'local'" in local["closed"]
        for content in other.values():
            assert "127.0.0.1 is loopback" in content and "tenant 'other'" in content, other


async def test_concurrent_runs_of_two_tenants_each_get_their_own_policy() -> None:
    """Two tenants' runs in flight at once, on one engine and one pooled client: each
    request passes its own run's tenant policy, never the other's (the pooled connection
    and DNS answers of the tenant that may reach loopback serve only that tenant)."""
    from podium import tool

    async with serve() as base:
        client = HttpClient(LOOPBACK)
        both_in = asyncio.Barrier(2)

        @tool
        async def page() -> str:
            """Read the page."""
            await both_in.wait()  # both runs are inside their tools now
            return (await client.get(f"{base}/page")).text

        seen: dict[str, str] = {}

        def reply(messages: Sequence[Message], request: ModelRequest) -> ModelResponse | str:
            if request.step == 0:
                return tool_call_reply(("page", "{}"))
            seen[request.run_id] = next(m.content for m in messages if m.role == "tool")
            return "done"

        agent = Agent("reader", FunctionModel(reply), tools=[page])
        strict = EgressPolicy(allow_ports=None, label="tenant 'strict'")
        open_ = EgressPolicy.loopback(label="tenant 'open'")
        async with Engine() as engine:
            for _ in range(2):  # the second time over the pooled keep-alive connection
                a, b = await asyncio.gather(
                    engine.run(agent, "go", tenant="open", egress=open_),
                    engine.run(agent, "go", tenant="strict", egress=strict),
                )
                assert "hello" in seen[a.run_id], seen[a.run_id]
                assert "EgressDenied" in seen[b.run_id] and "tenant 'strict'" in seen[b.run_id]
        await client.aclose()
