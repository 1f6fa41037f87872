"""Regenerate the README's screenshots of the HTML report and the live dashboard.

    python docs/images/make_screenshots.py [--out docs/images]

1. ``podium bench --report`` on a short built-in scenario, the report photographed.
2. A live ``podium serve`` whose agent calls a ``podium sim-server`` backend (so the
   dashboard has backend occupancy to show), fed runs by a client while headless
   Chromium photographs ``/dashboard`` with an operator's key.

Needs Debian's ``chromium`` (or Chrome) on PATH. The PNGs are reduced to a 64-colour
palette when Pillow is installed, which keeps each well under 200 KB.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

KEY = "pk_screenshot_operator"
CONFIG = f"""
[server]
store = "memory"
drain_grace_s = 1

[[models]]
name = "sim"
base_url = "{{base_url}}"
model = "podium-sim"
capacity = 24

[[keys]]
key = "{KEY}"
tenant = "ops"
admin = true
"""
BENCH_SCENARIO = """
[load]
runs = 400
concurrency = 100
[script]
tool = "lookup"
tool_steps = 4
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("no chromium on PATH (apt-get install chromium)")


def shoot(url: str, out: Path, size: str, wait_ms: int) -> None:
    """Headless Chromium's own screenshot, after ``wait_ms`` of the page's (real) timers."""
    with tempfile.TemporaryDirectory(prefix="podium-shot-") as profile:
        subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--disable-dev-shm-usage", "--no-first-run", f"--user-data-dir={profile}",
             f"--window-size={size}", f"--virtual-time-budget={wait_ms}",
             f"--screenshot={out}", url],
            check=True, capture_output=True, timeout=120,
        )
    shrink(out)
    print(f"{out}: {out.stat().st_size // 1024} KB")


def shrink(path: Path) -> None:
    try:
        from PIL import Image
    except ImportError:
        return
    image = Image.open(path).convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    path.write_bytes(buffer.getvalue())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def podium(*args: str) -> list[str]:
    return [sys.executable, "-m", "podium.cli.main", *args]


def report(out: Path, work: Path) -> None:
    scenario = work / "scenario.toml"
    scenario.write_text(BENCH_SCENARIO)
    html = work / "report.html"
    subprocess.run(podium("bench", "--scenario", str(scenario), "--report", str(html)),
                   check=True, capture_output=True, timeout=300)
    shoot(html.as_uri(), out / "report.png", "1100,1500", 500)


@contextlib.contextmanager
def process(args: list[str], ready: str) -> Iterator[str]:
    """A subprocess, once a line of its output matches ``ready`` (returned)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            found = re.search(ready, line)
            if found:
                break
        else:
            raise RuntimeError(f"{args[3]} exited before it was ready")
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe flowing
        yield found[1]
    finally:
        proc.terminate()
        proc.wait(30)


def feed(url: str, stop: threading.Event) -> None:
    """Submit about 16 runs a second until ``stop``."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as c:
        while not stop.is_set():
            for _ in range(4):
                c.post("/v1/runs", json={"agent": "react", "input": "What is Podium?"})
            time.sleep(0.25)


def dashboard(out: Path, work: Path) -> None:
    port = free_port()
    sim = ["sim-server", "--port", str(port), "--capacity", "16", "--step-ms", "4",
           "--output-tokens", "12", "--tool-steps", "4"]
    with process(podium(*sim), r"(http://127\.0\.0\.1:\d+)"):
        config = work / "podium.toml"
        config.write_text(CONFIG.replace("{base_url}", f"http://127.0.0.1:{port}/v1"))
        serve = ["serve", "--config", str(config), "--port", "0",
                 "--agent", "podium.examples.react:agent", "--model", "sim"]
        with process(podium(*serve), r"Uvicorn running on (http://127\.0\.0\.1:\d+)") as url:
            stop = threading.Event()
            feeder = threading.Thread(target=feed, args=(url, stop), daemon=True)
            feeder.start()
            time.sleep(20)  # traffic enough for the throughput plot to level off
            try:
                shoot(f"{url}/dashboard#key={KEY}", out / "dashboard.png", "1100,1000", 3000)
            finally:
                stop.set()
                feeder.join(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="podium-screenshots-") as tmp:
        report(args.out, Path(tmp))
        dashboard(args.out, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
