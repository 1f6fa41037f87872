"""Real containers for the tests, with no registry: Debian's dockerd on a private data root,
a base image from a debootstrap root filesystem, Podium installed from a local wheelhouse.

Everything slow is cached under ~/.cache/podium-tests (the root filesystem's tarball, the
dependency wheels, dockerd's images), so a second run builds only what the sources changed.
Whatever cannot run here is a skip naming the command that failed and its error.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from deploy.chart import REPO

__all__ = (
    "LABEL", "Docker", "base_image", "base_image_made", "build_image", "rootfs_tarball",
    "start_docker",
)

CACHE = Path(os.environ.get("PODIUM_TEST_CACHE", Path.home() / ".cache" / "podium-tests"))
DOCKERD = "/usr/sbin/dockerd"
DOCKER = "/usr/bin/docker"  # Debian's client (another `docker` on PATH may be anyone's)
MIRROR = os.environ.get("PODIUM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "redis-server")
# Docker's bridges get addresses from here only: a range nothing else on the host uses
ADDRESS_POOL = "base=172.29.0.0/16,size=24"
#: a label on everything the tests start, so a run can sweep up what a killed one left
LABEL = "dev.podium.test=1"


def _run(args: Sequence[str], *, timeout: float, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                          check=False, **kw)  # type: ignore[call-overload]


def _skip_unless(result: subprocess.CompletedProcess[str], what: str) -> None:
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        pytest.skip(f"{what} failed ({' '.join(result.args[:3])}): {' / '.join(tail)}")


class Docker:
    """A dockerd of the tests' own, and its client."""

    def __init__(self, socket_path: Path) -> None:
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{socket_path}"}

    def __call__(self, *args: str, timeout: float = 300,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        result = _run([DOCKER, *args], timeout=timeout, env=self.env)
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {result.stderr.strip()}")
        return result

    def compose(self, project: str, files: Sequence[Path], *args: str,
                env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = ["docker-compose", "-p", project]
        for f in files:
            command += ["-f", str(f)]
        result = _run([*command, *args], timeout=timeout, env={**self.env, **env})
        if result.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)}: {result.stderr.strip()}")
        return result

    def answers(self) -> bool:
        """Whether the daemon answers (a client may wait on a daemon still starting)."""
        try:
            return self("version", check=False, timeout=15).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def image_exists(self, tag: str) -> bool:
        return self("image", "inspect", tag, check=False).returncode == 0

    def sweep(self) -> None:
        """Remove containers and networks a killed earlier run left behind."""
        ids = self("ps", "-aq", "--filter", f"label={LABEL}").stdout.split()
        ids += self("ps", "-aq", "--filter", "label=com.docker.compose.project").stdout.split()
        if ids:
            self("rm", "-f", *ids, check=False)
        self("network", "prune", "-f", check=False)


