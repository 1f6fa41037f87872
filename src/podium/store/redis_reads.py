"""Reading runs back from Redis by their indexes: the listing (one sorted set per tenant
and status bucket, walked newest first), the runs stored ``queued`` whose submit was not
seen, and the count of runs found lost (evicted or deleted under Podium). A mixin of
:class:`~podium.store.redis.RedisRunStore`: its constructor sets what these read."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import msgspec
from redis.exceptions import ResponseError

from podium.engine.records import RunRecord
from podium.errors import StoreError
from podium.store.base import log_lost
from podium.store.redis_batch import Autopipeline
from podium.store.redis_connect import translate_errors
from podium.store.redis_expiry import ExpiryReaper

__all__ = ("RedisRunReads", "bucket")

#: Reaper calls a listing makes at most before walking an index (the rest is tidied as the
#: walk meets it): after a mass expiry the listing pays ZREMs, never a read per dead run.
_LIST_REAP_ROUNDS = 40
_MAX_LOST_IDS = 10_000  # lost runs remembered, so each is counted once


def bucket(status: str) -> str:
    """The index bucket of ``status``: queued and running share ``active``."""
    return "active" if status in ("queued", "running") else status


class RedisRunReads:
    """Listing, the unsubmitted runs' index, lost runs; and the runs' key names."""

    prefix: str
    _idx: str
    _pipe: Autopipeline
    _reaper: ExpiryReaper
    _record_dec: msgspec.msgpack.Decoder[RunRecord]
    _unsubmitted: str
    _forget_unsubmitted: str
    _lost: int
    _lost_ids: dict[str, None]

    def _run_key(self, run_id: str) -> str:
        return f"{self.prefix}:{{{run_id}}}:run"

    def _journal_key(self, run_id: str) -> str:
        return f"{self.prefix}:{{{run_id}}}:journal"

    async def list(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        agent: str | None = None,
        limit: int = 100,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        if tenant is not None and status is not None:
            key = f"{self._idx}ts:{tenant}:{bucket(status)}"
        elif tenant is not None:
            key = f"{self._idx}t:{tenant}"
        elif status is not None:
            key = f"{self._idx}s:{bucket(status)}"
        else:
            key = f"{self._idx}all"
        self._reaper.ensure_started()
        # Expired runs leave every index first, so the walk below reads only live ones.
        try:
            await self._reaper.drain(_LIST_REAP_ROUNDS)
        except StoreError as exc:
            if not isinstance(exc.__cause__, ResponseError):
                raise  # Redis is away: so is the listing
            # Redis answered but would not write (a read-only replica, out of memory):
            # list all the same; the walk skips what has expired
        # Queued, running and waiting runs have no expiry: one missing from their index is lost.
        live_bucket = status is not None and bucket(status) in ("active", "waiting")
        found: list[RunRecord] = []
        start, page = 0, max(limit, 50)
        # The indexes are scored by created_at: a time window is a range of scores.
        high = "+inf" if until is None else until
        low = "-inf" if since is None else since
        # On the pipeline, like every command a request waits for: it waits
        # ``unavailable_s`` at most for a Redis that does not answer.
        async with translate_errors():
            while len(found) < limit:
                ids: list[bytes] = await self._pipe.execute(
                    "ZREVRANGEBYSCORE", key, high, low, "LIMIT", start, page
                )
                if not ids:
                    break
                start += page
                raws = await self._pipe.execute_all(
                    *[("HGET", self._run_key(run_id.decode()), "r") for run_id in ids]
                )
                expired = [i for i, raw in zip(ids, raws, strict=True) if raw is None]
                if expired and live_bucket:  # no expiry there: these were evicted or deleted
                    for run_id in expired:
                        self.report_lost(run_id.decode(), f"the index {key}")
                if expired and await self._tidy(key, expired):  # runs gone meanwhile
                    start -= len(expired)
                for raw in raws:
                    if raw is None:
                        continue
                    record = self._record_dec.decode(raw)
                    if (status is None or record.status == status) and (
                        agent is None or record.agent == agent
                    ):
                        found.append(record)
        return found[:limit]

    async def _tidy(self, key: str, gone: builtins.list[bytes]) -> bool:
        """Remove the ids of runs found gone from the index ``key``; False where Redis
        refuses the write (the listing goes on past them)."""
        try:
            await self._pipe.execute("ZREM", key, *gone)
        except ResponseError:
            return False
        return True

    def report_lost(self, run_id: str, where: str) -> None:
        # Once per run: a lost run is met again by every listing and sweep until tidied.
        if run_id in self._lost_ids:
            return
        self._lost_ids[run_id] = None
        if len(self._lost_ids) > _MAX_LOST_IDS:
            del self._lost_ids[next(iter(self._lost_ids))]
        self._lost += 1
        log_lost(run_id, where)

    # -- runs whose submit was not seen: the stranded sweep's index ---------------------------

    async def unsubmitted(self, before: float, limit: int) -> builtins.list[RunRecord]:
        """One indexed read (and the records it names): empty unless a submitter died
        between its write and its submit, or a submit is under way."""
        async with translate_errors():
            rows: list[Any] = await self._pipe.execute(
                "ZRANGEBYSCORE", self._unsubmitted, "-inf", repr(before), "WITHSCORES",
                "LIMIT", 0, limit,
            )
            if not rows:
                return []
            ids = [run_id.decode() for run_id in rows[::2]]
            raws = await self._pipe.execute_all(
                *[("HGET", self._run_key(run_id), "r") for run_id in ids]
            )
        found: list[RunRecord] = []
        gone: list[tuple[str, Any]] = []
        for run_id, score, raw in zip(ids, rows[1::2], raws, strict=True):
            if raw is None:  # stored queued, never driven, and gone: evicted
                self.report_lost(run_id, "the index of queued runs")
                gone.append((run_id, score))
            else:
                found.append(self._record_dec.decode(raw))
        if gone:
            async with translate_errors():
                await self._pipe.execute(
                    "EVALSHA", self._forget_unsubmitted, 1, self._unsubmitted,
                    *[x for pair in gone for x in pair],
                )
        return found

    async def forget_unsubmitted(self, records: Sequence[RunRecord]) -> None:
        if not records:
            return
        async with translate_errors():
            await self._pipe.execute(
                "EVALSHA", self._forget_unsubmitted, 1, self._unsubmitted,
                *[x for r in records for x in (r.run_id, repr(r.updated_at))],
            )
