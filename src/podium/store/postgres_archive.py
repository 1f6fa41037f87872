"""Writing finished runs copied from another store (Redis) into PostgreSQL's tables.

One transaction per batch: the runs' rows (a row already there is replaced only by a
newer version of the run), then their journal entries (an entry already there is kept:
entries never change once written). So archiving a run twice — an archiver killed after
its commit and before it said so, two archivers at once — writes it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from podium.engine.records import RunRecord
from podium.store.base import JournalItem

if TYPE_CHECKING:
    import asyncpg

    from podium.store.postgres import PostgresRunStore

__all__ = ("archive_runs",)

_RUNS = """
INSERT INTO podium_runs (run_id, tenant, agent, status, created_at, version, next_seq,
                         record, expires_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],
                     $5::double precision[], $6::bigint[], $7::bigint[], $8::bytea[],
                     $9::double precision[])
ON CONFLICT (run_id) DO UPDATE SET
    status = EXCLUDED.status, version = EXCLUDED.version, record = EXCLUDED.record,
    next_seq = GREATEST(podium_runs.next_seq, EXCLUDED.next_seq),
    expires_at = EXCLUDED.expires_at
WHERE podium_runs.version < EXCLUDED.version
"""
_JOURNAL = """
INSERT INTO podium_journal (run_id, seq, data)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
ON CONFLICT (run_id, seq) DO NOTHING
"""

_encoder = msgspec.msgpack.Encoder()


async def archive_runs(
    store: PostgresRunStore, runs: Sequence[tuple[RunRecord, Sequence[JournalItem]]]
) -> None:
    """Write ``runs`` (each a record and its whole journal) to ``store``'s tables, in one
    transaction; waits out an outage as every write of the store does."""
    if not runs:
        return
    encode = _encoder.encode
    expiry = store.finished_ttl_s
    cols: tuple[list[object], ...] = tuple([] for _ in range(9))
    jids: list[str] = []
    seqs: list[int] = []
    datas: list[bytes] = []
    for record, items in runs:
        next_seq = items[-1][0] + 1 if items else 0
        expires = None if expiry is None else (record.finished_at or record.updated_at) + expiry
        for col, value in zip(cols, (
            record.run_id, record.tenant, record.agent, record.status, record.created_at,
            record.version, next_seq, encode(record), expires,
        ), strict=True):
            col.append(value)
        for seq, entry in items:
            jids.append(record.run_id)
            seqs.append(seq)
            datas.append(encode(entry))

    async def op(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await conn.execute(_RUNS, *cols)
            if jids:
                await conn.execute(_JOURNAL, jids, seqs, datas)

    # Safe to send again after a cut connection: both statements are idempotent.
    await store._call(op)
