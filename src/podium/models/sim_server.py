"""``podium sim-server``: the simulated model as an OpenAI-compatible HTTP server.

``POST /v1/chat/completions`` (plain and streamed, with ``tools``), ``GET
/health``, ``GET /v1/models`` and ``GET /metrics`` (Prometheus text; add
``?format=json`` for a JSON snapshot with recent occupancy samples). Latency
comes from :class:`~podium.models.sim_batching.BatchEngine`.

What it answers: a run's step is the number of assistant messages in the
prompt. While the step is below ``tool_steps`` and the request offers tools,
it calls the first offered tool with arguments built from its JSON Schema;
after that it writes a final answer. ``tool_choice`` is honoured (``none``
answers, ``required`` calls a tool, a named tool is the one called).
``response_format`` is accepted as vLLM accepts it: ``json_schema`` makes the final
answer a JSON value built from the schema (``json_object``: a small JSON object,
``text``: plain text); a malformed one is a 400. A request
may override the script with an ``extra_body`` field ``"sim": {"tool_steps": N,
"output_tokens": N, "tool": "name", "arguments": {...}, "reasoning_tokens": N,
"stall_after": N}``.

It can also behave like the real servers' awkward corners (each a
:class:`SimServerConfig` field and a ``podium sim-server`` option), so clients
are tested against them on loopback:

* ``reasoning_tokens``: stream ``reasoning_content`` deltas before the reply
  (vLLM/SGLang reasoning parsers);
* ``usage=False``: no usage in replies or streams (servers that ignore
  ``stream_options``);
* ``stall_after``: after that many tokens a stream sends only ``: ping``
  keep-alive comments every ``ping_s``, no tokens, until the client leaves;
* ``health=False``: no ``/health`` (404), like Ollama and llama-cpp-python;
* ``models_wait``: ``/v1/models`` waits until no generation runs, like
  llama-cpp-python's model lock;
* ``loading_s``: every path answers llama.cpp's 503 ``Loading model`` for
  that long after start;
* ``context_tokens`` + ``context_error``: a prompt plus ``max_tokens`` above
  the context is refused with the real text of ``vllm``, ``sglang``,
  ``llama.cpp`` or ``ollama``;
* ``invalid_500``: an invalid request is answered with 500 and the exception
  text, like llama-cpp-python, instead of 400;
* ``json_object_only``: ``response_format`` ``json_schema`` is refused (with
  ``invalid_500``, a 500, as llama-cpp-python does); ``json_object`` with a
  ``schema`` beside it answers a value of that schema (llama.cpp's grammar);
* ``models_interrupt``: ``GET /v1/models`` cuts every generation in progress (its
  stream ends without a ``finish_reason``), as a default llama-cpp-python server does;
* ``named_tools_only``: tools are called only when ``tool_choice`` names one
  (llama-cpp-python's generic chat formats answer in text otherwise);
* ``hang_after``: after that many chat requests the server answers nothing more, on
  any path (a hung process that still accepts connections, like a SIGSTOPped one).

``SimServerConfig.mimic("llama-cpp-python")`` turns on that server's set (no
``/health``, ``/openapi.json`` answered, ``models_interrupt``, ``json_object_only``,
``invalid_500``, ``named_tools_only``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from typing import Any, Literal

import msgspec
from aiohttp import web

from podium.errors import ConfigError
from podium.models.schema_example import example_value
from podium.models.sim_batching import BatchEngine, BatchingConfig, SimSequence
from podium.models.sim_guard import GUARD_MODES, guard_reply
from podium.models.sim_quirks import CONTEXT_ERRORS, LOADING_BODY, context_error, invalid_500

__all__ = ("MIMICS", "SimServerConfig", "build_app", "example_arguments")


class SimServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the server says and how fast (see :class:`BatchingConfig`)."""

    model: str = "podium-sim"
    batching: BatchingConfig = BatchingConfig()
    tool_steps: int = 3
    output_tokens: int = 24
    answer: str = "The simulated model has finished the task."
    reasoning_tokens: int = 0
    usage: bool = True
    stall_after: int | None = None
    ping_s: float = 0.05
    health: bool = True
    models_wait: bool = False
    loading_s: float = 0.0
    context_tokens: int = 0
    context_error: str = "vllm"
    invalid_500: bool = False
    json_object_only: bool = False
    models_interrupt: bool = False
    named_tools_only: bool = False
    hang_after: int | None = None
    #: the title of its ``/openapi.json`` (a llama-cpp-python server's names it)
    title: str = "podium sim-server"
    #: Answer as a guard model (see :mod:`podium.models.sim_guard`): ``classify`` or
    #: ``garbage``, each after ``guard_delay_s``.
    guard: str = "off"
    guard_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.context_error not in CONTEXT_ERRORS:
            raise ConfigError(f"context_error must be one of {', '.join(sorted(CONTEXT_ERRORS))}")
        if self.guard not in GUARD_MODES:
            raise ConfigError(f"guard must be one of {', '.join(GUARD_MODES)}")

    def mimic(self, server: str) -> SimServerConfig:
        """This config with the quirks of ``server`` (one of :data:`MIMICS`) turned on."""
        if server not in MIMICS:
            raise ConfigError(f"mimic must be one of {', '.join(sorted(MIMICS))}")
        return msgspec.structs.replace(self, **MIMICS[server])


