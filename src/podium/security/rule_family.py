"""How a family of the heuristic screener's rules is built: its anchors, its window, its
regular expressions (over characters and over ASCII bytes) and the shortcuts that spare
them (punctuation needed, leading words, hold words, a guard).

The tables are ``heuristic_rules.py`` (English, and the override verbs of the European
languages) and ``rules_multilingual.py`` (the other scripts and word orders);
``heuristics.py`` runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import ahocorasick_rs

__all__ = ("GAP", "WORD_START", "Family", "Rule", "family", "starts")

# Up to 40 characters within a sentence; a single line break too (a wrapped line), not a
# blank line (a paragraph's end).
GAP = r"(?:[^.\n。!?]|\n(?!\n)){0,40}?"
WORD_START = r"(?<![\w])"  # a word start that also works after punctuation and CJK


@dataclass(frozen=True, slots=True)
class Family:
    anchors: tuple[str, ...]
    before: int  # how far before an anchor a match may start; 0: matches start at the anchor
    after: int  # how far after it a match may end
    rules: tuple[tuple[str, float, re.Pattern[str]], ...]
    # The same rules over lower-cased UTF-8 bytes, for windows that are all ASCII: there a
    # byte is a character and ASCII lowering is str lowering, so they match exactly alike.
    # Each with the words it needs (see Rule): every group must have one in the window.
    byte_rules: tuple[tuple[str, float, re.Pattern[bytes], tuple[tuple[bytes, ...], ...]], ...]
    # ASCII punctuation one of which every match holds (lowering never makes one out of
    # another character): a window holding none is skipped before any regex runs.
    needs: tuple[bytes, ...]
    # Words every match begins with, for a family whose anchor ends its matches: an ASCII
    # window is scanned for them (a small automaton) and the rules tried only where one
    # starts, instead of re.search trying each position of the window in turn.
    leads: ahocorasick_rs.BytesAhoCorasick | None
    # Words one of which every match holds (the nouns an override needs): an ASCII window
    # holding none of them is skipped, which costs one small automaton pass instead of
    # the regexes' backtracking through every gap length.
    holds: ahocorasick_rs.BytesAhoCorasick | None
    # For each of ``holds``' words, the rules (a bit per rule of ``byte_rules``) that a
    # window holding it may match: a rule with words of its own (see Rule) only where one
    # of them holds a word of ``holds`` (the automaton's overlapping matches say which).
    # The automaton also finds what no match holds (the end of a sentence, where every
    # gap of the rules stays in one), for a family whose matches start at the anchor:
    # -1 here, where the hold words it reports after it (by end) are out of reach.
    hold_rules: tuple[int, ...]
    # A regex over the bytes after an anchor (ASCII case ignored) that holds wherever one
    # of the rules can match from the anchor: an occurrence without it opens no window
    # (Hyperscan does not even report it: see anchors.py). Only for families whose
    # matches start at the anchor, so that a window holds nothing unless a rule matches
    # right there.
    guard: bytes


def _spaces_as_whitespace(pattern: str) -> str:
    r"""``pattern`` with each space outside a character class as ``\s``."""
    out: list[str] = []
    in_class = escaped = False
    for c in pattern:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        elif c == " " and not in_class:
            c = r"\s"
        out.append(c)
    return "".join(out)


def _as_bytes(pattern: str) -> re.Pattern[bytes]:
    # str-mode ``\s`` also matches the ASCII separators \x1c-\x1f; bytes-mode does not.
    return re.compile(pattern.replace(r"\s", r"[\s\x1c-\x1f]").encode())


def _merged(rules: tuple[tuple[str, float, str], ...]) -> list[tuple[str, float, str]]:
    """Consecutive rules with the same name and score as one alternation. Where matches start
    at the anchor, ``match`` tries the alternatives in order, as the rules one by one would
    (the first that matches is kept either way): one regex call instead of several."""
    out: list[tuple[str, float, str]] = []
    for rule, score, pattern in rules:
        if out and out[-1][:2] == (rule, score):
            out[-1] = (rule, score, f"{out[-1][2]}|(?:{pattern})")
        else:
            out.append((rule, score, f"(?:{pattern})"))
    return out


def _merged_requires(
    rules: tuple[tuple[str, float, str], ...], requires: list[tuple[tuple[bytes, ...], ...]]
) -> list[tuple[tuple[bytes, ...], ...]]:
    """The words each of ``_merged(rules)`` needs: a match of the alternation is a match of
    one of its rules, so it holds a word of that rule's first group; the union of those
    groups is the merged rule's one group, where every rule merged has words (else none)."""
    out: list[tuple[tuple[bytes, ...], ...]] = []
    last: tuple[str, float] | None = None
    for (rule, score, _), need in zip(rules, requires, strict=True):
        if last == (rule, score):
            out[-1] = ((*out[-1][0], *need[0]),) if out[-1] and need else ()
        else:
            out.append((need[0],) if need else ())
        last = (rule, score)
    # (a word holding another of its group adds nothing: where it is, the other is)
    return [
        tuple(tuple(w for w in g if not any(v != w and v in w for v in g)) for g in r)
        for r in out
    ]


