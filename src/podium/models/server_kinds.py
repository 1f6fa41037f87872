"""What each inference server accepts, by kind: the probe, structured output, ``tool_choice``.

A :class:`ServerProfile` is picked by ``kind`` (``[[models]] kind`` in ``podium.toml``,
``OpenAIChatModel(server=...)``); every part of it can also be set on its own. The
entries say what each server's own code does:

- **probe**: a path answered by the HTTP layer without touching the model, so a
  probe never queues behind, or interrupts, a generation. llama-cpp-python's
  ``/v1/models`` takes the model lock and cuts the generation in progress, so no
  profile (not even the default one, which must not know what it talks to) ever
  probes ``/v1/models`` before ``/openapi.json``: a llama-cpp-python server answers
  that one first.
- **structured output**: ``json_schema`` (OpenAI's ``response_format``: vLLM, SGLang,
  llama-server, Ollama ≥ 0.5, OpenAI) or ``json_object`` with the schema beside it
  (llama-cpp-python refuses ``json_schema`` with a 500 and takes
  ``{"type": "json_object", "schema": ...}``; llama-server takes that too; TGI names
  the schema ``value``), or none (the agent is asked with a final-answer tool).
- **tool_choice**: the forms a server honours. A structured agent in tool mode
  must end with its answer tool, so its calls force a tool where the server can:
  ``"required"``, else the answer tool by name when it is the only tool offered.
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

from podium.errors import ConfigError

__all__ = (
    "DEFAULT_PROFILE",
    "PROFILES",
    "ResponseFormatMode",
    "ServerKind",
    "ServerProfile",
    "ToolChoiceForm",
    "server_profile",
)

ServerKind = Literal["vllm", "sglang", "llamacpp", "llama-cpp-python", "ollama", "tgi", "openai"]
#: How native structured output is sent: ``json_schema``, ``json_object`` with the schema,
#: or ``none`` (no ``response_format``: agents get a final-answer tool instead).
ResponseFormatMode = Literal["json_schema", "json_object", "none"]
#: ``required``: a tool call is mandatory; ``named``: ``{"type": "function", ...}`` forces one.
ToolChoiceForm = Literal["required", "named"]


class ServerProfile(msgspec.Struct, frozen=True, kw_only=True):
    """What one kind of server accepts (see the module docstring)."""

    kind: str
    health_paths: tuple[str, ...]
    response_format: ResponseFormatMode = "json_schema"
    #: the key of the schema in a ``json_object`` response format
    schema_key: str = "schema"
    tool_choice: frozenset[ToolChoiceForm] = frozenset({"required", "named"})


_BOTH: frozenset[ToolChoiceForm] = frozenset({"required", "named"})

PROFILES: dict[str, ServerProfile] = {
    # /health: engine liveness, not queued behind generation
    "vllm": ServerProfile(kind="vllm", health_paths=("/health",)),
    # /health (never /health_generate, which generates a token)
    "sglang": ServerProfile(kind="sglang", health_paths=("/health",)),
    # llama-server: /health from its HTTP thread, 503 while loading. llama-cpp-python
    # has no /health (404): /openapi.json then, never /v1/models. Both take json_object
    # with a schema; llama-server reads tool_choice as a string only ("required" works,
    # an object is read as "auto").
    "llamacpp": ServerProfile(
        kind="llamacpp",
        health_paths=("/health", "/openapi.json"),
        response_format="json_object",
        tool_choice=frozenset({"required"}),
    ),
    # llama-cpp-python alone: its chat handlers force a tool given by name (a grammar)
    "llama-cpp-python": ServerProfile(
        kind="llama-cpp-python",
        health_paths=("/openapi.json",),
        response_format="json_object",
        tool_choice=frozenset({"named"}),
    ),
    # Ollama: no /health; /api/version answers at once. It ignores tool_choice.
    "ollama": ServerProfile(kind="ollama", health_paths=("/api/version",), tool_choice=frozenset()),
    # TGI: /health; its grammar is {"type": "json_object", "value": schema}
    "tgi": ServerProfile(
        kind="tgi", health_paths=("/health",), response_format="json_object", schema_key="value"
    ),
    # Hosted OpenAI-compatible APIs: only the API itself
    "openai": ServerProfile(kind="openai", health_paths=("/v1/models",), tool_choice=_BOTH),
}
#: Unknown servers: paths that never disturb a generation first (llama-cpp-python answers
#: /openapi.json, Ollama /api/version); /v1/models last, for hosted APIs. Nothing is forced.
DEFAULT_PROFILE = ServerProfile(
    kind="",
    health_paths=("/health", "/openapi.json", "/api/version", "/v1/models"),
    tool_choice=frozenset(),
)
_ALIASES = {"llama.cpp": "llamacpp", "llama-server": "llamacpp"}

assert set(get_args(ServerKind)) == set(PROFILES)


def server_profile(kind: str | None) -> ServerProfile:
    """The profile of ``kind`` (``None``: an unknown server); :class:`ConfigError` for a
    kind Podium does not know."""
    if kind is None:
        return DEFAULT_PROFILE
    profile = PROFILES.get(_ALIASES.get(kind, kind))
    if profile is None:
        raise ConfigError(f"unknown server {kind!r}: one of {', '.join(sorted(PROFILES))}")
    return profile
