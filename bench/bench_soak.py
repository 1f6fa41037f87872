"""Soak: steady load through the distributed mode for minutes or hours; nothing may grow.

Starts what ``bench_chaos.py`` starts — a private ``redis-server`` (append-only file, so
its data survives a restart), ``podium serve --redis`` and ``podium worker --procs N`` —
with finished runs expiring after ``--ttl`` seconds, and submits runs of
``bench/chaos_agent.py`` at a steady ``--rate`` (each makes side-effecting tool calls whose
idempotency keys land in a file outside Podium's keys). On a schedule it SIGKILLs a worker
(the newest, so one worker lives through the whole soak and its memory is one series;
the supervisor starts a new one) and SIGKILLs and restarts Redis.

Every ``--sample-s`` it samples Redis's ``used_memory`` and key count, and the RSS of the
gateway, the worker supervisor and every worker. At the end it prints, per series, the
slope after warm-up (least squares, in percent of the mean per 10 minutes), the runs
lost (submitted but never seen completed) and the tool calls repeated (an idempotency
key executed twice; those in flight at a kill are told apart).

    python bench/bench_soak.py                      # 10 minutes
    python bench/bench_soak.py --minutes 60         # the long one
    python bench/bench_soak.py --minutes 3 --sample-s 10 --ttl 30   # a quick look

Exits 0 when no run was lost, no call repeated outside a kill, and every slope is under
``--max-slope`` percent per 10 minutes; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import redis.asyncio as aioredis

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

from tests.distributed.redis_server import free_port  # noqa: E402

from bench_chaos import KEY, PREFIX, RETRYABLE, Chaos, Execution  # noqa: E402

TERMINAL = ("completed", "failed", "cancelled")


@dataclass
class Sample:
    t: float  # seconds since the load began
    used_memory: int | None  # bytes; None while Redis is down
    keys: int | None
    runs_indexed: int | None  # members of idx:all (finished runs leave with their TTL)
    rss_kb: dict[str, int]  # process label -> resident set size


@dataclass
class Slope:
    series: str
    samples: int
    mean: float
    pct_per_10min: float


@dataclass
class SoakReport:
    minutes: float = 0.0
    rate_per_s: float = 0.0
    ttl_s: float = 0.0
    warmup_s: float = 0.0
    runs_submitted: int = 0
    runs_completed: int = 0
    runs_failed: list[str] = field(default_factory=list)
    runs_lost: list[str] = field(default_factory=list)
    submit_retries: int = 0
    worker_kills: int = 0
    redis_restarts: int = 0
    tool_calls_executed: int = 0
    calls_repeated: int = 0
    calls_repeated_in_flight_at_a_kill: int = 0
    calls_repeated_after_checkpoint: list[str] = field(default_factory=list)
    slopes: list[Slope] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    ok: bool = False


def rss_kb(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def slope_pct_per_10min(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope of ``(t, value)`` as percent of the mean per 600 s; the mean."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    if var_t == 0 or mean_v == 0:
        return 0.0, mean_v
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t
    return slope * 600 / mean_v * 100, mean_v


class Soak(Chaos):
    """The chaos bench's processes and verdict on repeats, driven steadily for a long time."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        super().__init__(args, workdir)
        self.soak = SoakReport(minutes=args.minutes, rate_per_s=args.rate, ttl_s=args.ttl,
                               warmup_s=args.warmup_s)
        self.completed: set[str] = set()
        self.failed: dict[str, str] = {}
        self.first_seen: dict[int, float] = {}  # worker pid -> when the bench first saw it
        self.began = 0.0
        self.stopping = False

    def start_services(self) -> None:
        (self.workdir / "redis").mkdir()
        self.redis.start()
        config = self.workdir / "podium.toml"  # the workers read it too (their cwd)
        config.write_text(
            f'[server]\nredis = "{self.redis.url}"\nttl_s = {self.args.ttl}\n\n'
            f'[[agents]]\npath = "chaos_agent:agent"\n\n'
            f'[[keys]]\nkey = "{KEY}"\ntenant = "soak"\n'
        )
        self.port = self.args.port or free_port()
        self.gateway = self._spawn("gateway", "serve", "--config", str(config),
                                   "--port", str(self.port), "--log-level", "warning")
        self.supervisor = self._spawn(
            "workers", "worker", "--agent", "chaos_agent:agent",
            "--procs", str(self.args.procs), "--lease", str(self.args.lease),
            "--max-deliveries", str(self.args.max_deliveries),
            "--concurrency", str(self.args.concurrency), "--log-level", "WARNING",
        )

    # -- the load ---------------------------------------------------------------------------

    async def drive(self, client: httpx.AsyncClient, key: str) -> None:
        """One run, as a careful client: submitted with an Idempotency-Key and waited for,
        the same request sent again (the same run) until it has ended."""
        body = {"agent": "chaos", "input": f"charge {key}", "metadata": {"chaos_key": key},
                "wait": True, "wait_timeout_s": 20}
        headers = {"Idempotency-Key": key}
        deadline = time.monotonic() + self.args.settle + self.args.minutes * 60
        while time.monotonic() < deadline:
            retry_after = 0.5
            try:
                r = await client.post("/v1/runs", json=body, headers=headers)
                if r.status_code in (200, 201, 202):
                    run = r.json()
                    self.acked[key] = run["id"]
                    if run["status"] == "completed":
                        self.completed.add(key)
                        return
                    if run["status"] in TERMINAL:
                        self.failed[key] = f"{run['id']}:{run['status']}:{run.get('reason')}"
                        return
                    await asyncio.sleep(0.1)
                    continue  # not ended within the wait: wait again
                if r.status_code not in RETRYABLE:
                    self.failed[key] = f"{r.status_code}: {r.text[:200]}"
                    return
                retry_after = float(r.headers.get("Retry-After", "0.5") or 0.5)
            except httpx.TransportError:
                pass
            self.soak.submit_retries += 1
            await asyncio.sleep(min(retry_after, 2.0) * (0.5 + self.rng.random()))

    async def load(self, client: httpx.AsyncClient) -> None:
        tasks: set[asyncio.Task[None]] = set()
        interval = 1.0 / self.args.rate
        end = self.began + self.args.minutes * 60
        i = 0
        next_at = time.monotonic()
        while next_at < end:
            task = asyncio.create_task(self.drive(client, f"soak-{i:07d}"))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        self.soak.runs_submitted = i
        if tasks:
            await asyncio.wait(tasks, timeout=self.args.settle)
        for task in tasks:
            task.cancel()

    # -- the faults -------------------------------------------------------------------------

    def workers(self) -> list[int]:
        now = time.monotonic()
        pids = self.worker_pids()
        for pid in pids:
            self.first_seen.setdefault(pid, now)
        return pids

    async def faults(self) -> None:
        end = self.began + self.args.minutes * 60
        next_kill = self.began + self.args.kill_every if self.args.kill_every > 0 else end
        next_redis = self.began + self.args.redis_every if self.args.redis_every > 0 else end
        while (now := time.monotonic()) < end:
            if now >= next_kill:
                pids = self.workers()
                if len(pids) > 1:  # the newest: the oldest's memory stays one series
                    victim = max(pids, key=lambda p: (self.first_seen[p], p))
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(victim, signal.SIGKILL)
                        self.worker_kills.append((time.time(), victim))
                next_kill = now + self.args.kill_every
            if now >= next_redis:
                down = time.time()
                self.redis.kill()
                await asyncio.sleep(self.args.redis_down)
                await asyncio.to_thread(self.redis.start)
                self.redis_outages.append((down, time.time()))
                next_redis = time.monotonic() + self.args.redis_every
            await asyncio.sleep(0.2)

    # -- the samples ------------------------------------------------------------------------

    async def sample(self, admin: aioredis.Redis) -> Sample:
        used = keys = indexed = None
        with contextlib.suppress(OSError, aioredis.RedisError):
            info = await admin.info("memory")
            used = int(info["used_memory"])
            keys = int(await admin.dbsize())
            indexed = int(await admin.zcard(f"{PREFIX}:idx:all"))
        rss: dict[str, int] = {}
        for label, pid in (("gateway", self.gateway.pid), ("supervisor", self.supervisor.pid)):
            if (kb := rss_kb(pid)) is not None:
                rss[label] = kb
        for pid in self.workers():
            if (kb := rss_kb(pid)) is not None:
                rss[f"worker-{pid}"] = kb
        return Sample(round(time.monotonic() - self.began, 1), used, keys, indexed, rss)

    async def sampler(self) -> None:
        admin = aioredis.Redis.from_url(self.redis.url, socket_timeout=2,
                                        socket_connect_timeout=1)
        try:
            end = self.began + self.args.minutes * 60
            next_at = self.began
            while not self.stopping:
                s = await self.sample(admin)
                self.soak.samples.append(s)
                if not self.args.json:
                    print(f"t={s.t:7.1f}s used_memory={s.used_memory} keys={s.keys} "
                          f"idx:all={s.runs_indexed} done={len(self.completed)} "
                          f"rss_kb={s.rss_kb}", file=sys.stderr, flush=True)
                next_at += self.args.sample_s
                if next_at > end + 1:
                    break
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            await admin.aclose()

    # -- the verdict ------------------------------------------------------------------------

    def slopes(self) -> list[Slope]:
        after = [s for s in self.soak.samples if s.t >= self.args.warmup_s]
        series: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for s in after:
            if s.used_memory is not None and s.keys is not None:
                series["redis used_memory"].append((s.t, s.used_memory))
                series["redis keys"].append((s.t, s.keys))
            for label, kb in s.rss_kb.items():
                series[f"rss {label}"].append((s.t, kb))
        out = []
        for name, points in series.items():
            if len(points) >= 3:
                pct, mean = slope_pct_per_10min(points)
                out.append(Slope(name, len(points), round(mean, 1), round(pct, 2)))
        return out

    def repeats(self) -> None:
        rep = self.soak
        by_key: dict[str, list[Execution]] = defaultdict(list)
        for e in self.executions():
            by_key[e.key].append(e)
        rep.tool_calls_executed = sum(len(v) for v in by_key.values())
        for key, runs in by_key.items():
            ordered = sorted(runs, key=lambda e: e.start)
            for earlier, again in itertools.pairwise(ordered):
                rep.calls_repeated += 1
                if self.in_flight_at_a_kill(earlier, again):
                    rep.calls_repeated_in_flight_at_a_kill += 1
                else:
                    rep.calls_repeated_after_checkpoint.append(key)

    async def soak_run(self) -> SoakReport:
        self.start_services()
        try:
            base = f"http://127.0.0.1:{self.port}"
            limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
            async with httpx.AsyncClient(
                base_url=base, headers={"Authorization": f"Bearer {KEY}"},
                timeout=httpx.Timeout(45.0), limits=limits,
            ) as client:
                await self.wait_ready(client)
                self.began = time.monotonic()
                sampler = asyncio.create_task(self.sampler())
                await asyncio.gather(self.load(client), self.faults())
                self.stopping = True
                await sampler
        finally:
            self.stop_all()
        rep = self.soak
        rep.runs_completed = len(self.completed)
        rep.runs_failed = sorted(self.failed.values())
        submitted = {f"soak-{i:07d}" for i in range(rep.runs_submitted)}
        rep.runs_lost = sorted(submitted - self.completed - set(self.failed))
        rep.worker_kills = len(self.worker_kills)
        rep.redis_restarts = len(self.redis_outages)
        self.repeats()
        rep.slopes = self.slopes()
        watched = [s for s in rep.slopes if s.series in (
            "redis used_memory", "redis keys", "rss gateway", "rss supervisor",
        ) or s.series == self.longest_worker()]
        rep.ok = (
            not rep.runs_lost and not rep.runs_failed and not rep.calls_repeated_after_checkpoint
            and all(abs(s.pct_per_10min) <= self.args.max_slope for s in watched)
        )
        return rep

    def longest_worker(self) -> str:
        """The worker that lived longest (its series decides the verdict; the others were
        started by kills and are reported only)."""
        counts: dict[str, int] = defaultdict(int)
        for s in self.soak.samples:
            for label in s.rss_kb:
                if label.startswith("worker-"):
                    counts[label] += 1
        return "rss " + max(counts, key=lambda k: counts[k]) if counts else ""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of load")
    p.add_argument("--sample-s", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--rate", type=float, default=5.0, help="runs submitted per second")
    p.add_argument("--ttl", type=float, default=120.0, help="finished runs expire after S")
    p.add_argument("--warmup-s", type=float, default=None,
                   help="samples before this are not fitted (default: TTL + 60 s, at most "
                   "half the soak)")
    p.add_argument("--procs", type=int, default=2, help="worker processes")
    p.add_argument("--concurrency", type=int, default=64, help="runs driven at once per worker")
    p.add_argument("--tool-steps", type=int, default=2, help="tool steps per run")
    p.add_argument("--parallel", type=int, default=2, help="parallel tool calls per step")
    p.add_argument("--tool-delay", type=float, default=0.05, help="seconds per tool call")
    p.add_argument("--kill-every", type=float, default=150.0,
                   help="SIGKILL the newest worker every S seconds (0: never)")
    p.add_argument("--redis-every", type=float, default=270.0,
                   help="SIGKILL and restart Redis every S seconds (0: never)")
    p.add_argument("--redis-down", type=float, default=2.0, help="seconds Redis stays down")
    p.add_argument("--lease", type=float, default=5.0, help="worker lease seconds")
    p.add_argument("--max-deliveries", type=int, default=50)
    p.add_argument("--settle", type=float, default=120.0,
                   help="seconds the runs under way get to end after the load stops")
    p.add_argument("--max-slope", type=float, default=1.0,
                   help="percent per 10 minutes a watched series may grow (or shrink)")
    p.add_argument("--port", type=int, default=0, help="the gateway's port (0: a free one)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    for name in ("minutes", "sample_s", "rate", "ttl", "procs", "concurrency"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    duration = args.minutes * 60
    if args.warmup_s is None:
        args.warmup_s = min(args.ttl + 60, duration / 2)
    args.duration = duration  # what the chaos bench's helpers read
    # The chaos bench's other options, at its defaults: the soak kills Redis (SIGKILL, AOF
    # restart) with runs in Redis, workers holding their writes through an outage 90 s.
    args.postgres, args.outage_kind, args.outage_hold, args.kills_apart = False, "kill", 90.0, False
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    workdir = Path(tempfile.mkdtemp(prefix="podium-soak-"))
    report = asyncio.run(Soak(args, workdir).soak_run())
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        for slope in report.slopes:
            print(f"slope {slope.series:28} {slope.pct_per_10min:+8.2f} %/10 min "
                  f"(mean {slope.mean:,.0f}, {slope.samples} samples)")
        out = asdict(report)
        for name in ("slopes", "samples"):
            out.pop(name)
        for name, value in out.items():
            shown = len(value) if isinstance(value, list) else value
            print(f"{name:36} {shown}")
        if report.runs_lost:
            print(f"lost (first 10): {report.runs_lost[:10]}")
        if report.runs_failed:
            print(f"failed (first 10): {report.runs_failed[:10]}")
    if args.keep or not report.ok:
        print(f"logs: {workdir}", file=sys.stderr)
    else:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
