"""Secret values, found however they were written: one compiled pattern per set of secrets.

A secret that a tool was given (``secret_args``), that a tool returned (``secret_result``)
or that the agent declares (``Agent(secrets=...)``) can come back in other words: a tool
that echoes its input, a model that repeats a token it read, an error that quotes its
argument. Such copies are rarely byte for byte the same: a model upper-cases, spells out
with spaces, reverses, base64- or URL-encodes. :class:`SecretMatcher` compiles, once per
set of values, every such variant into one regular expression, so that scrubbing a text
costs one scan however many secrets there are:

- the value and its reverse, case-insensitive, with up to three whitespace characters
  between any two of its characters (``H u n t e r 2``, a line break in the middle);
- its URL encodings (``quote``, ``quote_plus``, every byte as ``%XX``) and hex;
- its base64 (standard and URL-safe alphabets, of the value, upper- and lower-cased and
  reversed), at each of the three alignments a value can have inside a longer encoded
  text: only the characters that depend on the value alone are matched;
- its rot13 (and that of its reverse), a pattern of its own.

A text that may read otherwise (not plain ASCII, or holding ``&`` or ``\\u``) is also
read decoded (:mod:`podium.security.secret_views`: HTML character references and JSON
``\\u`` escapes decoded, NFKC-folded, invisible characters dropped, Cyrillic and Greek
look-alikes read as Latin), and what is found there is replaced where it stood.

Values shorter than :data:`SHORTEST` characters are not matched (``"1"`` would blank every
digit). What no matcher can find: a secret encrypted, hashed, translated, split across
fields, or in encodings stacked on one another; see docs/security.md.
"""

from __future__ import annotations

import base64
import codecs
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

import ahocorasick_rs

from podium.security.secret_views import ESCAPE_LENGTH, may_differ, view_of

__all__ = ("SECRET", "SHORTEST", "SecretMatcher", "secret_tokens")

#: What a secret is replaced by, wherever it would have been written.
SECRET = "[secret]"
#: The shortest value that is matched at all.
SHORTEST = 3
#: Whitespace tolerated between two characters of a value (bounded: a match has a bounded
#: length, which the token stream's hold-back window relies on).
_GAP = 3
_GAP_PATTERN = r"\s{0,3}"
#: The prefilter's mark of a JSON escape, and whose secret it is (nobody's).
_ESCAPE_MARK = "\\u"
_NOBODY: frozenset[int] = frozenset()
#: Characters that make up a token inside a secret result (API keys, JWTs, URLs' parts).
_TOKEN = re.compile(r"[A-Za-z0-9_\-.+/=~:]{12,}")
_WS = re.compile(r"\s+")


def _spaced(value: str) -> str:
    chars = [c for c in value if not c.isspace()]
    return _GAP_PATTERN.join(re.escape(c) for c in chars)


def _b64_cores(data: bytes) -> set[str]:
    """The parts of ``data``'s base64 that do not depend on the bytes around it, for each
    of its three alignments and both alphabets."""
    cores: set[str] = set()
    for pad in range(3):
        whole = b"\0" * pad + data
        full, rest = divmod(len(whole), 3)
        end = 4 * full + (0, 1, 2)[rest]
        start = (0, 2, 3)[pad]
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            core = encode(whole).decode()[start:end]
            if len(core) >= 4:
                cores.add(core)
    return cores


def _squeezed(text: str) -> str:
    """``text`` lower-cased without whitespace: where the prefilter looks."""
    return "".join(text.lower().split())


def _variants(value: str) -> tuple[list[str], list[str], set[str]]:
    """(case-insensitive patterns, case-sensitive literals, the prefilter's literals)
    that find ``value``."""
    plain = {value, value[::-1]}
    loose = [_spaced(v) for v in sorted(plain)]
    literals = {_squeezed(v) for v in plain}
    exact: set[str] = set()
    for form in {value, value.lower(), value.upper(), value[::-1]}:
        raw = form.encode()
        encoded = {
            quote(form, safe=""),
            quote_plus(form, safe=""),
            "".join(f"%{b:02x}" for b in raw),
            raw.hex(),
        } - {form}
        loose.extend(re.escape(v) for v in encoded)
        literals |= {v.lower() for v in encoded}
        exact |= _b64_cores(raw)
    literals |= {v.lower() for v in exact}
    return loose, sorted(exact, key=len, reverse=True), literals


def _rot13(value: str) -> tuple[str, set[str]]:
    """(the case-insensitive pattern, the prefilter's literals) that find ``value`` in
    rot13: a pattern of its own, run only where the prefilter saw a rot13 copy (its
    branches would slow the search of every text holding a plain one)."""
    forms = {codecs.encode(v, "rot13") for v in (value, value[::-1])} - {value, value[::-1]}
    return "|".join(_spaced(v) for v in sorted(forms)), {_squeezed(v) for v in forms}


