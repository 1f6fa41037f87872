"""Streamed text held back just long enough that no secret leaves in pieces.

A run that knows secrets (see :mod:`podium.security.redact`) streams its model's reply
through a :class:`HeldText` per kind of text (content, reasoning): each delta joins what
is held, every secret found is replaced, and all but the end a match may still grow into
go out (:meth:`~podium.security.secrets.SecretMatcher.held_from`: the longest text one
match of the run's secrets can cover, longer where that end holds escapes such as
``&#115;`` or ``\\u0073``), so a match that starts in what goes out is already whole:
a secret split across two deltas, or spelled out a letter a delta, never leaves in clear.
The price is that delay, only for runs with secrets; the journaled reply is scrubbed
whole, with the same matches.
"""

from __future__ import annotations

from podium.security.secrets import SECRET, SecretMatcher

__all__ = ("HeldText",)


class HeldText:
    """What of one stream's text is not yet published."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def push(self, text: str, matcher: SecretMatcher) -> str:
        """Take ``text``; the scrubbed text that may go out now (maybe empty)."""
        held = self._held + text
        cut = matcher.held_from(held)
        if cut <= 0:
            self._held = held
            return ""
        out: list[str] = []
        pos = 0
        for start, end in matcher.spans(held):
            if start >= cut:
                break
            out.append(held[pos:start])
            out.append(SECRET)
            pos = end
        release = max(cut, pos)
        out.append(held[pos:release])
        self._held = held[release:]
        return "".join(out)

    def flush(self, matcher: SecretMatcher) -> str:
        """All that is held, scrubbed (the stream ended, or other text comes between)."""
        held, self._held = self._held, ""
        return matcher.scrub(held)
