"""Wake-ups for readers of a PostgreSQL store's journals: LISTEN on one connection.

Every append notifies ``podium_journal`` with the run id in the same statement, so the
notification is delivered only once the entries are committed (PostgreSQL holds a
transaction's NOTIFY until its commit). One connection per store listens, opened when
a reader first waits, and hands each run id to the store's
:class:`~podium.store.notify.JournalNotifier`. A listener that dies (the server
restarted, its backend terminated) is opened again by the next wait, at most once a
second; meanwhile the readers poll (see ``PostgresRunStore.wait_journal``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from podium.store.notify import JournalNotifier

if TYPE_CHECKING:
    import asyncpg

__all__ = ("CHANNEL", "JournalListener")

CHANNEL = "podium_journal"
_RETRY_S = 1.0

log = logging.getLogger("podium.store")


class JournalListener:
    """The listening connection of one store (none until a reader waits)."""

    def __init__(
        self, dsn: str, notifier: JournalNotifier, connect_timeout_s: float, name: str
    ) -> None:
        self._dsn = dsn
        self._name = name  # the store's application_name: its connections are one process
        self._notifier = notifier
        self._timeout = connect_timeout_s
        self._conn: asyncpg.Connection | None = None
        self._next_try = 0.0

    @property
    def listening(self) -> bool:
        conn = self._conn
        return conn is not None and not conn.is_closed()

    async def ensure(self) -> bool:
        """Listening now (True), or not, having tried at most once in a while: a reader
        then polls. Never raises: a wake-up is an optimisation, the journal is the truth."""
        if self.listening:
            return True
        now = time.monotonic()
        if now < self._next_try:
            return False
        self._next_try = now + _RETRY_S
        import asyncpg

        try:
            conn = await asyncpg.connect(self._dsn, timeout=self._timeout,
                                         server_settings={"application_name": self._name})
            await conn.add_listener(CHANNEL, self._on_notify)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.debug("journal listener: cannot listen (%s); readers poll", exc)
            return False
        conn.add_termination_listener(self._on_lost)
        self._conn = conn
        return True

    def _on_notify(self, conn: Any, pid: int, channel: str, run_id: str) -> None:
        self._notifier.notify(run_id)

    def _on_lost(self, conn: Any) -> None:
        if conn is self._conn:
            self._conn = None
            log.info("journal listener: connection lost; readers poll until it is back")

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing what may be gone already
                await conn.close(timeout=2)
