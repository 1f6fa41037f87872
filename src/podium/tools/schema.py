"""From a typed Python signature to an argument struct and its JSON Schema.

The struct is what makes validation one pass: ``msgspec.json.decode(raw,
type=ArgsStruct)`` parses and validates the model's arguments together.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import msgspec

from podium.errors import ToolDefinitionError

__all__ = ("ParsedDocstring", "build_args_struct", "parse_docstring", "schema_for")

_ARG_LINE = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ParsedDocstring(msgspec.Struct, frozen=True):
    summary: str
    params: dict[str, str]


def parse_docstring(doc: str | None) -> ParsedDocstring:
    """Summary and per-parameter descriptions of a Google-style docstring."""
    if not doc:
        return ParsedDocstring("", {})
    text = inspect.cleandoc(doc)
    lines = text.splitlines()
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.rstrip(":").lower() in {"args", "arguments", "parameters", "params"} and (
            stripped.endswith(":")
        ):
            section, current = "args", None
            continue
        if stripped.endswith(":") and stripped[:-1].lower() in {
            "returns",
            "return",
            "raises",
            "yields",
            "examples",
            "example",
            "note",
            "notes",
        }:
            section, current = "other", None
            continue
        if section is None:
            summary_lines.append(line)
        elif section == "args":
            match = _ARG_LINE.match("  " + line if not line.startswith("  ") else line)
            if match and (line.startswith("  ") or line == stripped):
                current = match.group(1).lstrip("*")
                params[current] = match.group(2).strip()
            elif current and stripped:
                params[current] = f"{params[current]} {stripped}".strip()
    summary = "\n".join(summary_lines).strip()
    return ParsedDocstring(summary, params)


def build_args_struct(
    fn: Callable[..., Any], name: str, skip: frozenset[str]
) -> tuple[type[msgspec.Struct], tuple[str, ...]]:
    """A ``msgspec.Struct`` type with one field per parameter of ``fn`` (minus ``skip``)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    names: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name in skip:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {name!r}: *args/**kwargs cannot become a schema")
        if param.kind is param.POSITIONAL_ONLY:  # tools are called with keyword arguments
            raise ToolDefinitionError(
                f"tool {name!r}: parameter {param.name!r} is positional-only; the model's "
                "arguments are passed by name: remove the '/'"
            )
        if param.name not in hints:
            hint = ""
            if param.name in ("self", "cls"):
                hint = " (a method? decorate it on an instance instead: tool(obj.method))"
            raise ToolDefinitionError(
                f"tool {name!r}: parameter {param.name!r} needs a type hint{hint}"
            )
        annotation = hints[param.name]
        _check_param(name, param, annotation)
        if param.default is inspect.Parameter.empty:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, param.default))
        names.append(param.name)
    # Required fields must precede optional ones in a struct; keyword calls keep the order moot.
    fields.sort(key=lambda f: len(f) == 3)
    struct = msgspec.defstruct(
        f"{name}_args",
        fields,
        forbid_unknown_fields=True,
        kw_only=True,
        gc=False,
    )
    return struct, tuple(names)


def _check_param(tool: str, param: inspect.Parameter, annotation: Any) -> None:
    """Refuse a parameter the model could not be told about: a type with no JSON Schema,
    or a default that is not a JSON value (the schema shows it)."""
    try:
        msgspec.json.schema(annotation)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool!r}: parameter {param.name!r}: type {_type_name(annotation)} has no "
            "JSON Schema; use str, int, float, bool, a list or dict of them, a msgspec "
            f"Struct, a dataclass or a TypedDict ({str(exc).splitlines()[-1]})"
        ) from exc
    if param.default is not inspect.Parameter.empty:
        try:
            msgspec.json.encode(param.default)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {tool!r}: parameter {param.name!r}: its default {param.default!r} is "
                "not a JSON value (the model is shown it); use None, a number, a string..."
            ) from exc


def _type_name(annotation: Any) -> str:
    return annotation.__qualname__ if isinstance(annotation, type) else repr(annotation)


def schema_for(struct: type[msgspec.Struct], descriptions: dict[str, str]) -> dict[str, Any]:
    """The JSON Schema of ``struct`` with ``$ref``s inlined, as tool-calling APIs expect."""
    try:
        schema = msgspec.json.schema(struct)
    except Exception as exc:
        raise ToolDefinitionError(
            f"cannot build a JSON schema for {struct.__name__}: {exc}"
        ) from exc
    defs: dict[str, Any] = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(dict(defs[ref.removeprefix("#/$defs/")]))
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    root: dict[str, Any] = inline(schema)
    root.pop("title", None)
    root.setdefault("properties", {})
    root.setdefault("required", [])
    root["additionalProperties"] = False
    for pname, desc in descriptions.items():
        prop = root["properties"].get(pname)
        if prop is not None and desc:
            prop.setdefault("description", desc)
    return root
