"""The answers with which real servers refuse, in their own words and shapes, for
``podium sim-server`` (see :mod:`podium.models.sim_server`)."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

__all__ = ("CONTEXT_ERRORS", "LOADING_BODY", "context_error", "invalid_500")

_encode = msgspec.json.encode


def context_error(kind: str, n_ctx: int, prompt: int, completion: int) -> web.Response:
    """The context-overflow answer of each server, in its own words and shape."""
    body: dict[str, Any]
    if kind == "vllm":
        body = {
            "object": "error",
            "message": f"This model's maximum context length is {n_ctx} tokens. However, you"
            f" requested {prompt + completion} tokens ({prompt} in the messages, {completion}"
            " in the completion). Please reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    elif kind == "sglang":
        body = {
            "object": "error",
            "message": f"The input ({prompt} tokens) is longer than the model's context length"
            f" ({n_ctx} tokens).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    elif kind == "llama.cpp":
        body = {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": n_ctx,
            }
        }
    else:  # ollama's OpenAI-compatible endpoint
        body = {
            "error": {
                "message": "the input length exceeds the context length",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    return web.Response(status=400, body=_encode(body), content_type="application/json")


CONTEXT_ERRORS = frozenset({"vllm", "sglang", "llama.cpp", "ollama"})
LOADING_BODY = _encode(
    {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
)


def invalid_500(message: str) -> web.Response:
    """llama-cpp-python's answer to a request it cannot serve: the exception text, as a 500."""
    body = {
        "error": {
            "message": f"ValueError: {message}",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }
    return web.Response(status=500, body=_encode(body), content_type="application/json")
