"""uvicorn on sockets ``podium serve`` bound itself (imported only when it serves)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import uvicorn

__all__ = ("BoundServer",)

logger = logging.getLogger("uvicorn.error")


class BoundServer(uvicorn.Server):
    """A ``uvicorn.Server`` that says where it runs when it serves sockets it was given,
    and tells the application first when it stops.

    uvicorn logs ``Uvicorn running on URL`` only for sockets it binds itself; for given
    ones it leaves that to whoever bound them. Operators and scripts wait for that line
    to know the server answers, so this logs it once the application has started.
    """

    def __init__(
        self, config: uvicorn.Config, url: str, on_stop: Callable[[], None] | None = None
    ) -> None:
        super().__init__(config)
        self.url = url
        self.on_stop = on_stop

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
