"""``podium.toml``: the settings of ``podium serve`` and ``podium worker``, typed.

Every setting of ``[server]``, ``[limits]`` and ``[pools.NAME]`` can also come from the
environment, which wins over the file: ``PODIUM_<SECTION>__<FIELD>`` (double underscore
between levels, any case; the value read as the field's type, see
:mod:`podium._config_env`),
for example ``PODIUM_SERVER__PORT=9000``, ``PODIUM_LIMITS__TENANT_RATE=50``,
``PODIUM_POOLS__DEFAULT__WORKERS=2`` (pool names are read in lower case).
Two lists have a compact form:
``PODIUM_AGENTS="react=pkg.mod:agent,other=pkg.other:make"`` and
``PODIUM_KEYS="sha256:<hex>=tenant-a,pk_plain_key=tenant-b"`` (``=ops:admin`` marks an
operator's key, which may read ``/metrics``).

Example::

    [server]
    host = "127.0.0.1"
    port = 8000
    store = "sqlite:podium.sqlite"      # or "memory", or "postgresql://…"

    [[agents]]
    name = "support"
    path = "myapp.agents:support"
    pool = "default"

    [pools.default]
    workers = 1            # in-process workers (embedded mode)
    concurrency = 256      # runs each worker drives at once
    rate = 100.0           # admitted runs/s (token bucket), 0 = unlimited
    burst = 200
    latency_target_s = 30.0

    [limits]
    tenant_rate = 50.0
    tenant_burst = 100

    [[keys]]
    hash = "sha256:9f86d0…"   # `podium serve --hash-key SECRET` prints it
    tenant = "acme"
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from podium._config_checks import check_config
from podium._config_env import apply_env
from podium.config_schema import (
    AdaptiveConfig,
    AgentConfig,
    Config,
    EgressConfig,
    KeyConfig,
    LimitsConfig,
    MCPServerConfig,
    ModelConfig,
    PoolConfig,
    RouteConfig,
    ScreeningConfig,
    ServerConfig,
)
from podium.errors import ConfigError

_INT64_MAX = 2**63 - 1

__all__ = (
    "AdaptiveConfig",
    "AgentConfig",
    "Config",
    "EgressConfig",
    "KeyConfig",
    "LimitsConfig",
    "MCPServerConfig",
    "ModelConfig",
    "PoolConfig",
    "RouteConfig",
    "ScreeningConfig",
    "ServerConfig",
    "load_config",
)

def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (TOML; optional), apply ``PODIUM_*`` overrides, validate.

    Every mistake is one :class:`ConfigError` line naming the setting and where it came
    from (the file, or the variable that set it); nothing wrong falls back to a default.
    """
    data = _read(path) if path is not None else {}
    origin = apply_env(data, os.environ if environ is None else environ, Config)
    source = f"config file {path}" if path is not None else "config"
    _check_numbers(data, "", origin, source)
    config = _convert(data, origin, source)
    check_config(config)
    return config


def _read(path: str | Path) -> dict[str, Any]:
    """The file as TOML, or one line saying why it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, not a TOML file") from None
    except OSError as exc:  # permission denied, an I/O error
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {exc.start}): is it a TOML file?"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


def _label(where: str, origin: Mapping[str, str], source: str) -> str:
    """``where`` (a dotted path) prefixed by what set it: the variable, else the file."""
    bare = re.sub(r"\[\d+\]", "", where)
    parts = bare.split(".")
    for n in range(len(parts), 0, -1):  # a list's items come from the variable giving it
        var = origin.get(".".join(parts[:n]))
        if var is not None:
            return f"{var} ({where})"
    return f"{source}: {where}" if where else source


def _check_numbers(node: Any, where: str, origin: Mapping[str, str], source: str) -> None:
    """TOML reads ``inf`` and ``nan``, and integers of any size: refuse them here, where
    the setting can still be named (a rate of ``inf`` breaks the token bucket's sums; an
    integer past 64 bits cannot be encoded for Redis or MessagePack)."""
    if isinstance(node, dict):
        for key, value in node.items():
            _check_numbers(value, f"{where}.{key}" if where else str(key), origin, source)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_numbers(value, f"{where}[{i}]", origin, source)
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(f"{_label(where, origin, source)}: must be a finite number, got {node}")
    elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > _INT64_MAX:
        raise ConfigError(
            f"{_label(where, origin, source)}: {node} is out of range (at most {_INT64_MAX})"
        )


def _convert(data: dict[str, Any], origin: Mapping[str, str], source: str) -> Config:
    """Typed settings; strict, so that ``port = "8000"`` or ``workers = 2.0`` is a mistake
    named here rather than a value silently converted."""
    pools = data.get("pools")
    if isinstance(pools, dict):  # one by one: msgspec's error would not name the pool
        for name, raw in pools.items():
            try:
                msgspec.convert(raw, PoolConfig, strict=True)
            except msgspec.ValidationError as exc:
                raise _invalid(exc, f"pools.{name}", origin, source) from None
    try:
        return msgspec.convert(data, Config, strict=True)
    except msgspec.ValidationError as exc:
        raise _invalid(exc, "", origin, source) from None


def _invalid(
    exc: msgspec.ValidationError, base: str, origin: Mapping[str, str], source: str
) -> ConfigError:
    """msgspec's ``Expected `int` >= 1 - at `$.pools[...].workers``` as a line that names
    the setting, with the keys allowed where an unknown one was found."""
    message, _, at = str(exc).partition(" - at `")
    tail = at.rstrip("`").removeprefix("$").lstrip(".")
    where = ".".join(p for p in (base, tail) if p)
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", message)
    if unknown is not None:
        key = unknown.group(1)
        known = _known_keys(where)
        near = difflib.get_close_matches(key, known, 1, 0.7)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        where = f"{where}.{key}" if where else key
        message = f"unknown key (known here: {', '.join(known)}){hint}"
    elif message.endswith("of length >= 1"):
        message = "must not be empty (leave the key out for its default)"
    return ConfigError(f"{_label(where, origin, source)}: {message}")


def _known_keys(where: str) -> list[str]:
    """The keys a table at ``where`` (``"pools.cpu"``, ``"agents[0]"``) accepts."""
    node: mi.Type = mi.type_info(Config)
    for part in filter(None, re.sub(r"\[\d+\]", "", where).split(".")):
        if isinstance(node, mi.StructType):
            node = next(f.type for f in node.fields if f.encode_name == part)
        elif isinstance(node, mi.DictType):
            node = node.value_type
        while isinstance(node, (mi.ListType, mi.UnionType)):
            node = (
                node.item_type
                if isinstance(node, mi.ListType)
                else next(t for t in node.types if not isinstance(t, mi.NoneType))
            )
    if isinstance(node, mi.DictType):  # [pools]: the pool names are free
        node = node.value_type
    return [f.encode_name for f in node.fields] if isinstance(node, mi.StructType) else []
