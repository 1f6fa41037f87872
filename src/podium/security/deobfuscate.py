"""Obfuscated forms of a text, for the rules to read again: the screen's normalisation stage.

An attack written so that no rule reads it (look-alike letters from Cyrillic or Greek,
full-width or mathematical letters, letters spaced out, leetspeak, rot13, base64 or hex,
zero-width characters between letters) is turned back into plain text here, and the
heuristic screener (``heuristics.py``) screens that text with its own rules; a finding
from it is reported as ``obfuscated:<form>:<rule>``, spanning what it came from.

Normalising costs a pass in Python over the text, so it runs only on a cheap trigger:

- *anchors* found in the screener's single anchor pass (no extra pass at all): the
  spaced-out, leetspeak, rot13, base64 and hex forms of the rules' key words
  (``TRIGGERS``): "i g n o r", "1gn0r", "vtaber", "aWdub3Jl", "69676e6f7265";
- for a text that is not all ASCII (``len(data) != len(text)``: free), one byte
  translation that classes its bytes (``suspicious``): a Latin letter next to a Cyrillic
  or Greek one in a word, full-width, mathematical, circled or small-capital letters,
  combining marks after a Latin letter. Text wholly in another script (a Russian or
  Hindi page, Chinese docs with full-width punctuation) does not trigger it.

The forms (``variants``):

- ``unicode``: NFKC, format characters (zero-width and the like) dropped (and, in a
  second form, read as spaces: "ignore\\u200bprevious"), look-alike letters folded to
  Latin, combining marks on a Latin letter dropped;
- ``spaced``: letters separated by single spaces, dots, dashes or underscores joined
  ("i g n o r e  a l l" reads "ignore all");
- ``leet``: in words that mix letters and digits or symbols, 1/!/| read as i, 0 as o,
  3 as e, 4/@ as a, 5/$ as s, 7/+ as t;
- ``rot13``: the whole text rotated;
- ``base64``/``hex``: runs of 16 or more characters of the alphabet that decode to UTF-8
  text that is mostly printable (an image, a hash or a key decodes to bytes, not text)
  are screened decoded; a JWT's parts are base64 too, and decode to JSON that the rules
  pass.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from dataclasses import dataclass
from functools import cache

__all__ = ("TRIGGERS", "Variant", "folded", "suspicious", "variants")

# The rules' key words: their obfuscated forms are the trigger anchors.
_KEY_WORDS = (
    "ignore", "disregard", "forget", "override", "bypass", "previous", "instructions",
    "system", "prompt", "reveal", "password", "secret", "jailbreak", "rules", "developer",
    "unrestricted", "credentials", "confidential",
)  # fmt: skip
# Phrases whose encoded forms trigger too (spaced out or in leetspeak, their words do).
_KEY_PHRASES = ("you are now", "api key", "do anything now")
_SEPARATORS = (" ", ".", "-")
# The common substitutions (the fold reads more: "|" for l, "+" for t).
_LEET = {"a": "4@", "e": "3", "i": "1!", "l": "1", "o": "0", "s": "5$", "t": "7"}


def _leet_forms(stem: str) -> set[str]:
    forms = {""}
    for c in stem:
        forms = {f + s for f in forms for s in c + _LEET.get(c, "")}
    forms.discard(stem)
    return forms


def _base64_forms(word: bytes) -> set[str]:
    """The characters of ``word``'s base64 that do not depend on its neighbours, at each of
    the three alignments (six at least: shorter ones would be found by chance)."""
    out = set()
    for k in range(3):
        a = base64.b64encode(b"\x00" * k + word + b"\x00\x00\x00").decode()
        b = base64.b64encode(b"\xff" * k + word + b"\xff\xff\xff").decode()
        same = "".join(x if x == y else " " for x, y in zip(a, b, strict=True))
        best = max(same.split(), key=len)
        if len(best) >= 6:
            out.add(best.lower())  # (the anchor pass ignores ASCII case)
    return out


def _triggers() -> tuple[str, ...]:
    found: set[str] = set()
    for word in _KEY_WORDS:
        stem = word[:5]
        found.update(sep.join(stem) for sep in _SEPARATORS)
        found.update(_leet_forms(word[:5]))
    for word in (*_KEY_WORDS, *_KEY_PHRASES):
        found.add(codecs.encode(word, "rot13"))
        for cased in {word, word.capitalize(), word.title(), word.upper()}:
            found.update(_base64_forms(cased.encode()))
            found.add(cased.encode().hex())
    return tuple(sorted(found))


TRIGGERS = _triggers()

# The lead bytes of the blocks that hold look-alikes (IPA and small capitals, combining
# marks, Greek, Cyrillic, Armenian, small capitals again, full-width forms, mathematical
# letters): English text with a dash, a quote or an accent holds none, and one byte
# deletion says so. (Circled letters, in the block of arrows and dashes, are folded but
# do not trigger.)
_KEPT = bytes([0xC9, 0xCA, *range(0xCC, 0xD7), 0xE1, 0xEF, 0xF0])
_NOT_KEPT = bytes(b for b in range(256) if b not in _KEPT)
_LOOKALIKE_LEADS = re.compile(rb"[\xc9\xca\xcc\xcd]")
_CYRILLIC_GREEK_LEAD = re.compile(rb"[\xce-\xd6]")
# Where a lead byte of a three- or four-byte block is, the text itself is searched (a
# regex that starts with a fixed byte): small capitals U+1D00-1D2B, mathematical letters
# U+1D400-1D7FF (not the emoji beside them).
_SMALL_CAPITAL = re.compile(rb"\xe1\xb4[\x80-\xab]")
_MATH_LETTER = re.compile(rb"\xf0\x9d[\x90-\x9f]")
# Full-width Latin letters (not full-width punctuation, which Chinese and Japanese text
# is full of), looked for in the text where a lead byte of their block is.
_FULLWIDTH_LETTER = re.compile(rb"\xef(?:\xbc[\xa1-\xba]|\xbd[\x81-\x9a])")
# Byte classes for the Cyrillic and Greek check: a Latin letter "a", a Cyrillic, Greek or
# Armenian lead byte "c", anything else a space (continuation bytes dropped).
_CLASSES = bytearray(b" " * 256)
for _b in range(256):
    if chr(_b).isascii() and chr(_b).isalpha():
        _CLASSES[_b] = ord("a")
for _b in range(0xCE, 0xD7):
    _CLASSES[_b] = ord("c")
_CLASS_TABLE = bytes(_CLASSES)
_CONTINUATION = bytes(range(0x80, 0xC0))


# The last text asked about and the answer: the first pass asks twice of one text (for
# the rules, then for the model), with the same bytes object. (Held, so no other object
# can have its identity; threads at worst work it out again.)
_last: tuple[bytes, bool] = (b"", False)


def suspicious(data: bytes) -> bool:
    """``_suspicious``, remembered for the last text."""
    global _last
    last = _last
    if last[0] is data:
        return last[1]
    answer = _suspicious(data)
    _last = (data, answer)
    return answer


def _suspicious(data: bytes) -> bool:
    """Whether a non-ASCII text's UTF-8 holds look-alike letters (see the module
    docstring). One byte deletion leaves the lead bytes of the blocks that hold
    look-alikes (none in most text); only text with such a lead byte is searched whole:
    for a full-width, small-capital or mathematical letter, or a Latin letter beside a
    Cyrillic or Greek one in a word."""
    leads = data.translate(None, _NOT_KEPT)
    if not leads:  # (most non-ASCII text: accents, dashes, quotes, CJK)
        return False
    if _LOOKALIKE_LEADS.search(leads) is not None:
        return True
    if b"\xef" in leads and _FULLWIDTH_LETTER.search(data) is not None:
        return True
    if b"\xe1" in leads and _SMALL_CAPITAL.search(data) is not None:
        return True
    if b"\xf0" in leads and _MATH_LETTER.search(data) is not None:
        return True
    if _CYRILLIC_GREEK_LEAD.search(leads) is None:
        return False
    classes = data.translate(_CLASS_TABLE, _CONTINUATION)
    return b"ac" in classes or b"ca" in classes


# Look-alikes NFKC leaves alone: Cyrillic, Greek, Armenian, IPA and small capitals.
_CONFUSABLES = dict(
    zip(
        "аеорсухѕіјԁһӏԛԝүъьвкмнтАВЕКМНОРСТУХЅІЈҮ"
        "αβεικνορτυχγωΑΒΕΖΗΙΚΜΝΟΡΤΥΧ"
        "օսհոց"
        "ıİɡɑɩɪɢɴʀʏʙʜʟᴀᴄᴅᴇᴊᴋᴍᴏᴘᴛᴜᴠᴡᴢꜱ",
        "aeopcyxsijdhlqwybbbkmhtABEKMHOPCTYXSIJY"
        "abeiknoptuxywABEZHIKMNOPTYX"
        "ounhg"
        "iIgaiignryb"
        "hlacdejkmoptuvwzs",
        strict=True,
    )
)
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc"})


def _is_variation_selector(point: int) -> bool:
    return 0xFE00 <= point <= 0xFE0F or 0xE0100 <= point <= 0xE01EF


@cache
def _fold_char(c: str) -> str:
    """What a non-ASCII character reads as: "" for an invisible one, its Latin
    look-alike, its NFKC form where that is ASCII (full-width, mathematical, circled
    letters, ligatures), else itself."""
    if c in _CONFUSABLES:
        return _CONFUSABLES[c]
    category = unicodedata.category(c)
    if category in _INVISIBLE_CATEGORIES or _is_variation_selector(ord(c)):
        return ""
    n = unicodedata.normalize("NFKC", c)
    if n != c and n.isascii() and n.isprintable():
        return n
    if len(n) == 1 and n in _CONFUSABLES:
        return _CONFUSABLES[n]
    return c


@dataclass(frozen=True, slots=True)
class Variant:
    """A form of the text: ``offsets[i]`` is where its character ``i`` came from in the
    text (one more entry for its end); a decoded run has ``span`` instead."""

    form: str
    text: str
    offsets: list[int] | None = None
    span: tuple[int, int] = (0, 0)

    def origin(self, start: int, end: int) -> tuple[int, int]:
        """The span of the text that the variant's ``[start:end]`` came from."""
        if self.offsets is None:
            return self.span
        if end <= start:
            return self.offsets[start], self.offsets[start]
        return self.offsets[start], self.offsets[end - 1] + 1


