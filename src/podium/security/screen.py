"""Prompt-injection screening: what a user or a tool brings in is screened before the model
reads it.

A :class:`ScreeningPolicy` on an :class:`~podium.Agent` runs a chain of :class:`Screener`\\ s
on the run's input and on every tool result. Each screener returns :class:`Finding`\\ s
(rule, score, span); the highest score decides, and the policy's action applies when it
reaches ``threshold``:

- ``flag``: the model reads the text unchanged; the verdict is journaled and counted;
- ``redact``: the matching spans (and hidden characters) are cut out before the model
  reads the text;
- ``block``: the model does not see the text at all: it reads a notice saying what was
  withheld and why; with ``on_block="fail"`` the run then ends, ``failed`` with reason
  ``injection_blocked``.

Every verdict (score, rule, action, source) is journaled: with the tool result it concerns
(:attr:`ToolResult.screen`) or, for the input, as a :class:`Screened` entry. An agent
without a policy pays nothing: the engine checks ``agent.screening is None`` and moves on.
"""

from __future__ import annotations

import inspect
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import msgspec

from podium.security.findings import Finding
from podium.security.first_pass import FirstPass
from podium.security.guard_model import GuardModel
from podium.security.heuristics import HeuristicScreener
from podium.security.output_guard import OutputGuard, tainted_values
from podium.security.verdict import Screened, ScreenVerdict

if TYPE_CHECKING:
    from podium.engine.records import RunRecord
    from podium.security.secrets import SecretMatcher
    from podium.tools.planned import PlannedCall
    from podium.tools.result import ToolResult

__all__ = (
    "Finding",
    "FirstPass",
    "HeuristicScreener",
    "OutputGuard",
    "ScreenVerdict",
    "Screened",
    "Screener",
    "ScreeningPolicy",
    "screening_statistics",
)

Action = Literal["flag", "redact", "block"]


@runtime_checkable
class Screener(Protocol):
    """Finds injection attempts in text. ``screen`` may be sync or ``async`` (a classifier
    model behind an HTTP endpoint); it returns the findings, empty when the text is clean."""

    name: str

    def screen(self, text: str) -> Sequence[Finding] | Awaitable[Sequence[Finding]]: ...


# Counted per (source kind, action, rule); the gateway's metrics and the benchmarks read them.
_counts: Counter[tuple[str, str, str]] = Counter()


def screening_statistics() -> dict[tuple[str, str, str], int]:
    """Verdicts so far in this process, by (``input``/``tool``, action, rule)."""
    return dict(_counts)


