"""``Agent`` and ``ContextPolicy``: what an agent is, independent of how it is run."""

from __future__ import annotations

import functools
import inspect
import typing
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, overload

import msgspec

from podium.context.buffer import Prefix, summary_overhead
from podium.context.tokenizers import MESSAGE_OVERHEAD_TOKENS, EstimateTokenizer, Tokenizer
from podium.errors import ConfigError
from podium.handoffs import Handoff
from podium.models.base import Model, ModelSettings
from podium.output import FINAL_TOOL, OutputModeSetting, OutputSpec, OutT
from podium.security.screen import ScreeningPolicy
from podium.tools.agent_tool import AgentTool, HandoffTool, agent_tools
from podium.tools.tool import Tool

if TYPE_CHECKING:
    from podium.engine.records import RunRecord
    from podium.store.base import RunStore

__all__ = ("DEFAULT_DEADLINE_S", "DEFAULT_MAX_TOOL_CALLS", "Agent", "ContextPolicy")

#: A run's wall-clock limit unless its agent (or the run) says otherwise: a hung model
#: call or a ``timeout=None`` tool cannot hold a run for longer. ``None`` only explicitly.
DEFAULT_DEADLINE_S = 600.0
#: Tool calls run per model reply; the rest become error observations.
DEFAULT_MAX_TOOL_CALLS = 32


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """How a run's context is kept within budget.

    - ``max_context_tokens``: when the prompt would pass this, the oldest turns
      are compacted (the user input and the last ``keep_last_turns`` stay verbatim).
    - ``max_tool_result_tokens``: longer tool results are cut with a marker.
    - ``compaction``: ``"model"`` asks the agent's model for a summary (falling
      back to extractive if that fails); ``"extractive"`` keeps the head of each
      removed message without a model call.
    - ``tokenizer``: the built-in estimate, or a :class:`HuggingFaceTokenizer`.
    """

    max_context_tokens: int = 32_000
    max_tool_result_tokens: int = 2_000
    keep_last_turns: int = 4
    compaction: Literal["model", "extractive"] = "extractive"
    summary_max_tokens: int = 512
    tokenizer: Tokenizer = field(default_factory=EstimateTokenizer)

    def __post_init__(self) -> None:
        if self.max_context_tokens <= 0 or self.max_tool_result_tokens <= 0:
            raise ConfigError("token budgets must be positive")
        if self.keep_last_turns < 1:
            raise ConfigError("keep_last_turns must be at least 1")
        if self.compaction not in ("model", "extractive"):
            raise ConfigError(
                f"compaction must be 'model' or 'extractive', not {self.compaction!r}"
            )
        if self.summary_max_tokens < 1:
            raise ConfigError("summary_max_tokens must be at least 1")
        if not isinstance(self.tokenizer, Tokenizer):
            raise ConfigError(
                f"tokenizer takes a Tokenizer (EstimateTokenizer(), HuggingFaceTokenizer."
                f"from_file(...)), not {self.tokenizer!r:.60}"
            )
        summary = self.summary_max_tokens + summary_overhead(self.tokenizer)
        if summary >= self.max_context_tokens:
            raise ConfigError(
                f"summary_max_tokens={self.summary_max_tokens} does not fit "
                f"max_context_tokens={self.max_context_tokens}: a compacted prompt holds the "
                f"summary ({summary} tokens with its marker) beside the instructions, the "
                "input and the latest turn; lower summary_max_tokens or raise the budget"
            )


def _result_limit(tool: Tool[Any, Any], default: int) -> int:
    """The most tokens of one result of ``tool`` the context takes."""
    own = getattr(getattr(tool, "policy", None), "max_result_tokens", None)
    return own if isinstance(own, int) else default