@contextlib.contextmanager
def start_docker() -> Iterator[Docker]:
    """dockerd on a private data root (cached), its socket in a private directory; no
    iptables rules, no default bridge (user networks get ADDRESS_POOL), stopped after."""
    if os.geteuid() != 0:
        pytest.skip("starting dockerd needs root")
    for binary in (DOCKERD, DOCKER):
        if not os.path.exists(binary):
            pytest.skip(f"{binary} missing: Debian's docker.io is not installed (.ci/run does)")
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose missing: Debian's docker-compose is not installed")
    run_dir = Path(tempfile.mkdtemp(prefix="podium-docker-"))
    data_root = CACHE / "docker-root"
    data_root.mkdir(parents=True, exist_ok=True)
    socket_path = run_dir / "docker.sock"
    log = (run_dir / "dockerd.log").open("w")
    daemon = subprocess.Popen(
        [DOCKERD, "--data-root", str(data_root), "--exec-root", str(run_dir / "exec"),
         "--pidfile", str(run_dir / "dockerd.pid"), "--host", f"unix://{socket_path}",
         "--iptables=false", "--ip6tables=false", "--bridge=none",
         "--default-address-pool", ADDRESS_POOL, "--storage-driver", "overlay2"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    docker = Docker(socket_path)
    try:
        deadline = time.monotonic() + 120
        while not docker.answers():
            if daemon.poll() is not None or time.monotonic() > deadline:
                tail = (run_dir / "dockerd.log").read_text().strip().splitlines()[-3:]
                pytest.skip(f"dockerd did not start: {' / '.join(tail)}")
            time.sleep(0.2)
        docker.sweep()
        yield docker
    finally:
        with contextlib.suppress(Exception):
            docker.sweep()
        daemon.terminate()
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        shutil.rmtree(run_dir, ignore_errors=True)


def _base_key() -> str:
    return hashlib.sha256(f"{SUITE} {' '.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]


@contextlib.contextmanager
def cache_lock() -> Iterator[None]:
    """The cache to oneself: a root filesystem being made by the prefetch (or another
    run) is waited for, not made twice."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing


def rootfs_tarball() -> Path:
    """The debootstrap root filesystem of the base image, as a tarball (made once)."""
    tarball = CACHE / f"rootfs-{SUITE}-{_base_key()}.tar"
    with cache_lock():
        if tarball.exists():
            return tarball
        if shutil.which("debootstrap") is None:
            pytest.skip("debootstrap missing: no base image can be made without a registry")
        root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE))
        try:
            _skip_unless(_run(["debootstrap", "--variant=minbase",
                               f"--include={','.join(BASE_PACKAGES)}", SUITE, str(root), MIRROR],
                              timeout=1200), "debootstrap")
            partial = tarball.with_suffix(".partial")
            _skip_unless(_run(["tar", "-C", str(root), "-cf", str(partial), "."], timeout=600),
                         "tar of the root filesystem")
            partial.rename(tarball)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return tarball


def base_image_made() -> bool:
    """Whether the base image is in the cached data root already, or its tarball is in the
    cache (read from dockerd's tag store, with no dockerd running): nothing to prefetch."""
    if (CACHE / f"rootfs-{SUITE}-{_base_key()}.tar").exists():
        return True
    tags = CACHE / "docker-root" / "image" / "overlay2" / "repositories.json"
    try:
        return f"podium-test-base:{SUITE}-{_base_key()}" in tags.read_text()
    except OSError:
        return False


def base_image(docker: Docker) -> str:
    """Debian with python3 and redis-server, from a debootstrap root filesystem (cached as
    a tarball), imported once per data root."""
    tag = f"podium-test-base:{SUITE}-{_base_key()}"
    if docker.image_exists(tag):
        return tag
    with rootfs_tarball().open("rb") as f:
        result = subprocess.run([DOCKER, "import", "-", tag], stdin=f, capture_output=True,
                                text=True, timeout=600, env=docker.env, check=False)
    _skip_unless(result, "docker import")
    return tag


def _python_version(docker: Docker, base: str) -> str:
    out = docker("run", "--rm", "--network", "none", "--label", LABEL, base, "python3", "-c",
                 "import platform; print(platform.python_version())", timeout=120)
    return out.stdout.strip()


def wheelhouse(docker: Docker, base: str, into: Path) -> None:
    """Podium's wheel (built now, from the sources) and its dependencies' wheels for the
    base image's Python (downloaded once into the cache), in ``into``."""
    version = _python_version(docker, base)
    pyproject = (REPO / "pyproject.toml").read_bytes()
    deps = CACHE / f"wheels-{version}-{hashlib.sha256(pyproject).hexdigest()[:12]}"
    into.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    _skip_unless(_run([*pip, "wheel", "--no-deps", "-w", str(into), str(REPO)], timeout=600),
                 "pip wheel of podium")
    if not deps.exists():
        partial = Path(tempfile.mkdtemp(prefix="wheels-", dir=CACHE))
        [podium_wheel] = into.glob("podium-*.whl")
        arch = platform.machine()
        # pip evaluates markers with this interpreter, not the target's: async-timeout is
        # redis-py's dependency below Python 3.11.3 (Debian 12 has 3.11.2), named here
        _skip_unless(_run([
            *pip, "download", "-d", str(partial), "--only-binary=:all:",
            "--python-version", version, "--implementation", "cp",
            "--platform", f"manylinux2014_{arch}", "--platform", f"manylinux_2_28_{arch}",
            "--platform", f"linux_{arch}", f"{podium_wheel}[redis]", "hatchling",
            "async-timeout",
        ], timeout=900), "pip download of the wheelhouse")
        (partial / podium_wheel.name).unlink(missing_ok=True)
        for stale in CACHE.glob("wheels-*.*-*"):  # other versions' dependencies
            shutil.rmtree(stale, ignore_errors=True)
        partial.rename(deps)
    for wheel in deps.iterdir():
        shutil.copy2(wheel, into / wheel.name)


def build_image(docker: Docker, base: str) -> str:
    """deploy/Dockerfile built on ``base`` from the local wheelhouse, offline; tagged by
    its inputs' hash, so an unchanged tree is not built again."""
    context = Path(tempfile.mkdtemp(prefix="podium-context-"))
    try:
        for name in ("pyproject.toml", "README.md", "LICENSE", ".dockerignore"):
            shutil.copy2(REPO / name, context / name)
        shutil.copytree(REPO / "src", context / "src",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (context / "deploy").mkdir()
        for name in ("Dockerfile", "healthcheck.py"):
            shutil.copy2(REPO / "deploy" / name, context / "deploy" / name)
        digest = hashlib.sha256(base.encode())
        for path in sorted(context.rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(context)).encode() + path.read_bytes())
        tag = f"podium:test-{digest.hexdigest()[:12]}"
        if docker.image_exists(tag):
            return tag
        wheelhouse(docker, base, context / "wheels")
        docker("build", "-q", "-f", str(context / "deploy" / "Dockerfile"),
               "--build-arg", f"BASE_IMAGE={base}",
               "--build-arg", "PIP_OPTS=--no-index --find-links /src/wheels",
               "--label", LABEL, "-t", tag, str(context), timeout=1200)
        # the cache keeps one image of the tree, not one per change ever tested
        older = [t for t in docker("images", "--format", "{{.Repository}}:{{.Tag}}",
                                   "podium").stdout.split() if t != tag]
        if older:
            docker("rmi", *older, check=False)
        docker("image", "prune", "-f", check=False)
        return tag
    finally:
        shutil.rmtree(context, ignore_errors=True)
