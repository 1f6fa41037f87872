"""``PODIUM_<SECTION>__<FIELD>`` variables, read against the settings' types.

A variable's value is a string; what it means depends on the field it sets, so each
one is converted here by that field's type (``PODIUM_SERVER__PREFIX=123`` is the
prefix ``"123"``, ``PODIUM_SERVER__PORT=123`` the port 123) and a value or a name that
fits no setting is a :class:`~podium.errors.ConfigError` naming the variable. Guessing
with TOML's grammar instead made numeric strings unsettable, and a mistyped section
(``PODIUM_SERVR__PORT``) was dropped without a word.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from typing import Any

import msgspec
import msgspec.inspect as mi

from podium._env_names import check_single_variable
from podium.errors import ConfigError

__all__ = ("ENV_PREFIX", "ENV_SECTIONS", "apply_env")

ENV_PREFIX = "PODIUM_"
#: The sections whose fields a ``PODIUM_<SECTION>__<FIELD>`` variable sets.
ENV_SECTIONS = ("server", "limits", "pools")
#: Lists with a compact form of their own (``PODIUM_AGENTS``, ``PODIUM_KEYS``).
_COMPACT = ("agents", "keys")
_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def _parse_pairs(text: str, what: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        left, sep, right = item.rpartition("=")
        if not sep or not left or not right:
            raise ConfigError(
                f"{what}: expected LEFT=RIGHT items separated by commas, got {item!r}"
            )
        pairs.append((left, right))
    if not pairs:  # set but empty: a silent "no agents" would serve the built-in examples
        raise ConfigError(f"{what} is empty; unset it, or give LEFT=RIGHT items")
    return pairs


def _key_from_env(key: str, tenant: str) -> dict[str, Any]:
    """One ``KEY=TENANT`` item of ``PODIUM_KEYS``; ``TENANT:admin`` marks an operator's key."""
    name, _, role = tenant.partition(":")
    if role not in ("", "admin"):
        raise ConfigError(f"PODIUM_KEYS: unknown role {role!r} for tenant {name!r} (only 'admin')")
    entry: dict[str, Any] = {"hash" if key.startswith("sha256:") else "key": key, "tenant": name}
    if role:
        entry["admin"] = True
    return entry


def _field_type(root: type, path: list[str], var: str) -> mi.Type:
    """The type of the setting at ``path`` (a pool's name is any key of ``pools``)."""
    node: mi.Type = mi.type_info(root)
    for depth, part in enumerate(path):
        if isinstance(node, mi.DictType):
            node = node.value_type
            continue
        if not isinstance(node, mi.StructType):
            raise ConfigError(f"{var}: {'.'.join(path[:depth])} has no fields")
        fields = {f.encode_name: f.type for f in node.fields}
        if part not in fields:
            where = ".".join(path[:depth]) or "the top level"
            raise ConfigError(
                f"{var}: no setting {part!r} in {where} (known: {', '.join(fields)})"
            )
        node = fields[part]
    if isinstance(node, mi.UnionType):  # ``X | None``: the variable gives an X
        node = next(t for t in node.types if not isinstance(t, mi.NoneType))
    return node


def _convert(kind: mi.Type, value: str, var: str) -> Any:
    """``value`` as the type ``kind`` wants; range checks are left to the settings' own."""
    if isinstance(kind, (mi.StrType, mi.LiteralType)):
        return value
    if isinstance(kind, mi.BoolType):
        if value.lower() in _BOOLS:
            return _BOOLS[value.lower()]
        raise ConfigError(f"{var}: expected true or false, got {value!r}")
    if isinstance(kind, (mi.IntType, mi.FloatType)):
        try:
            number = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            number = None
        want_int = isinstance(kind, mi.IntType)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        if isinstance(number, float) and not want_int:
            return number
        what = "a whole number" if want_int else "a number"
        raise ConfigError(f"{var}: expected {what}, got {value!r}")
    if isinstance(kind, (mi.StructType, mi.DictType)):
        raise ConfigError(f"{var}: names a section; set one of its fields as {var}__<FIELD>")
    raise ConfigError(f"{var}: this setting cannot be given in the environment")


def apply_env(
    data: dict[str, Any], environ: Mapping[str, str], root: type[msgspec.Struct]
) -> dict[str, str]:
    """Merge ``PODIUM_*`` variables into the raw settings ``data`` (they win over the
    file). Returns the settings they set, as dotted paths, with each variable's name:
    a value out of range is reported under the variable that gave it."""
    origin: dict[str, str] = {}
    for name, value in environ.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in upper[len(ENV_PREFIX) :].split("__")]
        head = path[0]
        if path == ["agents"]:
            data["agents"] = [{"name": n, "path": p} for n, p in _parse_pairs(value, name)]
            origin["agents"] = name
            continue
        if path == ["keys"]:
            data["keys"] = [_key_from_env(k, t) for k, t in _parse_pairs(value, name)]
            origin["keys"] = name
            continue
        if len(path) == 1:
            # Other parts of Podium read single names of their own (PODIUM_GC, …): their
            # values are checked here; only a near miss of a section's name is surely a
            # mistake.
            check_single_variable(name, value)
            near = difflib.get_close_matches(head, (*ENV_SECTIONS, *_COMPACT), 1, 0.8)
            if near:
                raise ConfigError(
                    f"{name}: not a setting; did you mean {ENV_PREFIX}{near[0].upper()}"
                    f"{'' if near[0] in _COMPACT else '__<FIELD>'}?"
                )
            continue
        if head not in ENV_SECTIONS:
            raise ConfigError(
                f"{name}: no section {head!r} can be set in the environment (known: "
                f"{', '.join(ENV_SECTIONS)}; agents and keys as PODIUM_AGENTS, PODIUM_KEYS)"
            )
        if not all(path):
            raise ConfigError(f"{name}: an empty name between double underscores")
        if not value:
            raise ConfigError(f"{name} is empty; unset it to keep the file's value or the default")
        converted = _convert(_field_type(root, path, name), value, name)
        node = data
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[path[-1]] = converted
        origin[".".join(path)] = name
    return origin