#: The quirk sets of real servers (see the module docstring).
MIMICS: dict[str, dict[str, Any]] = {
    "llama-cpp-python": {
        "health": False,
        "models_interrupt": True,
        "json_object_only": True,
        "invalid_500": True,
        "named_tools_only": True,
        "context_error": "llama.cpp",
        "title": "🦙 llama.cpp Python API",
    },
}


class _SimOptions(msgspec.Struct):
    tool_steps: int | None = None
    output_tokens: int | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    reasoning_tokens: int | None = None
    stall_after: int | None = None


class _NamedFunction(msgspec.Struct):
    name: str


class _NamedChoice(msgspec.Struct):
    function: _NamedFunction


class _FnSpec(msgspec.Struct):
    name: str
    parameters: dict[str, Any] = {}


class _ToolSpec(msgspec.Struct):
    function: _FnSpec


class _Role(msgspec.Struct):
    role: str


class _JSONSchemaSpec(msgspec.Struct):
    name: str = "response"
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class _ResponseFormat(msgspec.Struct):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: _JSONSchemaSpec | None = None
    schema: dict[str, Any] | None = None  # json_object's schema (llama.cpp)


class _Said(msgspec.Struct):
    role: str = ""
    content: str | list[dict[str, Any]] | None = None


def _said(raw: msgspec.Raw) -> tuple[str, str]:
    """A message's role and text (its text parts joined), for the guard mode."""
    try:
        m = msgspec.json.decode(raw, type=_Said)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "", ""
    if isinstance(m.content, list):
        return m.role, " ".join(str(p.get("text", "")) for p in m.content)
    return m.role, m.content or ""


class _Req(msgspec.Struct):
    messages: list[msgspec.Raw]
    model: str = ""
    tools: list[_ToolSpec] = []
    stream: bool = False
    max_tokens: int | None = None
    sim: _SimOptions | None = None
    tool_choice: str | _NamedChoice | None = None
    response_format: _ResponseFormat | None = None


class _Plan(msgspec.Struct):
    content: str
    tool: str
    args: str
    tokens: int
    finish: str
    reasoning: str = ""
    reasoning_tokens: int = 0


_decode_req = msgspec.json.Decoder(_Req).decode
_decode_role = msgspec.json.Decoder(_Role).decode
_encode = msgspec.json.encode
_ids = itertools.count(1)
_PLACEHOLDER: dict[str, Any] = {
    "string": "podium",
    "integer": 1,
    "number": 1.0,
    "boolean": True,
    "array": [],
    "object": {},
}


def example_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy a simple JSON Schema: a placeholder for each required property."""
    props: dict[str, Any] = schema.get("properties", {})
    out: dict[str, Any] = {}
    for name in schema.get("required", list(props)):
        spec = props.get(name, {})
        if "enum" in spec:
            out[name] = spec["enum"][0]
        elif "default" in spec:
            out[name] = spec["default"]
        else:
            kind = spec.get("type", "string")
            out[name] = _PLACEHOLDER.get(kind if isinstance(kind, str) else kind[0], "podium")
    return out


def _error(status: int, message: str) -> web.Response:
    body = _encode({"error": {"message": message, "type": "invalid_request_error", "code": status}})
    return web.Response(status=status, body=body, content_type="application/json")


def _pieces(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` nearly equal pieces (the tokens of the stream)."""
    n = max(1, min(n, len(text))) if text else 1
    size, extra = divmod(len(text), n)
    out, i = [], 0
    for k in range(n):
        j = i + size + (k < extra)
        out.append(text[i:j])
        i = j
    return out


