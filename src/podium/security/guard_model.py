"""A guard model behind the first pass: a classifier served like any other model.

The heuristic first pass is cheap and decides most texts; a :class:`GuardModel` on a
:class:`~podium.security.screen.ScreeningPolicy` (``ScreeningPolicy(guard=GuardModel(m))``)
asks a classifier model about the others: only texts whose first-pass score falls in the
``unsure`` band (``when="unsure"``, the default), or every text (``when="always"``). Any
:class:`~podium.models.base.Model` serves, typically an OpenAI-compatible endpoint
(``[[models]]``) running Llama Guard, Prompt Guard or a similar classifier:

- the text goes as one user message; the reply's first line is the verdict: ``safe`` /
  ``unsafe`` (Llama Guard, its second line the categories, ``S1,S14``) or ``benign`` /
  ``injection`` / ``jailbreak`` (Prompt Guard's labels);
- ``unsafe`` adds a finding ``guard_unsafe`` (``guard_unsafe:S14``) of score 0.95, which
  the policy's action applies to like any other; ``safe`` overrules an unsure first pass
  (the verdict is ``allow``; the rule it overruled stays in the journal);
- an answer that is none of these (``garbage``), an error or a reply later than
  ``budget_s`` is a failure: ``on_failure="open"`` lets the first pass decide alone,
  ``"closed"`` adds a finding ``guard_unavailable`` of score 1.0 (the policy's action
  applies: a guard that is down blocks what it would have been asked about);
- a text longer than ``max_chars`` is shown as the window of that size around what the
  first pass found (not its head: padding would push an injection out of sight), and a
  ``safe`` on a window overrules nothing (the guard did not read the rest);
- verdicts are cached per content hash (``cache_size`` entries, least recently used out),
  failures are not;
- every consultation is journaled with the text's verdict (:attr:`ScreenVerdict.guard`:
  ``safe``, ``unsafe:S14``, ``timeout``, ``error``, ``garbage``, ``cached`` ones marked
  ``+cached``) and counted (:func:`guard_statistics`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter, OrderedDict
from typing import Literal

from podium.messages import Message
from podium.models.base import Model, ModelRequest, ModelSettings

__all__ = ("GuardAnswer", "GuardModel", "guard_statistics", "parse_guard_reply")

_UNSAFE = frozenset({"unsafe", "injection", "jailbreak", "malicious"})
_SAFE = frozenset({"safe", "benign"})
_counts: Counter[str] = Counter()


def guard_statistics() -> dict[str, int]:
    """Guard consultations so far in this process, by outcome (``safe``, ``unsafe``,
    ``timeout``, ``error``, ``garbage``, ``cache_hit``)."""
    return dict(_counts)


def parse_guard_reply(text: str) -> str | None:
    """``safe``, ``unsafe`` or ``unsafe:CATEGORIES`` from a guard's reply; None if it is
    no verdict."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    head = lines[0].lower().rstrip(".:")
    if head in _SAFE:
        return "safe"
    if head in _UNSAFE:
        if head != "unsafe":
            return f"unsafe:{head}"
        if len(lines) > 1 and len(lines[1]) <= 64:  # Llama Guard's categories: "S1,S14"
            return f"unsafe:{lines[1].replace(' ', '')}"
        return "unsafe"
    return None


class GuardAnswer:
    """What the guard said about one text: ``said`` is the journal's word for it;
    ``whole``: it read all of the text (else a window of it)."""

    __slots__ = ("failed", "said", "unsafe", "whole")

    def __init__(
        self, said: str, *, unsafe: bool = False, failed: bool = False, whole: bool = True
    ) -> None:
        self.said = said
        self.unsafe = unsafe
        self.failed = failed
        self.whole = whole


class GuardModel:
    """A classifier model consulted by the screen (see the module's docstring).

    Example::

        guard = OpenAIChatModel("http://127.0.0.1:8001/v1", "meta-llama/Llama-Guard-3-1B")
        ScreeningPolicy(action="block", guard=GuardModel(guard, budget_s=0.5))
    """

    def __init__(
        self,
        model: Model,
        *,
        when: Literal["unsure", "always"] = "unsure",
        unsure: tuple[float, float] = (0.2, 0.8),
        budget_s: float = 1.0,
        on_failure: Literal["open", "closed"] = "open",
        cache_size: int = 4096,
        max_chars: int = 16_000,
    ) -> None:
        if when not in ("unsure", "always"):
            raise ValueError(f"when must be 'unsure' or 'always', not {when!r}")
        if on_failure not in ("open", "closed"):
            raise ValueError(f"on_failure must be 'open' or 'closed', not {on_failure!r}")
        if not budget_s > 0:
            raise ValueError("budget_s must be positive")
        self.model = model
        self.when = when
        self.unsure = unsure
        self.budget_s = budget_s
        self.on_failure = on_failure
        self.cache_size = cache_size
        self.max_chars = max_chars
        self.name = f"guard:{model.name}"
        self._cache: OrderedDict[bytes, GuardAnswer] = OrderedDict()

    def consults(self, first_pass_score: float) -> bool:
        """Whether a text the first pass scored so goes to the guard."""
        low, high = self.unsure
        return self.when == "always" or low <= first_pass_score < high

    def window(self, text: str, focus: tuple[int, int] | None = None) -> str:
        """What of ``text`` the guard reads: all of it, or ``max_chars`` around ``focus``
        (the span the first pass scored highest; a classifier's context is short)."""
        if len(text) <= self.max_chars:
            return text
        start = 0 if focus is None else max(0, focus[0] - self.max_chars // 4)
        start = min(start, len(text) - self.max_chars)
        return text[start : start + self.max_chars]

    async def ask(self, text: str, focus: tuple[int, int] | None = None) -> GuardAnswer:
        """The guard's answer on ``text`` (cached), within the latency budget; a long text
        is read around ``focus`` (see :meth:`window`)."""
        whole = len(text) <= self.max_chars
        text = self.window(text, focus)
        key = hashlib.blake2b(text.encode(), digest_size=16).digest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            _counts["cache_hit"] += 1
            return GuardAnswer(f"{cached.said}+cached", unsafe=cached.unsafe, whole=whole)
        request = ModelRequest(
            [Message("user", text)], settings=ModelSettings(temperature=0.0, max_tokens=16)
        )
        try:
            async with asyncio.timeout(self.budget_s):
                response = await self.model.request(request)
        except TimeoutError:
            return self._failed("timeout")
        except Exception:  # a backend down, refusing, broken: the policy decides
            return self._failed("error")
        said = parse_guard_reply(response.content)
        if said is None:
            return self._failed("garbage")
        answer = GuardAnswer(said, unsafe=said.startswith("unsafe"), whole=whole)
        _counts["unsafe" if answer.unsafe else "safe"] += 1
        self._cache[key] = answer
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return answer

    def _failed(self, why: str) -> GuardAnswer:
        _counts[why] += 1
        return GuardAnswer(why, failed=True)

    async def aclose(self) -> None:
        await self.model.aclose()
