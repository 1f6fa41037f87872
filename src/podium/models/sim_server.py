"""``podium sim-server``: the simulated model as an OpenAI-compatible HTTP server.

``POST /v1/chat/completions`` (plain and streamed, with ``tools``), ``GET
/health``, ``GET /v1/models`` and ``GET /metrics`` (Prometheus text; add
``?format=json`` for a JSON snapshot with recent occupancy samples). Latency
comes from :class:`~podium.models.sim_batching.BatchEngine`.

What it answers: a run's step is the number of assistant messages in the
prompt. While the step is below ``tool_steps`` and the request offers tools,
it calls the first offered tool with arguments built from its JSON Schema;
after that it writes a final answer. A request may override the script with
an ``extra_body`` field ``"sim": {"tool_steps": N, "output_tokens": N,
"tool": "name", "arguments": {...}}``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import msgspec
from aiohttp import web

from podium.models.sim_batching import BatchEngine, BatchingConfig, SimSequence

__all__ = ("SimServerConfig", "build_app", "example_arguments")


class SimServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the server says and how fast (see :class:`BatchingConfig`)."""

    model: str = "podium-sim"
    batching: BatchingConfig = BatchingConfig()
    tool_steps: int = 3
    output_tokens: int = 24
    answer: str = "The simulated model has finished the task."


class _SimOptions(msgspec.Struct):
    tool_steps: int | None = None
    output_tokens: int | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None


class _FnSpec(msgspec.Struct):
    name: str
    parameters: dict[str, Any] = {}


class _ToolSpec(msgspec.Struct):
    function: _FnSpec


class _Role(msgspec.Struct):
    role: str


class _Req(msgspec.Struct):
    messages: list[msgspec.Raw]
    model: str = ""
    tools: list[_ToolSpec] = []
    stream: bool = False
    max_tokens: int | None = None
    sim: _SimOptions | None = None


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

    def _engine(self) -> BatchEngine:
        if self.engine is None:
            self.engine = BatchEngine(self.config.batching)
            self.engine.start()
        return self.engine

    def _plan(self, req: _Req) -> tuple[str, str, str, int, str]:
        """(content, tool name, tool arguments, output tokens, finish reason) for a request."""
        cfg = self.config
        opts = req.sim or _SimOptions()
        step = sum(1 for m in req.messages if _decode_role(m).role == "assistant")
        tool_steps = cfg.tool_steps if opts.tool_steps is None else opts.tool_steps
        n = cfg.output_tokens if opts.output_tokens is None else opts.output_tokens
        finish = "stop"
        if req.max_tokens is not None and req.max_tokens < n:
            n, finish = max(1, req.max_tokens), "length"
        if req.tools and step < tool_steps:
            by_name = {t.function.name: t.function for t in req.tools}
            fn = by_name.get(opts.tool or "", req.tools[0].function)
            args = (
                opts.arguments if opts.arguments is not None else example_arguments(fn.parameters)
            )
            return (
                "",
                fn.name,
                _encode(args).decode(),
                n,
                "tool_calls" if finish == "stop" else finish,
            )
        words = (cfg.answer + " ").split(" ")
        text = " ".join(itertools.islice(itertools.cycle(w for w in words if w), n))
        return text, "", "", n, finish

    @staticmethod
    def _segments(req: _Req, body_tools: bytes) -> Iterator[tuple[bytes, int]]:
        if body_tools:
            yield body_tools, len(body_tools) // 4
        for m in req.messages:
            data = bytes(m)
            yield data, len(data) // 4 + 4

    async def chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            req = _decode_req(raw)
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid request body: {exc}")
        if not req.messages:
            return _error(400, "messages must not be empty")
        content, tool, args, n, finish = self._plan(req)
        tools_key = _encode([t.function.name for t in req.tools]) if req.tools else b""
        engine = self._engine()
        seq = engine.submit(self._segments(req, tools_key), n)
        usage: dict[str, Any] = {
            "prompt_tokens": seq.prompt_tokens,
            "completion_tokens": seq.output_tokens,
            "prompt_tokens_details": {"cached_tokens": seq.cached_tokens},
        }
        cid = f"chatcmpl-sim{next(_ids)}"
        try:
            if req.stream:
                return await self._stream(
                    request, req, seq, cid, content, tool, args, finish, usage
                )
            await seq.finished
        finally:
            engine.abort(seq)
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        if tool:
            call = {
                "id": f"call_{cid}",
                "type": "function",
                "function": {"name": tool, "arguments": args},
            }
            message["tool_calls"] = [call]
        body = {
            "id": cid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": req.model or self.config.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        return web.Response(body=_encode(body), content_type="application/json")

    async def _stream(
        self,
        request: web.Request,
        req: _Req,
        seq: SimSequence,
        cid: str,
        content: str,
        tool: str,
        args: str,
        finish: str,
        usage: dict[str, Any],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        model = req.model or self.config.model
        head = (
            b'data: {"id":"'
            + cid.encode()
            + b'","object":"chat.completion.chunk","model":'
            + _encode(model)
        )
        pieces = _pieces(args if tool else content, seq.output_tokens)
        written = 0
        first = True
        while True:
            await seq.progress.wait()
            seq.progress.clear()
            upto = min(seq.tokens, len(pieces))
            out = []
            while written < upto:
                piece = pieces[written]
                if tool:
                    call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
                    if first:
                        call.update(id=f"call_{cid}", type="function")
                        call["function"]["name"] = tool
                    delta: dict[str, Any] = {"tool_calls": [call]}
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
            if seq.done:
                end = {"index": 0, "delta": {}, "finish_reason": finish}
                out.append(head + b',"choices":[' + _encode(end) + b"]}\n\n")
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                out.append(
                    head + b',"choices":[],"usage":' + _encode(usage) + b"}\n\ndata: [DONE]\n\n"
                )
            if out:
                await resp.write(b"".join(out))
            if seq.done:
                break
        await resp.write_eof()
        return resp

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', content_type="application/json")

    async def models(self, request: web.Request) -> web.Response:
        model = {"id": self.config.model, "object": "model", "created": 0, "owned_by": "podium"}
        return web.Response(
            body=_encode({"object": "list", "data": [model]}), content_type="application/json"
        )

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
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/health", server.health)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/metrics", server.metrics)
    app.on_cleanup.append(server.on_cleanup)
    return app
