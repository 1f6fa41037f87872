"""Token streaming: a run's model tokens, live, from the engine to the clients listening.

:class:`LocalTokenChannel` serves one process (the embedded gateway);
``podium.streaming.redis.RedisTokenChannel`` carries tokens from ``podium worker``
processes to gateways over Redis pub/sub (import it from there: it needs redis-py).
"""

from podium.streaming.base import TokenChannel, TokenDelta, TokenSubscription
from podium.streaming.local import LocalTokenChannel

__all__ = ("LocalTokenChannel", "TokenChannel", "TokenDelta", "TokenSubscription")
