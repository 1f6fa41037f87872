"""docs/configuration.md against the code, both ways: every ``podium.toml`` key the
loader accepts and every option ``podium CMD --help`` shows is in the doc with its
default, and nothing the doc names is missing from the code. The lists come from the
config structs and the argparse parsers, so a new key or option fails here until it is
documented."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from podium import config as cfg
from podium.cli.main import build_parser
from podium.models.resilience import Timeouts

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "configuration.md").read_text()

#: The doc's heading of each table -> the struct whose fields it lists.
STRUCTS: dict[str, type[msgspec.Struct]] = {
    "`[server]`": cfg.ServerConfig,
    "`[[models]]`": cfg.ModelConfig,
    "`[[agents]]`": cfg.AgentConfig,
    "`[agents.screening]`": cfg.ScreeningConfig,
    "`[[mcp_servers]]`": cfg.MCPServerConfig,
    "`[pools.NAME]`": cfg.PoolConfig,
    "`[limits]` and `[limits.adaptive]`": cfg.LimitsConfig,
    "`[[keys]]`": cfg.KeyConfig,
    "`[keys.egress]`": cfg.EgressConfig,
}
#: Defaults the doc states as what happens when a key is left unset (None in the struct).
EFFECTIVE: dict[tuple[str, str], Any] = {("`[[models]]`", "timeout_s"): Timeouts().total_s}
_MISSING = object()


def tables() -> dict[str, list[list[str]]]:
    """Each heading's table rows (header and separator rows left out), cells stripped."""
    found: dict[str, list[list[str]]] = {}
    heading = ""
    for line in DOC.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if cells[0] in ("key", "option", "variable"):
                continue
            found.setdefault(heading, []).append(cells)
    return found


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def literals(cell: str, n: int) -> list[Any] | None:
    """The defaults a cell states as ``n`` literals (```8000```, ```0`, `0```, ```30` (7 d)```),
    None where it says it in words. ``none`` is None; ``required``, no default."""
    if cell.startswith("none"):
        return [None] * n
    if cell == "required":
        return [_MISSING] * n
    tokens = ticked(cell)
    plain = re.fullmatch(r"`[^`]*`(, `[^`]*`)*", cell) and len(tokens) == n
    first = n == 1 and re.fullmatch(r"`[^`]*`( \(.*\))?", cell)
    if not (plain or first):
        return None
    values = []
    for token in tokens[:n]:
        try:
            values.append(tomllib.loads(f"v = {token}")["v"])
        except tomllib.TOMLDecodeError:
            values.append(token)  # a bare word: a CLI default such as memory or uvloop
    return values


def struct_keys(struct: type[msgspec.Struct], documented: set[str]) -> dict[str, Any]:
    """The struct's keys with their defaults; a nested struct's fields are ``outer.inner``
    where the doc lists them so (``adaptive.enabled``), else the outer key alone."""
    keys: dict[str, Any] = {}
    for f in msgspec.structs.fields(struct):
        default = (
            f.default if f.default is not msgspec.NODEFAULT
            else f.default_factory() if f.default_factory is not msgspec.NODEFAULT
            else _MISSING
        )
        inner = getattr(default, "__struct_fields__", None)
        if inner and any(d.startswith(f"{f.name}.") for d in documented):
            for sub, value in struct_keys(type(default), set()).items():
                keys[f"{f.name}.{sub}"] = value
        else:
            keys[f.name] = default
    return keys


@pytest.mark.parametrize("heading", list(STRUCTS))
def test_every_key_is_documented_with_its_default(heading: str) -> None:
    rows = tables()[heading]
    documented = {name for row in rows for name in ticked(row[0])}
    keys = struct_keys(STRUCTS[heading], documented)
    assert documented == set(keys), (
        f"{heading}: undocumented {sorted(set(keys) - documented)}, "
        f"not in the code {sorted(documented - set(keys))}"
    )
    if len(rows[0]) < 3:  # [[keys]]: no default column
        return
    for row in rows:
        names = ticked(row[0])
        stated = literals(row[1], len(names))
        for name, value in zip(names, stated or [None] * len(names), strict=True):
            actual = EFFECTIVE.get((heading, name), keys[name])
            if stated is None:  # said in words: the code leaves it unset, for a later choice
                assert actual in (None, "", [], {}), f"{heading} {name}: {row[1]!r} vs {actual!r}"
            else:
                assert value == actual, f"{heading} {name}: doc {value!r}, code {actual!r}"


