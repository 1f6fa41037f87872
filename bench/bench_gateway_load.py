"""Load test of ``podium serve``: admitted runs keep their latency at 2× capacity, the rest is shed.

A real ``podium serve`` process (embedded mode, memory store) serves one agent
(3 steps, simulated model of ~20 ms per call with log-normal jitter) behind a
pool token bucket of ``--rate`` runs/s: the admitted capacity. A separate
load-generator process sends open-loop ``POST /v1/runs`` with ``"wait": true``
at a constant rate, first at 0.5× capacity (unloaded), then at 2× (loaded),
each for ``--seconds``. The report: requests/s, p50/p99 of admitted runs,
the loaded/unloaded p99 ratio (target ≤ 1.5), the shed share (429s), lost
requests (neither a completed run nor a 429: target 0) and gateway CPU per
request (from /proc, so Linux only).

With ``--slowloris N`` a third phase repeats the loaded one while N
connections send a request head a byte at a time and never finish it (they
reconnect when the server drops them), and ``--server-fds 1024`` starts the
server with the usual 1,024 file descriptors (soft and hard limit).

    python bench/bench_gateway_load.py [--rate 100] [--seconds 8] [--json]
    python bench/bench_gateway_load.py --slowloris 2000 --server-fds 1024
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from podium import Agent, LatencyModel, Scenario, SimulatedModel, tool

HERE = Path(__file__).resolve().parent
KEY = "pk_bench_load"


@tool
async def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: What to look up.
    """
    return f"Result for {query}: 42 items found."


def agent() -> Agent:
    """The served agent: two tool steps and an answer, ~20 ms of simulated model per step."""
    return Agent(
        "bench",
        SimulatedModel(
            Scenario.react("lookup", {"query": "load"}, tool_steps=2, final="done"),
            latency=LatencyModel(ttft_s=0.02, jitter="lognormal", sigma=0.2),
            seed=7,
        ),
        "You look things up.",
        [lookup],
        max_steps=4,
    )


CONFIG = """
[server]
store = "memory"
drain_grace_s = 5

[[agents]]
path = "bench_gateway_load:agent"
name = "bench"

[pools.default]
concurrency = 512
rate = {rate}
burst = {burst}
latency_target_s = 2.0
expected_run_s = 0.1

[[keys]]
key = "{key}"
tenant = "bench"
"""


# -- the load generator (a separate process) ---------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q / 100 * len(ordered) + 0.999999) - 1))]