class SimServer:
    """The request handlers around one :class:`BatchEngine`."""

    def __init__(self, config: SimServerConfig) -> None:
        self.config = config
        self.engine: BatchEngine | None = None
        self.started = time.monotonic()
        self.generating = 0  # chat requests in flight
        self.idle = asyncio.Event()  # set while none is
        self.idle.set()
        self.chats = 0  # chat requests received
        self.interrupts = 0  # times /v1/models cut the generations in progress
        self.hung = asyncio.Event()  # never set: what a hung server waits on

    def _invalid(self, message: str) -> web.Response:
        if self.config.invalid_500:
            return invalid_500(message)
        return _error(400, message)

    @web.middleware
    async def loading(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """llama.cpp while it loads its model: 503 on every path."""
        hang_after = self.config.hang_after
        if hang_after is not None and self.chats >= hang_after:
            await self.hung.wait()  # a hung process: the connection is taken, never answered
        if self.config.loading_s and time.monotonic() - self.started < self.config.loading_s:
            return web.Response(status=503, body=LOADING_BODY, content_type="application/json")
        resp: web.StreamResponse = await handler(request)
        return resp

    def _engine(self) -> BatchEngine:
        if self.engine is None:
            self.engine = BatchEngine(self.config.batching)
            self.engine.start()
        return self.engine

    def _plan(self, req: _Req) -> _Plan | str:
        """What to answer, or why the request is invalid."""
        cfg = self.config
        opts = req.sim or _SimOptions()
        step = sum(1 for m in req.messages if _decode_role(m).role == "assistant")
        tool_steps = cfg.tool_steps if opts.tool_steps is None else opts.tool_steps
        n = cfg.output_tokens if opts.output_tokens is None else opts.output_tokens
        r = cfg.reasoning_tokens if opts.reasoning_tokens is None else opts.reasoning_tokens
        finish = "stop"
        if req.max_tokens is not None and req.max_tokens < n + r:
            n, finish = max(1, req.max_tokens - r), "length"
        choice = req.tool_choice
        forced = opts.tool
        if isinstance(choice, _NamedChoice):
            forced = choice.function.name
        elif choice not in (None, "auto", "required", "none"):
            return f"invalid tool_choice {choice!r}"
        by_name = {t.function.name: t.function for t in req.tools}
        if isinstance(choice, _NamedChoice) and forced not in by_name:
            return f"Invalid tool_choice: {forced!r} is not among the tools"
        if isinstance(choice, str) and choice == "required" and not req.tools:
            return "tool_choice 'required' needs tools"
        call = bool(req.tools) and choice != "none"
        if choice is None or choice == "auto":
            call = bool(req.tools) and step < tool_steps
        if cfg.named_tools_only and not isinstance(choice, _NamedChoice) and opts.tool is None:
            call = False  # llama-cpp-python's generic formats: text unless a tool is named
        reasoning = " ".join(itertools.repeat("hmm", r)) if r else ""
        if call:
            fn = by_name.get(forced or "", req.tools[0].function)
            args = (
                opts.arguments if opts.arguments is not None else example_arguments(fn.parameters)
            )
            finish = "tool_calls" if finish == "stop" else finish
            return _Plan("", fn.name, _encode(args).decode(), n, finish, reasoning, r)
        words = (cfg.answer + " ").split(" ")
        text = " ".join(itertools.islice(itertools.cycle(w for w in words if w), n))
        fmt = req.response_format
        if fmt is not None and fmt.type == "json_schema" and cfg.json_object_only:
            return (
                "1 validation error for CreateChatCompletionRequest response_format.type:"
                " Input should be 'text' or 'json_object'"
            )
        if fmt is not None and fmt.type != "text":
            if fmt.type == "json_object" and fmt.schema is not None:
                value: Any = example_value(fmt.schema)
            elif fmt.type == "json_object":
                value = {"answer": text}
            elif fmt.json_schema is None or fmt.json_schema.schema is None:
                return "response_format json_schema needs json_schema.schema"
            else:
                value = example_value(fmt.json_schema.schema)
            return _Plan(_encode(value).decode(), "", "", n, finish, reasoning, r)
        return _Plan(text, "", "", n, finish, reasoning, r)

    @staticmethod
    def _segments(req: _Req, body_tools: bytes) -> Iterator[tuple[bytes, int]]:
        if body_tools:
            yield body_tools, len(body_tools) // 4
        for m in req.messages:
            data = bytes(m)
            yield data, len(data) // 4 + 4

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.chats += 1
        raw = await request.read()
        try:
            req = _decode_req(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self._invalid(f"invalid request body: {exc}")
        if not req.messages:
            return self._invalid("messages must not be empty")
        if self.config.guard != "off":
            return await self._guard(req)
        plan = self._plan(req)
        if isinstance(plan, str):
            return self._invalid(plan)
        tools_key = _encode([t.function.name for t in req.tools]) if req.tools else b""
        cfg = self.config
        if cfg.context_tokens:
            prompt = sum(t for _, t in self._segments(req, tools_key))
            completion = req.max_tokens or plan.tokens + plan.reasoning_tokens
            if prompt + completion > cfg.context_tokens:
                return context_error(cfg.context_error, cfg.context_tokens, prompt, completion)
        engine = self._engine()
        seq = engine.submit(self._segments(req, tools_key), plan.tokens + plan.reasoning_tokens)
        cid = f"chatcmpl-sim{next(_ids)}"
        self.generating += 1
        self.idle.clear()
        try:
            if req.stream:
                return await self._stream(request, req, seq, cid, plan)
            await seq.finished
        finally:
            engine.abort(seq)
            self.generating -= 1
            if not self.generating:
                self.idle.set()
        message: dict[str, Any] = {"role": "assistant", "content": plan.content or None}
        if plan.reasoning:
            message["reasoning_content"] = plan.reasoning
        if plan.tool:
            call = {
                "id": f"call_{cid}",
                "type": "function",
                "function": {"name": plan.tool, "arguments": plan.args},
            }
            message["tool_calls"] = [call]
        body = {
            "id": cid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model or cfg.model,
            "choices": [{"index": 0, "message": message, "finish_reason": plan.finish}],
        }
        if cfg.usage:
            body["usage"] = self._usage(seq)
        return web.Response(body=_encode(body), content_type="application/json")

    async def _guard(self, req: _Req) -> web.Response:
        """A guard model's verdict on the last user message, whole (never streamed)."""
        cfg = self.config
        if cfg.guard_delay_s:
            await asyncio.sleep(cfg.guard_delay_s)
        said = [_said(m) for m in req.messages]
        users = [text for role, text in said if role == "user"]
        text = guard_reply(cfg.guard, users[-1] if users else "")
        body = {
            "id": f"chatcmpl-guard{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model or cfg.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text},
                 "finish_reason": "stop"}
            ],
        }
        return web.Response(body=_encode(body), content_type="application/json")

    @staticmethod
    def _usage(seq: SimSequence) -> dict[str, Any]:
        return {
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": seq.output_tokens,
            "total_tokens": seq.prompt_tokens + seq.output_tokens,
            "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
        }

    async def _stream(
        self, request: web.Request, req: _Req, seq: SimSequence, cid: str, plan: _Plan
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        cfg = self.config
        model = req.model or cfg.model
        head = (
            b'data: {"id":"'
            + cid.encode()
            + b'","object":"chat.completion.chunk","model":'
            + _encode(model)
        )
        tool = plan.tool
        thoughts = ["hmm "] * plan.reasoning_tokens
        pieces = thoughts + _pieces(plan.args if tool else plan.content, plan.tokens)
        opts = req.sim or _SimOptions()
        stall = cfg.stall_after if opts.stall_after is None else opts.stall_after
        written = 0
        first = True
        interrupts = self.interrupts
        while True:
            await seq.progress.wait()
            seq.progress.clear()
            if self.interrupts != interrupts:
                break  # cut by a /v1/models request: the stream ends without a finish_reason
            upto = min(seq.tokens, len(pieces))
            if stall is not None:
                upto = min(upto, stall)
            out = []
            while written < upto:
                piece = pieces[written]
                delta: dict[str, Any]
                if written < len(thoughts):
                    delta = {"reasoning_content": piece}
                elif tool:
                    call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                    if written == len(thoughts):
                        call.update(id=f"call_{cid}", type="function")
                        call["function"]["name"] = tool
                    delta = {"tool_calls": [call]}
                else:
                    delta = {"content": piece}
                if first:
                    delta["role"] = "assistant"
                    first = False
                out.append(
                    head
                    + b',"choices":[{"index":0,"delta":'
                    + _encode(delta)
                    + b',"finish_reason":null}]}\n\n'
                )
                written += 1
            if out:
                await resp.write(b"".join(out))
            if stall is not None and written >= stall:
                # a stalled server: keep-alive comments, never another token
                while True:
                    await asyncio.sleep(cfg.ping_s)
                    await resp.write(b": ping\n\n")
            if seq.done:
                end = {"index": 0, "delta": {}, "finish_reason": plan.finish}
                tail = head + b',"choices":[' + _encode(end) + b"]}\n\n"
                if cfg.usage:
                    usage = _encode(self._usage(seq))
                    tail += head + b',"choices":[],"usage":' + usage + b"}\n\n"
                await resp.write(tail + b"data: [DONE]\n\n")
                break
        await resp.write_eof()
        return resp

    async def health(self, request: web.Request) -> web.Response:
        if not self.config.health:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=b'{"status":"ok"}', content_type="application/json")

    async def models(self, request: web.Request) -> web.Response:
        if self.config.models_interrupt and self.generating:
            self.interrupts += 1  # llama-cpp-python: the request takes the model from them
        if self.config.models_wait:
            await self.idle.wait()  # behind generation, like llama-cpp-python's model lock
        model = {"id": self.config.model, "object": "model", "created": 0, "owned_by": "podium"}
        return web.Response(
            body=_encode({"object": "list", "data": [model]}), content_type="application/json"
        )

    async def openapi(self, request: web.Request) -> web.Response:
        """A FastAPI server's schema document (llama-cpp-python answers it at once)."""
        info = {"openapi": "3.1.0", "info": {"title": self.config.title, "version": "0"}}
        return web.Response(body=_encode(info), content_type="application/json")

    async def metrics(self, request: web.Request) -> web.Response:
        engine = self._engine()
        stats = engine.statistics()
        if request.query.get("format") == "json":
            body = msgspec.to_builtins(stats)
            body["samples"] = list(engine.samples)
            return web.Response(body=_encode(body), content_type="application/json")
        lines = [
            f"# HELP sim_{name} {help_}\n# TYPE sim_{name} {kind}\nsim_{name} {value}"
            for name, kind, value, help_ in (
                ("capacity", "gauge", stats.capacity, "Batch capacity (sequences)."),
                ("running", "gauge", stats.running, "Sequences running now."),
                ("waiting", "gauge", stats.waiting, "Sequences queued beyond capacity."),
                ("requests_total", "counter", stats.requests, "Requests received."),
                ("tokens_total", "counter", stats.tokens, "Output tokens generated."),
                ("steps_total", "counter", stats.steps, "Engine steps run."),
                (
                    "busy_seq_seconds_total",
                    "counter",
                    f"{stats.busy_seq_seconds:.6f}",
                    "Integral of running sequences over time.",
                ),
                ("uptime_seconds", "gauge", f"{stats.uptime_s:.6f}", "Seconds since start."),
                (
                    "occupancy",
                    "gauge",
                    f"{stats.occupancy:.6f}",
                    "busy_seq_seconds / (capacity × uptime).",
                ),
                ("prompt_tokens_total", "counter", stats.prompt_tokens, "Prompt tokens received."),
                (
                    "cached_tokens_total",
                    "counter",
                    stats.cached_tokens,
                    "Prompt tokens the prefix cache held.",
                ),
            )
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def on_cleanup(self, app: web.Application) -> None:
        if self.engine is not None:
            await self.engine.stop()


def build_app(config: SimServerConfig | None = None) -> web.Application:
    """The aiohttp application of a simulated backend."""
    server = SimServer(config or SimServerConfig())
    app = web.Application(middlewares=[server.loading])
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/health", server.health)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/openapi.json", server.openapi)
    app.router.add_get("/metrics", server.metrics)
    app.on_cleanup.append(server.on_cleanup)
    return app