class Agent(Generic[OutT]):
    """An agent: a model, instructions, the tools it may call, and its limits.

    Example::

        agent = Agent(
            "support",
            SimulatedModel(Scenario.react("get_order", {"order_id": "A-1"})),
            instructions="You answer questions about orders.",
            tools=[get_order],
            max_steps=8,
        )
        record = await agent.run("Where is my order A-1?")

    Limits: ``max_steps`` model calls; ``deadline_s`` of wall time per run (default
    :data:`DEFAULT_DEADLINE_S`; the run then fails with reason ``deadline``; ``None``
    for none); ``max_tool_calls`` calls run per reply (default
    :data:`DEFAULT_MAX_TOOL_CALLS`; the rest get an error observation);
    ``max_invalid_tool_calls`` unknown or malformed calls per run.

    Structured output: with ``output_type`` (a msgspec ``Struct``, a dataclass, a
    ``TypedDict``, or a type such as ``list[Item]``) the model is asked for that type
    and its answer is validated; ``agent.output_of(record)`` is the typed value. The
    type is part of the agent's: ``Agent(..., output_type=Verdict)`` is an
    ``Agent[Verdict]`` (``Agent[str]`` without one), its runs are ``RunRecord[Verdict]``
    and ``output_of`` returns a ``Verdict`` under mypy and pyright.
    ``output_mode`` says how it is asked: ``"native"`` sends the JSON Schema as
    OpenAI's ``response_format``, ``"tool"`` offers a ``final_result`` tool whose
    arguments are the answer, ``"auto"`` (the default) does what the model supports
    (:attr:`Model.structured_output`). An invalid answer goes back to the model with
    the error, ``output_retries`` times; then the run fails with ``invalid_output``::

        class Verdict(msgspec.Struct):
            order_id: str
            refund: bool

        agent = Agent("triage", model, output_type=Verdict)  # an Agent[Verdict]
        verdict = agent.output_of(await agent.run("Refund A-1?"))  # a Verdict

    Several agents: ``other.as_tool()`` is a tool whose call runs ``other`` as a child
    run (at most ``max_parallel_children`` of one run's children at once);
    ``handoffs=[other]`` gives the model a ``transfer_to_<other>`` tool that hands the
    conversation over, ``Handoff(other, input_filter=...)`` with only part of its history
    (see :meth:`as_tool`, :meth:`add_handoffs`, :mod:`podium.handoffs`).

    Human approval (tools with ``requires_approval``, or a tool raising
    :class:`~podium.errors.Interrupt`) parks the run ``waiting``: with
    ``deadline_while_waiting="count"`` (the default) its deadline keeps running and
    a run still waiting past it fails with reason ``deadline``; with ``"pause"``
    the time spent waiting is not counted. ``approval_timeout_s`` bounds each wait
    on its own (reason ``approval_timeout``). See ``docs/approvals.md``.

    Secrets: ``secrets=[...]`` declares values (the API keys its tools hold) that no
    journal, record, event or stream may show in clear; with the tools' ``secret_args``
    and ``secret_result`` they are scrubbed wherever they reappear, in any common
    encoding (see ``docs/security.md``).

    The prompt prefix (instructions and tool schemas) is rendered and counted
    once, here; runs share it.
    """

    # The output type is inferred from ``output_type``: none is a text answer (str); a
    # class (or ``list[Item]``) is itself; what is not a class to a type checker (a union,
    # ``Annotated[...]``) gives ``Agent[Any]``.
    @overload
    def __init__(
        self: Agent[str],
        name: str,
        model: Model,
        instructions: str = "",
        tools: Sequence[Tool[Any, Any]] = (),
        *,
        max_steps: int = 12,
        context: ContextPolicy | None = None,
        settings: ModelSettings | None = None,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        max_invalid_tool_calls: int = 5,
        model_retries: int = 2,
        tags: Sequence[str] = (),
        description: str = "",
        screening: ScreeningPolicy | None = None,
        output_type: None = None,
        output_mode: OutputModeSetting = "auto",
        output_retries: int = 2,
        handoffs: Sequence[Agent[Any] | Handoff] = (),
        max_parallel_children: int = 4,
        approval_timeout_s: float | None = None,
        deadline_while_waiting: Literal["pause", "count"] = "count",
        secrets: Sequence[str] = (),
    ) -> None: ...

    @overload
    def __init__(
        self,
        name: str,
        model: Model,
        instructions: str = "",
        tools: Sequence[Tool[Any, Any]] = (),
        *,
        max_steps: int = 12,
        context: ContextPolicy | None = None,
        settings: ModelSettings | None = None,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        max_invalid_tool_calls: int = 5,
        model_retries: int = 2,
        tags: Sequence[str] = (),
        description: str = "",
        screening: ScreeningPolicy | None = None,
        output_type: type[OutT],
        output_mode: OutputModeSetting = "auto",
        output_retries: int = 2,
        handoffs: Sequence[Agent[Any] | Handoff] = (),
        max_parallel_children: int = 4,
        approval_timeout_s: float | None = None,
        deadline_while_waiting: Literal["pause", "count"] = "count",
        secrets: Sequence[str] = (),
    ) -> None: ...

    @overload
    def __init__(
        self: Agent[Any],
        name: str,
        model: Model,
        instructions: str = "",
        tools: Sequence[Tool[Any, Any]] = (),
        *,
        max_steps: int = 12,
        context: ContextPolicy | None = None,
        settings: ModelSettings | None = None,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        max_invalid_tool_calls: int = 5,
        model_retries: int = 2,
        tags: Sequence[str] = (),
        description: str = "",
        screening: ScreeningPolicy | None = None,
        output_type: Any,
        output_mode: OutputModeSetting = "auto",
        output_retries: int = 2,
        handoffs: Sequence[Agent[Any] | Handoff] = (),
        max_parallel_children: int = 4,
        approval_timeout_s: float | None = None,
        deadline_while_waiting: Literal["pause", "count"] = "count",
        secrets: Sequence[str] = (),
    ) -> None: ...

    def __init__(
        self,
        name: str,
        model: Model,
        instructions: str = "",
        tools: Sequence[Tool[Any, Any]] = (),
        *,
        max_steps: int = 12,
        context: ContextPolicy | None = None,
        settings: ModelSettings | None = None,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        max_invalid_tool_calls: int = 5,
        model_retries: int = 2,
        tags: Sequence[str] = (),
        description: str = "",
        screening: ScreeningPolicy | None = None,
        output_type: Any = None,
        output_mode: OutputModeSetting = "auto",
        output_retries: int = 2,
        handoffs: Sequence[Agent[Any] | Handoff] = (),
        max_parallel_children: int = 4,
        approval_timeout_s: float | None = None,
        deadline_while_waiting: Literal["pause", "count"] = "count",
        secrets: Sequence[str] = (),
    ) -> None:
        _check_texts(name, instructions)
        _check_model(name, model)
        tools = _tool_list(name, tools)
        _check_numbers(name, deadline_s, (
            ("max_steps", max_steps, 1),
            ("max_tool_calls", max_tool_calls, 1),
            ("max_parallel_children", max_parallel_children, 1),
            ("max_invalid_tool_calls", max_invalid_tool_calls, 0),
            ("model_retries", model_retries, 0),
            ("output_retries", output_retries, 0),
        ))
        _check_kinds(name, (
            ("context", context, ContextPolicy),
            ("settings", settings, ModelSettings),
            ("screening", screening, ScreeningPolicy),
        ), tags, secrets)
        if isinstance(handoffs, Agent | Handoff):
            raise ConfigError(f"agent {name!r}: handoffs takes a list of agents: handoffs=[...]")
        if approval_timeout_s is not None and not approval_timeout_s > 0:
            raise ConfigError("approval_timeout_s must be positive (or None for none)")
        if deadline_while_waiting not in ("pause", "count"):
            raise ConfigError(
                f"deadline_while_waiting must be 'pause' or 'count', not {deadline_while_waiting!r}"
            )
        names = [t.name for t in tools]
        if len(set(names)) != len(names):  # only the clashes: an MCP list may be long
            twice = sorted(n for n, count in Counter(names).items() if count > 1)
            raise ConfigError(f"agent {name!r}: duplicate tool names {', '.join(map(repr, twice))}")
        if output_mode not in ("auto", "native", "tool"):
            raise ConfigError(f"agent {name!r}: output_mode must be 'auto', 'native' or 'tool'")
        if output_type is not None and FINAL_TOOL in names:
            raise ConfigError(
                f"agent {name!r}: a tool named {FINAL_TOOL!r} clashes with the final-answer "
                "tool of structured output; rename it"
            )
        self.name = name
        self.model = model
        self.instructions = instructions
        self.tools: dict[str, Tool[Any, Any]] = {t.name: t for t in tools}
        self.max_steps = max_steps
        self.context = context or ContextPolicy()
        self.settings = settings or ModelSettings()
        self.deadline_s = deadline_s
        self.max_tool_calls = max_tool_calls
        self.max_invalid_tool_calls = max_invalid_tool_calls
        self.model_retries = model_retries
        self.tags = tuple(tags)
        self.description = description or instructions.split("\n", 1)[0][:200]
        #: Prompt-injection screening of the input and tool results (None: off, free).
        self.screening = screening
        #: The structured answer's type (None: a text answer) and how it is asked for.
        self.output_type: type[OutT] | None = output_type
        self.output_mode: OutputModeSetting = output_mode
        self.output_retries = output_retries
        self.output: OutputSpec | None = None
        self.approval_timeout_s = approval_timeout_s
        #: Values never written down in clear (API keys its tools use, say): see
        #: :mod:`podium.security.redact`.
        self.secrets = tuple(secrets)
        self.deadline_while_waiting = deadline_while_waiting
        #: Some tool needs approval for some calls: decided once here, tested once per step.
        self.gated = any(t.approval is not None for t in tools)
        self.max_parallel_children = max_parallel_children
        #: ``transfer_to_<name>`` tools by name (empty: no hand-offs; tested once per step).
        self.handoffs: dict[str, HandoffTool] = {}
        self._tool_definitions = tuple(t.definition for t in tools)
        self.prefix = Prefix(instructions, self._tool_definitions, self.context.tokenizer)
        #: Whether runs set up child runs or hand-offs at load (decided here, once).
        self.multi_agent = agent_tools(self.tools)
        if handoffs:
            self.add_handoffs(*handoffs)
        if output_type is not None:
            self._bind_output()
        self._check_context_fits()

    def _bind_output(self) -> None:
        """Decide how the model is asked for the output type (its capability or the agent's
        ``output_mode``); the request settings and the prompt prefix follow. Called again
        when the agent is moved to another model (:func:`podium.factory.with_model`)."""
        mode = self.model.structured_output if self.output_mode == "auto" else self.output_mode
        if self.output is None or self.output.mode != mode:
            self.output = OutputSpec(self.output_type, mode)
        self.settings = msgspec.structs.replace(self.settings, output=self.output.request)
        self._render_prefix()

    def _render_prefix(self) -> None:
        """The prompt prefix from the instructions, the tools and (in tool mode) the
        structured answer's ``final_result`` tool."""
        tools = self._tool_definitions
        if self.output is not None and self.output.mode == "tool":
            tools = (*tools, self.output.tool)
        if tools is not self.prefix.tools:
            self.prefix = Prefix(self.instructions, tools, self.context.tokenizer)
            self._check_context_fits()

    def _check_context_fits(self) -> None:
        """Refuse a context budget that cannot hold what a compacted prompt always keeps:
        the prefix, a summary and (with tools) one tool result of the largest size."""
        policy = self.context
        prefix = self.prefix.tokens
        summary = policy.summary_max_tokens + summary_overhead(policy.tokenizer)
        # A turn kept verbatim: the assistant message calling a tool and one result.
        result = max(
            (_result_limit(t, policy.max_tool_result_tokens) for t in self.tools.values()),
            default=0,
        )
        turn = result + 2 * MESSAGE_OVERHEAD_TOKENS if result else 0
        if prefix + summary + turn > policy.max_context_tokens:
            with_turn = f" and one tool result ({result} tokens at most)" if turn else ""
            raise ConfigError(
                f"agent {self.name!r}: max_context_tokens={policy.max_context_tokens} cannot "
                f"hold the instructions and tool schemas ({prefix} tokens), a summary of "
                f"compacted turns (summary_max_tokens={policy.summary_max_tokens}, {summary} "
                f"tokens with its marker){with_turn}; raise max_context_tokens or lower "
                "summary_max_tokens or max_tool_result_tokens"
            )

    def as_tool(self, name: str | None = None, description: str | None = None) -> AgentTool:
        """This agent as a tool of another: each call runs it as a child run.

        Example::

            researcher = Agent("researcher", model, "You research one topic.", [search])
            lead = Agent("lead", model, "Split the question, then summarize.",
                         [researcher.as_tool(description="Research one topic")])

        The call's one argument, ``input``, is the child's input; its answer is the
        result. The child run has its own record (``parent_run_id``, ``parent_call``),
        journal and profile; a resumed parent reuses a finished child's answer and
        resumes an unfinished one, never starting it twice.
        """
        return AgentTool(self, name, description)

    def add_handoffs(self, *agents: Agent[Any] | Handoff) -> None:
        """Let this agent hand the conversation to ``agents`` (``transfer_to_<name>`` tools).

        An agent receives the whole history; ``Handoff(agent, input_filter=...)`` what the
        filter keeps of it (see :mod:`podium.handoffs`). For agents that hand back and
        forth (``a`` to ``b`` and ``b`` to ``a``), create both, then add the hand-offs.
        Call it before the agent serves runs.
        """
        for declared in agents:
            if isinstance(declared, Handoff):
                target, input_filter = declared.agent, declared.input_filter
            else:
                target, input_filter = declared, None
            if not isinstance(target, Agent):  # a name: only podium.toml takes agents by name
                raise ConfigError(
                    f"agent {self.name!r}: handoffs takes Agent objects, not {target!r}; pass "
                    "the agent itself, or Handoff(agent, input_filter=...) (podium.toml's "
                    "handoffs = [...] takes names)"
                )
            if target is self:
                raise ConfigError(f"agent {self.name!r} cannot hand off to itself")
            tool = HandoffTool(target, input_filter)
            if tool.name in self.tools:
                raise ConfigError(f"agent {self.name!r}: duplicate tool name {tool.name!r}")
            # New dicts: a copy of this agent (factory.with_model) keeps its own.
            self.tools = {**self.tools, tool.name: tool}
            self.handoffs = {**self.handoffs, tool.name: tool}
        self._tool_definitions = tuple(t.definition for t in self.tools.values())
        self._render_prefix()
        self.multi_agent = True

    async def run(self, user_input: str, **kwargs: Any) -> RunRecord[OutT]:
        """Run once on a throw-away in-memory engine and return the finished record.

        With ``thread_id=...`` the run continues that conversation: such runs share one
        in-memory store per process, so the thread lives as long as the process (give an
        :class:`~podium.Engine` a SQLite or Redis store to keep it longer).
        """
        from podium.engine.driver import Engine

        store = _threads_store() if kwargs.get("thread_id") is not None else None
        async with Engine(store) as engine:
            return await engine.run(self, user_input, **kwargs)

    def run_sync(self, user_input: str, **kwargs: Any) -> RunRecord[OutT]:
        """:meth:`run` for code without an event loop (a script, a notebook cell that is
        not async, a test): runs it on a loop of its own and returns the finished record::

            record = agent.run_sync("Where is my order A-1?")
            print(record.output)

        Inside a running event loop, ``await agent.run(...)`` instead (this would block it).
        """
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(user_input, **kwargs))
        raise ConfigError(
            f"agent {self.name!r}: run_sync() called inside a running event loop; "
            "use `await agent.run(...)` there"
        )

    def output_of(self, record: RunRecord[Any]) -> OutT:
        """The answer of ``record`` (a run of this agent) as the agent's output type: the
        validated ``output_type`` value, or the text of an agent without one. Typed by the
        agent, so ``verdict`` below is a ``Verdict`` to mypy and pyright::

            agent = Agent("triage", model, output_type=Verdict)
            verdict = agent.output_of(await agent.run("Refund A-1?"))

        Raises :class:`~podium.errors.RunError` if the run did not complete, and
        :class:`~podium.errors.OutputValidationError` if its output is not one (a record
        of another agent). ``record.output_as(T)`` does the same with a type given.
        """
        output_type: Any = str if self.output_type is None else self.output_type
        value: OutT = record.output_as(output_type)
        return value

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.model.name!r}, tools={list(self.tools)})"


