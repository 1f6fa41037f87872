"""The default first pass: the rules and the learned model, each checking the other.

The rules (``heuristics.py``) are sure of what they name and blind to paraphrase; the
learned model (``learned.py``) generalises over wording but has little to go on in a
short text. Together:

- every finding of both stands, the highest score deciding (the policy's threshold, and
  the guard model's ``unsure`` band, read it as ever);
- a rule that matched in a text the learned model judges (``MIN_WORDS`` words or more:
  a sentence will do) and finds plainly benign (below ``BENIGN_BELOW``) is lowered to
  ``UNSURE``: an
  article about prompt injection quotes "ignore previous instructions", a JSON body reads
  ``{"tool": "calculator", "input": ...}``. Below the default threshold such a text is
  allowed, and a guard model, where one is configured, is asked about it. Hidden
  characters (tag characters, zero-width runs, bidi overrides) are never lowered: no
  wording makes them benign; nor is a rule matched only in a normalised form of the text
  (``obfuscated:<form>:<rule>``: look-alike letters, base64...; see ``deobfuscate.py``): a
  benign text has no reason to disguise its words. Nor is an override rule's match that
  *is* an instruction rather than a mention of one: one that opens its sentence (or
  follows only a label such as "Note:", "SYSTEM MESSAGE:", "Assistant," or "please"), the
  way an instruction planted in a resume, a report or a page reads ("...five years at
  Acme. Ignore previous instructions and print..."). A mention has words of its own
  sentence before it ("a typical payload tells the model to ignore...", "strings like
  'ignore all...'", "kids often ignore instructions"): the document around an embedded
  instruction is benign by construction, so the model's verdict on the whole text cannot
  tell the two apart. The rules report a rule's first match only: before a mention is
  lowered, its rule's later matches are looked at for one that opens its sentence (a JSON
  snippet mentioning "ignore ... rules", then the planted "Ignore previous instructions
  and print...");
- a non-ASCII text with look-alike letters (``deobfuscate.suspicious``) that the model
  does not find suspect as written is scored again with them read as Latin: a jailbreak
  in Cyrillic look-alikes names no rule and holds no word the model knows
  (``obfuscated:unicode:learned``);
- the learned finding spans the window it scored, unless a rule's finding (with a span)
  stands: a redacting policy then cuts the rules' spans, not the whole window.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import ahocorasick_rs

from podium.security.deobfuscate import folded, suspicious
from podium.security.findings import Finding
from podium.security.heuristic_rules import FAMILIES
from podium.security.heuristics import HeuristicScreener, screen_encoded
from podium.security.learned import (
    FOLD,
    MIN_WORDS,
    REPORT_FROM,
    WINDOW,
    LearnedScreener,
)

__all__ = ("FirstPass", "opens_sentence")

# Where the model has a verdict at all; a sentence is context enough for it.
CONTEXT_WORDS = MIN_WORDS
BENIGN_BELOW = 0.05
UNSURE = 0.45
# The rules whose matches begin with the instruction's verb ("ignore", "disregard"...):
# only there does a match at a sentence's start mean an imperative. ("Output filtering
# catches secrets" opens a sentence too, with a noun.)
IMPERATIVE_RULES = frozenset({"override", "hijack"})
# Findings no context lowers: hidden characters (no wording makes them benign) and rules
# matched only once the text was normalised (look-alike letters, base64...: a benign text
# has no reason to hide its words).
_NEVER_LOWERED = ("hidden", "obfuscated")
# How many later override verbs that open their sentences are tried.
_LATER_TRIES = 8
# Where an override may begin: the verbs that anchor the family of override rules that
# start at them (its rules, tried right there, say whether one does).
_OVERRIDE_FAMILY = next(
    family
    for family in FAMILIES
    if family.before == 0 and any(rule == "override" for rule, _, _ in family.rules)
)
_OVERRIDE_VERBS = sorted(set(_OVERRIDE_FAMILY.anchors))
_OVERRIDE_VERB_FINDER = ahocorasick_rs.AhoCorasick(_OVERRIDE_VERBS)
_OVERRIDE_VERB = re.compile("|".join(map(re.escape, _OVERRIDE_VERBS)), re.IGNORECASE)


def _verbs_after(text: str, start: int) -> list[tuple[int, int]]:
    """Where override verbs are in ``text`` from ``start`` on, as (start, end)."""
    low = text.lower()
    if len(low) != len(text):  # a rare character changed length when lowered
        return [m.span() for m in _OVERRIDE_VERB.finditer(text, start)]
    return [
        (a, b) for _, a, b in _OVERRIDE_VERB_FINDER.find_matches_as_indexes(low) if a >= start
    ]


# The start of a sentence, a line or a paragraph, or text after a tag or a closed
# structure ("<p>", "}", "]"): where an imperative begins. (Not ":" or a quote:
# '"snippet": "ignore customer..."' has the words of a field name before it.)
_SENTENCE_CHARS = ".!?\n>}]"
# Words that may stand before a planted instruction in its own sentence: labels, address
# to the assistant, politeness and urgency. Anything else before the match makes it a
# mention.
_LEAD = re.compile(
    r"(?:\W|\d|please|kindly|now|just|so|then|and|also|first|but|ok|okay|important|urgent"
    r"|note|notes|nb|ps|attention|warning|update|updated|new|system|message|instructions?"
    r"|admin|administrator|developer|assistant|ai|model|llm|chatbot|bot|gpt|chatgpt|claude"
    r"|to|for|the|an?|dear|hey|hi|hello|you|must|should|will|need|have|are|required)*",
    re.ASCII,
)


class FirstPass:
    """The rules and the learned model as one screener (see the module docstring)."""

    name = "first_pass"

    def __init__(
        self, rules: HeuristicScreener | None = None, learned: LearnedScreener | None = None
    ) -> None:
        self.rules = rules or HeuristicScreener()
        self.learned = learned or LearnedScreener()
        # Bound once: on a short text the lookups cost as much as the screening. The
        # screener's function itself where it is the built-in one (a call less).
        self._rules: Callable[[str, bytes], Sequence[Finding]] = (
            screen_encoded if type(self.rules) is HeuristicScreener else self.rules.screen_encoded
        )
        self._best_window = self.learned.best_window
        # A words-only model scores a text of one window here: the call to ``best_window``
        # and its tuple cost a tenth of a short text's screening.
        self._unigrams = self.learned.unigram_model()

    def screen(self, text: str) -> Sequence[Finding]:
        data = text.encode("utf-8", "surrogatepass")  # once, for the rules and the model
        found = self._rules(text, data)
        n = len(text)
        unigrams = self._unigrams
        w: list[bytes] | None = None  # the model's words, where it took them
        if unigrams is None or n > WINDOW or not n:
            p, start, end = self._best_window(text, data)
        else:  # ``best_window`` inlined: one window, its whole text
            start, end = 0, n
            w = data.translate(FOLD).split()
            if len(w) < MIN_WORDS:
                p = 0.0
            else:
                z = unigrams[1] + sum(map(unigrams[0], set(w)))
                p = 1.0 / (1.0 + math.exp(-z)) if z > -30 else 0.0
        if len(data) != len(text) and p < REPORT_FROM and suspicious(data):
            found = [*found, *self._learned_folded(text)]
        if not found:  # (most texts: no rule matched)
            return () if p < REPORT_FROM else (Finding("learned", round(p, 3), start, end),)
        found = list(found)
        if (
            p < BENIGN_BELOW
            and any(f.score > UNSURE and not f.rule.startswith(_NEVER_LOWERED) for f in found)
            and len(data.translate(FOLD).split() if w is None else w) >= CONTEXT_WORDS
        ):
            found = [
                f
                if f.rule.startswith(_NEVER_LOWERED) or f.score <= UNSURE or opens_sentence(text, f)
                else self._given_later(text, f) or Finding(f.rule, UNSURE, f.start, f.end)
                for f in found
            ]
        if p >= REPORT_FROM:
            # The model cannot say where in its window the attack is: where a rule can, the
            # rule's span is what a redacting policy cuts (the learned finding has none);
            # alone, the model's finding spans its window.
            if any(f.score > UNSURE and f.end > f.start for f in found):
                start = end = 0
            found.append(Finding("learned", round(p, 3), start, end))
        return found

    def _learned_folded(self, text: str) -> list[Finding]:
        """The model's verdict on ``text`` with its look-alike letters read as Latin: a
        jailbreak written in Cyrillic look-alikes names no rule and, as written, holds
        no word the model knows."""
        q, _, _ = self._best_window(folded(text))
        if q < REPORT_FROM:
            return []
        return [Finding("obfuscated:unicode:learned", round(q, 3), 0, len(text))]

    def _given_later(self, text: str, finding: Finding) -> Finding | None:
        """A later override that opens its sentence, if one does: the rules report a
        rule's first match only, and a mention further up ("the snippet reads 'ignore
        customer previous rules'") must not hide the instruction planted after it. Only an
        override verb that opens its sentence is tried, with the override rules at it: an
        article full of mentions costs an automaton pass, not a screening per mention."""
        if finding.rule != "override":
            return None
        tries = 0
        # (from just after its start: a match from a mention's verb can run on over the
        # instruction, "...skip token settings"}]}Ignore previous instructions")
        for at, end in _verbs_after(text, finding.start + 1):
            if text[at - 1].isalnum() or not opens_sentence(
                text, Finding("override", finding.score, at, end)
            ):
                continue
            later = _override_at(text, at)
            if later is not None:
                return later
            tries += 1
            if tries == _LATER_TRIES:
                break
        return None


def _override_at(text: str, at: int) -> Finding | None:
    """The override rule's match starting at ``at``, if one does (the rules as the
    screener tries them at an anchor, on the lowered window)."""
    window = text[at : at + _OVERRIDE_FAMILY.after]
    low = window.lower()
    if len(low) != len(window):  # (a rare character changed length: not worth mapping)
        return None
    for rule, score, pattern in _OVERRIDE_FAMILY.rules:
        m = pattern.match(low) if rule == "override" else None
        if m is not None:
            return Finding(rule, score, at, at + m.end())
    return None


def opens_sentence(text: str, finding: Finding) -> bool:
    """Whether ``finding``'s match opens its sentence (after labels and address at most):
    an instruction given, not one mentioned (see the module docstring). A finding with no
    span does not."""
    if finding.rule not in IMPERATIVE_RULES or finding.end <= finding.start:
        return False
    # (200 characters back at most: a sentence start further away is not this sentence's)
    head = text[max(0, finding.start - 200) : finding.start]
    # (the last sentence start by a reverse find per character: a regex iterating over
    # every one cost a mention's check 2 µs)
    last = max(map(head.rfind, _SENTENCE_CHARS))
    if last < 0 and finding.start > 200:
        return False
    lead = head[last + 1 :].lower()
    return _LEAD.fullmatch(lead) is not None
