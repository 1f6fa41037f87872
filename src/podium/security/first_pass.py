"""The default first pass: the rules and the learned model, each checking the other.

The rules (``heuristics.py``) are sure of what they name and blind to paraphrase; the
learned model (``learned.py``) generalises over wording but has little to go on in a
short text. Together:

- every finding of both stands, the highest score deciding (the policy's threshold, and
  the guard model's ``unsure`` band, read it as ever);
- a rule that matched in a text of at least ``CONTEXT_WORDS`` words that the learned
  model finds plainly benign (below ``BENIGN_BELOW``) is lowered to ``UNSURE``: an
  article about prompt injection quotes "ignore previous instructions", a JSON body reads
  ``{"tool": "calculator", "input": ...}``. Below the default threshold such a text is
  allowed, and a guard model, where one is configured, is asked about it. Hidden
  characters (tag characters, zero-width runs, bidi overrides) are never lowered: no
  wording makes them benign;
- the learned finding spans the window it scored, unless a rule's finding (with a span)
  stands: a redacting policy then cuts the rules' spans, not the whole window.
"""

from __future__ import annotations

from collections.abc import Sequence

from podium.security.findings import Finding
from podium.security.heuristics import HeuristicScreener
from podium.security.learned import REPORT_FROM, LearnedScreener, words

__all__ = ("FirstPass",)

CONTEXT_WORDS = 40
BENIGN_BELOW = 0.05
UNSURE = 0.45


class FirstPass:
    """The rules and the learned model as one screener (see the module docstring)."""

    name = "first_pass"

    def __init__(
        self, rules: HeuristicScreener | None = None, learned: LearnedScreener | None = None
    ) -> None:
        self.rules = rules or HeuristicScreener()
        self.learned = learned or LearnedScreener()

    def screen(self, text: str) -> Sequence[Finding]:
        found = list(self.rules.screen(text))
        p, start, end = self.learned.best_window(text)
        if (
            found
            and p < BENIGN_BELOW
            and any(f.score > UNSURE and not f.rule.startswith("hidden") for f in found)
            and len(words(text)) >= CONTEXT_WORDS
        ):
            found = [
                f if f.rule.startswith("hidden") or f.score <= UNSURE
                else Finding(f.rule, UNSURE, f.start, f.end)
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