def positive_seconds(seconds: object) -> bool:
    """A positive number of seconds (``math.inf`` included; NaN, a bool, a string not)."""
    return (
        isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0
    )  # NaN is not > 0


def _check_texts(name: object, instructions: object) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"an agent's name is a non-empty string, not {name!r}")
    if not isinstance(instructions, str):
        hint = " (tools go in tools=[...])" if isinstance(instructions, (list, tuple)) else ""
        raise ConfigError(
            f"agent {name!r}: instructions must be a string, not "
            f"{type(instructions).__name__}{hint}"
        )


def _check_model(agent: str, model: object) -> None:
    """Refuse what is not a model instance, saying what to pass instead."""
    if isinstance(model, Model):
        if not _returns_coroutine(model.request):  # the engine awaits its reply
            raise ConfigError(
                f"agent {agent!r}: {type(model).__name__}.request must be an async def "
                "(or a def annotated to return a Coroutine)"
            )
        return
    if isinstance(model, str):
        hint = (
            f"a model name needs its server: OpenAIChatModel(base_url, {model!r}) from "
            "podium.models (or a [[models]] entry of podium.toml and podium run --model)"
        )
    elif isinstance(model, type) and issubclass(model, Model):
        hint = f"pass an instance, {model.__name__}(...), not the class"
    elif callable(model):
        hint = "a reply function goes in FunctionModel(fn)"
    else:
        hint = "pass a Model: SimulatedModel, FunctionModel, OpenAIChatModel..."
    raise ConfigError(f"agent {agent!r}: model {model!r} is not a Model: {hint}")


