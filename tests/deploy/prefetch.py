"""Make the container tests' root filesystem in the background while the suite runs.

The root conftest starts this script at the start of a run that includes tests/deploy
(where debootstrap and dockerd are installed and we are root): debootstrap spends minutes
downloading and unpacking, mostly waiting on the network, and an xdist worker that did it
itself would run no test meanwhile. :func:`deploy.docker_env.rootfs_tarball` holds the
cache's lock while it works, so the container tests wait for it rather than start a
second debootstrap; if it fails, they try again and skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LOG = "prefetch.log"


def wanted(args: list[str], rootdir: Path) -> bool:
    """Whether a run of pytest ``args`` (paths, or node ids) may include tests/deploy,
    and the prefetch could help: root, debootstrap and dockerd installed."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        return False
    if not os.path.exists("/usr/sbin/dockerd"):
        return False
    from deploy.docker_env import base_image_made

    if base_image_made():
        return False
    deploy = TESTS / "deploy"
    for arg in args:
        path = (rootdir / arg.split("::")[0]).resolve()
        if path == deploy or deploy in path.parents or path in deploy.parents:
            return True
    return False


def start(cache: Path) -> subprocess.Popen[bytes]:
    """This script in a process group of its own (so that it can be stopped whole)."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / LOG).open("wb") as log:
        return subprocess.Popen([sys.executable, __file__], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a prefetch still running (the suite ended first): its group, debootstrap too."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    sys.path.insert(0, str(TESTS))
    # SIGTERM unwinds (the half-made root filesystem is removed by rootfs_tarball's finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from _pytest.outcomes import Skipped

    from deploy.docker_env import rootfs_tarball

    try:
        print(rootfs_tarball(), flush=True)
    except Skipped as why:  # the tests will try again and skip with the reason
        print(f"prefetch failed: {why}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