class LoopbackClient:
    """A minimal HTTP/1.1 keep-alive client: the load generator must cost far less than the
    server it measures (httpx's pool slows down with thousands of requests in flight)."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.host, self.port = host, int(port)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened: list[asyncio.StreamWriter] = []

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        reused = bool(self.idle)
        if reused:
            reader, writer = self.idle.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self.opened.append(writer)
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        first = await reader.readline()
        if not first and reused:
            # The server closed this idle keep-alive connection before reading the request
            # (uvicorn's keep-alive timeout): nothing was processed, send it on a fresh one.
            self.idle.clear()
            return await self.post(path, body)
        status = int(first.split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        data = await reader.readexactly(int(headers.get("content-length", "0")))
        self.idle.append((reader, writer))
        return status, headers, data

    async def aclose(self) -> None:
        for writer in self.opened:
            writer.close()


async def generate(url: str, rate: float, seconds: float) -> dict[str, Any]:
    """Open loop: request i leaves at t0 + i/rate whether or not earlier ones have answered."""
    total = int(rate * seconds)
    admitted: list[float] = []
    shed: list[float] = []
    other: dict[str, int] = {}
    client = LoopbackClient(url)

    async def one(i: int) -> None:
        body = json.dumps({"agent": "bench", "input": f"q{i}", "wait": True}).encode()
        t = time.perf_counter()
        try:
            status, headers, data = await client.post("/v1/runs", body)
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            other[type(exc).__name__] = other.get(type(exc).__name__, 0) + 1
            return
        dt = time.perf_counter() - t
        if status == 200 and json.loads(data)["status"] == "completed":
            admitted.append(dt)
        elif status == 429 and "retry-after" in headers:
            shed.append(dt)
        else:
            other[str(status)] = other.get(str(status), 0) + 1

    tasks = []
    t0 = time.perf_counter()
    for i in range(total):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    send_s = time.perf_counter() - t0
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    await client.aclose()
    return {
        "offered_rps": rate,
        "requests": total,
        "elapsed_s": round(elapsed, 2),
        "sent_rps": round(total / send_s, 1),
        "admitted": len(admitted),
        "admitted_rps": round(len(admitted) / send_s, 1),
        "shed": len(shed),
        "shed_share": round(len(shed) / total, 3) if total else 0.0,
        "lost": total - len(admitted) - len(shed),
        "other": other,
        "p50_ms": round(percentile(admitted, 50) * 1e3, 1),
        "p99_ms": round(percentile(admitted, 99) * 1e3, 1),
        "shed_p50_ms": round(percentile(shed, 50) * 1e3, 2),
    }


# -- the orchestrator --------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Slowloris:
    """``n`` connections that trickle a request head and never finish it, kept up by a thread."""

    def __init__(self, url: str, n: int) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.address = (host, int(port))
        self.n = n
        self.stop = threading.Event()
        self.reconnects = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Slowloris:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = self.n + 256
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _open(self) -> Any:
        import socket

        s = socket.create_connection(self.address, timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: podium\r\n")
        s.setblocking(False)
        return s

    def _run(self) -> None:
        socks: list[Any] = []
        while len(socks) < self.n and not self.stop.is_set():
            try:
                socks.append(self._open())
            except OSError:
                time.sleep(0.01)
        while not self.stop.wait(0.5):
            for i, s in enumerate(socks):
                try:
                    s.send(b"X")  # one more byte of a header that never ends
                except OSError:
                    s.close()
                    self.reconnects += 1
                    with contextlib.suppress(OSError):
                        socks[i] = self._open()
        for s in socks:
            s.close()


def start_server(
    tmp: Path, rate: float, server_fds: int | None = None
) -> tuple[subprocess.Popen[str], str]:
    import resource
    import socket

    def limit_fds() -> None:
        if server_fds:
            resource.setrlimit(resource.RLIMIT_NOFILE, (server_fds, server_fds))

    (tmp / "podium.toml").write_text(CONFIG.format(rate=rate, burst=max(1, rate / 10), key=KEY))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "podium.cli.main",
            "serve",
            "--config",
            str(tmp / "podium.toml"),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=tmp,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        preexec_fn=limit_fds,
    )
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "podium: serving" in line:
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    ready.wait(30)
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(100):  # the "serving" line comes just before uvicorn binds
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    return proc, url


def phase(url: str, pid: int, rate: float, seconds: float) -> dict[str, Any]:
    c0 = cpu_seconds(pid)
    out = subprocess.run(
        [sys.executable, __file__, "--loadgen", url, str(rate), str(seconds)],
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds * 4 + 60,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    result["gateway_cpu_ms_per_request"] = round(
        (cpu_seconds(pid) - c0) / max(1, result["requests"]) * 1e3, 3
    )
    return result


def leftovers(url: str) -> dict[str, int]:
    import httpx

    headers = {"Authorization": f"Bearer {KEY}"}
    return {
        status: len(
            httpx.get(
                f"{url}/v1/runs", params={"status": status, "limit": 1000}, headers=headers
            ).json()["data"]
        )
        for status in ("queued", "running", "failed", "cancelled")
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="admitted capacity, runs/s")
    parser.add_argument("--seconds", type=float, default=8.0, help="duration of each phase")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--slowloris",
        type=int,
        default=0,
        metavar="N",
        help="add a loaded phase under N slowloris connections",
    )
    parser.add_argument(
        "--server-fds", type=int, metavar="N", help="the server's open-file limit (soft and hard)"
    )
    parser.add_argument(
        "--loadgen", nargs=3, metavar=("URL", "RATE", "SECONDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.loadgen:
        url, rate, seconds = args.loadgen
        print(json.dumps(asyncio.run(generate(url, float(rate), float(seconds)))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp), args.rate, args.server_fds)
        attacked: dict[str, Any] | None = None
        try:
            phase(url, proc.pid, args.rate * 0.5, 1.0)  # warm up
            unloaded = phase(url, proc.pid, args.rate * 0.5, args.seconds)
            loaded = phase(url, proc.pid, args.rate * 2.0, args.seconds)
            if args.slowloris:
                with Slowloris(url, args.slowloris) as attack:
                    time.sleep(2.0)  # let the attack settle in
                    attacked = phase(url, proc.pid, args.rate * 2.0, args.seconds)
                    attacked["slowloris_reconnects"] = attack.reconnects
            left = leftovers(url)
        finally:
            proc.terminate()
            proc.wait(30)
    ratio = loaded["p99_ms"] / unloaded["p99_ms"] if unloaded["p99_ms"] else float("inf")
    report = {
        "admitted_capacity_rps": args.rate,
        "unloaded": unloaded,
        "loaded": loaded,
        "p99_ratio": round(ratio, 2),
        "p99_ratio_target": 1.5,
        "runs_left_unfinished_or_failed": left,
        "slowloris": attacked,
        "ok": ratio <= 1.5
        and loaded["lost"] == 0
        and unloaded["lost"] == 0
        and not any(left.values())
        and (attacked is None or attacked["lost"] == 0),
    }
    if args.json:
        print(json.dumps(report))
        return 0
    rows = [("unloaded (0.5×)", unloaded), ("loaded (2×)", loaded)]
    if attacked is not None:
        rows.append((f"2× + {args.slowloris} slowloris", attacked))
    for name, r in rows:
        print(
            f"{name:16s} offered {r['offered_rps']:6.1f} req/s, sent {r['sent_rps']:6.1f}"
            f" | admitted {r['admitted']:5d} ({r['admitted_rps']:.1f}/s) p50 {r['p50_ms']:6.1f}"
            f" ms p99 {r['p99_ms']:6.1f} ms | shed {r['shed_share']:.1%} (429 p50 "
            f"{r['shed_p50_ms']} ms) | lost {r['lost']} {r['other'] or ''}| gateway CPU "
            f"{r['gateway_cpu_ms_per_request']:.3f} ms/request"
        )
    print(
        f"p99 loaded / unloaded: {report['p99_ratio']}× (target ≤ 1.5×); "
        f"unfinished or failed runs left: {sum(left.values())}; ok: {report['ok']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
