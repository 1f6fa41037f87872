"""The learned first pass: a linear model over the words and word pairs of a text.

The rules in ``heuristics.py`` catch what they name; jailbreaks are paraphrased without
end, and a rule list does not generalise. This screener scores a text with a logistic
regression over *presence* features: each distinct lower-cased word (a run of letters)
and each pair of adjacent words that the model knows adds its weight. The weights are a
text data file (``screen_weights.json``, shipped in the package, a few hundred KB) that
``bench/train_screen.py`` regenerates deterministically from the development part of the
screen's evaluation corpus (public attack corpora and benign tool output; the test part
is never read). No numeric library at run time: a byte translation, a split, a set of the
words and one dict lookup each, summed in C.

Long texts are scored in windows (``WINDOW`` characters, half overlapping), the highest
window deciding: a short injection inside a long, benign page is not outvoted by it.

A finding (rule ``learned``, the model's probability as its score, the window as its
span) is reported only from ``REPORT_FROM`` up: lower scores are no verdict at all, so a
clean text costs no journal entry. A text of fewer than ``MIN_WORDS`` words is left to
the rules: the model has too little to go on. The policy's threshold and the guard model's
``unsure`` band read the score like any other.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources

from podium.security.findings import Finding

__all__ = ("FOLD", "LearnedScreener", "features", "words", "words_of")

WINDOW = 4096
REPORT_FROM = 0.35
# Fewer words than this are too little evidence ("write a poem about the sea"): the rules
# alone judge such a text.
MIN_WORDS = 12
# Words: runs of ASCII letters and of non-ASCII bytes (UTF-8 of other scripts) in the
# ASCII-lowered UTF-8; everything else separates them, digits too (numbers in logs and
# API bodies are ids and counts: as features they were memorised noise, 900 of the 8,000
# kept, and each one a lookup). One byte translation (which lowers ASCII letters as it
# goes, as ``bytes.lower`` would in a pass of its own) and a split: 3 µs per KB, where a
# regular expression over the characters costs 40.
FOLD = bytes(
    b if b >= 0x80 else ord(chr(b).lower()) if chr(b).isalpha() else 0x20 for b in range(256)
)


def words(text: str) -> list[bytes]:
    """The lower-cased words of ``text``, in order (the model's tokens)."""
    return text.encode("utf-8", "surrogatepass").translate(FOLD).split()


def words_of(data: bytes) -> list[bytes]:
    """``words`` of a text already encoded (UTF-8, ``surrogatepass``): the first pass
    encodes once for the rules and the model."""
    return data.translate(FOLD).split()


def features(text: str) -> tuple[set[bytes], set[tuple[bytes, bytes]]]:
    """The distinct words and adjacent word pairs of ``text``: what the model weighs."""
    w = words(text)
    return set(w), set(itertools.pairwise(w))


class _Vocabulary(dict[bytes, float]):
    """The words' weights, nothing for a word the model does not know: ``__getitem__``
    bound takes one argument (``dict.get`` with a default, two). A miss (one distinct word
    in twenty) calls ``__missing__``: ``operator.not_``, a builtin (a class attribute that
    is not bound), no Python frame; it says False of a word, which ``sum`` adds as 0.0."""

    __slots__ = ()

    __missing__ = operator.not_


class _Weights:
    __slots__ = ("bias", "get", "pair_keys", "pairs", "unigram_keys", "unigrams")

    def __init__(self, data: dict[str, object]) -> None:
        bias = data["bias"]
        unigrams = data["unigrams"]
        pairs = data["bigrams"]
        assert isinstance(bias, float | int)
        assert isinstance(unigrams, dict)
        assert isinstance(pairs, dict)
        self.bias = float(bias)
        self.unigrams: dict[bytes, float] = {
            str(k).encode(): float(v) for k, v in unigrams.items()
        }
        self.pairs: dict[tuple[bytes, bytes], float] = {}
        for k, v in pairs.items():
            a, b = str(k).encode().split(b" ")
            self.pairs[(a, b)] = float(v)
        # Sets of the keys: set & set walks the smaller one (a text's few hundred words),
        # where a dict's keys view copies all its keys first.
        self.unigram_keys = frozenset(self.unigrams)
        self.pair_keys = frozenset(self.pairs)
        self.get: Callable[[bytes], float] = _Vocabulary(self.unigrams).__getitem__

    def evidence(self, w: list[bytes]) -> float:
        """The sum of the weights of the features words ``w`` hold (the logit less the bias)."""
        # One lookup per distinct word, summed in C (``map``; 0.0 for an unknown word):
        # half the cost of intersecting with the vocabulary and summing the hits in a loop.
        z: float = sum(map(self.get, set(w)))
        pairs = self.pairs
        if pairs:  # (a model without pairs skips making them: 8 µs per KB)
            for p in self.pair_keys & set(itertools.pairwise(w)):
                z += pairs[p]
        return z

    def score(self, text: str) -> float:
        return self.score_words(words(text))

    def score_words(self, w: list[bytes]) -> float:
        if len(w) < MIN_WORDS:
            return 0.0
        # (``evidence`` inlined without pairs: a short text's call costs as much as its lookups)
        z = self.bias + (self.evidence(w) if self.pairs else sum(map(self.get, set(w))))
        return 1.0 / (1.0 + math.exp(-z)) if z > -30 else 0.0


@cache
def _shipped() -> _Weights:
    raw = resources.files("podium.security").joinpath("screen_weights.json").read_text("utf-8")
    return _Weights(json.loads(raw))


class LearnedScreener:
    """The learned first pass (see the module docstring). Stateless, sync.

    ``weights``: a path to a weights file in ``screen_weights.json``'s format (None: the
    shipped one)."""

    name = "learned"

    def __init__(self, weights: str | None = None) -> None:
        if weights is None:
            self._weights = _shipped()
        else:
            with open(weights, encoding="utf-8") as f:
                self._weights = _Weights(json.load(f))

    def unigram_model(self) -> tuple[Callable[[bytes], float], float] | None:
        """The model's word lookup (a word's weight, 0.0 for an unknown one) and bias,
        where it weighs words only (no pairs): a caller scoring one window inline
        (``FirstPass``) saves a call per text."""
        weights = self._weights
        return None if weights.pairs else (weights.get, weights.bias)

    def probability(self, text: str) -> float:
        """The model's probability that ``text`` is an attack (the highest window's)."""
        return self.best_window(text)[0]

    def best_window(self, text: str, data: bytes | None = None) -> tuple[float, int, int]:
        """The highest window's probability and its span (``0.0, 0, 0`` for no text).
        ``data``: ``text`` encoded (UTF-8, ``surrogatepass``) where the caller has it."""
        n = len(text)
        if n <= WINDOW:  # (most texts: one window, no list of them to make)
            if not n:
                return (0.0, 0, 0)
            if data is None:
                data = text.encode("utf-8", "surrogatepass")
            w = data.translate(FOLD).split()
            weights = self._weights
            if len(w) < MIN_WORDS:
                return (0.0, 0, n)
            if weights.pairs:
                return (weights.score_words(w), 0, n)
            # (``score_words`` inlined: on a sentence the call costs a tenth of the scoring)
            z = weights.bias + sum(map(weights.get, set(w)))
            return (1.0 / (1.0 + math.exp(-z)) if z > -30 else 0.0, 0, n)
        return max(self._windows(text))

    def screen(self, text: str) -> Sequence[Finding]:
        p, start, end = self.best_window(text)
        if p < REPORT_FROM:
            return ()
        return (Finding("learned", round(p, 3), start, end),)

    def _windows(self, text: str) -> list[tuple[float, int, int]]:
        if len(text) <= WINDOW:
            return [(self._weights.score(text), 0, len(text))] if text else []
        step = WINDOW // 2
        return [
            (self._weights.score(text[a : a + WINDOW]), a, min(len(text), a + WINDOW))
            for a in range(0, len(text) - step, step)
        ]
