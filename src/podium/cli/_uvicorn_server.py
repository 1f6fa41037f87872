"""uvicorn on sockets ``podium serve`` bound itself (imported only when it serves)."""

from __future__ import annotations

import logging
import socket

import uvicorn

__all__ = ("BoundServer",)

logger = logging.getLogger("uvicorn.error")


class BoundServer(uvicorn.Server):
    """A ``uvicorn.Server`` that says where it runs when it serves sockets it was given.

    uvicorn logs ``Uvicorn running on URL`` only for sockets it binds itself; for given
    ones it leaves that to whoever bound them. Operators and scripts wait for that line
    to know the server answers, so this logs it once the application has started.
    """

    def __init__(self, config: uvicorn.Config, url: str) -> None:
        super().__init__(config)
        self.url = url

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            logger.info("Uvicorn running on %s (Press CTRL+C to quit)", self.url)