def _returns_coroutine(method: Any) -> bool:
    """An ``async def``, or a plain ``def`` declared to return a coroutine (one that
    delegates without awaiting); a ``def`` declared to return a reply, or not declared,
    is the forgotten ``async``."""
    if inspect.iscoroutinefunction(method):
        return True
    try:
        returns = typing.get_type_hints(method).get("return")
    except Exception:  # unreadable hints: not ours to refuse
        return True
    return typing.get_origin(returns) is Coroutine  # the engine drives it with send()


def _tool_list(agent: str, tools: object) -> tuple[Tool[Any, Any], ...]:
    """``tools`` as a tuple (read once: a generator is spent by the first look), refused
    unless it is a collection of tools."""
    if isinstance(tools, Tool):
        raise ConfigError(f"agent {agent!r}: tools takes a list: tools=[{tools.name}]")
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Iterable):
        raise ConfigError(
            f"agent {agent!r}: tools takes a list of tools, not {type(tools).__name__}"
        )
    listed = tuple(tools)
    for t in listed:
        if isinstance(t, Agent):
            raise ConfigError(
                f"agent {agent!r}: {t!r} is an agent, not a tool: pass {t.name}.as_tool() "
                "(it answers as a child run) or handoffs=[...] (it takes the conversation over)"
            )
        if not isinstance(t, Tool):  # a plain function is the common case
            what = getattr(t, "__name__", type(t).__name__)
            raise ConfigError(
                f"agent {agent!r}: tool {what!r} is not a tool: decorate the function with @tool"
            )
    return listed


