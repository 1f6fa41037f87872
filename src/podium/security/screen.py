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
from podium.security.heuristics import HeuristicScreener

if TYPE_CHECKING:
    from podium.engine.records import RunRecord
    from podium.tools.executor import ToolResult

__all__ = (
    "Finding",
    "HeuristicScreener",
    "ScreenVerdict",
    "Screened",
    "Screener",
    "ScreeningPolicy",
    "screening_statistics",
)

Action = Literal["flag", "redact", "block"]


class ScreenVerdict(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """What the screen decided about one text. ``action`` is ``allow`` below the threshold."""

    source: str
    rule: str
    score: float
    action: Literal["allow", "flag", "redact", "block"]
    screener: str = ""
    excerpt: str = ""


class Screened(msgspec.Struct, tag="screen", gc=False):
    """Journal entry: the verdict on the run's input (tool results carry their own)."""

    ts: float
    verdict: ScreenVerdict


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
    screeners: tuple[Screener, ...] = field(default_factory=lambda: (HeuristicScreener(),))
    inputs: bool = True
    tool_results: bool = True

    async def verdict(self, text: str, source: str) -> tuple[ScreenVerdict, str] | None:
        """The verdict on ``text`` and the text the model may read, or ``None`` if clean."""
        best: Finding | None = None
        by: str = ""
        findings: list[Finding] = []
        for screener in self.screeners:
            found = screener.screen(text)
            if inspect.isawaitable(found):
                found = await found
            for f in found:
                findings.append(f)
                if best is None or f.score > best.score:
                    best, by = f, screener.name
        if best is None:
            return None
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
