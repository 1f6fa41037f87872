"""``podium.toml`` loading, ``PODIUM_*`` overrides, keys and the loop-lag monitor."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from podium.config import load_config
from podium.errors import ConfigError
from podium.gateway.auth import KeyRing, hash_key
from podium.gateway.errors import ApiError
from podium.observe.looplag import LoopLagMonitor

TOML = """
[server]
port = 9000
store = "memory"

[[agents]]
name = "support"
path = "gateway_agents:react"
pool = "cpu"

[pools.cpu]
rate = 10.0
burst = 20

[limits]
tenant_rate = 5.0

[[keys]]
hash = "{hash}"
tenant = "acme"
"""


def test_file_then_environment(tmp_path: Path) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(TOML.format(hash=hash_key("secret")))
    env = {
        "PODIUM_SERVER__PORT": "9100",
        "PODIUM_POOLS__CPU__WORKERS": "3",
        "PODIUM_LIMITS__ADAPTIVE__CPU_THRESHOLD": "0.5",
        "HOME": "/x",
    }
    config = load_config(path, env)
    assert config.server.port == 9100 and config.server.store == "memory"
    assert config.pools["cpu"].rate == 10.0 and config.pools["cpu"].workers == 3
    assert config.limits.tenant_rate == 5.0 and config.limits.adaptive.cpu_threshold == 0.5
    assert config.agents[0].pool == "cpu" and config.pool_names() == ["cpu"]
    assert KeyRing(config.keys).authenticate({"authorization": "Bearer secret"}).name == "acme"


def test_compact_agent_and_key_lists_from_the_environment() -> None:
    env = {
        "PODIUM_AGENTS": "a=pkg.mod:a, b=pkg.mod:b",
        "PODIUM_KEYS": f"{hash_key('k1')}=t1,plain=t2",
    }
    config = load_config(None, env)
    assert [(a.name, a.path) for a in config.agents] == [("a", "pkg.mod:a"), ("b", "pkg.mod:b")]
    ring = KeyRing(config.keys)
    assert ring.authenticate({"x-api-key": "k1"}).name == "t1"
    assert ring.authenticate({"authorization": "Bearer plain"}).name == "t2"
    with pytest.raises(ApiError):
        ring.authenticate({"authorization": "Bearer other"})


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ("[server]\nprot = 1\n", {}, "prot"),
        ("[server]\nport = 'high'\n", {}, "port"),
        ("", {"PODIUM_SERVER__PORT": "99999"}, "port"),
        ("[[keys]]\ntenant = 'x'\n", {}, "exactly one of hash or key"),
        ("[[keys]]\ntenant = 'x'\nhash = 'md5:1'\n", {}, "sha256"),
        # configuration.md's placeholders, copied as they are: no key could ever match them
        ("[[keys]]\ntenant = 'x'\nhash = 'sha256:...'\n", {}, "64 hex digits"),
        ("", {"PODIUM_KEYS": "sha256:<hex>=acme"}, "64 hex digits"),
        ("[server\n", {}, "podium.toml"),
        # A typo names the key, where it is, and what is allowed there.
        ("[pools.cpu]\nwokers = 2\n", {}, r"pools\.cpu\.wokers: unknown key .*'workers'\?"),
        ("wokers = 2\n", {}, "wokers: unknown key"),
        # TOML's types are kept: nothing is converted behind the user's back.
        ("[server]\nport = '8000'\n", {}, r"server\.port: Expected `int`, got `str`"),
        ("[pools.cpu]\nworkers = 2.0\n", {}, r"pools\.cpu\.workers: Expected `int`"),
        ("[server]\ndocs = 1\n", {}, r"server\.docs: Expected `bool`"),
        ("[pools.cpu]\nconcurrency = 0\n", {}, r"pools\.cpu\.concurrency: Expected `int` >= 1"),
        ("[pools.cpu]\nconcurrency = -3\n", {}, "concurrency"),
        ("[pools.cpu]\nmax_queue = 99999999999999999999\n", {}, "out of range"),
        ("[pools.cpu]\nrate = inf\n", {}, r"pools\.cpu\.rate: must be a finite number"),
        ("[server]\nttl_s = nan\n", {}, "finite"),
        # Empty strings are mistakes, not defaults (an empty host bound every interface).
        ("[server]\nhost = ''\n", {}, r"server\.host: must not be empty"),
        ("[server]\nprefix = ''\n", {}, "server.prefix: must not be empty"),
        ("[server]\nredis = ''\n", {}, "server.redis: must not be empty"),
        ("[[agents]]\nname = ''\npath = 'react'\n", {}, r"agents\[0\]\.name"),
        ("[[keys]]\ntenant = 't'\nkey = ''\n", {}, r"keys\[0\]\.key"),
        ("[pools.\"\"]\nworkers = 1\n", {}, r'\[pools\.""\]: a pool.s name must not be empty'),
        # Forms checked as the file is read, not when a server first opens them.
        ("[server]\nstore = 'mysql://db'\n", {}, "server.store: use 'sqlite:PATH', 'memory' or a"),
        ("[server]\nstore = 'postgres://db'\n", {}, "server.store: .*names no database"),
        ("[server]\nstore = 'sqlite:'\n", {}, "server.store"),
        ("[server]\nredis = 'http://h:6379/0'\n", {}, "server.redis: .*redis://"),
        ("[server]\nredis = 'rediss://h:6379/0'\n", {}, "server.redis: .*TLS"),
        ("[[models]]\nname = 'm'\nmodel = 'x'\nbase_url = 'gpu:8000/v1'\n", {}, "base_url"),
        ("[[keys]]\ntenant = 'x'\nhash = 'sha256:abc'\n", {}, "64 hex"),
        ("[[keys]]\ntenant = 'a'\nkey = 'k'\n[[keys]]\ntenant = 'b'\nkey = 'k'\n", {},
         "same key is given twice"),
        ("[limits.adaptive]\nmin_rate = 50\nmax_rate = 10\n", {}, "min_rate .* above max_rate"),
        ("[pools.cpu]\nmax_queue = 0\n", {}, r"pools\.cpu\.max_queue: Expected `int` >= 1"),
        # Whole seconds, at least 1, as the doc says: 0.5 was silently rounded up to 1.
        ("[server]\nkeep_alive_s = 0.5\n", {}, r"server\.keep_alive_s: Expected `float` >= 1"),
        ("[server]\nkeep_alive_s = 0\n", {}, r"server\.keep_alive_s: Expected `float` >= 1"),
        ("[server]\nkeep_alive_s = 2.5\n", {}, r"server\.keep_alive_s: whole seconds, at least 1"),
        ("", {"PODIUM_SERVER__KEEP_ALIVE_S": "1.5"}, "server.keep_alive_s: whole seconds"),
        # A stuck reader is cut after this: 0 would cut every reader whose socket fills.
        ("[server]\nwrite_timeout_s = 0\n", {}, r"server\.write_timeout_s: Expected `float` > 0"),
        ("", {"PODIUM_SERVER__WRITE_TIMEOUT_S": "-1"}, r"server\.write_timeout_s"),
        # An imported agent has its own limits: one set here would be ignored, so it is refused.
        ("[[agents]]\npath = 'react'\nmax_steps = 1\n", {}, "which sets its own max_steps"),
        ("[[agents]]\npath = 'react'\ndeadline_s = 5\ninstructions = 'x'\n", {},
         "sets its own instructions, deadline_s: set them in Python"),
        ("[[agents]]\npath = 'react'\ntools = ['m:t']\n", {}, "sets its own tools"),
        # The environment: each variable named, and read by its field's type.
        ("", {"PODIUM_SERVER__PORT": "abc"}, "PODIUM_SERVER__PORT: expected a whole number"),
        ("", {"PODIUM_SERVER__PORT": "80.5"}, "PODIUM_SERVER__PORT: expected a whole number"),
        ("", {"PODIUM_SERVER__PORT": ""}, "PODIUM_SERVER__PORT is empty"),
        ("", {"PODIUM_SERVER__PORT": "70000"}, r"PODIUM_SERVER__PORT \(server\.port\)"),
        ("", {"PODIUM_POOLS__CPU__WORKERS": "-1"}, r"PODIUM_POOLS__CPU__WORKERS \(pools\.cpu"),
        ("", {"PODIUM_SERVER__DOCS": "yes"}, "PODIUM_SERVER__DOCS: expected true or false"),
        ("", {"PODIUM_SERVR__PORT": "1"}, "PODIUM_SERVR__PORT: no section 'servr'"),
        ("", {"PODIUM_SERVER__PROT": "1"}, "PODIUM_SERVER__PROT: no setting 'prot'"),
        ("", {"PODIUM_SERVER__PORT__X": "1"}, "PODIUM_SERVER__PORT__X"),
        ("", {"PODIUM_MODELS__NAME": "x"}, "PODIUM_MODELS__NAME: no section 'models'"),
        ("", {"PODIUM_SERVER": "x"}, "did you mean PODIUM_SERVER__<FIELD>"),
        ("", {"PODIUM_AGENT": "a=react"}, "did you mean PODIUM_AGENTS"),
        ("", {"PODIUM_LIMITS__ADAPTIVE": "1"}, "names a section"),
        ("", {"PODIUM_LIMITS__TENANT_RATE": "inf"}, "PODIUM_LIMITS__TENANT_RATE.*finite"),
        ("", {"PODIUM_AGENTS": " , "}, "PODIUM_AGENTS is empty"),
        ("", {"PODIUM_SERVER__REDIS": "redis//h"}, "server.redis"),
    ],
)
def test_bad_settings_name_what_is_wrong(
    tmp_path: Path, text: str, env: dict[str, str], needle: str
) -> None:
    path = tmp_path / "podium.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_config(path, env)


@pytest.mark.anyio
async def test_loop_lag_monitor_sees_a_blocked_loop() -> None:
    monitor = LoopLagMonitor(0.005)
    monitor.start()
    await asyncio.sleep(0.03)
    time.sleep(0.1)  # noqa: ASYNC251 - block the loop on purpose
    await asyncio.sleep(0.02)
    await monitor.stop()
    stats = monitor.statistics()
    assert stats.samples >= 3 and stats.max_ms >= 80 and monitor.p99_ms() >= 80


def test_podium_keys_marks_operator_keys_with_admin() -> None:
    config = load_config(None, {"PODIUM_KEYS": "pk_a=acme,pk_ops=ops:admin"})
    assert [(k.key, k.tenant, k.admin) for k in config.keys] == [
        ("pk_a", "acme", False), ("pk_ops", "ops", True)
    ]
    with pytest.raises(ConfigError, match="unknown role 'root'"):
        load_config(None, {"PODIUM_KEYS": "pk_x=acme:root"})


def test_an_agent_in_the_file_and_on_the_command_line_is_served_once(tmp_path: Path) -> None:
    from podium.factory import worker_agents

    config_file = tmp_path / "podium.toml"
    config_file.write_text('[[agents]]\npath = "podium.examples.react:agent"\n')
    config = load_config(config_file, {})
    agents = worker_agents(config, ["podium.examples.react:agent"], "default")
    assert list(agents) == ["react"]
    with pytest.raises(ConfigError, match="two agents are named"):  # a real clash still is one
        worker_agents(config, ["react=podium.examples.research:agent"], "default")


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b"[server]\nhost = '\xff'\n"), "is not UTF-8 text"),
        (lambda p: None, "not found"),
    ],
    ids=["directory", "not-utf8", "missing"],
)
def test_a_file_that_cannot_be_read_is_one_error(make: Any, needle: str, tmp_path: Path) -> None:
    path = tmp_path / "podium.toml"
    make(path)
    with pytest.raises(ConfigError, match=needle):
        load_config(path, {})


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "podium.toml"
    path.write_text("")
    path.chmod(0)
    with pytest.raises(ConfigError, match="Permission denied"):
        load_config(path, {})


def test_environment_values_take_their_fields_types(tmp_path: Path) -> None:
    """A string setting keeps the variable's text as it is; numbers and booleans are read."""
    path = tmp_path / "podium.toml"
    path.write_text("[server]\nprefix = 'file'\nport = 1\n")
    config = load_config(path, {
        "PODIUM_SERVER__PREFIX": "123", "PODIUM_SERVER__HOST": "true",
        "podium_server__port": "8080", "PODIUM_SERVER__DOCS": "FALSE",
        "PODIUM_LIMITS__TENANT_RATE": "2", "PODIUM_POOLS__GPU__RATE": "1.5",
        "PODIUM_GC": "default",  # read elsewhere (podium.gctune), left alone here
    })
    server = config.server
    assert (server.prefix, server.host, server.port, server.docs) == ("123", "true", 8080, False)
    assert config.limits.tenant_rate == 2.0 and config.pools["gpu"].rate == 1.5


