"""Error answers of OpenAI-compatible servers, sans I/O: the server's own message, and
what kind of error it is (a context-length overflow, an invalid request) in any of
vLLM's, SGLang's, llama.cpp's, llama-cpp-python's, Ollama's or OpenAI's words."""

from __future__ import annotations

import html
import re

import msgspec

from podium.errors import ModelContextLengthError, ModelHTTPError, ModelTimeoutError

__all__ = ("BackendStalledError", "http_error")


class BackendStalledError(ModelTimeoutError):
    """A call's backend took it and then made no progress: no first token within
    ``first_token_s``, or no token (nor byte) for ``token_idle_s`` / ``read_s``. Unlike a
    call that ran out of its total time, the backend is suspect (hung, stopped, wedged):
    a pool probes it, drains it if the probe gets no answer, and moves the call to
    another backend."""


class _ErrorDetail(msgspec.Struct, gc=False):
    message: str = ""
    type: str | None = None
    code: int | str | None = None


class _ErrorBody(msgspec.Struct, gc=False):
    # {"error": {...}} (OpenAI, vLLM >= 0.6, llama.cpp, Ollama), {"error": "text"} (Ollama's
    # native API), {"object": "error", "message": ...} (older vLLM), {"detail": ...} (FastAPI)
    error: _ErrorDetail | str | None = None
    message: str | None = None
    type: str | None = None
    detail: str | None = None


_error_decoder = msgspec.json.Decoder(_ErrorBody)
_INVALID_TYPES = frozenset(
    {"invalid_request_error", "badrequesterror", "invalid_request", "exceed_context_size_error"}
)
_CONTEXT_TYPES = frozenset({"exceed_context_size_error", "context_length_exceeded"})
# The servers' own words: vLLM "This model's maximum context length is 4096 tokens" (and
# newer "The decoder prompt (length N) is longer than the maximum model length of M",
# "Input prompt (N tokens) is too long and exceeds limit of M"), llama-cpp-python (OpenAI's
# text), llama.cpp "exceeds the available context size", Ollama "prompt too long; exceeded
# max context length by N tokens" (older: "the input length exceeds the context length"),
# SGLang "is longer than the model's context length", TGI "`inputs` tokens +
# `max_new_tokens` must be <= 4096".
_CONTEXT_RE = re.compile(
    r"maximum context length|context length exceeded|exceeds? the (available )?context"
    r"|longer than the model's context length|input length exceeds the context length"
    r"|context window|too many tokens|prompt is too long|prompt too long"
    r"|exceeded max(imum)? context length|longer than the maximum model length"
    r"|too long and exceeds limit|inputs. tokens \+ .max_new_tokens. must be <=",
    re.IGNORECASE,
)
# A 500 whose message says the request was wrong (llama-cpp-python answers a bad field
# with 500 "internal_server_error" and the exception's text): retrying cannot help.
_INVALID_RE = re.compile(
    r"\binvalid (request|value|field|param\w*|argument|type|json|input|tool\w*|role|messages?"
    r"|schema|format|model)\b|\bnot supported\b|\bunsupported (field|param\w*|argument|value)"
    r"|validation error|unexpected keyword argument|unknown (field|parameter|argument)"
    r"|extra inputs are not permitted|\bbad request\b|could not parse|failed to parse"
    # a tool_choice naming a tool the request does not offer (llama-cpp-python: a 500)
    r"|unknown tool|no tool named|not (among|in) the tools|has not been passed in .?tools",
    re.IGNORECASE,
)
_MAX_BODY = 64 * 1024


def http_error(
    status: int,
    body: bytes,
    retry_after: float | None = None,
    url: object = None,
    backend: str = "",
) -> ModelHTTPError:
    """The typed error for an error answer: the server's message whole, context-length
    overflows as :class:`ModelContextLengthError`, and ``invalid_request`` set when the
    body says the request itself is wrong (whatever the status). A 404 that is not an
    API's error (a web server's page: no such path) names ``url``, the request's. An HTML
    page (a proxy's or a load balancer's error page) is cut to its title or first words.
    ``backend`` (the client's name) leads the message."""
    text = body[:_MAX_BODY].decode("utf-8", "replace")
    message, kind = text, None
    try:
        parsed = _error_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        parsed = None
        if _HTML_RE.match(text):
            message = _html_excerpt(text, len(body))
    if parsed is not None:
        err = parsed.error
        if isinstance(err, _ErrorDetail):
            message, kind = err.message or text, err.type
            if kind is None and isinstance(err.code, str):
                kind = err.code
        elif isinstance(err, str):
            message = err
        elif parsed.message:
            message, kind = parsed.message, parsed.type
        elif parsed.detail:
            message = parsed.detail
    if status == 404 and parsed is None and url is not None:
        # "model not found" comes as an API error; this is a path the server does not have
        message = (f"{message.strip() or 'Not Found'} (POST {url}: is base_url the server's "
                   "API root? it usually ends in /v1)")
    low = (kind or "").lower()
    context = low in _CONTEXT_TYPES or (status != 503 and bool(_CONTEXT_RE.search(message)))
    invalid = (
        context
        or status in (400, 413, 422)
        or low in _INVALID_TYPES
        or (status == 500 and bool(_INVALID_RE.search(message)))
    )
    cls = ModelContextLengthError if context else ModelHTTPError
    return cls(
        status,
        text,
        retry_after=retry_after,
        message=message,
        invalid_request=invalid,
        backend=backend,
    )


_HTML_RE = re.compile(r"\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body|title)\b", re.I | re.S)
_TITLE_RE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_SCRIPT_RE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.I | re.S)
_TAG_RE = re.compile(r"<[^>]*>")
_HTML_EXCERPT = 200


def _html_excerpt(page: str, size: int) -> str:
    """An error page in a line: its title, else its text, cut; the run's error and the
    terminal get that, not kilobytes of markup."""
    title = _TITLE_RE.search(page)
    words = title.group(1) if title is not None else _TAG_RE.sub(" ", _SCRIPT_RE.sub(" ", page))
    words = html.unescape(" ".join(words.split()))
    if len(words) > _HTML_EXCERPT:
        words = words[:_HTML_EXCERPT] + "…"
    return f"{words or 'an empty page'} (an HTML page of {size} bytes)"
