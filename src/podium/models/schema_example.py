"""A value that satisfies a JSON Schema: what the simulated backends answer when asked for
structured output (``response_format`` or a final-answer tool).

Covers what msgspec and OpenAI-style schemas use: ``$ref``/``$defs``, objects (each
required property, or every property when none is listed), arrays (one item, or
``minItems``), ``anyOf``/``oneOf`` (the first option that is not null), ``enum``,
``const``, ``default``, string ``format``\\ s msgspec emits, and numeric bounds.
"""

from __future__ import annotations

from typing import Any

__all__ = ("example_value",)

_FORMATS: dict[str, str] = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00",
    "duration": "P1D",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "email": "podium@example.com",
    "uri": "https://example.com/",
}
_MAX_DEPTH = 12  # recursive types: stop nesting here


def example_value(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A JSON value (dicts, lists, strings, numbers…) valid for ``schema``."""
    return _value(schema, schema.get("$defs", {}) if defs is None else defs, 0)


def _value(schema: dict[str, Any], defs: dict[str, Any], depth: int) -> Any:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        return _value(target, defs, depth + 1) if depth < _MAX_DEPTH else None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if options:
            usable = [o for o in options if o.get("type") != "null"] or options
            return _value(usable[0], defs, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {})
        names = schema.get("required", list(props))
        if depth >= _MAX_DEPTH:
            return {}
        return {n: _value(props.get(n, {}), defs, depth + 1) for n in names}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        if depth >= _MAX_DEPTH or schema.get("maxItems") == 0:
            return []
        prefix = schema.get("prefixItems")
        if prefix:  # a tuple
            return [_value(p, defs, depth + 1) for p in prefix]
        return [_value(schema.get("items", {}), defs, depth + 1) for _ in range(count)]
    if kind == "string":
        fmt = schema.get("format")
        text = _FORMATS.get(fmt, "podium") if isinstance(fmt, str) else "podium"
        shortest = int(schema.get("minLength", 0))
        if len(text) < shortest:
            text += "x" * (shortest - len(text))
        high = schema.get("maxLength")
        return text[: int(high)] if high is not None else text
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value: float = 1 if low is None else low + (1 if "exclusiveMinimum" in schema else 0)
        high = schema.get("maximum")
        if high is not None and value > high:
            value = high
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    return None
