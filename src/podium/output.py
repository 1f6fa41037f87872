"""Structured output: an agent's ``output_type``, the schema it asks for, its one-pass decoder.

``Agent(..., output_type=Order)`` takes a msgspec ``Struct``, a dataclass, a ``TypedDict``
or any other type msgspec validates (``list[Order]``, ``dict[str, int]``, ``int``…). Once
per agent, :class:`OutputSpec` derives the JSON Schema the model is asked for and builds
the decoder that turns the reply into a validated value in one pass. A type that is not a
JSON object is asked for inside one (``{"result": ...}``): OpenAI's ``response_format``
and tool arguments both want an object at the root.

The run stores the answer as canonical JSON text (``RunRecord.output``, with
``RunRecord.structured`` set); :meth:`RunRecord.output_as` gives the typed value back.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Hashable
from typing import Any, Literal, TypeVar, cast

import msgspec
from typing_extensions import TypeVar as DefaultTypeVar

from podium.errors import ConfigError, OutputValidationError
from podium.models.base import OutputMode, OutputSchema, ToolDefinition

__all__ = (
    "FINAL_TOOL",
    "OUTPUT_ERRORS",
    "OutT",
    "OutputModeSetting",
    "OutputSpec",
    "decode_output",
)

T = TypeVar("T")
#: The type of an agent's answer, carried in ``Agent[OutT]`` and ``RunRecord[OutT]`` for
#: type checkers only (nothing at run time depends on it). Its default, ``Any``, keeps a
#: bare ``Agent`` or ``RunRecord`` annotation meaning "any agent", as before.
OutT = DefaultTypeVar("OutT", default=Any)

#: The final-answer tool offered when the backend is not asked through ``response_format``.
FINAL_TOOL = "final_result"
#: What a failed decode raises (the text is what the model reads back).
OUTPUT_ERRORS = (msgspec.ValidationError, msgspec.DecodeError)
#: ``Agent(output_mode=...)``: ``"auto"`` asks the model the way it says it supports.
OutputModeSetting = Literal["auto", "native", "tool"]

_WRAP_KEY = "result"
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
#: Longest validation error and rejected answer quoted back to the model.
_MAX_ERROR_CHARS = 500


def _type_name(output_type: Any) -> str:
    name = getattr(output_type, "__name__", None) or str(output_type)
    return _NAME_CHARS.sub("_", name).strip("_")[:64] or "output"


def _inline_root(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a root ``$ref`` replaced by its definition (OpenAI wants an object at
    the root, not a reference); other definitions stay under ``$defs``."""
    ref = schema.get("$ref")
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return schema
    name = ref.removeprefix("#/$defs/")
    root = dict(defs[name])
    if ref.encode() not in msgspec.json.encode(defs):  # not recursive: its definition goes
        del defs[name]
    if defs:
        root["$defs"] = defs
    return root


class OutputSpec:
    """What an agent with an ``output_type`` asks the model for, and how it reads the answer.

    Built once per agent (and again only if the agent is moved to a model that is asked
    another way): the schema, the request's :class:`OutputSchema`, the final-answer
    tool's definition and the decoder.
    """

    __slots__ = (
        "_decode",
        "description",
        "key",
        "mode",
        "name",
        "output_type",
        "request",
        "schema",
        "schema_text",
        "tool",
    )

    def __init__(
        self, output_type: Any, mode: OutputMode, *, strict: bool | None = None
    ) -> None:
        try:
            raw = msgspec.json.schema(output_type)
            decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(output_type)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"output_type {output_type!r} cannot be validated: use a msgspec Struct, a "
                f"dataclass, a TypedDict or a type msgspec supports ({exc})"
            ) from exc
        self.output_type = output_type
        self.mode: OutputMode = mode
        self.name = _type_name(output_type)
        schema = _inline_root(raw)
        self.key: str | None = None
        if schema.get("type") != "object":
            # Not an object at the root: ask for {"result": value} and read the value back.
            defs = schema.pop("$defs", None)
            schema = {
                "type": "object",
                "properties": {_WRAP_KEY: schema},
                "required": [_WRAP_KEY],
            }
            if defs:
                schema["$defs"] = defs
            wrapper = msgspec.defstruct(self.name, [(_WRAP_KEY, output_type)])
            decoder = msgspec.json.Decoder(wrapper)
            self.key = _WRAP_KEY
        self._decode = decoder.decode
        self.schema = schema
        self.schema_text = msgspec.json.encode(schema).decode()
        doc = schema.get("description")
        self.description = doc if isinstance(doc, str) else ""
        tool_name = FINAL_TOOL if mode == "tool" else self.name
        self.request = OutputSchema(tool_name, schema, mode, self.description, self.key, strict)
        what = f" ({self.description})" if self.description else ""
        self.tool = ToolDefinition(
            FINAL_TOOL,
            f"Give the final answer of the task, a {self.name}{what}. Call it once, when "
            "the task is done: its arguments are the answer.",
            schema,
        )

    @property
    def tool_name(self) -> str:
        """The name of the call that carries the answer (tool mode)."""
        return self.request.name

    def validate(self, text: str) -> str:
        """The answer in ``text`` decoded and validated, as canonical JSON text.

        Raises ``msgspec.ValidationError`` / ``msgspec.DecodeError`` (their text says what
        is wrong and where). A reply wrapped in a Markdown code fence is read inside it.
        """
        if text[:3] == "```":
            text = _unfence(text)
        value = self._decode(text)
        if self.key is not None:
            value = getattr(value, self.key)
        return msgspec.json.encode(value).decode()

    def error_text(self, exc: Exception) -> str:
        text = str(exc)
        return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + "…"

    def feedback(self, exc: Exception) -> str:
        """What the model reads after a reply without tool calls failed validation."""
        error = self.error_text(exc)
        if self.mode == "tool":
            return (
                f"error: your answer is not a valid {self.name} ({error}). Give the final "
                f"answer by calling the tool {FINAL_TOOL} with arguments matching this JSON "
                f"Schema: {self.schema_text}"
            )
        return (
            f"error: your answer is not a valid {self.name} ({error}). Answer again with "
            f"only a JSON value matching this JSON Schema: {self.schema_text}"
        )

    def tool_feedback(self, exc: Exception) -> str:
        """The observation for a ``final_result`` call whose arguments failed validation."""
        return (
            f"error: invalid arguments for {FINAL_TOOL!r}: {self.error_text(exc)}. Call it "
            f"again with arguments matching this JSON Schema: {self.schema_text}"
        )

    def __repr__(self) -> str:
        return f"OutputSpec({self.name!r}, mode={self.mode!r})"


def _unfence(text: str) -> str:
    """The body of a ```` ```json ... ``` ```` block (models without constrained decoding)."""
    body = text.strip()
    first = body.find("\n")
    if first < 0 or not body.endswith("```"):
        return text
    return body[first + 1 : -3]


@functools.lru_cache(maxsize=256)
def _decoder(output_type: Hashable) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(output_type)


def decode_output(text: str, output_type: type[T]) -> T:
    """``text`` (a structured run's output) as ``output_type``, validated."""
    try:
        decoder = _decoder(cast(Hashable, output_type))
    except TypeError as exc:  # unhashable or unsupported: build one for this call
        try:
            decoder = msgspec.json.Decoder(output_type)
        except TypeError:
            raise OutputValidationError(f"{output_type!r} is not a type msgspec decodes") from exc
    try:
        value: T = decoder.decode(text)
    except OUTPUT_ERRORS as exc:
        what = _type_name(output_type)
        raise OutputValidationError(f"the output is not a valid {what}: {exc}") from exc
    return value