def test_routing_rule_keys_are_documented() -> None:
    [routing] = [row for row in tables()["`[[models]]`"] if ticked(row[0]) == ["routing"]]
    listed = re.search(r"\{([^}]*)\}", routing[2])
    assert listed is not None
    assert {k.strip() for k in listed.group(1).split(",")} == {
        f.name for f in msgspec.structs.fields(cfg.RouteConfig)
    }


def commands() -> dict[str, list[argparse.ArgumentParser]]:
    """Each command's parsers (``runs``: one per verb)."""
    def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    found: dict[str, list[argparse.ArgumentParser]] = {}
    for name, parser in subparsers(build_parser()).items():
        found[name] = list(subparsers(parser).values()) or [parser]
    return found


def options(parsers: list[argparse.ArgumentParser]) -> dict[str, argparse.Action]:
    """Every option ``--help`` shows, by each of its spellings (first parser wins)."""
    found: dict[str, argparse.Action] = {}
    for parser in parsers:
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            for spelling in action.option_strings:
                found.setdefault(spelling, action)
    return found


def documented_commands() -> dict[str, list[list[str]]]:
    rows = {}
    for heading, table in tables().items():
        match = re.fullmatch(r"`podium ([a-z-]+)[^`]*`", heading)
        if match:
            rows[match.group(1)] = table
    return rows


def test_every_command_is_documented() -> None:
    assert set(documented_commands()) == set(commands())


@pytest.mark.parametrize("command", sorted(commands()))
def test_every_option_is_documented_with_its_default(command: str) -> None:
    shown = options(commands()[command])
    rows = documented_commands()[command]
    named = [re.findall(r"(?<![\w-])(-{1,2}[a-z][a-z0-9-]*)", " ".join(ticked(r[0])))
             for r in rows]
    documented = {o for names in named for o in names}
    assert documented == set(shown), (
        f"podium {command}: undocumented {sorted(set(shown) - documented)}, "
        f"not in the code {sorted(documented - set(shown))}"
    )
    for row, names in zip(rows, named, strict=True):
        actions = list(dict.fromkeys(shown[o] for o in names))  # --config, -c: one action
        stated = literals(row[1], len(actions))
        for action, value in zip(actions, stated or [None] * len(actions), strict=True):
            default = action.default
            if default in (None, False, []) or value is None:
                continue  # no default of its own (the config's, or a flag)
            if isinstance(default, int | float) and not isinstance(default, bool):
                assert float(value) == default, f"{action.option_strings}: {value} vs {default}"
            else:
                assert str(value).lower() == str(default).lower(), action.option_strings


#: The Redis store's modules whose PODIUM_* strings are its Lua scripts' error codes.
_LUA_CODES = frozenset({"redis.py", "redis_scripts.py", "redis_connect.py"})


def test_environment_variables_are_documented_and_exist() -> None:
    """Every ``PODIUM_*`` name the code reads is in the doc; every one the doc lists is read."""
    read: set[str] = set()
    for path in (ROOT / "src" / "podium").rglob("*.py"):
        if path.name in _LUA_CODES and path.parent.name == "store":
            continue  # their PODIUM_* strings are Lua error codes, not variables
        read.update(re.findall(r"[\"'](PODIUM_[A-Z_]+)[\"']", path.read_text()))
    read |= {"PODIUM_AGENTS", "PODIUM_KEYS"}  # compact forms, spelled from the lists' names
    mentioned = set(re.findall(r"PODIUM_[A-Z_]*[A-Z]", DOC))
    assert read <= mentioned, f"undocumented: {sorted(read - mentioned)}"
    listed = {ticked(row[0])[0] for row in tables()["Configuration reference"]}
    assert listed <= read, f"documented but never read: {sorted(listed - read)}"
