"""The in-process token channel: the engine and the gateway share one event loop."""

from __future__ import annotations

from podium.streaming.base import (
    DEFAULT_BUFFER,
    TokenChannel,
    TokenDelta,
    TokenSubscription,
    drop_subscriber,
)

__all__ = ("LocalTokenChannel",)


class LocalTokenChannel(TokenChannel):
    """Deltas handed from the engine to subscribers of the same process, in order.

    A run is listened to while it has at least one open subscription.
    """

    def __init__(self, buffer: int = DEFAULT_BUFFER) -> None:
        self._subs: dict[str, list[TokenSubscription]] = {}
        self._buffer = buffer

    def listening(self, run_id: str) -> bool:
        return run_id in self._subs

    def publish(self, run_id: str, delta: TokenDelta) -> None:
        subs = self._subs.get(run_id)
        if subs is not None:
            one = (delta,)
            for sub in subs:
                sub.feed(one)

    async def subscribe(self, run_id: str) -> TokenSubscription:
        sub = TokenSubscription(run_id, self._unsubscribe, self._buffer)
        self._subs.setdefault(run_id, []).append(sub)
        return sub

    def _unsubscribe(self, sub: TokenSubscription) -> None:
        drop_subscriber(self._subs, sub)