def test_a_config_without_agents_gives_the_gateway_and_its_workers_the_same_agents() -> None:
    # operations.md: every gateway and worker reads one podium.toml and so serves the same
    # agents; with no [[agents]] the gateway serves the built-in examples, so must a worker.
    from podium.factory import worker_agents
    from podium.gateway.runtime import load_agents

    config = load_config(None, {})
    assert list(worker_agents(config, [], "default")) == [a.name for a in load_agents(config)]
    with pytest.raises(ConfigError, match="no agents to serve in pool 'batch'"):
        worker_agents(config, [], "batch")  # the built-ins are the default pool's only


def test_an_embedded_pool_without_workers_is_said_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from podium.gateway.runtime import build_gateway

    env = {"PODIUM_POOLS__DEFAULT__WORKERS": "0", "PODIUM_AGENTS": "react=react"}
    config = load_config(None, env)
    with caplog.at_level("WARNING", logger="podium.gateway"):
        gateway = build_gateway(config, store=None)
    assert gateway.workers == []
    assert "pools.default.workers = 0" in caplog.text and "'react'" in caplog.text
    assert "stay queued" in caplog.text


def test_a_declared_agent_gets_a_python_agents_default_deadline(tmp_path: Path) -> None:
    from podium.agent import DEFAULT_DEADLINE_S
    from podium.gateway.runtime import load_agents

    declared = "[[models]]\nname = 'm'\nmodel = 'm'\n\n[[agents]]\nname = '{name}'\nmodel = 'm'\n"
    path = tmp_path / "podium.toml"
    path.write_text(
        declared.format(name="plain")
        + "\n[[agents]]\nname = 'open'\nmodel = 'm'\ndeadline_s = 0\n"
        + "\n[[agents]]\nname = 'quick'\nmodel = 'm'\ndeadline_s = 5\n"
    )
    agents = {s.name: s.agent for s in load_agents(load_config(path, {}))}
    assert agents["plain"].deadline_s == DEFAULT_DEADLINE_S == 600.0
    assert agents["open"].deadline_s is None
    assert agents["quick"].deadline_s == 5.0