def _check_numbers(
    name: str, deadline_s: float | None, counts: Sequence[tuple[str, object, int]]
) -> None:
    """Each count a whole number of at least its least; the deadline positive seconds."""
    for what, count, least in counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < least:
            raise ConfigError(
                f"agent {name!r}: {what} must be a whole number of at least {least}, "
                f"not {count!r}"
            )
    if deadline_s is not None and not positive_seconds(deadline_s):
        raise ConfigError(
            f"agent {name!r}: deadline_s must be positive seconds (math.inf or None for "
            f"no deadline), not {deadline_s!r}"
        )


def _check_kinds(
    name: str, typed: Sequence[tuple[str, object, type]], tags: object, secrets: Sequence[str]
) -> None:
    """Each setting of its class (None: the default); tags and secrets lists of strings."""
    for what, value, kind in typed:
        if value is not None and not isinstance(value, kind):
            raise ConfigError(
                f"agent {name!r}: {what} takes a {kind.__name__}(...), not {value!r}"
            )
    if isinstance(tags, str):  # tuple("prod") would be ("p", "r", "o", "d")
        raise ConfigError(f"agent {name!r}: tags takes a list of strings: tags=[{tags!r}]")
    if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
        raise ConfigError(f"agent {name!r}: tags takes a list of strings, got {tags!r:.60}")
    if isinstance(secrets, str) or not all(isinstance(s, str) for s in secrets):
        raise ConfigError(f"agent {name!r}: secrets takes a list of strings")


@functools.cache
def _threads_store() -> RunStore:
    """The in-memory store of this process's ``Agent.run(..., thread_id=...)`` threads."""
    from podium.store.memory import MemoryRunStore

    return MemoryRunStore()