_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")


def _unicode_fold(text: str, zero_width_as_space: bool) -> tuple[str, list[int]]:
    """``text`` folded (see ``_fold_char``) and where each character came from. The ASCII
    between non-ASCII runs is copied in slices: a page in English with a few look-alikes
    costs a step per non-ASCII character, not per character."""
    out: list[str] = []
    offsets: list[int] = []
    pos = 0
    for m in _NON_ASCII_RUN.finditer(text):
        a, b = m.span()
        out.append(text[pos:a])
        offsets.extend(range(pos, a))
        prev_latin = a > 0 and text[a - 1].isalpha()  # (ASCII: the run starts after it)
        for i in range(a, b):
            c = text[i]
            r = _fold_char(c)
            if r == c and prev_latin and unicodedata.combining(c):
                continue  # a diacritic stacked on a Latin letter ("i̴g̴n̴o̴r̴e̴")
            if not r and zero_width_as_space and unicodedata.category(c) == "Cf":
                r = " "
            if r:
                out.append(r)
                offsets.extend([i] * len(r))
                prev_latin = r[-1].isascii() and r[-1].isalpha()
        pos = b
    out.append(text[pos:])
    offsets.extend(range(pos, len(text) + 1))
    return "".join(out), offsets


# Single letters (or digits) each followed by one separator, at least four of them: a
# spaced-out word. Its separator run ends it ("i g n o r e  a l l": two spaces).
_SPACED = re.compile(r"(?<![^\W_])(?:[^\W_][ .\-_*]){3,}[^\W_](?![^\W_])")
_SPACED_GAP = re.compile(r"[ .\-_*]{2,4}")


