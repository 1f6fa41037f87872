# ruff: noqa: E501  (the rule table reads best one pattern per line)
"""The built-in heuristic injection screener: fast rules, no model.

Rules come in families. Each family has *anchors*: literal strings one of which every match
contains, with a window around it where the family's regular expressions can match. One
pass over the UTF-8 bytes finds every anchor of every family at once, ignoring ASCII case
(Hyperscan where its wheel is installed, else an Aho-Corasick automaton over the lowered
bytes: see ``anchors.py``); most text has none and costs just that pass, about 1 µs per KB
with the encoding. Only around an anchor do the regular expressions run, on a small
window, and cheaply:

- a window that is all ASCII (most are, even in prose with a dash or an accent here and
  there) is matched as lowered bytes: no str slicing, no character offsets unless a rule
  matches; the rules match there exactly as on the characters;
- a family whose every match holds some punctuation (``<`` or ``:`` for role tags) skips
  windows without it before any regex runs;
- rules that start at their anchor are one alternation tried with ``match``; a family whose
  anchor ends its matches ("reveal ... the system prompt") tries its rules only where one of
  its leading words starts, found by a small automaton, not at every position;
- a family whose rules start at the anchor can have it count only when what must follow
  does (``call `` then a name with ``_``): the window that could hold nothing is never
  opened, and Hyperscan does not even report the anchor.

Families:

- ``override``: "ignore all previous instructions" and its kin, in English, French,
  Spanish, Portuguese, German, Italian, Dutch, Russian, Chinese, Japanese, Korean, Arabic;
- ``exfiltrate``: asks to reveal the system prompt, keys, passwords;
- ``role_spoof``: chat-template delimiters (``<|im_start|>``, ``[INST]``, ``<<SYS>>``),
  fake ``<system>`` tags, ``system:`` lines pretending a new message starts;
- ``tool_call``: text shaped like a tool call (``{"name": ..., "arguments": ...}``,
  ``<tool_call>``), or telling the model to call a tool;
- ``hidden``: Unicode tag characters (invisible ASCII), zero-width and bidi-override
  characters. Phrases split by hidden characters are still found.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import ahocorasick_rs

from podium.security.anchors import anchor_scanner
from podium.security.findings import Finding

__all__ = ("HeuristicScreener",)

# Up to 40 characters within a sentence; a single line break too (a wrapped line), not a
# blank line (a paragraph's end).
_GAP = r"(?:[^.\n。!?]|\n(?!\n)){0,40}?"
_W = r"(?<![\w])"  # a word start that also works after punctuation and CJK
_OVERRIDE_VERBS = r"(?:ignore|ignoring|disregard|forget|override|bypass|skip)"
_OVERRIDE_WHAT = r"(?:previous|prior|above|earlier|preceding|original|initial|all|any|your|system|developer|safety)"
_OVERRIDE_NOUNS = r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|messages|context|guardrails|programming|commands?)"


@dataclass(frozen=True, slots=True)
class _Family:
    anchors: tuple[str, ...]
    before: int  # how far before an anchor a match may start; 0: matches start at the anchor
    after: int  # how far after it a match may end
    rules: tuple[tuple[str, float, re.Pattern[str]], ...]
    # The same rules over lower-cased UTF-8 bytes, for windows that are all ASCII: there a
    # byte is a character and ASCII lowering is str lowering, so they match exactly alike.
    byte_rules: tuple[tuple[str, float, re.Pattern[bytes]], ...]
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


def _family(
    anchors: tuple[str, ...],
    before: int,
    after: int,
    *rules: tuple[str, float, str],
    needs: str = "",
    leads: tuple[str, ...] = (),
    holds: tuple[str, ...] = (),
    guard: bytes = b"",
) -> _Family:
    assert all(c.isascii() and not c.isalnum() for c in needs)
    assert not guard or before == 0
    # A space in a rule is any one whitespace character: a phrase wrapped onto the next
    # line ("your system\nprompt") is the phrase.
    rules = tuple((r, sc, _spaces_as_whitespace(p)) for r, sc, p in rules)
    merged = _merged(rules) if before == 0 else rules
    return _Family(
        anchors,
        before,
        after,
        tuple((r, s, re.compile(p)) for r, s, p in merged),
        tuple((r, s, _as_bytes(p)) for r, s, p in merged),
        tuple(c.encode() for c in needs),
        ahocorasick_rs.BytesAhoCorasick([w.encode() for w in leads]) if leads else None,
        ahocorasick_rs.BytesAhoCorasick([w.encode() for w in holds]) if holds else None,
        guard,
    )


def _starts(
    anchors: tuple[str, ...],
    after: int,
    *rules: tuple[str, float, str],
    needs: str = "",
    holds: tuple[str, ...] = (),
    guard: bytes = b"",
) -> _Family:
    """A family whose matches begin with one of its anchors (a verb): the rules are tried
    only *at* the anchor (``re.match``), the cheapest test there is."""
    return _family(anchors, 0, after, *rules, needs=needs, holds=holds, guard=guard)


# Patterns run on lower-cased windows of the text.
_FAMILIES: tuple[_Family, ...] = (
    _family(
        (
            "you are now",
            "from now on",
            "new instruction",
            "new system instruction",
            "developer mode",
            "dan mode",
            "god mode",
            "jailbr",
            "do anything now",
        ),
        10,
        120,
        (
            "override",
            0.8,
            r"you are now (?:a |an |in )?(?:dan|jailbroken|unrestricted|unfiltered|developer mode|free|no longer)",
        ),
        ("override", 0.6, r"from now on,? you (?:will|must|are|should)"),
        ("override", 0.7, r"(?:^|\n|\. )\W*new (?:system )?instructions?\s*:"),
        ("override", 0.7, r"(?:developer|dan|jailbreak|god) mode|do anything now|jailbroken"),
    ),
    _starts(
        (
            *("ignor", "disregard", "forget", "overrid", "bypass", "skip "),
            "oubli",
            "olvid",
            "omit",
            "esque",
            "vergiss",
            "vergess",
            "missacht",
            "dimentic",
            "negeer",
            "vergeet",
        ),
        220,
        (
            "override",
            0.9,
            rf"{_W}{_OVERRIDE_VERBS}{_GAP}{_OVERRIDE_WHAT}\b{_GAP}{_OVERRIDE_NOUNS}\b",
        ),
        (
            "override",
            0.9,
            rf"{_W}(?:ignore[zr]?|oublie[zr]?){_GAP}(?:instructions|consignes|directives)\b",
        ),
        (
            "override",
            0.9,
            rf"{_W}(?:ignora|ignore|olvida|omite){_GAP}(?:instrucciones|indicaciones)\b",
        ),
        ("override", 0.9, rf"{_W}(?:ignore|ignora|esqueça|esqueca){_GAP}instru[çc](?:ões|oes)"),
        (
            "override",
            0.9,
            rf"{_W}(?:ignoriere|ignorier|ignorieren|vergiss|vergessen|missachte){_GAP}(?:anweisungen|instruktionen|befehle|regeln|vorgaben)\b",
        ),
        ("override", 0.9, rf"{_W}(?:ignora|dimentica){_GAP}(?:istruzioni|indicazioni)\b"),
        ("override", 0.9, rf"{_W}(?:negeer|vergeet){_GAP}(?:instructies|aanwijzingen)\b"),
        # The rules' nouns, or a stem of them: every match holds one.
        holds=(
            *("instru", "prompt", "direction", "directive", "rules", "guideline", "message"),
            *("context", "guardrail", "programming", "command", "consigne", "indicaci"),
            *("anweisung", "befehl", "regeln", "vorgabe", "istruzion", "indicazion"),
            "aanwijzing",
        ),
    ),
    _family(
        # Bytes are lowered as ASCII only: Cyrillic anchors come in their usual cases.
        (
            "игнор",
            "Игнор",
            "ИГНОР",
            "забуд",
            "Забуд",
            "ЗАБУД",
            "忽略",
            "忽视",
            "无视",
            "無視",
            "不要理会",
            "忘记",
            "忘掉",
            "忘れ",
            "무시",
            "잊어",
            "تجاهل",
        ),
        60,
        120,
        (
            "override",
            0.9,
            r"(?:игнорируй|игнорируйте|игнорировать|забудь|забудьте)[^.\n]{0,40}(?:инструкци|указани|правил)",
        ),
        (
            "override",
            0.9,
            r"(?:忽略|忽视|无视|無視|不要理会|忘记|忘掉)[^。\n]{0,12}(?:指令|指示|说明|提示|规则|命令)",
        ),
        ("override", 0.9, r"(?:指示|命令|プロンプト|ルール)[^。\n]{0,12}(?:無視|忘れ)"),
        ("override", 0.9, r"(?:지시|지침|명령|규칙)[^.\n]{0,12}(?:무시|잊어)"),
        ("override", 0.9, r"تجاهل[^.\n]{0,30}(?:التعليمات|الأوامر|التوجيهات)"),
    ),
    _family(
        (
            "system prompt",
            "initial prompt",
            "hidden instruction",
            "api key",
            "api_key",
            "api-key",
            "apikey",
            "password",
            "secret",
            "credential",
            "do not tell",
            "do not inform",
            "do not alert",
            "do not warn",
        ),
        80,
        60,
        (
            "exfiltrate",
            0.75,
            rf"{_W}(?:reveal|print|show|repeat|output|leak|send|tell me|give me|disclose){_GAP}(?:system prompt|initial prompt|hidden instructions|api[ _-]?keys?|passwords?|secrets?|credentials)\b",
        ),
        ("override", 0.6, r"do not (?:tell|inform|alert|warn) the user"),
        leads=(
            *("reveal", "print", "show", "repeat", "output", "leak", "send", "tell me"),
            *("give me", "disclose", "do not "),
        ),
    ),
    _family(
        (
            "system prompt",
            "|>",
            "[inst]",
            "[/inst]",
            "sys>>",
            "_of_turn>",
            "system>",
            "tool_result>",
            "tool_output>",
            "function_results>",
            "instruction>",
            "instructions>",
            "system:",
            "assistant:",
            "developer:",
            "prompt:",
            "message:",
            "instructions:",
            "instruction:",
        ),
        60,
        60,
        (
            "role_spoof",
            0.85,
            r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|begin_of_text)\|>",
        ),
        ("role_spoof", 0.85, r"\[/?inst\]|<</?sys>>|<(?:start|end)_of_turn>"),
        (
            "role_spoof",
            0.75,
            r"</?(?:system|tool_result|tool_output|function_results|instructions?)>",
        ),
        (
            "role_spoof",
            0.55,
            r"(?:^|\n)[ \t]*(?:#{1,4}[ \t]*)?(?:system|assistant|developer)(?:[ \t]+(?:prompt|message|instructions?))?[ \t]*:",
        ),
        needs="[<:",
    ),
    _family(
        (
            'tool_calls"',
            'function_call"',
            'arguments"',
            'args"',
            'parameters"',
            'input"',
            # The tags with their "<": a bare "tool_call" is everyday prose in docs about
            # agents, and the rules around it all need a quote or a "<" anyway.
            "<tool_call",
            "<function_call",
            "<tool_use",
            "<invoke",
        ),
        120,
        40,
        ("tool_call", 0.7, r"\"(?:tool_calls|function_call)\"\s*:"),
        (
            "tool_call",
            0.7,
            r"\{\s*\"(?:name|tool|function)\"\s*:\s*\"[\w.-]+\"\s*,\s*\"(?:arguments|args|parameters|input)\"\s*:",
        ),
        ("tool_call", 0.7, r"<(?:tool_call|function_call|tool_use|invoke)\b"),
    ),
    _starts(
        ("call ", "invoke ", "execute "),
        100,
        (
            "tool_call",
            0.6,
            r"(?:call|invoke|execute) (?:the )?[`'\"]?[a-z]+_[a-z_]+[`'\"]?(?: (?:tool|function)\b|\(| now\b| immediately\b| with\b)",
        ),
        # The rule's start after its verb, on the bytes. The rule reads the window lowered
        # as str, where [a-z] also matches the Kelvin sign (U+212A lowers to "k"; U+0130,
        # the only other non-ASCII character that lowers to ASCII, lowers to "i" and a
        # combining dot, which [a-z] does not match): its UTF-8 counts as a letter.
        guard=rb"(?:the )?[`'\x22]?(?:[a-z]|\xe2\x84\xaa)+_",
    ),
)

# Hidden characters, as UTF-8 byte sequences: zero-width (U+200B, U+2060-2064, U+FEFF,
# U+180E), bidi overrides (U+202A-202E, U+2066-2069), tag characters (U+E0000-E007F).
_HIDDEN_CHARS = (
    "\u200b\u180e\ufeff"
    + "".join(map(chr, range(0x2060, 0x2065)))
    + "".join(map(chr, range(0x202A, 0x202F)))
    + "".join(map(chr, range(0x2066, 0x206A)))
)
# Invisible characters with uses of their own (joiners in Persian, Indic scripts and
# emoji, direction marks in right-to-left text, soft hyphens, variation selectors,
# Hangul fillers): not findings themselves, but a phrase split by them is still found.
_IGNORABLE_CHARS = (
    "\u200c\u200d\u200e\u200f\u061c\u00ad\u034f\u3164\u115f\u1160\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
)
_HIDDEN_ANCHORS = (
    *(c.encode() for c in _HIDDEN_CHARS + _IGNORABLE_CHARS),
    b"\xf3\xa0\x80",  # U+E0000-E003F
    b"\xf3\xa0\x81",  # U+E0040-E007F
)
_HIDDEN = -1  # the family index of a hidden-character anchor

# Each distinct anchor maps to the families it opens a window for. Every occurrence is
# found, overlapping ones too (it costs the scan nothing more).
_FAMILIES_OF: dict[bytes, list[int]] = {}
for _i, _f in enumerate(_FAMILIES):
    for _a in _f.anchors:
        _FAMILIES_OF.setdefault(_a.encode(), []).append(_i)
for _h in _HIDDEN_ANCHORS:
    _FAMILIES_OF[_h] = [_HIDDEN]
_ANCHORS = list(_FAMILIES_OF)
_ANCHOR_FAMILIES = [tuple(_FAMILIES_OF[a]) for a in _ANCHORS]
# The same, each family with its index, its window (characters before and after the anchor)
# and the byte range its ``needs`` are looked for in (enough bytes for those characters);
# family None for a hidden character. Flat tuples: one unpacking instead of attribute loads.
_Window = tuple[int, "_Family | None", int, int, tuple[bytes, ...], int, int]
_ANCHOR_WINDOWS: list[tuple[_Window, ...]] = [
    tuple(
        (fi, None, 0, 0, (), 0, 0)
        if fi == _HIDDEN
        else (fi, (f := _FAMILIES[fi]), f.before, f.after, f.needs, 4 * f.before, 4 * f.after)
        for fi in fis
    )
    for fis in _ANCHOR_FAMILIES
]
# A guard belongs to the anchors of its family, which must open windows for no other.
_GUARDS = {
    i: _FAMILIES[fis[0]].guard
    for i, fis in enumerate(_ANCHOR_FAMILIES)
    if fis[0] != _HIDDEN and _FAMILIES[fis[0]].guard
}
assert all(len(_ANCHOR_FAMILIES[i]) == 1 for i in _GUARDS)
_GUARD_AFTER = [
    re.compile(_GUARDS[i], re.IGNORECASE) if i in _GUARDS else None for i in range(len(_ANCHORS))
]
# A hidden character sends the whole text to _screen_hidden: the scan may stop at one.
_STOP = [fis == (_HIDDEN,) for fis in _ANCHOR_FAMILIES]
_STOPS = [i for i, stop in enumerate(_STOP) if stop]
# Hyperscan where its wheel is installed, else an Aho-Corasick automaton (see anchors.py).
_SCANNER = anchor_scanner(_ANCHORS, _GUARDS, _STOPS)

_ZERO_WIDTH = re.compile("[\u200b\u180e\u2060-\u2064\ufeff]+")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]+")
_ANY_HIDDEN = re.compile(
    "[\u200b\u180e\u202a-\u202e\u2060-\u2069\ufeff\U000e0000-\U000e007f"
    + _IGNORABLE_CHARS + "]+"
)
# Past this many anchors of one family, search the whole text once instead of each window.
_MAX_WINDOWS = 64


# Whether a byte is an ASCII letter or digit (a word goes on through it).
_ALNUM_BYTE = tuple(b < 0x80 and chr(b).isalnum() for b in range(256))


class HeuristicScreener:
    """Rule-based screening (see the module docstring for the rules). Stateless, sync."""

    name = "heuristic"

    def screen(self, text: str) -> Sequence[Finding]:
        return _screen(text)


def _screen(text: str, *, byte_windows: bool = True) -> Sequence[Finding]:
    """Screen ``text``. A window around an anchor that is all ASCII (most of them, even in
    prose with dashes and accents here and there) is matched on the lower-cased bytes as
    they are: no str slicing or lowering, and no character offset to work out unless a rule
    matches. A window holding other characters is matched on the text's characters.
    ``byte_windows=False`` matches every window on characters: the reference the tests hold
    the fast path to."""
    data = text.encode("utf-8", "surrogatepass")
    hits = _SCANNER.hits(data)
    if not hits:
        return ()
    if _STOP[hits[-1][0]]:  # the scan stopped at a hidden character
        return _screen_hidden(text)
    best: dict[str, Finding] = {}
    # Windows opened per family: counted only when there are enough anchors to reach the cap.
    windows = [0] * len(_FAMILIES) if len(hits) >= _MAX_WINDOWS else None
    chars: _CharOffsets | None = None  # made when a character offset is first needed
    for i, start, end in hits:
        guard = _GUARD_AFTER[i]  # ASCII case ignored, as the rules' lowering does
        if guard is not None and guard.match(data, end) is None:
            continue
        for fi, family, before, after, needs, needs_before, needs_after in _ANCHOR_WINDOWS[i]:
            if family is None:
                return _screen_hidden(text)
            if windows is not None:
                n = windows[fi] = windows[fi] + 1
                if n > _MAX_WINDOWS:
                    continue
                if n == _MAX_WINDOWS:  # anchor-stuffed text: one full search bounds the cost
                    _search(family, text, 0, best, anchored=False)
                    continue
            if needs:  # ASCII punctuation (the same in any case), in the window's bytes
                lo = start - needs_before
                for need in needs:
                    if data.find(need, lo if lo > 0 else 0, start + needs_after) >= 0:
                        break
                else:
                    continue
            if before == 0:  # matches start at the anchor, which must start a word
                if start:
                    prev = data[start - 1]
                    if _ALNUM_BYTE[prev]:
                        continue
                    if prev >= 0x80:
                        chars = chars or _CharOffsets(text, data)
                        if text[chars.at(start) - 1].isalnum():
                            continue
                a = start
            else:
                a = start - before if start > before else 0
            window = data[a : start + after].lower()
            if byte_windows and window.isascii():
                if family.holds is not None and not family.holds.find_matches_as_indexes(window):
                    continue
                if family.leads is not None:
                    _search_leads(family, window, a, data, best)
                else:
                    _search_bytes(family, window, a, data, best)
                continue
            chars = chars or _CharOffsets(text, data)
            pos = chars.at(start)
            if before == 0:
                _search(family, text[pos : pos + after], pos, best, anchored=True)
            else:
                a = max(0, pos - before)
                _search(family, text[a : pos + after], a, best, anchored=False)
    return list(best.values())


class _CharOffsets:
    """Character offsets of byte offsets into the UTF-8 of a text, asked for in nearly
    increasing order (anchors come by end; one that starts before the last one asked for
    overlaps it): each call decodes only the bytes between the last offset and this one."""

    __slots__ = ("_ascii", "_byte", "_char", "_data")

    def __init__(self, text: str, data: bytes) -> None:
        self._data = data
        self._ascii = len(data) == len(text)
        self._byte = self._char = 0

    def at(self, byte: int) -> int:
        if self._ascii:
            return byte
        if byte > self._byte:
            self._char += len(self._data[self._byte : byte].decode("utf-8", "surrogatepass"))
            self._byte = byte
        elif byte < self._byte:
            self._char -= len(self._data[byte : self._byte].decode("utf-8", "surrogatepass"))
            self._byte = byte
        return self._char


def _search_bytes(
    family: _Family,
    window: bytes,
    a: int,
    data: bytes,
    best: dict[str, Finding],
) -> None:
    """``_search`` on an ASCII window of the lower-cased bytes starting at byte ``a``."""
    anchored = family.before == 0
    for rule, score, pattern in family.byte_rules:
        found = best.get(rule)
        if found is not None and found.score >= score:
            continue
        m = pattern.match(window) if anchored else pattern.search(window)
        if m is not None:
            best[rule] = _found(rule, score, m, a, data)


def _search_leads(
    family: _Family,
    window: bytes,
    a: int,
    data: bytes,
    best: dict[str, Finding],
) -> None:
    """``_search_bytes`` trying the rules only where one of the family's leads starts (a
    lead inside another one counts: the automaton reports overlapping matches)."""
    assert family.leads is not None
    found_at = family.leads.find_matches_as_indexes(window, overlapping=True)
    if not found_at:
        return
    starts = sorted({s for _, s, _ in found_at})
    for rule, score, pattern in family.byte_rules:
        found = best.get(rule)
        if found is not None and found.score >= score:
            continue
        for pos in starts:
            m = pattern.match(window, pos)  # a lookbehind still sees the bytes before pos
            if m is not None:
                best[rule] = _found(rule, score, m, a, data)
                break


def _found(rule: str, score: float, m: re.Match[bytes], a: int, data: bytes) -> Finding:
    # The window starts at byte ``a``; being ASCII, it has as many characters as bytes.
    at = len(data[:a].decode("utf-8", "surrogatepass"))
    return Finding(rule, score, at + m.start(), at + m.end())


def _search(
    family: _Family, window: str, offset: int, best: dict[str, Finding], *, anchored: bool
) -> None:
    low = window.lower()
    offsets: list[int] | None = None
    if len(low) != len(window):  # a rare character changed length when lowered
        low, offsets = _lower_mapped(window)
    for rule, score, pattern in family.rules:
        found = best.get(rule)
        if found is not None and found.score >= score:
            continue
        m = pattern.match(low) if anchored else pattern.search(low)
        if m is not None:
            start, end = m.span()
            if offsets is not None:
                start, end = offsets[start], offsets[end]
            best[rule] = Finding(rule, score, offset + start, offset + end)


def _screen_hidden(text: str) -> list[Finding]:
    """Report hidden characters, then screen the visible text (so "ig\\u200bnore" still
    reads "ignore"), mapping spans back to the text as given. One pass finds the hidden
    runs; each is split into its tag, zero-width and bidi characters (reported) and its
    ignorable ones (not)."""
    runs = [m.span() for m in _ANY_HIDDEN.finditer(text)]
    tags: list[Finding] = []
    zw: list[tuple[int, int]] = []
    bidi: list[Finding] = []
    for start, end in runs:  # short: a few characters each
        kind, since = None, start
        for at in range(start, end + 1):
            now = _hidden_kind(text[at]) if at < end else None
            if now != kind:
                if kind == "tags":
                    tags.append(Finding("hidden_tags", 0.95, since, at))
                elif kind == "zw":
                    zw.append((since, at))
                elif kind == "bidi":
                    bidi.append(Finding("hidden_bidi", 0.6, since, at))
                kind, since = now, at
    findings = tags
    if zw:
        # One stray zero-width space is common in copied text; many are not.
        score = min(0.9, 0.25 + 0.1 * len(zw))
        findings.extend(Finding("hidden_zero_width", score, a, b) for a, b in zw)
    findings.extend(bidi)
    # The visible text holds no hidden character: screened as any text is (its anchors),
    # not by every family over all of it (16 KB of Persian or emoji text, whose joiners
    # and selectors are ignorable, cost 30 times as much that way).
    gaps = list(zip([0, *(e for _, e in runs)], [*(s for s, _ in runs), len(text)], strict=True))
    found = _screen("".join([text[a:b] for a, b in gaps]))
    if found:
        keep: list[int] = []  # where each visible character is in the text
        for a, b in gaps:
            keep.extend(range(a, b))
        keep.append(len(text))
        for f in found:
            end = keep[f.end - 1] + 1 if f.end > f.start else keep[f.start]
            findings.append(Finding(f.rule, f.score, keep[f.start], end))
    return findings


def _hidden_kind(c: str) -> str | None:
    """Which finding a hidden character makes: tags, zw (zero-width), bidi, or None
    (ignorable: not reported)."""
    if "\U000e0000" <= c <= "\U000e007f":
        return "tags"
    if _ZERO_WIDTH.match(c):
        return "zw"
    if _BIDI.match(c):
        return "bidi"
    return None


def _lower_mapped(text: str) -> tuple[str, list[int]]:
    out: list[str] = []
    offsets: list[int] = []
    for i, c in enumerate(text):
        lc = c.lower()
        out.append(lc)
        offsets.extend([i] * len(lc))
    offsets.append(len(text))
    return "".join(out), offsets