class SecretMatcher:
    """Finds and replaces the given secret values in any of the forms listed above.

    Example::

        m = SecretMatcher(["hunter2-TOPSECRET"])
        m.scrub("echo: HUNTER2-topsecret")   # 'echo: [secret]'
    """

    __slots__ = ("_owners", "_patterns", "_prefilter", "max_span", "values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = {v for v in values if isinstance(v, str) and len(v.strip()) >= SHORTEST}
        # Longest first: where one secret contains another, the whole of it goes.
        self.values: tuple[str, ...] = tuple(sorted(kept, key=len, reverse=True))
        # One pattern per secret (and one for its rot13), run only where the prefilter
        # found it: a text holding one of 50 secrets pays for one pattern, not 50.
        self._patterns: list[re.Pattern[str]] = []
        owners: dict[str, set[int]] = {}
        for value in self.values:
            loose, exact, literals = _variants(value)
            parts = ["(?i:" + "|".join(loose) + ")", *(re.escape(v) for v in exact)]
            rot13, rot13_literals = _rot13(value)
            groups = [("|".join(parts), literals)]
            if rot13:
                groups.append(("(?i:" + rot13 + ")", rot13_literals))
            for pattern, found_by in groups:
                for literal in found_by:
                    owners.setdefault(literal, set()).add(len(self._patterns))
                self._patterns.append(re.compile(pattern))
        # Python's regex tries every branch at every position (milliseconds for a 10 KB
        # text and a few secrets); an automaton over the squeezed, lower-cased text finds
        # a superset of the patterns' matches in one pass, and a pattern runs only then.
        # And one mark: whether the text holds a JSON escape (``\u``), found in the same
        # pass (``"\\u" in text`` alone costs as much as the pass over ordinary text).
        if owners:
            owners.setdefault(_ESCAPE_MARK, set())
        literal_list = sorted(owners)
        self._owners = [frozenset(owners[lit]) for lit in literal_list]
        self._prefilter = (
            ahocorasick_rs.AhoCorasick(
                literal_list, implementation=ahocorasick_rs.Implementation.DFA
            )
            if literal_list
            else None
        )
        # The longest text one match can cover: the hold-back window of a stream.
        longest = max((len(v.encode()) for v in self.values), default=0)
        self.max_span = max(longest * (1 + _GAP), longest * 3, longest * 4 // 3 + 4)

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def _scan(self, text: str) -> tuple[list[int], bool]:
        """The secrets the prefilter found a trace of in ``text`` (longest first), and
        whether ``text`` may read otherwise once decoded (see :func:`view_of`)."""
        prefilter = self._prefilter
        if prefilter is None or not text:
            return [], False
        squeezed = _squeezed(text)
        hits = prefilter.find_matches_as_indexes(squeezed)
        differs = not text.isascii() or "&" in text
        if not hits:
            return [], differs
        owners = self._owners
        if any(owners[lit] == _NOBODY for lit, _, _ in hits):
            differs = True  # and again, overlapping: the mark may hide a trace inside it
            hits = prefilter.find_matches_as_indexes(squeezed, True)
        return sorted({i for literal, _, _ in hits for i in owners[literal]}), differs

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where copies of secrets are in ``text``: (start, end), left to right, none
        overlapping (the longer secret wins where two overlap)."""
        candidates, differs = self._scan(text)
        found = self._found(text, candidates)
        if differs:
            view = view_of(text)
            if view is not None:  # found in the decoded text: where it stood in this one
                shown, starts, ends = view
                more = self._found(shown, self._scan(shown)[0])
                found += [(starts[s], -ends[-e - 1]) for s, e in more]
                found.sort()
        spans: list[tuple[int, int]] = []
        pos = 0
        for start, neg_end in found:
            if start >= pos:
                spans.append((start, -neg_end))
                pos = -neg_end
        return spans

    def _found(self, text: str, candidates: list[int]) -> list[tuple[int, int]]:
        """(start, -end) of every match in ``text`` of the ``candidates``, sorted."""
        if not candidates:
            return []
        return sorted(
            (m.start(), -m.end())
            for i in candidates
            for m in self._patterns[i].finditer(text)
            if m.end() > m.start()
        )

    def found(self, text: str) -> bool:
        """Whether ``text`` holds any of the secrets."""
        candidates, differs = self._scan(text)
        if any(self._patterns[i].search(text) for i in candidates):
            return True
        return differs and bool(self.spans(text))

    def held_from(self, text: str) -> int:
        """Where the end of ``text`` that a match may still grow into starts (a stream
        holds it back until more comes): the last :attr:`max_span` characters, or, where
        the end of ``text`` reads otherwise (escapes, invisible characters), as many as
        make up the last :attr:`max_span` characters of its view."""
        cut = len(text) - max(self.max_span, ESCAPE_LENGTH)
        if cut <= 0:
            return 0
        tail_start = max(0, len(text) - self.max_span * ESCAPE_LENGTH)
        tail = text[tail_start:]
        view = view_of(tail) if may_differ(tail) else None
        if view is None:
            return cut
        shown, starts, _ = view
        if len(shown) <= self.max_span:
            return tail_start
        return min(cut, tail_start + starts[len(shown) - self.max_span])

    def scrub(self, text: str) -> str:
        """``text`` with every copy of a secret replaced by :data:`SECRET`."""
        spans = self.spans(text)
        if not spans:
            return text
        out: list[str] = []
        pos = 0
        for start, end in spans:
            out.append(text[pos:start])
            out.append(SECRET)
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def with_values(self, values: Iterable[str]) -> SecretMatcher:
        """A matcher for these secrets and ``values`` (``self`` if nothing is new)."""
        new = {v for v in values if isinstance(v, str) and len(v.strip()) >= SHORTEST}
        if new <= set(self.values):
            return self
        return SecretMatcher((*self.values, *new))


def secret_tokens(content: str) -> list[str]:
    """What of a secret tool result is matched later: the whole (whitespace-trimmed) text
    and each long token inside it, so that a model quoting just the key of a JSON answer
    (``{"token": "sk-live-…"}``) is caught too."""
    text = _WS.sub(" ", content).strip()
    if not text:
        return []
    return [text, *_TOKEN.findall(text)]
