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

from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

__all__ = ("TRANSIENT", "RefusalLog", "is_refusal", "is_transient", "refusal_reason")

#: Replies that mean "not now": the command was not applied, send it again later.
#: LOADING: a restarted Redis replaying its file; BUSY: a script holds it; TRYAGAIN: a
#: cluster resharding; OOM / MISCONF: writes refused until memory or disk is freed;
#: READONLY: a replica (a failover under way, or a URL naming a replica) refuses writes;
#: UNBLOCKED: a blocking read ended by the server changing role (master to replica).
TRANSIENT = ("LOADING", "BUSY", "TRYAGAIN", "OOM", "MISCONF", "READONLY", "UNBLOCKED")

#: Sent instead of any reply when ``maxclients`` is reached; the server then hangs up.
MAX_CLIENTS = "ERR max number of clients reached"

#: The refusals among the transient replies (worth an operator's attention).
_REFUSALS = ("OOM", "MISCONF", "READONLY", "UNBLOCKED")

#: What each "not now" means, in an operator's words (a 503's body, a readiness check).
_REASONS = {
    "OOM": "Redis is out of memory (maxmemory reached with noeviction) and refuses writes",
    "MISCONF": "Redis cannot save to disk (stop-writes-on-bgsave-error) and refuses writes",
    "READONLY": "Redis is a read-only replica and refuses writes (a failover, or the URL "
    "names a replica)",
    "UNBLOCKED": "Redis changed role (a master became a replica: a failover) and ended "
    "blocked reads",
    "LOADING": "Redis is loading its data set (restarting)",
    "BUSY": "a long script holds Redis",
    "TRYAGAIN": "the Redis cluster is moving keys",
}

log = logging.getLogger("podium.redis")


def is_transient(message: str) -> bool:
    return message.startswith(TRANSIENT)


def is_refusal(exc: BaseException) -> bool:
    """A redis-py error that is a write refusal (redis-py strips the ``OOM`` and
    ``READONLY`` codes)."""
    if isinstance(exc, OutOfMemoryError | ReadOnlyError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(_REFUSALS)


def refusal_reason(exc: BaseException | None) -> str | None:
    """Why Redis said "not now", in an operator's words, if ``exc`` (or the error it was
    raised from) is such a reply; None for anything else (a connection lost, say).

    The pipeline hands a refusal it gave up resending over as a connection error whose
    text is Redis's reply, and the store raises its own error from that one: both are
    looked at."""
    seen = 0
    while exc is not None and seen < 4:
        if isinstance(exc, OutOfMemoryError):
            return _REASONS["OOM"]
        if isinstance(exc, ReadOnlyError):
            return _REASONS["READONLY"]
        code = str(exc).split(" ", 1)[0]
        if code in _REASONS:
            return _REASONS[code]
        exc, seen = exc.__cause__, seen + 1
    return None


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
