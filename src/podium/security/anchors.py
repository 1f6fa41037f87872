"""Find many literal anchors in UTF-8 bytes at once, ignoring ASCII case: the first pass of
the heuristic screener, and most of its cost on clean text.

Two engines, one answer: every occurrence of every anchor, overlapping ones included, as
``(anchor index, start byte, end byte)`` ordered by end, then start. A *stop* anchor, one
that makes the caller drop the others (a hidden character: the screener then reads the
whole text again without them), may end the scan: the hits then end with it.

- Hyperscan (the ``hyperscan`` wheel, published for the common platforms): SIMD literal
  matching straight on the text's bytes, without the lowering pass the automaton needs.
  On prose it costs 0.6 µs per KB against 2.2 for the automaton, plus about 0.2 µs a call
  and 0.25 µs per match (a Python callback each);
- an Aho-Corasick DFA (``ahocorasick_rs``) over the ASCII-lowered bytes: the fallback
  everywhere else, and on anchor-stuffed text, where Hyperscan's callbacks would cost more
  than the automaton's single pass. A DFA makes one dependent table load per byte, which
  holds it near 2 ns a byte whatever the anchors.

An anchor may have a *guard*: a regex that follows it (ASCII case ignored) wherever the
caller could find something around it, such as the identifier with an underscore that
``call `` needs before it can be a tool call. Hyperscan matches it in the same pass and
drops the occurrences without it, which saves the caller a window it would search in vain;
the automaton reports them all, so the caller checks the guard again (a cheap ``re.match``
where the anchor ends). A guard should match at most once from a given start: Hyperscan
reports each match.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from operator import itemgetter
from typing import Any, Protocol

import ahocorasick_rs

try:  # no wheel for some platforms (Linux on ARM with Python 3.14): the automaton serves
    import hyperscan

    HYPERSCAN = True
except ImportError:  # pragma: no cover - depends on the platform
    HYPERSCAN = False

__all__ = ("AnchorScanner", "anchor_scanner", "available_engines")

Hit = tuple[int, int, int]  # (anchor index, start byte, end byte)


class AnchorScanner(Protocol):
    """Finds anchors (lower-case bytes) in UTF-8 bytes, ignoring ASCII case."""

    engine: str

    def hits(self, data: bytes) -> list[Hit]: ...


class AhoCorasickAnchors:
    """The Aho-Corasick DFA over the lowered bytes. Its overlapping search reports by end,
    then start: the order promised, with no sorting."""

    engine = "aho-corasick"

    def __init__(self, anchors: Sequence[bytes]) -> None:
        self._automaton = ahocorasick_rs.BytesAhoCorasick(
            list(anchors), implementation=ahocorasick_rs.Implementation.DFA
        )

    def hits(self, data: bytes) -> list[Hit]:
        # (overlapping, positionally: keywords cost the binding's parser)
        found: list[Hit] = self._automaton.find_matches_as_indexes(data.lower(), True)
        return found


_BY_END_THEN_START = itemgetter(2, 1)
# Below this many bytes the automaton answers. (128 with 337 anchors; with the 1,000 or so
# that obfuscated key words brought, the automaton's table grew and Hyperscan is the
# cheaper from 64 bytes up: 6.6 against 8.4 µs per KB of 64-127-byte sentences.)
_SHORT = 64


class HyperscanAnchors:
    """Hyperscan's matcher, caseless for ASCII only (as ``bytes.lower`` is).

    Each match comes through a Python callback. One costs about what the automaton takes
    for 100 bytes, so past 32 matches and one per 64 bytes the scan stops and the
    automaton answers instead; it also answers for text under ``_SHORT`` (64) bytes, where its
    cheaper call outweighs its slower pass."""

    engine = "hyperscan"

    def __init__(
        self, anchors: Sequence[bytes], guards: Mapping[int, bytes], stops: Collection[int]
    ) -> None:
        assert HYPERSCAN
        assert all(a == a.lower() for a in anchors)
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        # Anchors as regexes of escaped bytes (the pure-literal compiler stops at a NUL), a
        # guard after its anchor; the leftmost start of each match is asked for, as a
        # guarded anchor's match ends where the guard does.
        self._db.compile(
            expressions=[
                b"".join(b"\\x%02x" % c for c in a) + guards.get(i, b"")
                for i, a in enumerate(anchors)
            ],
            ids=list(range(len(anchors))),
            elements=len(anchors),
            flags=hyperscan.HS_FLAG_CASELESS | hyperscan.HS_FLAG_SOM_LEFTMOST,
        )
        self._lengths = [len(a) for a in anchors]
        self._stops = [i in stops for i in range(len(anchors))]
        self._fallback = AhoCorasickAnchors(anchors)
        # Bound once: a bound method made per call is a short text's allocation more.
        self._find_short = self._fallback._automaton.find_matches_as_indexes
        self._callback = self._on_match
        # A scratch space serves one scan at a time, and a scan releases the GIL: one each.
        self._local = threading.local()

    def _scratch(self) -> Any:
        try:
            return self._local.scratch
        except AttributeError:
            self._local.scratch = scratch = hyperscan.Scratch(self._db)
            return scratch

    def _on_match(self, i: int, start: int, _to: int, _flags: int, ctx: Any) -> bool:
        found, most = ctx  # (the hits so far, how many may come)
        found.append((i, start, start + self._lengths[i]))
        return self._stops[i] or len(found) > most  # True stops the scan

    def hits(self, data: bytes) -> list[Hit]:
        if len(data) < _SHORT:  # the automaton costs less to call, and this little to run
            found_short: list[Hit] = self._find_short(data.lower(), True)  # (its ``hits``)
            return found_short
        found: list[Hit] = []
        try:
            # Positional arguments: keywords cost the binding's parser 200 ns a call.
            try:  # (the scratch looked up here, not by a call: a short text's scan is 0.5 µs)
                scratch = self._local.scratch
            except AttributeError:
                scratch = self._scratch()
            self._db.scan(data, self._callback, 0, (found, 32 + (len(data) >> 6)), scratch)
        except hyperscan.ScanTerminated:
            if self._stops[found[-1][0]]:
                return found
            return self._fallback.hits(data)
        if len(found) > 1:
            found.sort(key=_BY_END_THEN_START)  # ties at one end come in no set order
        return found


def available_engines() -> tuple[str, ...]:
    return ("hyperscan", "aho-corasick") if HYPERSCAN else ("aho-corasick",)


def anchor_scanner(
    anchors: Sequence[bytes],
    guards: Mapping[int, bytes] | None = None,
    stops: Collection[int] = (),
    engine: str | None = None,
) -> AnchorScanner:
    """The fastest scanner available, or the ``engine`` named."""
    if engine is None and HYPERSCAN:
        try:
            return HyperscanAnchors(anchors, guards or {}, stops)
        except hyperscan.error:  # pragma: no cover - a CPU it does not support (no SSSE3)
            engine = "aho-corasick"
    engine = engine or available_engines()[0]
    if engine == "hyperscan" and HYPERSCAN:
        return HyperscanAnchors(anchors, guards or {}, stops)
    if engine == "aho-corasick":
        return AhoCorasickAnchors(anchors)
    raise ValueError(f"anchor engine {engine!r} is not available")