def _collapse(text: str, offsets: list[int]) -> tuple[str, list[int]] | None:
    """Spaced-out words joined, the gap between two of them one space."""
    runs = [m.span() for m in _SPACED.finditer(text)]
    if not runs:
        return None
    out: list[str] = []
    offs: list[int] = []
    pos = 0
    for n, (a, b) in enumerate(runs):
        gap = text[pos:a]
        if n and _SPACED_GAP.fullmatch(gap):
            gap = " "
            out.append(" ")
            offs.append(offsets[pos])
        else:
            out.append(gap)
            offs.extend(offsets[pos:a])
        for k in range(a, b, 2):
            out.append(text[k])
            offs.append(offsets[k])
        pos = b
    out.append(text[pos:])
    offs.extend(offsets[pos:])
    return "".join(out), offs


_LEET_TABLE = str.maketrans("10!|34@57+$", "ioileaastts")
# A word that mixes letters with digits or the symbols leetspeak uses for them.
_LEET_WORD = re.compile(r"(?=[\w!|@$+]*[a-zA-Z])(?=[\w!|@$+]*[0-9!|@$+])[\w!|@$+]{3,}")


# "1" is an "l" as often as an "i" ("ru1es"): the second reading.
_LEET_TABLE_L = str.maketrans("10!|34@57+$", "loileaastts")


