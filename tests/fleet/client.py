"""A client of the fleet, run inside its client host: ``python client.py SPEC_JSON``.

SPEC: ``gateways`` (base URLs, tried in turn), ``key``, ``agent``, ``runs`` (how many),
``concurrency``, ``rate`` (runs started per second, 0: as fast as ``concurrency``
allows), ``deadline_s`` (the whole job's bound), ``tag`` (makes Idempotency-Keys).

Each run is one ``POST /v1/runs`` with ``wait``, its Idempotency-Key fixed, sent to the
gateways in turn until one answers (a gateway that is cut off times out, a 5xx or 429 is
tried again after its Retry-After): a retry on another gateway never makes a second run.
A run whose wait ended unfinished is polled on any gateway until it ends.

Prints one JSON object: ``runs`` (per run: id, status, seconds from first send to its end,
the gateway that took it, attempts) and ``errors`` (what it could not do, with why).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx

TIMEOUT = httpx.Timeout(10.0, connect=1.0)


async def _send(
    client: httpx.AsyncClient, spec: dict[str, Any], i: int, deadline: float
) -> dict[str, Any]:
    gateways: list[str] = spec["gateways"]
    headers = {"Authorization": f"Bearer {spec['key']}",
               "Idempotency-Key": f"{spec['tag']}-{i}"}
    body = {"agent": spec["agent"], "input": f"item {i}", "wait": True, "wait_timeout_s": 5}
    t0 = time.monotonic()
    attempts = 0
    run: dict[str, Any] | None = None
    via = ""
    last = ""
    while run is None or run["status"] not in ("completed", "failed", "cancelled"):
        if time.monotonic() > deadline:
            return {"i": i, "error": f"deadline: {last}", "attempts": attempts}
        gateway = gateways[(i + attempts) % len(gateways)]
        attempts += 1
        try:
            if run is None:
                r = await client.post(f"{gateway}/v1/runs", json=body, headers=headers)
            else:
                r = await client.get(f"{gateway}/v1/runs/{run['id']}", headers=headers)
        except httpx.TransportError as exc:
            last = f"{gateway}: {type(exc).__name__}"
            continue
        if r.status_code >= 500 or r.status_code == 429:
            last = f"{gateway}: {r.status_code} retry-after={r.headers.get('retry-after')}"
            await asyncio.sleep(min(1.0, float(r.headers.get("retry-after", "0.2"))))
            continue
        if r.status_code >= 400:
            return {"i": i, "error": f"{r.status_code} {r.text[:200]}", "attempts": attempts}
        run = r.json()
        via = via or gateway
        if run["status"] not in ("completed", "failed", "cancelled"):
            await asyncio.sleep(0.1)
    return {"i": i, "id": run["id"], "status": run["status"], "via": via,
            "seconds": time.monotonic() - t0, "attempts": attempts}


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + float(spec.get("deadline_s", 60))
    gate = asyncio.Semaphore(int(spec.get("concurrency", 16)))
    rate = float(spec.get("rate", 0))
    results: list[dict[str, Any]] = []
    limits = httpx.Limits(max_connections=int(spec.get("concurrency", 16)) * 2)

    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:

        async def one(i: int) -> None:
            async with gate:
                results.append(await _send(client, spec, i, deadline))

        tasks = []
        start = time.monotonic()
        for i in range(int(spec["runs"])):
            if rate > 0:  # open loop: run i starts at i / rate
                await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    runs = [r for r in results if "error" not in r]
    errors = [r for r in results if "error" in r]
    return {"runs": sorted(runs, key=lambda r: r["i"]), "errors": errors}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
