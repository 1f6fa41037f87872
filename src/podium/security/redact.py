"""Secrets stay out of the journal: tool arguments and results marked secret are replaced
before anything is written, and so is every copy of a secret value anywhere else.

A tool marks them with ``@tool(secret_args=("password",), secret_result=True)``; an agent
declares values it knows of (API keys its tools use) with ``Agent(secrets=[...])``. The
engine passes every batch of journal entries through the run's :class:`RunRedactor` on
its way to the store, so the store, the events streamed from it (SSE), the observers
(traces, live printing) and anything reading the journal later see ``"[secret]"``
instead. That is the one door through which a run's data is written down; the run's
record (``output``, ``error``) and the streamed deltas pass the same redactor.

Two passes, in this order:

1. by field: a secret argument's value and a secret result's content are replaced
   whatever they hold (the values are learnt as they pass: the run now knows them);
2. by value: every string of every entry (a model's reply, a tool result that echoes
   its input, an error, a summary) is scrubbed of every secret the run knows, in any
   form :class:`~podium.security.secrets.SecretMatcher` finds (case, spacing, reversed,
   base64, URL-encoded, hex, rot13, HTML and JSON escapes, look-alike letters).

The run's live context keeps the real values; a run resumed from its journal continues
with the redacted ones. An agent without secret tools or declared secrets has no
redactor and pays nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from podium.engine.records import (
    ApprovalDecided,
    ApprovalRequested,
    HandedOff,
    JournalEntry,
    ModelTurn,
    RunFinished,
    StepRecord,
    ToolOutcome,
)
from podium.handoffs import reachable
from podium.messages import Message, ToolCall
from podium.security.secrets import SECRET, SecretMatcher, secret_tokens
from podium.tools.executor import ToolResult

if TYPE_CHECKING:
    from podium.agent import Agent

__all__ = ("SECRET", "Redactor", "RunRedactor", "redactor_for", "scrub_input", "scrub_value")

T = TypeVar("T")
_WITHHELD = "[secret result: not journaled]"
#: Values a run learns at most (each call with a secret argument adds one): past that the
#: matcher stops growing, and the field pass still replaces every secret argument.
MAX_LEARNT = 256
_decode = msgspec.json.decode
_encode = msgspec.json.encode


class Redactor:
    """An agent's secrets: which tool arguments and results are secret, which values it
    declares. Shared by its runs; each run gets its own :class:`RunRedactor`."""

    def __init__(
        self,
        args: Mapping[str, frozenset[str]],
        results: frozenset[str],
        declared: Sequence[str] = (),
    ) -> None:
        self.args = dict(args)
        self.results = results
        self.declared = tuple(declared)
        self._matcher = SecretMatcher(self.declared)  # compiled once, shared by every run

    def for_run(self) -> RunRedactor:
        return RunRedactor(self)

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

    def secret_values(self, tool: str, arguments: str | None) -> list[str]:
        """The values of ``tool``'s secret arguments in a call's JSON ``arguments``."""
        secret = self.args.get(tool)
        if not secret or not arguments:
            return []
        try:
            args: Any = _decode(arguments)
        except msgspec.DecodeError:
            return []
        if not isinstance(args, dict):
            return []
        found = []
        for key in secret:
            value = args.get(key)
            if value is None or isinstance(value, bool):
                continue
            found.append(value if isinstance(value, str) else _encode(value).decode())
        return found


class RunRedactor:
    """One run's redactor: the agent's rules and the secret values the run has met."""

    __slots__ = ("agent", "matcher")

    def __init__(self, agent: Redactor) -> None:
        self.agent = agent
        self.matcher = agent._matcher

    @property
    def args(self) -> dict[str, frozenset[str]]:
        return self.agent.args

    def learn(self, values: Sequence[str]) -> None:
        """Add secret values met outside the journal (a tool's arguments, say)."""
        if values and len(self.matcher.values) < MAX_LEARNT:
            self.matcher = self.matcher.with_values(values)

    def __call__(self, entries: Sequence[JournalEntry]) -> Sequence[JournalEntry]:
        for entry in entries:
            self._learn(entry)
        matcher = self.matcher
        out = []
        for entry in entries:
            entry = self._entry(entry)
            if matcher:
                entry = scrub_value(entry, matcher)
            out.append(entry)
        return out

    def scrub(self, text: str) -> str:
        """``text`` (a record's output, a streamed delta) without the secrets known so far."""
        return self.matcher.scrub(text)

    def final(self, final: RunFinished) -> RunFinished:
        """The run's end, its output and error scrubbed (the record takes them from it)."""
        return scrub_value(final, self.matcher) if self.matcher else final

    # -- learning: the secret values an entry shows, before they are replaced ---------------

    def _learn(self, entry: JournalEntry) -> None:
        values: list[str] = []
        message = getattr(entry, "message", None)
        if isinstance(message, Message):
            for call in message.tool_calls:
                values += self.agent.secret_values(call.name, call.arguments)
        if isinstance(entry, ApprovalRequested | ApprovalDecided):
            values += self.agent.secret_values(entry.tool, entry.arguments)
        results: tuple[ToolResult, ...] = ()
        if isinstance(entry, StepRecord):
            results = entry.results
        elif isinstance(entry, ToolOutcome):
            results = (entry.result,)
        for result in results:
            if result.ok and result.name in self.agent.results:
                values += secret_tokens(result.content)
        self.learn(values)

    # -- the field pass ------------------------------------------------------------------

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
            and entry.tool in self.agent.args
        ):
            return msgspec.structs.replace(
                entry, arguments=self.agent.arguments(entry.tool, entry.arguments)
            )
        return entry

    def shown(self, message: Message) -> Message:
        """``message`` as a summary of the context may quote it (compaction): secret
        arguments replaced, a secret result withheld, known secrets scrubbed."""
        if message.role == "tool" and message.name in self.agent.results:
            return msgspec.structs.replace(message, content=_WITHHELD)
        message = self.message(message)
        return scrub_value(message, self.matcher) if self.matcher else message

    def message(self, message: Message) -> Message:
        if not any(c.name in self.agent.args for c in message.tool_calls):
            return message
        calls = tuple(self.call(c) for c in message.tool_calls)
        return msgspec.structs.replace(message, tool_calls=calls)

    def call(self, call: ToolCall) -> ToolCall:
        if not self.agent.args.get(call.name):
            return call
        return msgspec.structs.replace(
            call, arguments=self.agent.arguments(call.name, call.arguments)
        )

    def result(self, result: ToolResult) -> ToolResult:
        if result.name not in self.agent.results or not result.ok:
            return result
        return msgspec.structs.replace(result, content=_WITHHELD, screen=None)


