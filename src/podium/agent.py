"""``Agent`` and ``ContextPolicy``: what an agent is, independent of how it is run."""

from __future__ import annotations

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

__all__ = ("Agent", "ContextPolicy")


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
        deadline_s: float | None = None,
        max_invalid_tool_calls: int = 5,
        model_retries: int = 2,
        tags: Sequence[str] = (),
        description: str = "",
        screening: ScreeningPolicy | None = None,
    ) -> None:
        if max_steps < 1:
            raise ConfigError("max_steps must be at least 1")
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
        """Run once on a throw-away in-memory engine and return the finished record."""
        from podium.engine.driver import Engine

        async with Engine() as engine:
            return await engine.run(self, user_input, **kwargs)

    def __repr__(self) -> str:
        return f"Agent({self.name!r}, model={self.model.name!r}, tools={list(self.tools)})"