# A rule: name, score, pattern and, optionally, the words it cannot match without, as
# groups of space-separated literals (every group must have one of its words in the window
# for the pattern to match): ``in`` rules a window out before the regex runs. A regex
# opening on lookbehinds or \b alternations has no literal prefix for re's own scan to
# skip by, and tries every position of a 160-character window; a literal listed here
# must be one every match holds (the rules see lower-cased windows, so lower case).
Rule = tuple[str, float, str] | tuple[str, float, str, tuple[str, ...]]


def family(
    anchors: tuple[str, ...],
    before: int,
    after: int,
    *specs: Rule,
    needs: str = "",
    leads: tuple[str, ...] = (),
    holds: tuple[str, ...] = (),
    ends: tuple[str, ...] = (),
    guard: bytes = b"",
) -> Family:
    assert all(c.isascii() and not c.isalnum() for c in needs)
    assert not guard or before == 0
    assert not ends or (before == 0 and holds)
    stops = tuple(w.encode() for w in (*holds, *ends))
    requires = [
        tuple(tuple(w.encode() for w in g.split()) for g in s[3]) if len(s) == 4 else ()
        for s in specs
    ]
    assert all(w and " " not in w.decode() for r in requires for g in r for w in g)
    # A space in a rule is any one whitespace character: a phrase wrapped onto the next
    # line ("your system\nprompt") is the phrase.
    rules = tuple((s[0], s[1], _spaces_as_whitespace(s[2])) for s in specs)
    merged = _merged(rules) if before == 0 else rules
    if before == 0:
        requires = _merged_requires(rules, requires)
    return Family(
        anchors,
        before,
        after,
        tuple((r, s, re.compile(p)) for r, s, p in merged),
        tuple((r, s, _as_bytes(p), q) for (r, s, p), q in zip(merged, requires, strict=True)),
        tuple(c.encode() for c in needs),
        ahocorasick_rs.BytesAhoCorasick([w.encode() for w in leads]) if leads else None,
        ahocorasick_rs.BytesAhoCorasick(list(stops)) if holds else None,
        (*_hold_rules(tuple(w.encode() for w in holds), requires), *(-1 for _ in ends)),
        guard,
    )


def _hold_rules(
    holds: tuple[bytes, ...], requires: list[tuple[tuple[bytes, ...], ...]]
) -> tuple[int, ...]:
    """``Family.hold_rules``: hold word ``h`` may let rule ``j`` match when ``h`` is in
    one of the words of ``j``'s first group (any rule without words: every hold word). A
    match of ``j`` holds one of those words, and each of them holds a word of ``holds``,
    which the automaton then finds."""
    if not holds:
        return ()
    bits = [0] * len(holds)
    for j, need in enumerate(requires):
        for i, h in enumerate(holds):
            if not need or any(h in w for w in need[0]):
                bits[i] |= 1 << j
        assert not need or all(any(h in w for h in holds) for w in need[0]), need
    return tuple(bits)


def starts(
    anchors: tuple[str, ...],
    after: int,
    *rules: Rule,
    needs: str = "",
    holds: tuple[str, ...] = (),
    ends: tuple[str, ...] = (),
    guard: bytes = b"",
) -> Family:
    """A family whose matches begin with one of its anchors (a verb): the rules are tried
    only *at* the anchor (``re.match``), the cheapest test there is."""
    return family(anchors, 0, after, *rules, needs=needs, holds=holds, ends=ends, guard=guard)