def _strings(value: object) -> list[str]:
    """Every string in a call's arguments (as builtins), at any depth."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


_ACTIONS = ("allow", "flag", "redact", "block")


def _severity(verdict: ScreenVerdict) -> tuple[int, float]:
    return _ACTIONS.index(verdict.action), verdict.score


def _withheld(verdict: ScreenVerdict) -> str:
    return (
        f"[withheld by the injection screen: {verdict.source} matched rule "
        f"{verdict.rule!r} (score {verdict.score:.2f}); its content was not shown]"
    )


def _redact(text: str, findings: Sequence[Finding]) -> str:
    spans = sorted((f.start, f.end, f.rule) for f in findings if f.end > f.start)
    out: list[str] = []
    pos = 0
    for start, end, rule in spans:
        if end <= pos:
            continue
        start = max(start, pos)
        out.append(text[pos:start])
        # Hidden characters are dropped silently; visible spans leave a marker.
        if not rule.startswith("hidden"):
            out.append(f"[redacted: {rule}]")
        pos = end
    out.append(text[pos:])
    return "".join(out)


@dataclass(frozen=True, slots=True)
class ScreeningPolicy:
    """How an agent screens what it reads.

    Example::

        Agent("support", model, tools=[...],
              screening=ScreeningPolicy(action="block", on_block="fail"))
    """

    action: Action = "flag"
    on_block: Literal["continue", "fail"] = "continue"
    threshold: float = 0.5
    #: The first pass (default: the rules and the learned model, see first_pass.py).
    screeners: tuple[Screener, ...] = field(default_factory=lambda: (FirstPass(),))
    inputs: bool = True
    tool_results: bool = True
    #: Checks on what the model says: its answer and its tool calls (None: not screened).
    outputs: OutputGuard | None = None
    #: A classifier model asked where the first pass is unsure (None: the first pass alone).
    guard: GuardModel | None = None

    async def verdict(self, text: str, source: str) -> tuple[ScreenVerdict, str] | None:
        """The verdict on ``text`` and the text the model may read, or ``None`` if clean."""
        findings: list[tuple[Finding, str]] = []
        for screener in self.screeners:
            found = screener.screen(text)
            if inspect.isawaitable(found):
                found = await found
            findings.extend((f, screener.name) for f in found)
        guard = self.guard
        if guard is None:
            return self.decide(text, source, findings)
        first = max((f.score for f, _ in findings), default=0.0)
        if not guard.consults(first):
            return self.decide(text, source, findings)
        best = max(findings, key=lambda fb: fb[0].score)[0] if findings else None
        answer = await guard.ask(text, None if best is None else (best.start, best.end))
        overruled = ""
        if answer.unsafe:
            rule = "guard_unsafe" + answer.said.removeprefix("unsafe").split("+", 1)[0]
            findings.append((Finding(rule, 0.95, 0, len(text)), guard.name))
        elif answer.failed and guard.on_failure == "closed":
            findings.append((Finding("guard_unavailable", 1.0, 0, 0), guard.name))
        elif not answer.failed and best is not None and answer.whole:
            # safe, having read it all: the guard overrules an unsure first pass
            overruled = best.rule
            findings = [(Finding("guard_safe", 0.0, 0, 0), guard.name)]
        decided = self.decide(text, source, findings)
        if decided is None:
            return None
        verdict, shown = decided
        verdict = msgspec.structs.replace(verdict, guard=answer.said, overruled=overruled)
        return verdict, shown

    def decide(
        self, text: str, source: str, found: Sequence[tuple[Finding, str]]
    ) -> tuple[ScreenVerdict, str] | None:
        """The verdict from ``found`` (each finding with the screener that made it): the
        highest score decides; the text as the action leaves it. Counted."""
        if not found:
            return None
        best, by = max(found, key=lambda fb: fb[0].score)
        findings = [f for f, _ in found]
        action = self.action if best.score >= self.threshold else "allow"
        excerpt = text[best.start : best.end][:120] if best.end > best.start else ""
        verdict = ScreenVerdict(source, best.rule, round(best.score, 3), action, by, excerpt)
        _counts[(source.split(":", 1)[0], action, best.rule)] += 1
        if action == "block":
            return verdict, _withheld(verdict)
        if action == "redact":
            return verdict, _redact(text, [f for f in findings if f.score >= self.threshold])
        return verdict, text

    @property
    def holds_output(self) -> bool:
        """Whether the answer may change before it leaves (an output guard that redacts or
        blocks): such a run streams no tokens, since a streamed image is fetched by the
        client before the screen has seen the whole answer."""
        return self.outputs is not None and self.action != "flag"

    @property
    def fails_on_block(self) -> bool:
        return self.action == "block" and self.on_block == "fail"

    async def screen_result(self, result: ToolResult) -> ToolResult:
        """Screen a tool result in place: record the verdict, redact or withhold the content."""
        if not self.tool_results:
            return result
        found = await self.verdict(result.content, f"tool:{result.name}")
        if found is not None:
            verdict, text = found
            result.screen = verdict
            result.content = text
            if verdict.action == "block":
                result.ok = False
                result.error = "blocked"
        return result

    def screen_output(
        self, text: str, secrets: SecretMatcher | None = None
    ) -> tuple[ScreenVerdict, str] | None:
        """The verdict on the run's answer (source ``output``) and the answer as it may
        leave; None when :attr:`outputs` is off or nothing was found."""
        guard = self.outputs
        if guard is None:
            return None
        found = [(f, guard.name) for f in guard.screen(text)]
        if secrets:
            found.extend(
                (Finding("secret", 1.0, start, end), "secrets")
                for start, end in secrets.spans(text)
            )
        decided = self.decide(text, "output", found)
        if decided is None:
            return None
        verdict, shown = decided
        # The excerpt names the host, not the URL: its query is the data it would carry off
        # (and a secret's excerpt would be the secret).
        excerpt = guard.host_in(verdict.excerpt) if verdict.rule != "secret" else ""
        return msgspec.structs.replace(verdict, excerpt=excerpt), shown

    def screen_structured(
        self, output: str, secrets: SecretMatcher | None = None
    ) -> tuple[ScreenVerdict, str] | None:
        """:meth:`screen_output` for a structured answer (the JSON of an ``output_type``):
        each string in it is screened as an answer is; the most severe verdict is the
        answer's (its source ``output``), and under ``redact`` the JSON comes back with
        each string as the screen left it (still of the same type). None when nothing was
        found. A blocking verdict withholds the whole answer: see the engine."""
        if self.outputs is None:
            return None
        try:
            value = msgspec.json.decode(output)
        except msgspec.DecodeError:
            return self.screen_output(output, secrets)
        worst: ScreenVerdict | None = None

        def walk(v: object) -> object:
            nonlocal worst
            if isinstance(v, str):
                found = self.screen_output(v, secrets)
                if found is None:
                    return v
                verdict, shown = found
                if worst is None or _severity(verdict) > _severity(worst):
                    worst = verdict
                return shown
            if isinstance(v, dict):
                return {k: walk(x) for k, x in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v

        shown = walk(value)
        if worst is None:
            return None
        return worst, msgspec.json.encode(shown).decode()

    def screen_calls(
        self,
        planned: list[PlannedCall],
        rejected: list[tuple[int, ToolResult]],
        flagged: Sequence[str],
    ) -> tuple[list[PlannedCall], list[tuple[int, ToolResult]], list[ScreenVerdict]]:
        """Screen the step's calls against what the screen flagged earlier in the run: a
        call quoting flagged text is tainted (source ``call:<tool>``). Under ``block`` or
        ``redact`` it moves to the rejected calls (the model reads why); the verdicts are
        returned for the journal either way."""
        guard = self.outputs
        if guard is None or not guard.tool_calls or not flagged:
            return planned, rejected, []
        from podium.tools.result import ToolResult

        keep: list[PlannedCall] = []
        refused = list(rejected)
        verdicts: list[ScreenVerdict] = []
        for p in planned:
            quoted = tainted_values(_strings(msgspec.to_builtins(p.args)), flagged)
            found = self.decide(
                quoted or "", f"call:{p.tool.name}",
                [(Finding("tainted_call", 0.8, 0, len(quoted)), guard.name)] if quoted else [],
            )
            if found is None:
                keep.append(p)
                continue
            verdict, _ = found
            verdicts.append(verdict)
            if verdict.action in ("allow", "flag"):  # (a call cannot be half run: a
                keep.append(p)  # redacting policy refuses it as a blocking one does)
                continue
            notice = (
                f"[withheld by the output screen: this call to {p.tool.name!r} quotes text "
                "the injection screen flagged earlier in the run; it was not run]"
            )
            result = ToolResult(p.ctx.call_id, p.tool.name, notice, False, "blocked", 0)
            result.screen = verdict
            refused.append((p.index, result))
        return keep, refused, verdicts

    async def screen_input(self, record: RunRecord) -> Screened | None:
        """Screen a new run's input; a redacted or withheld input replaces ``record.input``
        (so a resumed run's context is rebuilt from what the model was allowed to read)."""
        if not self.inputs:
            return None
        found = await self.verdict(record.input, "input")
        if found is None:
            return None
        verdict, text = found
        record.input = text
        return Screened(time.time(), verdict)
