"""uvicorn on sockets ``podium serve`` bound itself (imported only when it serves)."""

from __future__ import annotations

import logging
import socket
import sqlite3
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

from podium.errors import PodiumError

__all__ = ("BoundServer", "StartupGuard")

logger = logging.getLogger("uvicorn.error")

Message = MutableMapping[str, Any]
#: What a start-up can fail with that says what is wrong in its message (a store that
#: cannot be created, a file it may not write): one line, not a traceback.
NAMED_FAILURES = (PodiumError, OSError, sqlite3.Error)


class StartupGuard:
    """Wraps an ASGI app so that a start-up failure that names its cause is kept in
    ``error`` (for one line at exit) instead of logged by uvicorn as a traceback.

    Starlette reports a failed start-up to uvicorn with the traceback as the
    message, then raises: the message is held until the exception says whether it
    is worth a traceback (a bug is: it is logged as it would have been)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app
        self.error: BaseException | None = None

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        held: list[str] = []

        async def holding_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed" and message.get("message"):
                held.append(message["message"])
                message = {**message, "message": ""}
            await send(message)

        try:
            await self.app(scope, receive, holding_send)
        except NAMED_FAILURES as exc:
            if not held:
                raise
            self.error = exc
            raise
        except BaseException:
            for text in held:
                logger.error(text)
            raise


class _QuietFailedStartup(logging.Filter):
    """Drops uvicorn's "Application startup failed" once the guard holds the reason."""

    def __init__(self, guard: StartupGuard) -> None:
        super().__init__()
        self.guard = guard

    def filter(self, record: logging.LogRecord) -> bool:
        return self.guard.error is None or not record.getMessage().startswith(
            "Application startup failed"
        )


class BoundServer(uvicorn.Server):
    """A ``uvicorn.Server`` that says where it runs when it serves sockets it was given,
    and tells the application first when it stops.

    uvicorn logs ``Uvicorn running on URL`` only for sockets it binds itself; for given
    ones it leaves that to whoever bound them. Operators and scripts wait for that line
    to know the server answers, so this logs it once the application has started.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        url: str,
        on_stop: Callable[[], None] | None = None,
        guard: StartupGuard | None = None,
    ) -> None:
        super().__init__(config)
        self.url = url
        self.on_stop = on_stop
        self.guard = guard
        if guard is not None:
            logger.addFilter(_QuietFailedStartup(guard))

    @property
    def startup_error(self) -> BaseException | None:
        """Why the application did not start, where the cause names itself."""
        return None if self.guard is None else self.guard.error

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """``on_stop`` first (the gateway drains, then ends its streams), while uvicorn
        waits for the connections to finish: else a follower of a run that cannot end
        (one waiting for a human) would hold the stop for the whole grace, then be cut
        off with a traceback in the log."""
        if self.on_stop is not None:
            self.on_stop()
        await super().shutdown(sockets=sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            logger.info("Uvicorn running on %s (Press CTRL+C to quit)", self.url)