def _leet(text: str, table: dict[int, int]) -> str | None:
    folded = _LEET_WORD.sub(lambda m: m.group().translate(table), text)
    return folded if folded != text else None


# Base64 (standard or URL-safe) and hex runs long enough to say something.
# (lines of a run wrapped as MIME wraps it are one run)
_ENCODED_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}(?:\r?\n[A-Za-z0-9+/_-]{4,})*={0,2}")
_HEX_RUN = re.compile(r"(?:[0-9a-fA-F]{2}){8,}")
_MAX_DECODED = 64 * 1024  # decoded text past this is not screened further


def _decoded(run: str) -> tuple[str, str] | None:
    """The text a run decodes to and its form, if it is mostly printable UTF-8."""
    run = "".join(run.split())
    raw: bytes | None = None
    form = "hex"
    if _HEX_RUN.fullmatch(run):
        raw = bytes.fromhex(run[: 2 * _MAX_DECODED])
    else:
        form = "base64"
        body = run[: 4 * _MAX_DECODED // 3].rstrip("=")
        altchars = b"-_" if "-" in body or "_" in body else None  # (URL-safe)
        try:
            raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=altchars)
        except (binascii.Error, ValueError):
            return None
    try:
        decoded = raw[:_MAX_DECODED].decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(c.isprintable() or c in "\n\t\r" for c in decoded)
    if len(decoded) < 8 or printable < 0.9 * len(decoded) or not any(c.isalpha() for c in decoded):
        return None
    return decoded, form


def folded(text: str) -> str:
    """``text`` with look-alike letters read as Latin and invisible characters dropped
    (the ``unicode`` form), for the learned model to score."""
    return _unicode_fold(text, zero_width_as_space=False)[0]


def variants(text: str, *, unicode: bool, anchored: bool) -> list[Variant]:
    """The forms of ``text`` to screen again (see the module docstring). ``unicode``: it
    holds look-alike letters; ``anchored``: the anchor pass found a trigger anchor."""
    out: list[Variant] = []
    base, offsets = text, list(range(len(text) + 1))
    if unicode:
        base, offsets = _unicode_fold(text, zero_width_as_space=False)
        out.append(Variant("unicode", base, offsets))
        spaced, spaced_offsets = _unicode_fold(text, zero_width_as_space=True)
        if spaced != base:
            out.append(Variant("unicode", spaced, spaced_offsets))
    if not anchored and not unicode:
        return out
    collapsed = _collapse(base, offsets)
    if collapsed is not None:
        base, offsets = collapsed
        out.append(Variant("spaced", base, offsets))
    leet = _leet(base, _LEET_TABLE)
    if leet is not None:
        out.append(Variant("leet", leet, offsets))
        if "1" in base:
            leet = _leet(base, _LEET_TABLE_L)
            if leet is not None:
                out.append(Variant("leet", leet, offsets))
    if anchored:
        out.append(Variant("rot13", codecs.encode(text, "rot13"), list(range(len(text) + 1))))
        for m in _ENCODED_RUN.finditer(text):
            found = _decoded(m.group())
            if found is not None:
                out.append(Variant(found[1], found[0], None, m.span()))
    return out
