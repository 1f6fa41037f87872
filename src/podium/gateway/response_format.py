"""A chat request's ``response_format`` schema checked against the agent's output type.

An agent with an ``output_type`` answers with its own JSON whatever the request asks; a
client that expects another shape (``client.chat.completions.parse(response_format=X)``
with an ``X`` that is not the agent's type) would otherwise fail in its own parser, far
from the cause. So the gateway compares the two schemas and answers 400 on a mismatch,
naming the first place they differ.

Two schemas match when they are the same after normalisation. Normalising drops what
says nothing about the shape of the JSON, and what OpenAI's strict mode adds or Podium's
answers make moot:

- annotations: ``title``, ``description``, ``examples``, ``default``, ``$comment``,
  ``deprecated``, ``readOnly``, ``writeOnly``, ``$schema``, ``$id``;
- ``required``: strict mode requires every property, and Podium's answer holds every
  field of the type (a field with a default is written with its value);
- ``additionalProperties: false`` (or ``true``); a schema there (a ``dict[str, T]``) counts;
- references: ``$ref`` into ``$defs`` / ``definitions`` is replaced by its definition
  (the names of definitions do not count), a one-element ``allOf`` by its element;
- order: of ``enum`` values, of ``anyOf`` / ``oneOf`` alternatives and of a ``type`` list;
  ``const: v`` is ``enum: [v]``, and ``type`` beside an ``enum`` is dropped.

What remains must be equal: JSON types, property names, items, enum values, formats,
and constraints (``minLength``, ``maximum``…). A ``json_object`` format, or a
``json_schema`` without a ``schema``, asks for nothing to compare and is accepted.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from podium.gateway.errors import ApiError
from podium.output import OutputSpec

__all__ = ("check_response_format", "mismatch", "normalise")

_ANNOTATIONS = frozenset({
    "title",
    "description",
    "examples",
    "default",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "required",
    "$defs",
    "definitions",
})
#: Where nested schemas are, by how they are held: one, a list, a mapping of names.
_ONE = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames"})
_LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_UNORDERED = frozenset({"anyOf", "oneOf"})
_MAP = frozenset({"properties", "patternProperties"})
_MAX_SHOWN = 160

_encode = msgspec.json.Encoder(order="sorted").encode


def normalise(schema: Any) -> Any:
    """``schema`` with what does not shape the JSON removed (see the module's rules)."""
    if not isinstance(schema, dict):
        return schema
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        found = schema.get(key)
        if isinstance(found, dict):
            defs.update({f"#/{key}/{name}": value for name, value in found.items()})
    return _node(schema, defs, ())


def _node(schema: Any, defs: dict[str, Any], expanding: tuple[str, ...]) -> Any:
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref in defs:
        if ref in expanding:  # a recursive type: its name stands for it the second time
            return {"$ref": "(recursive)"}
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        inner = _node(defs[ref], defs, (*expanding, ref))
        rest = _node(siblings, defs, expanding) if siblings else {}
        if rest and isinstance(inner, dict):  # (a constraint beside the reference)
            return {**rest, **inner}
        return inner
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key == "additionalProperties" and isinstance(value, bool):
            continue
        if key in _ONE:
            out[key] = _node(value, defs, expanding)
        elif key in _LIST and isinstance(value, list):
            items = [_node(v, defs, expanding) for v in value]
            out[key] = sorted(items, key=_encode) if key in _UNORDERED else items
        elif key in _MAP and isinstance(value, dict):
            out[key] = {name: _node(v, defs, expanding) for name, v in value.items()}
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    if "enum" in out and isinstance(out["enum"], list):
        out["enum"] = sorted(out["enum"], key=_encode)
        out.pop("type", None)
    if isinstance(out.get("type"), list):
        kinds = sorted(out["type"])
        out["type"] = kinds[0] if len(kinds) == 1 else kinds
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        del out["allOf"]
        out = {**out, **all_of[0]}
    return out


@functools.lru_cache(maxsize=64)
def _agent_schema(spec: OutputSpec) -> Any:
    """The schema of what the agent's answer is (its type's, not wrapped), normalised."""
    return normalise(msgspec.json.schema(spec.output_type))


def mismatch(spec: OutputSpec, requested: Any) -> str | None:
    """Why the client's ``requested`` schema (``response_format.json_schema.schema``) is
    not the agent's output schema, or None when they match."""
    try:
        ours = _agent_schema(spec)
    except TypeError:  # an unhashable spec: never, but not worth a 500
        ours = normalise(msgspec.json.schema(spec.output_type))
    return _difference(ours, normalise(requested), "")


def _difference(ours: Any, theirs: Any, path: str) -> str | None:
    """The first place where ``theirs`` differs from ``ours``, said for a client."""
    if ours == theirs:
        return None
    where = path or "the root"
    if isinstance(ours, dict) and isinstance(theirs, dict):
        # The JSON type first: "an array, not an object" says more than what each holds.
        for key in sorted(ours.keys() | theirs.keys(), key=lambda k: (k != "type", k)):
            if key not in theirs:
                return f"at {where}, the agent's schema has {key!r}: {_shown(ours[key])}"
            if key not in ours:
                return f"at {where}, the request's schema has {key!r}, the agent's does not"
            if key in _MAP and isinstance(ours[key], dict) and isinstance(theirs[key], dict):
                mine, yours = set(ours[key]), set(theirs[key])
                if mine != yours:
                    missing = ", ".join(sorted(mine - yours)) or "none"
                    extra = ", ".join(sorted(yours - mine)) or "none"
                    return (
                        f"at {where}, the properties differ: the request's lacks {missing}; "
                        f"it has {extra} the agent's does not"
                    )
                for name in sorted(mine):
                    inner = f"{path}.{name}" if path else name
                    found = _difference(ours[key][name], theirs[key][name], inner)
                    if found is not None:
                        return found
                continue
            if key in _ONE or (
                key in _LIST and len(ours[key]) == len(theirs[key])  # (lists: normalised)
            ):
                found = _difference(ours[key], theirs[key], f"{path}.{key}" if path else key)
                if found is not None:
                    return found
            elif ours[key] != theirs[key]:  # a keyword's value: the whole schema says most
                break
    elif isinstance(ours, list) and isinstance(theirs, list):
        for i, (mine, yours) in enumerate(zip(ours, theirs, strict=True)):
            found = _difference(mine, yours, f"{where}[{i}]")
            if found is not None:
                return found
    return f"at {where}, the agent's schema is {_shown(ours)}, the request's {_shown(theirs)}"


def _shown(value: Any) -> str:
    text = _encode(value).decode()
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"


def check_response_format(agent: str, spec: OutputSpec, json_schema: dict[str, Any]) -> None:
    """Raise a 400 (``response_format_mismatch``) when a chat request's ``json_schema``
    format asks for another shape than ``agent``'s output type answers with."""
    requested = json_schema.get("schema")
    if requested is None:  # a name alone: nothing to compare
        return
    if not isinstance(requested, dict):
        raise ApiError(
            400,
            "invalid_response_format",
            "response_format.json_schema.schema must be a JSON Schema object",
            field="response_format",
        )
    why = mismatch(spec, requested)
    if why is not None:
        where = (
            "GET /v1/agents lists it as output_schema"
            if spec.key is None  # (else that lists how the model is asked: {"result": ...})
            else f"the answer is the bare value, not the {{{spec.key!r}: ...}} object the "
            "model is asked for"
        )
        raise ApiError(
            400,
            "response_format_mismatch",
            f"agent {agent!r} answers with its output type {spec.name}, whose JSON Schema "
            f"is not the one in response_format ({why}); ask with the agent's schema "
            f"({where}) or leave response_format out",
            field="response_format",
        )
