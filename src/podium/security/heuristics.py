
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
  Spanish, Portuguese, German, Italian, Dutch, Polish, Russian, Turkish, Hindi (and
  romanised Hindi), Chinese, Japanese, Korean, Arabic; "disregard your rules" and "you
  are now" (without restrictions, DAN) in most of those;
- ``exfiltrate``: asks to reveal the system prompt, keys, passwords (the system prompt
  in the override languages too);
- ``hijack``: instructions planted in a document (garak's latent injection): output
  forced ("just print", "reply with only ... and nothing else"), "if the user asks ...,
  say that", words addressed to the assistant ("Note to the AI:"), a system or admin
  label giving an order ("SYSTEM MESSAGE: ignore..."), a harmful sentence ordered up;
- ``role_spoof``: chat-template delimiters (``<|im_start|>``, ``[INST]``, ``<<SYS>>``),
  fake ``<system>`` tags, ``system:`` lines pretending a new message starts;
- ``tool_call``: text shaped like a tool call (``{"name": ..., "arguments": ...}``,
  ``<tool_call>``), or telling the model to call a tool;
- ``hidden``: Unicode tag characters (invisible ASCII), zero-width and bidi-override
  characters. Phrases split by hidden characters are still found.

Obfuscated text (look-alike letters, full-width letters, spaced-out letters, leetspeak,
rot13, base64, hex, zero-width characters for spaces) is screened again in its
normalised forms, on a trigger the anchor pass finds for free or, for non-ASCII text, a
byte translation (``deobfuscate.py``); what only a normalised form matches is reported
as ``obfuscated:<form>:<rule>``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from podium.security.anchors import anchor_scanner
from podium.security.deobfuscate import TRIGGERS, suspicious, variants
from podium.security.findings import Finding
from podium.security.heuristic_rules import FAMILIES as _FAMILIES
from podium.security.heuristic_rules import Family as _Family

__all__ = ("HeuristicScreener", "screen_encoded")


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
# The family index of an obfuscated key word ("i g n o r", "1gn0r", base64...): it opens
# no window, but the text's normalised forms are screened too (see deobfuscate.py).
_TRIGGER = -2

# Each distinct anchor maps to the families it opens a window for. Every occurrence is
# found, overlapping ones too (it costs the scan nothing more).
_FAMILIES_OF: dict[bytes, list[int]] = {}
for _i, _f in enumerate(_FAMILIES):
    for _a in _f.anchors:
        _FAMILIES_OF.setdefault(_a.encode(), []).append(_i)
for _h in _HIDDEN_ANCHORS:
    _FAMILIES_OF[_h] = [_HIDDEN]
for _t in TRIGGERS:
    _FAMILIES_OF.setdefault(_t.encode(), []).append(_TRIGGER)
_ANCHORS = list(_FAMILIES_OF)
_ANCHOR_FAMILIES = [tuple(_FAMILIES_OF[a]) for a in _ANCHORS]
# The same, each family with its index, its window (characters before and after the anchor)
# and the byte range its ``needs`` are looked for in (enough bytes for those characters);
# family None for a hidden character. Flat tuples: one unpacking instead of attribute loads.
_Window = tuple[int, "_Family | None", int, int, tuple[bytes, ...], int, int]
_ANCHOR_WINDOWS: list[tuple[_Window, ...]] = [
    tuple(
        (fi, None, 0, 0, (), 0, 0)
        if fi < 0
        else (fi, (f := _FAMILIES[fi]), f.before, f.after, f.needs, 4 * f.before, 4 * f.after)
        for fi in fis
    )
    for fis in _ANCHOR_FAMILIES
]
# A guard belongs to the anchors of its family, which must open windows for no other.
_GUARDS = {
    i: _FAMILIES[fis[0]].guard
    for i, fis in enumerate(_ANCHOR_FAMILIES)
    if fis[0] >= 0 and _FAMILIES[fis[0]].guard
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
# Forms of forms screened at most this deep (base64 of rot13 of spaced letters is not).
_MAX_DEPTH = 2


# Whether a byte is an ASCII letter or digit (a word goes on through it).
_ALNUM_BYTE = tuple(b < 0x80 and chr(b).isalnum() for b in range(256))


class HeuristicScreener:
    """Rule-based screening (see the module docstring for the rules). Stateless, sync."""

    name = "heuristic"

    def screen(self, text: str) -> Sequence[Finding]:
        return _screen(text)

    def screen_encoded(self, text: str, data: bytes) -> Sequence[Finding]:
        """``screen`` for a caller that has ``text``'s UTF-8 (``surrogatepass``) already."""
        return _screen(text, data)


def _screen(
    text: str, data: bytes | None = None, *, byte_windows: bool = True, depth: int = 0
) -> Sequence[Finding]:
    """Screen ``text``. A window around an anchor that is all ASCII (most of them, even in
    prose with dashes and accents here and there) is matched on the lower-cased bytes as
    they are: no str slicing or lowering, and no character offset to work out unless a rule
    matches. A window holding other characters is matched on the text's characters.
    ``byte_windows=False`` matches every window on characters: the reference the tests hold
    the fast path to. ``data``: ``text``'s UTF-8 where the caller has it. ``depth``: how
    many normalisations deep ``text`` is (see deobfuscate.py)."""
    if data is None:
        data = text.encode("utf-8", "surrogatepass")
    hits = _SCANNER.hits(data)
    if not hits:
        # (all ASCII, the common case: a length compared, no look-alike letters to fold)
        if len(data) == len(text) or depth >= _MAX_DEPTH or not suspicious(data):
            return ()
        return _with_variants(text, [], unicode=True, anchored=False, depth=depth)
    if _STOP[hits[-1][0]]:  # the scan stopped at a hidden character
        return _screen_hidden(text, depth)
    triggered = False
    best: dict[str, Finding] = {}
    # Windows opened per family: counted only when there are enough anchors to reach the cap.
    windows = [0] * len(_FAMILIES) if len(hits) >= _MAX_WINDOWS else None
    chars: _CharOffsets | None = None  # made when a character offset is first needed
    ascii_text = len(data) == len(text)  # (then so is every window)
    for i, start, end in hits:
        guard = _GUARD_AFTER[i]  # ASCII case ignored, as the rules' lowering does
        if guard is not None and guard.match(data, end) is None:
            continue
        for fi, family, before, after, needs, needs_before, needs_after in _ANCHOR_WINDOWS[i]:
            if family is None:
                if fi == _HIDDEN:
                    return _screen_hidden(text, depth)
                triggered = True  # an obfuscated key word: see below
                continue
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
            if byte_windows and (ascii_text or window.isascii()):
                if family.holds is not None:
                    # (overlapping: "context" holds "text", and the two let different rules in)
                    # (by end: a sentence's end, -1, puts those after it out of reach)
                    mask = 0
                    for h, _, _ in family.holds.find_matches_as_indexes(window, True):
                        bits = family.hold_rules[h]
                        if bits < 0:
                            break
                        mask |= bits
                    if mask:
                        _search_bytes(family, window, a, data, best, mask)
                elif family.leads is not None:
                    # (overlapping: a lead inside another one counts; positional, as
                    # keywords cost the binding's parser)
                    led = family.leads.find_matches_as_indexes(window, True)
                    if led:
                        _search_leads(family, window, a, data, best, led)
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
    if depth < _MAX_DEPTH:
        unicode = len(data) != len(text) and suspicious(data)
        if triggered or unicode:
            return _with_variants(
                text, list(best.values()), unicode=unicode, anchored=triggered, depth=depth
            )
    return list(best.values())


def _with_variants(
    text: str, found: list[Finding], *, unicode: bool, anchored: bool, depth: int
) -> list[Finding]:
    """``found`` and what the rules find in ``text``'s normalised forms that they did not
    find in it: ``obfuscated:<form>:<rule>``, spanning the characters it came from."""
    have = {f.rule for f in found}
    extra: dict[str, Finding] = {}
    for v in variants(text, unicode=unicode, anchored=anchored):
        for f in _screen(v.text, depth=depth + 1):
            rule = f.rule.rsplit(":", 1)[-1]
            if rule in have or rule.startswith("hidden"):
                continue  # (found as written; hidden characters are reported as ever)
            name = f"obfuscated:{v.form}:{rule}"
            if name not in extra or extra[name].score < f.score:
                start, end = v.origin(f.start, f.end)
                extra[name] = Finding(name, f.score, start, end)
    return [*found, *extra.values()]


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
    mask: int = -1,
) -> None:
    """``_search`` on an ASCII window of the lower-cased bytes starting at byte ``a``.
    ``mask``: the rules (a bit each) the family's hold words found let in, where it has
    them (they stand for the rules' words, which are not looked for again)."""
    anchored = family.before == 0
    for rule, score, pattern, requires in family.byte_rules:
        bit = mask & 1
        mask >>= 1
        if not bit:
            continue
        found = best.get(rule)
        if found is not None and found.score >= score:
            continue
        if requires and mask < 0 and not _holds_words(window, requires):
            continue  # a word every match holds is missing: the regex cannot match
        m = pattern.match(window) if anchored else pattern.search(window)
        if m is not None:
            best[rule] = _found(rule, score, m, a, data)


def _search_leads(
    family: _Family,
    window: bytes,
    a: int,
    data: bytes,
    best: dict[str, Finding],
    led: list[tuple[int, int, int]],
) -> None:
    """``_search_bytes`` trying the rules only where one of the family's leads starts
    (``led``: the leads in ``window``, overlapping ones included)."""
    starts = sorted({s for _, s, _ in led})
    for rule, score, pattern, requires in family.byte_rules:
        found = best.get(rule)
        if found is not None and found.score >= score:
            continue
        if requires and not _holds_words(window, requires):
            continue
        for pos in starts:
            m = pattern.match(window, pos)  # a lookbehind still sees the bytes before pos
            if m is not None:
                best[rule] = _found(rule, score, m, a, data)
                break


def _holds_words(window: bytes, requires: tuple[tuple[bytes, ...], ...]) -> bool:
    """Whether ``window`` has one word of each group of ``requires``."""
    for group in requires:
        for word in group:
            if window.find(word) >= 0:  # (not `in`: bytes.__contains__ tries the word as an
                #  int first and formats a TypeError each time)
                break
        else:
            return False
    return True


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


def _screen_hidden(text: str, depth: int = 0) -> list[Finding]:
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
    found = _screen("".join([text[a:b] for a, b in gaps]), depth=depth)
    if found:
        keep: list[int] = []  # where each visible character is in the text
        for a, b in gaps:
            keep.extend(range(a, b))
        keep.append(len(text))
        for f in found:
            end = keep[f.end - 1] + 1 if f.end > f.start else keep[f.start]
            findings.append(Finding(f.rule, f.score, keep[f.start], end))
    if (
        depth < _MAX_DEPTH
        and any(0 < a < b < len(text) and text[a - 1].isalpha() and text[b].isalpha() for a, b in zw)  # noqa: E501
        and not any(f.rule == "override" for f in found or ())
    ):
        # Zero-width characters between letters, perhaps in place of spaces
        # ("ignore\u200bprevious"): the text is read again with them as spaces.
        findings = _with_variants(text, findings, unicode=True, anchored=False, depth=depth)
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


# ``HeuristicScreener.screen_encoded`` without its call in between, for ``FirstPass``: on a
# short text each Python call is a few per cent of the screening.
screen_encoded = _screen
