"""Client-side tools at the OpenAI-compatible edge: read them, hand their calls out, take
their outputs back (the engine's side is :mod:`podium.tools.client`).

A call handed to the client carries an id that names its run, step and place in the step
(``call_<run>_<step>_<index>``), so the client's follow-up finds the run whichever
gateway it reaches, with or without a ``previous_response_id`` (a chat completion has
none, and the OpenAI Agents SDK sends the whole conversation by default). The output is
journaled as the call's answer, which puts the run back on the queue once every call of
the step has one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from podium.engine.approvals import open_requests
from podium.engine.records import (
    ApprovalDecided,
    ApprovalRequested,
    ModelTurn,
    RunRecord,
    StepRecord,
)
from podium.errors import ConfigError
from podium.gateway.auth import Tenant
from podium.gateway.errors import ApiError, run_waiting
from podium.gateway.service import Gateway
from podium.streaming.base import TokenSubscription
from podium.tools.client import (
    CLIENT_TOOLS_KEY,
    ClientToolSpec,
    client_tool_names,
    encode_client_tools,
    with_client_tools,
)

__all__ = (
    "ClientCall",
    "client_calls",
    "client_tools_metadata",
    "parse_call_id",
    "resume_with_outputs",
    "visible_call_id",
)

#: OpenAI's rule for a function's name.
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CALL_ID = re.compile(r"call_([0-9a-f]{1,64})_(\d{1,9})_(\d{1,9})")
_MAX_TOOLS = 128


class ClientCall(msgspec.Struct, frozen=True, gc=False):
    """A call of a client tool that waits for the client's output."""

    id: str  # as the client sees it: names the run, step and index
    name: str
    arguments: str
    step: int
    index: int
    said: str = ""  # what the model said in the turn that made the call


def visible_call_id(run_id: str, step: int, index: int) -> str:
    return f"call_{run_id.removeprefix('run_')}_{step}_{index}"


def parse_call_id(call_id: str) -> tuple[str, int, int] | None:
    """``(run_id, step, index)`` of an id :func:`visible_call_id` made; None for another."""
    m = _CALL_ID.fullmatch(call_id)
    if m is None:
        return None
    return "run_" + m[1], int(m[2]), int(m[3])


def _function(tool: Mapping[str, Any], nested: bool, at: str) -> ClientToolSpec:
    kind = tool.get("type")
    if kind != "function":
        raise ApiError(
            400, "unsupported_tool",
            f"{at}: tools of type {kind!r} are not supported here; only function tools "
            "(which the client runs) are", field="tools",
        )
    fn = tool.get("function") if nested else tool
    if not isinstance(fn, Mapping):
        raise ApiError(400, "invalid_request", f"{at}: a function tool needs its function",
                       field="tools")
    name = fn.get("name")
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ApiError(
            400, "invalid_request",
            f"{at}: a function's name is 1 to 64 letters, digits, _ or -, not {name!r}",
            field="tools",
        )
    description = fn.get("description") or ""
    parameters = fn.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(description, str) or not isinstance(parameters, dict):
        raise ApiError(
            400, "invalid_request",
            f"{at}: a function's description is a string and its parameters a JSON Schema "
            "object", field="tools",
        )
    return ClientToolSpec(name, description, parameters)


def client_tools_metadata(
    gw: Gateway,
    agent_name: str,
    tools: Sequence[Any] | None,
    tool_choice: Any,
    *,
    nested: bool,
) -> dict[str, str]:
    """The run metadata that gives the agent the request's function tools (empty: none).

    ``nested``: chat completions' shape (``{"type": "function", "function": {...}}``),
    else the Responses API's (``{"type": "function", "name": ...}``). A tool of another
    type, a name the agent's own tools have, or tools that do not fit the agent's context
    budget are a 400: a tool the client sent is never silently dropped.
    """
    if not tools or tool_choice == "none":
        return {}
    if len(tools) > _MAX_TOOLS:
        raise ApiError(400, "invalid_request", f"at most {_MAX_TOOLS} tools", field="tools")
    specs: list[ClientToolSpec] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise ApiError(400, "invalid_request", f"tools[{i}] is not an object",
                           field="tools")
        specs.append(_function(tool, nested, f"tools[{i}]"))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ApiError(400, "invalid_request", "two tools have the same name", field="tools")
    raw = encode_client_tools(specs)
    try:  # the engine makes the same agent from the same metadata, on whichever worker
        with_client_tools(gw.served(agent_name, "model").agent, raw)
    except ConfigError as exc:
        raise ApiError(400, "invalid_request", str(exc), field="tools") from None
    return {CLIENT_TOOLS_KEY: raw}