@functools.cache
def _free_text_fields(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    """The fields of ``cls`` that can hold a secret: all but those that take only fixed
    words (a ``Literal`` or an enum: a role, a status, an approval's kind). Scrubbing a
    fixed word would break the entry (a secret ``interrup`` turns ``interrupt`` into
    ``[secret]t``, which no longer decodes), and a secret can never be one."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return tuple(f.name for f in info.fields if not _fixed_words(f.type))


def _fixed_words(kind: msgspec.inspect.Type) -> bool:
    if isinstance(kind, msgspec.inspect.LiteralType | msgspec.inspect.EnumType):
        return True
    if isinstance(kind, msgspec.inspect.UnionType):
        return all(
            _fixed_words(t) or isinstance(t, msgspec.inspect.NoneType) for t in kind.types
        )
    return False


def _scrubbed(value: Any, matcher: SecretMatcher) -> Any:
    """``value`` with every free-text string in it scrubbed, at any depth; ``value`` itself
    (the same object) where nothing changed, so the common case copies nothing."""
    if isinstance(value, str):
        return matcher.scrub(value)
    if isinstance(value, msgspec.Struct):
        changes = {}
        for name in _free_text_fields(type(value)):
            field = getattr(value, name)
            clean = _scrubbed(field, matcher)
            if clean is not field:
                changes[name] = clean
        return msgspec.structs.replace(value, **changes) if changes else value
    if isinstance(value, list | tuple):
        items = [_scrubbed(v, matcher) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, dict):  # free-form data (a tool's metadata): keys are text too
        pairs = [(_scrubbed(k, matcher), _scrubbed(v, matcher)) for k, v in value.items()]
        if all(k2 is k and v2 is v for (k2, v2), (k, v) in zip(pairs, value.items(),
                                                                   strict=True)):
            return value
        return dict(pairs)
    return value


def scrub_value(value: T, matcher: SecretMatcher) -> T:
    """``value`` (a journal entry, a message: any msgspec value) with every free-text string
    in it, at any depth, scrubbed of ``matcher``'s secrets; ``value`` itself when none held
    one. Fields of fixed words (roles, statuses, kinds) are left as they are: no secret
    fits there, and scrubbing one would make the entry undecodable."""
    clean: T = _scrubbed(value, matcher)
    return clean


def redactor_for(agent: Agent) -> Redactor | None:
    """The redactor of a run started with ``agent``, or ``None`` when no tool it may call
    has secrets and no agent declares any (cached): its tools' secrets and those of every
    agent its hand-offs reach, since the run's context (and what a compaction quotes of it)
    keeps what each called."""
    cached: Redactor | bool | None = getattr(agent, "_podium_redactor", False)
    if cached is not False:
        return cached  # type: ignore[return-value]
    args: dict[str, frozenset[str]] = {}
    results: set[str] = set()
    declared: list[str] = []
    for each in reachable(agent):
        declared.extend(getattr(each, "secrets", ()))
        for name, t in each.tools.items():
            if t.policy.secret_args:
                args[name] = args.get(name, frozenset()) | frozenset(t.policy.secret_args)
            if t.policy.secret_result:
                results.add(name)
    redactor = (
        Redactor(args, frozenset(results), declared) if args or results or declared else None
    )
    agent._podium_redactor = redactor  # type: ignore[attr-defined]
    return redactor


def scrub_input(agent: Agent, text: str) -> str:
    """A run's input as it is stored: without the secrets ``agent`` (and every agent its
    hand-offs reach) declares, in any form the matcher finds. The record is the input's
    only copy, and a resumed run must read what a fresh one read, so the model reads
    ``[secret]`` there too. A secret the run has not met yet (a tool's secret argument)
    is not known here: only declared ones are."""
    redactor = redactor_for(agent)
    if redactor is None or not redactor._matcher:
        return text
    return redactor._matcher.scrub(text)
