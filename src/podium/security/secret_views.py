"""A text as a reader decodes it, and where each character of that stood in the text.

:class:`~podium.security.secrets.SecretMatcher` looks for a secret in the text as it is
written and, where the text could read differently, in one more view of it:

- escapes decoded: HTML character references (``&#115;``, ``&#x73;``, named ones such as
  ``&hyphen;``; an escaped ``&amp;`` is read again, twice at most) and JSON ``\\uXXXX``
  escapes (behind any number of backslashes, as JSON inside JSON writes them);
- folded: NFKC (full-width and other compatibility forms as the characters they stand
  for), invisible format characters (zero-width spaces, joiners, soft hyphens) dropped;
- look-alikes read as the Latin letters they imitate (Cyrillic ``а е о р с х``..., Greek
  ``ο ν ρ``...), and dashes (``&hyphen;``, en and em dashes, the minus sign) as ``-``.

Each character of the view keeps the start and end of what it was read from, so a match
in the view is replaced where it stood. A plain ASCII text without ``&`` or ``\\u`` has no
other view (:func:`may_differ` is the cheap test, run before any decoding).
"""

from __future__ import annotations

import html.entities
import re
import unicodedata

__all__ = ("ESCAPE_LENGTH", "View", "may_differ", "view_of")

#: A view: its text, and for each of its characters the start and the end (exclusive) of
#: what it was read from in the original.
View = tuple[str, list[int], list[int]]

#: The longest escape read as one character (``&#x0000073;`` and the longest entity name
#: this module reads): a bound on how much text one character of a view stands for.
ESCAPE_LENGTH = 16

_ESCAPE = re.compile(
    r"&#([0-9]{1,8});?|&#[xX]([0-9a-fA-F]{1,7});?|&([A-Za-z][A-Za-z0-9]{1,12};)"
    r"|\\{1,8}u([0-9a-fA-F]{4})"
)
_ENTITIES = html.entities.html5
#: Invisible characters a copy may be salted with (Unicode's format category, in part).
_INVISIBLE = re.compile(r"[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")

# Cyrillic and Greek letters that look like Latin ones (after Unicode's confusables list).
_LOOKALIKES = {
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
    "с": "c", "т": "t", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d",
    "ӏ": "l", "һ": "h", "ԛ": "q", "ԝ": "w", "ѵ": "v", "ү": "y", "ɡ": "g",
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P",
    "С": "C", "Т": "T", "Х": "X", "У": "Y", "І": "I", "Ј": "J", "Ѕ": "S", "Ԛ": "Q",
    "Ԝ": "W", "Ү": "Y", "Ӏ": "I",
    "α": "a", "β": "b", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "ϲ": "c", "ϳ": "j", "ω": "w",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M",
    "Ν": "N", "Ο": "O", "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "Ϲ": "C",
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-",
    "\u2212": "-",
}  # fmt: skip
_LATIN = str.maketrans(_LOOKALIKES)
_LOOKALIKE = re.compile("[" + "".join(_LOOKALIKES) + "]")
_SUSPECT = re.compile("[" + _INVISIBLE.pattern[1:-1] + "".join(_LOOKALIKES) + "]")


def may_differ(text: str) -> bool:
    """Whether ``text`` may have a view other than itself (cheap: no decoding)."""
    # ("\\u" in text alone is slow: a search led by a frequent letter.)
    return not text.isascii() or "&" in text or ("\\" in text and "\\u" in text)


def view_of(text: str) -> View | None:
    """``text`` decoded, folded and with look-alikes read as Latin; None where that is
    ``text`` itself."""
    view: View | None = None
    for _ in range(3):  # (an escaped escape, "&amp;#115;", is read once more)
        step = _unescaped(view[0] if view else text)
        if step is None:
            break
        view = step if view is None else _composed(view, step)
    current = view[0] if view else text
    if current.isascii():
        return view
    # One search over the text for what is rare (invisible characters, look-alikes): the
    # common non-ASCII text (accents, quotes, other scripts in NFKC) pays for it alone.
    normal = unicodedata.is_normalized("NFKC", current)
    if normal and not _SUSPECT.search(current):
        return view
    if not normal or _INVISIBLE.search(current):
        folded = _folded(current)
        view = folded if view is None else _composed(view, folded)
        current = view[0]
    if _LOOKALIKE.search(current):  # one for one: where each stood does not change
        latin = current.translate(_LATIN)
        if view is None:
            return latin, list(range(len(text))), list(range(1, len(text) + 1))
        return latin, view[1], view[2]
    return view


def _composed(outer: View, inner: View) -> View:
    """``inner`` (a view of ``outer``'s text) as a view of what ``outer`` was read from."""
    _, starts, ends = outer
    text, inner_starts, inner_ends = inner
    return text, [starts[s] for s in inner_starts], [ends[e - 1] for e in inner_ends]


def _decoded(match: re.Match[str]) -> str | None:
    dec, hexa, name, unicode = match.groups()
    try:
        if dec is not None:
            return chr(int(dec))
        if hexa is not None:
            return chr(int(hexa, 16))
        if unicode is not None:
            return chr(int(unicode, 16))
    except (ValueError, OverflowError):  # (past U+10FFFF)
        return None
    return _ENTITIES.get(name)


def _unescaped(text: str) -> View | None:
    """``text`` with its HTML character references and JSON ``\\u`` escapes decoded."""
    if "&" not in text and "\\" not in text:
        return None
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for match in _ESCAPE.finditer(text):
        decoded = _decoded(match)
        if decoded is None:
            continue
        start, end = match.span()
        chars.append(text[pos:start])
        starts.extend(range(pos, start))
        ends.extend(range(pos + 1, start + 1))
        chars.append(decoded)
        starts.extend([start] * len(decoded))
        ends.extend([end] * len(decoded))
        pos = end
    if not pos:
        return None
    chars.append(text[pos:])
    starts.extend(range(pos, len(text)))
    ends.extend(range(pos + 1, len(text) + 1))
    return "".join(chars), starts, ends


def _folded(text: str) -> View:
    """``text`` read as a person reads it (NFKC, invisible characters dropped)."""
    chars: list[str] = []
    where: list[int] = []
    for i, c in enumerate(text):
        if unicodedata.category(c) == "Cf":
            continue
        for f in unicodedata.normalize("NFKC", c):
            chars.append(f)
            where.append(i)
    return "".join(chars), where, [i + 1 for i in where]