def _open(record: RunRecord, entries: Sequence[Any]) -> tuple[list[ApprovalRequested], bool]:
    """The run's open client-tool calls, and whether a human's decision is awaited too."""
    if record.status != "waiting":
        return [], False
    names = client_tool_names(record.metadata)
    asks, _ = open_requests(entries)
    mine = [a for a in asks.values() if a.tool in names and a.kind == "interrupt"]
    return sorted(mine, key=lambda a: a.index), len(mine) < len(asks)


async def client_calls(gw: Gateway, record: RunRecord) -> tuple[list[ClientCall], bool]:
    """The calls ``record``'s run waits on the client for, and whether it also waits for
    a human (an approval: the client cannot give that)."""
    if record.status != "waiting" or CLIENT_TOOLS_KEY not in record.metadata:
        return [], record.status == "waiting"
    entries = [e for _, e in await gw.store.journal(record.run_id)]
    asks, human = _open(record, entries)
    said = {e.step: e.message.content for e in entries if isinstance(e, ModelTurn | StepRecord)}
    calls = [
        ClientCall(visible_call_id(record.run_id, a.step, a.index), a.tool, a.arguments,
                   a.step, a.index, said.get(a.step, ""))
        for a in asks
    ]
    return calls, human


async def resume_listening(
    gw: Gateway, tenant: Tenant, run_id: str, agent: str,
    outputs: Sequence[tuple[str, str]], listen: bool,
) -> tuple[RunRecord, int, TokenSubscription | None]:
    """:func:`resume_with_outputs` for a request to ``agent`` (its tokens subscribed first
    when ``listen``, so the resumed run streams from its first token): the run, the journal
    position a stream starts after, and the subscription (closed if the request fails)."""
    tokens = await gw.listen(run_id) if listen else None
    try:
        record, after = await resume_with_outputs(gw, tenant, outputs)
        if record.agent != agent:
            raise ApiError(400, "invalid_request", f"the calls answered are agent "
                           f"{record.agent!r}'s, not {agent!r}'s", field="model")
    except BaseException:
        if tokens is not None:
            tokens.close()
        raise
    return record, after, tokens


async def resume_with_outputs(
    gw: Gateway, tenant: Tenant, outputs: Sequence[tuple[str, str]]
) -> tuple[RunRecord, int]:
    """Journal the client's ``(call id, output)`` pairs as the calls' answers: the run, and
    the id of its last journal entry before them (where a stream of what follows starts).

    All must name calls of one run of the tenant's. An output for a call answered already
    (a retried request) is skipped, so a retry resumes nothing twice.
    """
    places = [parse_call_id(call_id) for call_id, _ in outputs]
    runs = {p[0] for p in places if p is not None}
    if None in places or len(runs) != 1:
        raise ApiError(
            400, "invalid_request",
            "the tool outputs must answer calls of one response this server made",
            field="tool_call_id",
        )
    (run_id,) = runs
    record = await gw.get(tenant, run_id)
    journal = await gw.store.journal(run_id)
    wanted = {p[1:] for p in places if p is not None}
    # A retry streams again from the first answer: what the run did after it is its reply.
    before = [seq for seq, e in journal
              if isinstance(e, ApprovalDecided) and (e.step, e.index) in wanted]
    after = min(before) - 1 if before else (journal[-1][0] if journal else -1)
    entries = [e for _, e in journal]
    asks, _ = _open(record, entries)
    by_place = {(a.step, a.index): a for a in asks}
    for call_id, output in outputs:
        parsed = parse_call_id(call_id)
        assert parsed is not None
        ask = by_place.get(parsed[1:])
        if ask is None:
            if _answered(entries, parsed[1], parsed[2]):
                continue  # a retry of the request that answered it
            raise ApiError(
                409, "conflict",
                f"call {call_id!r} does not wait for an output (run {run_id} is "
                f"{record.status})", field="tool_call_id",
            )
        record = await gw.decide(tenant, run_id, ask.call_id, "answer", message=output,
                                 by="client")
    steps = {step for step, _ in wanted}
    if record.status == "waiting" and any(a.step in steps for a in asks):
        # Something of the answered step is still open: nothing resumes. (A retry may find
        # the run waiting on later calls: those are its reply.)
        open_now, human = _open(record, [e for _, e in await gw.store.journal(run_id)])
        missing = [a for a in open_now if a.step in steps]
        headers = {"X-Podium-Run-Id": run_id, "x-should-retry": "false"}
        if missing:
            raise ApiError(
                400, "invalid_request",
                "no output for the tool calls "
                + ", ".join(visible_call_id(run_id, a.step, a.index) for a in missing)
                + " (the outputs sent were taken: send the missing ones)",
                field="tool_call_id", headers=headers,
            )
        if human:
            raise ApiError(409, "run_waiting", run_waiting(run_id), headers=headers)
    return record, after


def _answered(entries: Sequence[Any], step: int, index: int) -> bool:
    return any(isinstance(e, ApprovalDecided) and e.step == step and e.index == index
               for e in entries)
