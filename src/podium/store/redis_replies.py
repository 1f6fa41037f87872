"""What a Redis error reply means for Podium: "come back soon", "you are misconfigured", or
an answer.

A Redis that is alive but refuses a write (``maxmemory`` reached with ``noeviction``,
a failed RDB save with ``stop-writes-on-bgsave-error``) did not apply it: the command can
be sent again once the operator frees memory or disk, exactly like a command lost with a
dropped connection. Treating those refusals as answers would fail a run that checkpoints
a finished tool call, and its next worker would call the tool again.
"""

from __future__ import annotations

import logging
import time
from typing import ClassVar

from redis.exceptions import OutOfMemoryError, ResponseError

__all__ = ("TRANSIENT", "RefusalLog", "is_refusal", "is_transient")

#: Replies that mean "not now": the command was not applied, send it again later.
#: LOADING: a restarted Redis replaying its file; BUSY: a script holds it; TRYAGAIN: a
#: cluster resharding; OOM / MISCONF: writes refused until memory or disk is freed.
TRANSIENT = ("LOADING", "BUSY", "TRYAGAIN", "OOM", "MISCONF")

#: Sent instead of any reply when ``maxclients`` is reached; the server then hangs up.
MAX_CLIENTS = "ERR max number of clients reached"

#: The refusals among the transient replies (worth an operator's attention).
_REFUSALS = ("OOM", "MISCONF")

log = logging.getLogger("podium.redis")


def is_transient(message: str) -> bool:
    return message.startswith(TRANSIENT)


def is_refusal(exc: BaseException) -> bool:
    """A redis-py error that is a write refusal (redis-py strips the ``OOM`` code)."""
    if isinstance(exc, OutOfMemoryError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(_REFUSALS)


class RefusalLog:
    """One warning when Redis starts refusing commands, one when it takes them again,
    however many commands (of however many runs) were refused in between.

    One per server and process (:meth:`of`): a store and a queue on the same Redis
    meet the same condition, and say so once."""

    __slots__ = ("count", "endpoint", "last", "since", "why")

    _by_endpoint: ClassVar[dict[str, RefusalLog]] = {}

    @classmethod
    def of(cls, endpoint: str) -> RefusalLog:
        found = cls._by_endpoint.get(endpoint)
        if found is None:
            found = cls._by_endpoint[endpoint] = cls(endpoint)
        return found

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.why: str | None = None
        self.since = self.last = 0.0
        self.count = 0

    def refused(self, why: str, patience_s: float) -> None:
        self.count += 1
        self.last = time.monotonic()
        if self.why is None:
            self.why, self.since = why, time.monotonic()
            log.warning(
                "redis at %s refuses commands (%s); holding them and retrying for up to %.1fs",
                self.endpoint, why, patience_s,
            )

    def quiet_for(self, seconds: float) -> bool:
        """No refusal for ``seconds``: whatever was refused then has been given up on."""
        return time.monotonic() - self.last > seconds

    def answered(self) -> None:
        if self.why is not None:
            log.warning(
                "redis at %s takes commands again after %.1fs (%d refused, sent again)",
                self.endpoint, time.monotonic() - self.since, self.count,
            )
            self.why, self.count = None, 0
