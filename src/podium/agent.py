"""``Agent`` and ``ContextPolicy``: what an agent is, independent of how it is run."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from podium.context.buffer import Prefix
from podium.context.tokenizers import EstimateTokenizer, Tokenizer
from podium.errors import ConfigError
from podium.models.base import Model, ModelSettings
from podium.security.screen import ScreeningPolicy
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


class Agent:
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

    The prompt prefix (instructions and tool schemas) is rendered and counted
    once, here; runs share it.
    """

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
    ) -> None:
        if max_steps < 1:
            raise ConfigError("max_steps must be at least 1")
        if max_tool_calls < 1:
            raise ConfigError("max_tool_calls must be at least 1")
        if deadline_s is not None and not deadline_s > 0:
            raise ConfigError("deadline_s must be positive (or None for no deadline)")
        for t in tools:
            if not isinstance(t, Tool):  # the types say it is one; a plain function is common
                what = getattr(t, "__name__", type(t).__name__)  # type: ignore[unreachable]
                raise ConfigError(
                    f"agent {name!r}: tool {what!r} is not a tool: decorate the function with @tool"
                )
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"agent {name!r}: duplicate tool names in {names}")
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
        self.prefix = Prefix(
            instructions, tuple(t.definition for t in tools), self.context.tokenizer
        )

    async def run(self, user_input: str, **kwargs: Any) -> RunRecord:
        """Run once on a throw-away in-memory engine and return the finished record.

        With ``thread_id=...`` the run continues that conversation: such runs share one
        in-memory store per process, so the thread lives as long as the process (give an
        :class:`~podium.Engine` a SQLite or Redis store to keep it longer).
        """
        from podium.engine.driver import Engine

        store = _threads_store() if kwargs.get("thread_id") is not None else None
        async with Engine(store) as engine:
            return await engine.run(self, user_input, **kwargs)

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.model.name!r}, tools={list(self.tools)})"


@functools.cache
def _threads_store() -> RunStore:
    """The in-memory store of this process's ``Agent.run(..., thread_id=...)`` threads."""
    from podium.store.memory import MemoryRunStore

    return MemoryRunStore()
