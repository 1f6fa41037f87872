"""``/readyz`` of a process without an event loop (a supervisor of worker processes) on a
PostgreSQL store: can the server take writes now?

One short connection per look (``SELECT``-free: ``SHOW transaction_read_only``), cached
for ``cache_s`` so a burst of probes costs one; its connection names itself
``podium-probe`` (not ``podium:…``, which counts as a process driving runs).
"""

from __future__ import annotations

import asyncio
import threading
import time

from podium.store.postgres_errors import redact, translate

__all__ = ("SyncPostgresHealth",)


class SyncPostgresHealth:
    """Why the PostgreSQL server at ``url`` cannot take writes now (None: it can)."""

    def __init__(self, url: str, *, cache_s: float = 1.5, timeout_s: float = 1.0) -> None:
        self.url = url
        self.cache_s = cache_s
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._answer: str | None = None

    async def _ask(self) -> str | None:
        import asyncpg

        try:
            conn = await asyncpg.connect(
                self.url, timeout=self.timeout_s,
                server_settings={"application_name": "podium-probe"})
            try:
                read_only = await conn.fetchval("SHOW transaction_read_only",
                                                timeout=self.timeout_s)
            finally:
                await conn.close(timeout=self.timeout_s)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            return str(translate(exc, self.url))
        if read_only == "on":
            return f"{redact(self.url)}: the server is read-only (a standby?)"
        return None

    def problem(self) -> str | None:
        with self._lock:  # one look at a time; the others take its answer
            now = time.monotonic()
            if now - self._at >= self.cache_s:
                self._answer = asyncio.run(self._ask())  # (called from a thread, no loop)
                self._at = time.monotonic()
            return self._answer
