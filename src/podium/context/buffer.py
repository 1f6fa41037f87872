"""A run's context: the agent's cached prefix plus an append-only history.

``messages`` is one list, ``[system, input, ...history]``; each step only
appends to it, so consecutive model calls of a run share their longest
prefix and a backend's prefix cache hits. Token counts are taken once per
message, when it enters. Only compaction rewrites the middle of the list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from podium.context.tokenizers import Tokenizer, count_message
from podium.messages import Message
from podium.models.base import ToolDefinition

__all__ = (
    "SUMMARY_MARKER",
    "CompactionPlan",
    "ContextBuffer",
    "Prefix",
    "summary_message",
    "summary_overhead",
    "truncate_text",
)

#: Opens the message that stands in for compacted turns.
SUMMARY_MARKER = "[Summary of earlier steps]"
#: A summary cut shorter than this says too little: fewer turns are kept to make room.
MIN_SUMMARY_TOKENS = 16

_encode = msgspec.json.encode


class Prefix:
    """The part of every prompt an agent sends that never changes: rendered and counted once."""

    __slots__ = ("system", "tokens", "tools")

    def __init__(self, instructions: str, tools: tuple[ToolDefinition, ...], tokenizer: Tokenizer):
        schema_tokens = sum(tokenizer.count(_encode(t).decode()) for t in tools)
        system = Message("system", instructions)
        system.tokens = count_message(tokenizer, system)
        self.system = system
        self.tools = tools
        self.tokens = system.tokens + schema_tokens


class CompactionPlan(msgspec.Struct, frozen=True):
    """Replace ``messages[start:end]`` by one summary message.

    ``summary_tokens``: the most tokens the summary's text may have so the compacted
    context fits its budget (0: not bounded, as when replaying a journaled compaction).
    """

    start: int
    end: int
    summary_tokens: int = 0


def summary_message(summary: str) -> Message:
    """The message that stands in for compacted turns."""
    return Message("user", f"{SUMMARY_MARKER}\n{summary}")


def summary_overhead(tokenizer: Tokenizer) -> int:
    """Tokens of a summary message besides its text (template, marker)."""
    return tokenizer.count_message(summary_message(""))


def truncate_text(text: str, max_tokens: int, tokenizer: Tokenizer) -> str:
    """``text`` cut to ``max_tokens`` with a marker saying how much was cut."""
    total = tokenizer.count(text)
    if total <= max_tokens:
        return text
    head = tokenizer.truncate(text, max_tokens)
    return (
        f"{head}\n[… truncated: {total - max_tokens} of {total} tokens cut "
        f"({len(text) - len(head)} characters) …]"
    )


# gc=False: thousands of runs hold one, and it holds nothing that refers back to it.
class ContextBuffer(msgspec.Struct, gc=False):
    """The messages of one run and their token accounting (make one with :meth:`start`).

    ``history``: a thread's earlier turns, put between the system message and the
    input. Then everything after the system message may be compacted (the thread's
    first input is no more sacred than its other turns); without it the input stays.
    """

    prefix: Any  # Prefix
    tokenizer: Any  # Tokenizer
    messages: list[Message]
    history_tokens: int = 0
    compact_from: int = 2  # after the system message and the user input

    @classmethod
    def start(
        cls,
        prefix: Prefix,
        tokenizer: Tokenizer,
        user_input: str,
        history: Sequence[Message] | None = None,
    ) -> ContextBuffer:
        buffer = cls(prefix, tokenizer, [prefix.system])
        if history is not None:
            buffer.compact_from = 1
            buffer.extend(history)
        buffer.append(Message("user", user_input))
        return buffer

    @property
    def tokens(self) -> int:
        """Prompt tokens of the next call: prefix (system + tool schemas) + history."""
        tokens: int = self.prefix.tokens + self.history_tokens
        return tokens

    def append(self, message: Message) -> Message:
        tokens = message.tokens
        if not tokens:
            tokens = message.tokens = self.tokenizer.count_message(message)
        self.history_tokens += tokens
        self.messages.append(message)
        return message

    def append_step(self, reply: Message, answer: Message) -> None:
        """A fast-lane step's two messages, the reply counted already (``tokens`` set, as it
        was built): the model's reply and the tool's answer, in one update of the count."""
        tokens = answer.tokens
        if not tokens:  # (an answer cut to its budget, or for another tokenizer)
            tokens = answer.tokens = self.tokenizer.count_message(answer)
        self.history_tokens += reply.tokens + tokens
        messages = self.messages
        messages.append(reply)
        messages.append(answer)

    def extend(self, messages: Sequence[Message]) -> None:
        for message in messages:
            self.append(message)

    def plan_compaction(
        self, budget: int, keep_last_turns: int, summary_max_tokens: int
    ) -> CompactionPlan | None:
        """Which turns to summarize so the context, summary included, fits ``budget``
        (None: it fits, or nothing this buffer may drop makes it fit).

        A turn is an assistant message with the tool results that answer it; the user
        input and the last ``keep_last_turns`` turns stay verbatim, fewer if the budget
        demands. Room for a summary of ``summary_max_tokens`` is reserved; where keeping
        even one turn leaves less, the summary is cut to what is left (at least
        ``MIN_SUMMARY_TOKENS``), and only where that fails is the last turn summarized too.
        """
        if self.tokens <= budget:
            return None
        msgs = self.messages
        start = self.compact_from  # an earlier summary in the range is folded in
        turns = [i for i in range(start, len(msgs)) if msgs[i].role == "assistant"]
        overhead = summary_overhead(self.tokenizer)
        least = min(summary_max_tokens, MIN_SUMMARY_TOKENS)
        cut: CompactionPlan | None = None  # the most turns kept with a summary cut short
        for keep in range(min(keep_last_turns, len(turns)), 0, -1):
            end = turns[-keep]
            if end <= start:
                continue
            room = budget - self._kept_tokens(start, end) - overhead
            if room >= summary_max_tokens:
                return CompactionPlan(start, end, summary_max_tokens)
            if cut is None and room >= least:
                cut = CompactionPlan(start, end, room)
        if cut is not None:
            return cut
        # No turn kept: all but a trailing user message (a thread's new input) goes.
        end = len(msgs) - 1 if msgs[-1].role == "user" else len(msgs)
        if end <= start:
            return None
        room = budget - self._kept_tokens(start, end) - overhead
        if room < least:
            return None
        return CompactionPlan(start, end, min(room, summary_max_tokens))

    def _kept_tokens(self, start: int, end: int) -> int:
        """Tokens of the context without ``messages[start:end]``."""
        return self.tokens - sum(m.tokens for m in self.messages[start:end])

    def transcript(
        self,
        plan: CompactionPlan,
        max_chars_per_message: int = 400,
        shown: Callable[[Message], Message] | None = None,
    ) -> str:
        """The messages a plan removes, as plain text for a summarizer; ``shown`` gives each
        message as it may be quoted (secrets withheld: the summary is journaled)."""
        lines: list[str] = []
        for m in self.messages[plan.start : plan.end]:
            if shown is not None:
                m = shown(m)
            if m.content.startswith(SUMMARY_MARKER):
                lines.append(m.content[len(SUMMARY_MARKER) :].strip())
                continue
            if m.role == "assistant":
                if m.content:
                    lines.append(f"assistant: {m.content[:max_chars_per_message]}")
                lines.extend(
                    f"called {c.name}({c.arguments[:max_chars_per_message]})" for c in m.tool_calls
                )
            elif m.role == "tool":
                text = m.content[:max_chars_per_message].replace("\n", " ")
                lines.append(f"{m.name or 'tool'} returned: {text}")
            else:
                lines.append(f"{m.role}: {m.content[:max_chars_per_message]}")
        return "\n".join(lines)

    def extractive_summary(
        self,
        plan: CompactionPlan,
        max_tokens: int,
        shown: Callable[[Message], Message] | None = None,
    ) -> str:
        """A summary without a model: the transcript's head lines, cut to ``max_tokens``."""
        summary: str = self.tokenizer.truncate(self.transcript(plan, 160, shown), max_tokens)
        return summary

    def apply_compaction(self, plan: CompactionPlan, summary: str) -> Message:
        """Replace the planned messages with one summary message; returns it.

        The summary is cut to the plan's room, counted as part of its message: a
        tokenizer may count a text differently once the marker is before it."""
        tokenizer = self.tokenizer
        message = summary_message(summary)
        message.tokens = tokenizer.count_message(message)
        if plan.summary_tokens:
            limit = plan.summary_tokens + summary_overhead(tokenizer)
            while message.tokens > limit and summary:  # each pass cuts at least one token
                excess = message.tokens - limit
                shorter = tokenizer.truncate(summary, max(0, tokenizer.count(summary) - excess))
                summary = shorter if len(shorter) < len(summary) else ""
                message = summary_message(summary)
                message.tokens = tokenizer.count_message(message)
        self.replace(plan, message)
        return message

    def restart(self, messages: Sequence[Message], keep_first: bool) -> None:
        """The history after the system message becomes ``messages`` (a hand-off's input
        filter), each counted anew (a filter may return changed copies with stale
        counts). ``keep_first``: the first of them is the run's input, which compaction
        keeps verbatim (else everything after the system message may be compacted)."""
        count = self.tokenizer.count_message
        for message in messages:
            message.tokens = count(message)
        self.messages[1:] = messages
        self.history_tokens = sum(m.tokens for m in messages)
        self.compact_from = 2 if keep_first and self.compact_from == 2 else 1

    def replace(self, plan: CompactionPlan, message: Message) -> None:
        """Put ``message`` where ``messages[plan.start:plan.end]`` were (replaying a compaction)."""
        if not message.tokens:
            message.tokens = self.tokenizer.count_message(message)
        removed = self.messages[plan.start : plan.end]
        self.history_tokens += message.tokens - sum(m.tokens for m in removed)
        self.messages[plan.start : plan.end] = [message]
