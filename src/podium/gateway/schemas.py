"""Request and response bodies of the gateway, as msgspec structs (JSON at the edge).

Request structs forbid unknown fields, so a typo is a 422 naming the field
rather than a silently ignored option. :func:`run_out` turns a stored
:class:`~podium.engine.records.RunRecord` into what the API shows.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from podium.engine.approvals import PendingApproval
from podium.engine.profile import STEP_PHASES, RunProfile
from podium.engine.records import RunFinished, RunRecord
from podium.threads.record import MAX_THREAD_ID, ThreadRecord

__all__ = (
    "AgentList",
    "AgentOut",
    "ApprovalList",
    "ApprovalOut",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatRequest",
    "DecisionIn",
    "Health",
    "Readiness",
    "RunCreate",
    "RunList",
    "RunOut",
    "ThreadCreate",
    "ThreadDeleted",
    "ThreadDetail",
    "ThreadList",
    "ThreadOut",
    "ToolOut",
    "approval_out",
    "output_out",
    "run_out",
    "thread_detail",
    "thread_out",
)

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Timeout = Annotated[float, msgspec.Meta(gt=0, le=3600)]
#: A reply's token budget: 16M tokens is past any model's context, so a larger number
#: (``10**30`` from a client's arithmetic) is a mistake, refused by name, not passed on.
MAX_TOKENS = 1 << 24
# OpenAI's documented ranges for its sampling options: a client sending others has a bug.
# The facade ignores them (the agent's settings apply), so a whole number written as
# ``100.0`` (an integer to JSON Schema, and to some clients) is taken too.
TokenBudget = Annotated[float, msgspec.Meta(ge=1, le=MAX_TOKENS, multiple_of=1)]
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]
Seed = Annotated[float, msgspec.Meta(ge=-(2**63), le=2**63 - 1, multiple_of=1)]
RunStatusName = Literal["queued", "running", "waiting", "completed", "failed", "cancelled"]
#: A thread id as the API accepts it (what :func:`podium.threads.check_thread_id` checks).
THREAD_ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
ThreadId = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_THREAD_ID, pattern=THREAD_ID_PATTERN)
]


class RunCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /v1/runs``: start ``agent`` on ``input``.

    ``wait``: answer when the run has finished (or after ``wait_timeout_s``,
    with its status so far). ``stream``: answer with its events as SSE (it wins
    over ``wait`` when both are set).
    """

    agent: Name
    input: str
    wait: bool = False
    stream: bool = False
    wait_timeout_s: Timeout | None = None
    metadata: dict[str, str] = {}
    #: Continue this thread (made by ``POST /v1/threads``): the run starts from its history,
    #: after the thread's earlier runs have ended.
    thread_id: ThreadId | None = None


class UsageOut(msgspec.Struct):
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    requests: int
    total_tokens: int


class PhaseOut(msgspec.Struct):
    wall_ms: float
    cpu_ms: float


class StepOut(msgspec.Struct):
    step: int
    tool_calls: int
    wall_ms: dict[str, float]
    cpu_ms: dict[str, float]


class ProfileOut(msgspec.Struct):
    """The run's workload profile: per-phase wall and CPU time, summed and per step."""

    admit_ms: float
    wall_ms: float
    cpu_ms: float
    phases: dict[str, PhaseOut]
    steps: list[StepOut]


class RunOut(msgspec.Struct):
    """A run. ``output`` is the answer: text, or for an agent with an ``output_type``
    (``structured: true``) the typed answer as a JSON value (an object, not a string)."""

    id: str
    object: Literal["run"]
    agent: str
    status: RunStatusName
    input: str
    output: Any
    error: str | None
    reason: str | None
    steps: int
    usage: UsageOut
    pool: str
    metadata: dict[str, str]
    created_at: float
    started_at: float | None
    finished_at: float | None
    profile: ProfileOut | None
    structured: bool = False
    #: A sub-agent's run: the run whose call (``"STEP:INDEX"``) started it.
    parent_run_id: str | None = None
    parent_call: str | None = None
    #: The agent driving the run after a hand-off (None: ``agent``).
    active_agent: str | None = None
    thread_id: str | None = None


class RunList(msgspec.Struct):
    object: Literal["list"]
    data: list[RunOut]


class DecisionIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /v1/runs/{run_id}/approvals/{call_id}``: a human's decision on one call.

    ``approve`` (with edited ``arguments``, checked against the tool's schema),
    ``reject`` (``message`` is what the model reads as the call's result) or
    ``answer`` (``message`` answers the tool's question). ``by`` names who decided
    (journaled with the decision; the API key's tenant otherwise).
    """

    decision: Literal["approve", "reject", "answer"]
    message: Annotated[str, msgspec.Meta(max_length=100_000)] | None = None
    arguments: dict[str, Any] | None = None
    by: Name | None = None


class ApprovalOut(msgspec.Struct):
    """A tool call waiting for a human: ``kind`` ``approval`` (the call has not run) or
    ``interrupt`` (the tool asked ``question``). ``until``: when the run fails undecided."""

    object: Literal["approval"]
    run_id: str
    agent: str
    call_id: str
    tool: str
    arguments: Any
    kind: Literal["approval", "interrupt"]
    step: int
    requested_at: float
    question: str | None
    until: float | None


class ApprovalList(msgspec.Struct):
    object: Literal["list"]
    data: list[ApprovalOut]


class ToolOut(msgspec.Struct):
    name: str
    description: str
    parameters: dict[str, Any]


class AgentOut(msgspec.Struct):
    """A served agent; ``output_schema`` is the JSON Schema of its answer (None: text)."""

    name: str
    description: str
    model: str
    pool: str
    max_steps: int
    tools: list[ToolOut]
    output_schema: dict[str, Any] | None = None


class AgentList(msgspec.Struct):
    object: Literal["list"]
    data: list[AgentOut]


class ModelOut(msgspec.Struct):
    """A served agent in OpenAI's model-list shape (``client.models.list()``)."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: Literal["list"]
    data: list[ModelOut]


class Health(msgspec.Struct):
    status: str


class Readiness(msgspec.Struct):
    status: Literal["ready", "unavailable"]
    checks: dict[str, str]


# -- threads ---------------------------------------------------------------------------------


class ThreadCreate(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /v1/threads``: a new conversation; it expires ``ttl_s`` after its last run
    (default 30 days; ``null``: never)."""

    ttl_s: Annotated[float, msgspec.Meta(gt=0, le=10 * 365 * 86_400)] | None = 30 * 86_400.0
    metadata: dict[str, str] = {}


class ThreadOut(msgspec.Struct):
    """A thread: ``runs`` counts its runs, ``turns`` the completed ones in its history,
    ``pending`` the runs not folded in yet (the one whose turn it is, then the waiting)."""

    id: str
    object: Literal["thread"]
    created_at: float
    updated_at: float
    expires_at: float | None
    runs: int
    turns: int
    pending: int
    metadata: dict[str, str]


class MessageOut(msgspec.Struct, omit_defaults=True):
    role: str
    content: str = ""
    tool_calls: list[dict[str, str]] = []
    tool_call_id: str | None = None
    name: str | None = None


class ThreadDetail(msgspec.Struct):
    """A thread with its conversation (as the next run will start from it, compacted)
    and the ids of its runs in order."""

    id: str
    object: Literal["thread"]
    created_at: float
    updated_at: float
    expires_at: float | None
    runs: int
    turns: int
    pending: int
    metadata: dict[str, str]
    run_ids: list[str]
    messages: list[MessageOut]


class ThreadList(msgspec.Struct):
    object: Literal["list"]
    data: list[ThreadOut]


class ThreadDeleted(msgspec.Struct):
    id: str
    object: Literal["thread.deleted"]
    deleted: bool


# -- the OpenAI-compatible facade ----------------------------------------------------------


class ContentPart(msgspec.Struct, kw_only=True):
    type: str
    text: str | None = None


# Unknown fields are accepted and ignored, as vLLM does: clients (OpenAI's SDK, LangChain)
# send fields of OpenAI's API that change over time (an assistant message's `refusal`,
# `tools` bound to a model, `logprobs`, `store`, `reasoning_effort`), and a 422 for each
# broke them. The agent's own tools and settings apply.
class ChatMessage(msgspec.Struct, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    include_usage: bool = False


class ResponseFormat(msgspec.Struct, kw_only=True):
    """OpenAI's ``response_format``: ``text``, ``json_object`` or ``json_schema`` (whose
    ``json_schema.schema``, if given, must be the agent's ``output_type``'s: see
    :mod:`podium.gateway.response_format`)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/chat/completions``: ``model`` names the agent; sampling options and any
    other field of OpenAI's API (``logprobs``, ``parallel_tool_calls``…) are accepted for
    compatibility and ignored (the agent's own settings apply). ``tools`` are the client's
    own function tools, offered to the model beside the agent's: a call to one comes back
    as ``tool_calls`` for the client to run (``tool_choice: "none"`` leaves them out). A sampling
    option outside OpenAI's range (``temperature`` 0–2, ``top_p`` 0–1, penalties −2–2,
    ``max_tokens`` 1–16,777,216, a 64-bit ``seed``) is a 422 naming it. ``response_format``
    asking for JSON needs an agent with an ``output_type``: its answer is the JSON."""

    model: Name
    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Annotated[float, msgspec.Meta(ge=1, le=1)] = 1
    temperature: Temperature | None = None
    top_p: Probability | None = None
    max_tokens: TokenBudget | None = None
    max_completion_tokens: TokenBudget | None = None
    stop: str | list[str] | None = None
    seed: Seed | None = None
    user: str | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    metadata: dict[str, str] | None = None
    response_format: ResponseFormat | None = None
    #: Podium's extension (``extra_body={"thread_id": ...}`` in OpenAI's SDK): continue the
    #: thread; the input is then the last user message alone, the history the thread's.
    thread_id: ThreadId | None = None
    #: Function tools the client runs itself (see :mod:`podium.gateway.client_tools`).
    tools: list[Any] | None = None
    tool_choice: Any = None


class ChatUsage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class FunctionOut(msgspec.Struct):
    name: str
    arguments: str


class ToolCallOut(msgspec.Struct):
    """A call of a client tool, for the client to run (``finish_reason: "tool_calls"``)."""

    id: str
    type: Literal["function"]
    function: FunctionOut


class ChunkToolCall(msgspec.Struct):
    index: int
    id: str
    type: Literal["function"]
    function: FunctionOut


class AssistantMessage(msgspec.Struct, omit_defaults=True):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(msgspec.Struct):
    index: int
    message: AssistantMessage
    finish_reason: str


class ChatCompletion(msgspec.Struct):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage


class ChunkDelta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(msgspec.Struct):
    index: int
    delta: ChunkDelta
    finish_reason: str | None = None


class ChatCompletionChunk(msgspec.Struct, omit_defaults=True):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: ChatUsage | None = None


# -- record → API view ---------------------------------------------------------------------


def profile_out(profile: RunProfile) -> ProfileOut:
    phases = {
        name: PhaseOut(wall / 1e6, cpu / 1e6)
        for name, (wall, cpu) in profile.phase_totals().items()
    }
    steps = [
        StepOut(
            s.step,
            s.tool_calls,
            {n: w / 1e6 for n, w in zip(STEP_PHASES, s.wall_ns, strict=False)},
            {n: c / 1e6 for n, c in zip(STEP_PHASES, s.cpu_ns, strict=False)},
        )
        for s in profile.steps
    ]
    return ProfileOut(
        profile.admit_ns / 1e6, profile.wall_ns / 1e6, profile.cpu_ns / 1e6, phases, steps
    )


def _phase_totals_safe(profile: RunProfile) -> ProfileOut | None:
    # A profile whose steps carry fewer phases than STEP_PHASES (an older record) is skipped.
    if any(len(s.wall_ns) < len(STEP_PHASES) for s in profile.steps):
        return None
    return profile_out(profile)


def output_out(record: RunRecord | RunFinished) -> Any:
    """The run's output as the API shows it: a structured answer's JSON is embedded as
    JSON (it is canonical JSON already: no decoding), text stays a string."""
    if record.structured and record.output is not None:
        return msgspec.Raw(record.output.encode())
    return record.output
def approval_out(pending: PendingApproval) -> ApprovalOut:
    try:
        arguments: Any = msgspec.json.decode(pending.arguments)
    except msgspec.DecodeError:  # shown as given
        arguments = pending.arguments
    return ApprovalOut(
        "approval", pending.run_id, pending.agent, pending.call_id, pending.tool, arguments,
        "interrupt" if pending.kind == "interrupt" else "approval", pending.step,
        pending.requested_at, pending.question, pending.until,
    )


def run_out(record: RunRecord) -> RunOut:
    u = record.usage
    return RunOut(
        id=record.run_id,
        object="run",
        agent=record.agent,
        status=record.status,
        input=record.input,
        output=output_out(record),
        error=record.error,
        reason=record.reason,
        steps=record.steps,
        usage=UsageOut(
            u.input_tokens, u.output_tokens, u.cached_tokens, u.requests, u.total_tokens
        ),
        pool=record.pool,
        metadata=dict(record.metadata),
        created_at=record.created_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        profile=None if record.profile is None else _phase_totals_safe(record.profile),
        structured=record.structured,
        parent_run_id=record.parent_run_id,
        parent_call=record.parent_call,
        active_agent=record.active_agent,
        thread_id=record.thread_id,
    )


def thread_out(thread: ThreadRecord) -> ThreadOut:
    return ThreadOut(
        thread.thread_id, "thread", thread.created_at, thread.updated_at, thread.expires_at,
        len(thread.runs), thread.turns, len(thread.pending), dict(thread.metadata),
    )


def thread_detail(thread: ThreadRecord) -> ThreadDetail:
    messages = [
        MessageOut(
            m.role,
            m.content,
            [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls],
            m.tool_call_id,
            m.name,
        )
        for m in thread.history
    ]
    return ThreadDetail(
        thread.thread_id, "thread", thread.created_at, thread.updated_at, thread.expires_at,
        len(thread.runs), thread.turns, len(thread.pending), dict(thread.metadata),
        list(thread.runs), messages,
    )
