"""Secrets stay out of the journal: tool arguments and results marked secret are replaced
before anything is written.

A tool marks them with ``@tool(secret_args=("password",), secret_result=True)``. The
engine passes every batch of journal entries through the agent's :class:`Redactor` on
its way to the store, so the store, the events streamed from it (SSE), the observers
(traces, live printing) and anything reading the journal later see ``"[secret]"``
instead. The run's live context keeps the real values; a run resumed from its journal
continues with the redacted ones. An agent without secret tools has no redactor and pays
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from podium.engine.handoff import reachable
from podium.engine.records import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    JournalEntry,
    ModelTurn,
    StepRecord,
    ToolOutcome,
)
from podium.messages import Message, ToolCall
from podium.tools.executor import ToolResult
from podium.tools.policy import SECRET

if TYPE_CHECKING:
    from podium.agent import Agent

__all__ = ("SECRET", "Redactor", "redactor_for")

_WITHHELD = "[secret result: not journaled]"
_decode = msgspec.json.decode
_encode = msgspec.json.encode


class Redactor:
    """Replaces secret arguments and results in journal entries (copies; never in place)."""

    def __init__(self, args: Mapping[str, frozenset[str]], results: frozenset[str]) -> None:
        self.args = dict(args)
        self.results = results

    def __call__(self, entries: Sequence[JournalEntry]) -> Sequence[JournalEntry]:
        return [self._entry(e) for e in entries]

    def _entry(self, entry: JournalEntry) -> JournalEntry:
        if isinstance(entry, StepRecord):
            return msgspec.structs.replace(
                entry,
                message=self.message(entry.message),
                results=tuple(self.result(r) for r in entry.results),
            )
        if isinstance(entry, ModelTurn):
            return msgspec.structs.replace(entry, message=self.message(entry.message))
        if isinstance(entry, ToolOutcome):
            return msgspec.structs.replace(entry, result=self.result(entry.result))
        if isinstance(entry, HandedOff):  # the history a hand-off's filter kept
            return msgspec.structs.replace(
                entry, messages=tuple(self.shown(m) for m in entry.messages)
            )
        # A call waiting for a human, and a human's edit of it: what the approver sees
        # (GET /v1/approvals, the event stream) is the call as journaled, secrets withheld.
        if (
            isinstance(entry, ApprovalRequested | ApprovalDecided)
            and entry.arguments is not None  # (a decision without an edit has none)
            and entry.tool in self.args
        ):
            return msgspec.structs.replace(
                entry, arguments=self.arguments(entry.tool, entry.arguments)
            )
        return entry

    def shown(self, message: Message) -> Message:
        """``message`` as a summary of the context may quote it (compaction): secret
        arguments replaced, a secret result withheld."""
        if message.role == "tool" and message.name in self.results:
            return msgspec.structs.replace(message, content=_WITHHELD)
        return self.message(message)

    def message(self, message: Message) -> Message:
        if not any(c.name in self.args for c in message.tool_calls):
            return message
        calls = tuple(self.call(c) for c in message.tool_calls)
        return msgspec.structs.replace(message, tool_calls=calls)

    def call(self, call: ToolCall) -> ToolCall:
        if not self.args.get(call.name):
            return call
        return msgspec.structs.replace(call, arguments=self.arguments(call.name, call.arguments))

    def arguments(self, tool: str, arguments: str) -> str:
        """A call's JSON arguments with ``tool``'s secret ones replaced."""
        secret = self.args.get(tool)
        if not secret:
            return arguments
        try:
            args: Any = _decode(arguments or "{}")
        except msgspec.DecodeError:  # unparseable: it may hold the secret anywhere
            return _encode(SECRET).decode()
        if isinstance(args, dict):
            args = {k: (SECRET if k in secret else v) for k, v in args.items()}
        return _encode(args).decode()

    def result(self, result: ToolResult) -> ToolResult:
        if result.name not in self.results or not result.ok:
            return result
        return msgspec.structs.replace(result, content=_WITHHELD, screen=None)


def redactor_for(agent: Agent) -> Redactor | None:
    """The redactor of a run started with ``agent``, or ``None`` when no tool it may call
    has secrets (cached): its tools' secrets and those of every agent its hand-offs reach,
    since the run's context (and what a compaction quotes of it) keeps what each called."""
    cached: Redactor | bool | None = getattr(agent, "_podium_redactor", False)
    if cached is not False:
        return cached  # type: ignore[return-value]
    args: dict[str, frozenset[str]] = {}
    results: set[str] = set()
    for each in reachable(agent):
        for name, t in each.tools.items():
            if t.policy.secret_args:
                args[name] = args.get(name, frozenset()) | frozenset(t.policy.secret_args)
            if t.policy.secret_result:
                results.add(name)
    redactor = Redactor(args, frozenset(results)) if args or results else None
    agent._podium_redactor = redactor  # type: ignore[attr-defined]
    return redactor
