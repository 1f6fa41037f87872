"""An archiver in a process of its own, for the test that SIGKILLs it mid-batch:
``python -m distributed.archive_proc REDIS_URL PREFIX POSTGRES_URL SCHEMA BATCH``.
Prints ``batch N`` after each batch it wrote; exits once nothing is pending."""

from __future__ import annotations

import asyncio
import sys

from podium.store.archiver import RunArchiver
from podium.store.postgres import PostgresRunStore
from podium.store.redis import RedisRunStore


async def main(redis_url: str, prefix: str, pg_url: str, schema: str, batch: int) -> None:
    async with (
        RedisRunStore(redis_url, prefix=prefix, reap_every_s=0) as hot,
        PostgresRunStore(pg_url, schema=schema) as cold,
    ):
        # A short lease: the archiver this one replaces was killed holding its own.
        archiver = RunArchiver(hot, cold, batch=batch, lease_s=0.5)
        while await hot.client.zcard(archiver._key):
            if await archiver.archive_once(settle_s=0):
                print(f"batch {archiver.statistics().batches}", flush=True)
            else:
                await asyncio.sleep(0.05)  # another's lease, running out


if __name__ == "__main__":
    r, p, pg, schema, batch = sys.argv[1:6]
    asyncio.run(main(r, p, pg, schema, int(batch)))
