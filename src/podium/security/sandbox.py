"""Run untrusted code in a separate process under bubblewrap, or not at all.

:class:`Sandbox` runs Python code in a fresh process inside Linux namespaces
(``bwrap``): a new mount, PID, network, IPC and UTS namespace; a read-only view of the
system directories (``/usr`` and the interpreter's prefix — not ``/home``, ``/root``,
``/work``, ``/tmp``, ``/etc``...); a private, size-capped ``/scratch`` (tmpfs) as the only
writable place; no network (only a loopback of its own); and resource limits: CPU seconds,
address space, processes, file size, open files, and a wall-clock deadline after which the
whole PID namespace is killed. A seccomp filter refuses ptrace, mount, unshare/setns,
keyctl, bpf, module loading, kexec and the like (:mod:`podium.security.seccomp`). The
code runs as nobody in a user namespace of its own, with no capability in any set; when
the worker is root, nobody is a uid of the sandbox's own outside (so a fork bomb counts
against that uid only; see :mod:`podium.security.userns`).

Where bubblewrap is missing or namespaces are not allowed, :meth:`Sandbox.run` raises
:class:`SandboxUnavailable`: code is never run unconfined.

The built-in tool :func:`run_python_tool` puts this behind a tool the model can call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from podium.errors import PodiumError
from podium.security.seccomp import filter_program
from podium.security.userns import NOBODY, UserNamespace

__all__ = ("Sandbox", "SandboxError", "SandboxLimits", "SandboxResult", "SandboxUnavailable")


class SandboxUnavailable(PodiumError):
    """No isolation is available here (no bubblewrap, or namespaces are not allowed)."""


class SandboxError(PodiumError):
    """Code in the sandbox failed, or a limit stopped it."""


_RESULT_MARK = "\x00podium-result\x00"
# Calls one function by reference inside the sandbox and prints its JSON result last.
_CALL = """
import asyncio, importlib, inspect, json, sys
sys.path[:0] = {paths}
target = importlib.import_module({module})
for part in {qualname}.split("."):
    target = getattr(target, part)
fn = getattr(target, "fn", target)
value = fn(**json.loads({kwargs}))
if inspect.iscoroutine(value):
    value = asyncio.run(value)
sys.stdout.write("\\x00podium-result\\x00" + json.dumps(value))
"""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Per-run limits. ``memory_bytes`` caps the address space (so it also bounds what
    the interpreter maps); ``scratch_bytes`` the private tmpfs."""

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_bytes: int = 256 << 20
    processes: int = 16
    file_bytes: int = 8 << 20
    open_files: int = 64
    scratch_bytes: int = 16 << 20
    output_bytes: int = 64 << 10


class SandboxResult(msgspec.Struct, gc=False):
    """How the code ended. ``killed`` names the limit that stopped it, if one did;
    ``truncated``: stdout or stderr passed ``output_bytes`` (only the first are kept)."""

    exit_code: int
    stdout: str
    stderr: str
    killed: str | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed is None


# Runs first inside the sandbox: limits, then (as root) its own uid and no capability
# left in any set, then the user's code from stdin. Everything it needs comes on argv;
# nothing from the environment.
_LAUNCHER = """
import os, resource, sys
cpu, mem, nproc, fsize, nofile, uid = map(int, sys.argv[1:7])
code = sys.stdin.read()
sys.stdin.close()
R = resource
R.setrlimit(R.RLIMIT_CPU, (cpu, cpu + 1))
R.setrlimit(R.RLIMIT_AS, (mem, mem))
R.setrlimit(R.RLIMIT_FSIZE, (fsize, fsize))
R.setrlimit(R.RLIMIT_NOFILE, (nofile, nofile))
R.setrlimit(R.RLIMIT_CORE, (0, 0))
if os.getuid() == 0:
    import ctypes
    libc = ctypes.CDLL(None)
    for cap in range(64):  # the bounding set emptied (PR_CAPBSET_DROP; past the last: EINVAL)
        libc.prctl(24, cap, 0, 0, 0)
    os.chown("/scratch", uid, uid)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)  # clears the permitted and effective sets; the inheritable one stays:
    head = (ctypes.c_uint32 * 2)(0x20080522, 0)  # capset(v3, this process, all empty)
    if libc.capset(head, (ctypes.c_uint32 * 6)()) != 0:
        raise SystemExit("sandbox: cannot clear the capability sets")
    del ctypes, libc, head, cap
R.setrlimit(R.RLIMIT_NPROC, (nproc, nproc))
del os, resource, R, cpu, mem, nproc, fsize, nofile, uid
sys.argv = ["main.py"]
exec(compile(code, "main.py", "exec"), {"__name__": "__main__"})
"""

_BASE_UID = 200_000
_free_slots: list[int] = []
_next_slot = 0


def _take_uid() -> int:
    # One uid per concurrent sandbox (and per worker process), so that the process limit
    # of one sandbox is not shared with any other.
    global _next_slot
    if _free_slots:
        slot = _free_slots.pop()
    else:
        slot = _next_slot
        _next_slot += 1
    return _BASE_UID + (os.getpid() % 4096) * 256 + slot % 256


def _give_uid(uid: int) -> None:
    _free_slots.append((uid - _BASE_UID) % 256)


#: bubblewrap's own environment. Not the worker's: an unprivileged worker's bubblewrap
#: stays in the sandbox as its PID 1, same uid, whose /proc/1/environ the sandboxed code
#: can read (--clearenv clears only the program's), and a worker's environment holds its
#: API keys and database URLs.
_BWRAP_ENV = {"PATH": "/usr/bin:/bin"}

#: How many times, and how long each, bubblewrap is tried before the sandbox is unavailable.
_PROBES = 3
_PROBE_TIMEOUT_S = 30.0
_PROBE_PAUSE_S = 0.5


class Sandbox:
    """Runs code under bubblewrap with :class:`SandboxLimits`. Example::

    result = await Sandbox().run_python("print(sum(range(10)))")
    assert result.stdout == "45\\n"
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        python: str | None = None,
        bwrap: str | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.python = python or os.path.realpath(sys.executable)
        self.bwrap = bwrap or shutil.which("bwrap")
        self._prefix = os.path.realpath(sys.base_prefix)
        self._checked: bool | None = None
        self._why = ""
        #: The seccomp filter bubblewrap installs (None on an architecture without a
        #: syscall table: see podium.security.seccomp).
        self.seccomp = filter_program()

    @property
    def unavailable_reason(self) -> str:
        """Why :meth:`available` said no (empty before it was asked, or when it said yes)."""
        return self._why

    def available(self) -> bool:
        """Whether isolation works here: bubblewrap runs ``true`` (probed until it gives an
        answer, which is kept). A probe that fails may fail for a passing reason (a machine
        too busy to start it in time, namespaces short while others are torn down): it is
        tried again before the sandbox is called unavailable, and a probe that timed out
        is not kept, so the next call probes again."""
        if self._checked is not None:
            return self._checked
        if self.bwrap is None:
            self._checked, self._why = False, "bubblewrap (bwrap) is not installed"
            return False
        for attempt in range(_PROBES):
            fds: list[int] = []
            uid = _take_uid()
            ns = None
            try:
                ns = UserNamespace(uid) if os.getuid() == 0 else None
                probe = subprocess.run(
                    [*self._command(fds, userns=ns), "/usr/bin/true"],
                    capture_output=True,
                    env=_BWRAP_ENV,
                    timeout=_PROBE_TIMEOUT_S,
                    check=False,
                    pass_fds=(*fds, *_fd_of(ns)),
                )
            except subprocess.TimeoutExpired:
                self._why = (
                    f"{self.bwrap} did not answer within {_PROBE_TIMEOUT_S:g}s "
                    f"{_PROBES} times (the machine is too busy?)"
                )
                continue  # not kept: asked again, it probes again
            except (OSError, subprocess.SubprocessError) as exc:
                self._checked, self._why = False, f"cannot run {self.bwrap}: {exc}"
                return False
            finally:
                _give_uid(uid)
                if ns is not None:
                    ns.close()
                for fd in fds:
                    os.close(fd)
            if probe.returncode == 0:
                self._checked, self._why = True, ""
                return True
            why = probe.stderr.decode(errors="replace").strip()
            self._why = f"bubblewrap cannot create namespaces here: {why}"
            if attempt + 1 == _PROBES:
                self._checked = False
            else:
                time.sleep(_PROBE_PAUSE_S * (attempt + 1))  # in a thread (see run_python)
        return False

    def _command(
        self, fds: list[int], extra: tuple[str, ...] = (), *, userns: UserNamespace | None
    ) -> list[str]:
        """bubblewrap's command line; the descriptor it reads the seccomp program from is
        opened into ``fds``, for the caller to pass and close (and the caller passes
        ``userns.fd`` too)."""
        assert self.bwrap is not None
        lim = self.limits
        cmd = [self.bwrap, "--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            target = os.path.join("/", link)
            if os.path.islink(target):
                cmd += ["--symlink", os.readlink(target), target]
            elif os.path.isdir(target):
                cmd += ["--ro-bind", target, target]
        for path in sorted({self._prefix, os.path.dirname(self.python), *extra}):
            if path.startswith("/usr/") or path == "/usr":
                continue
            # Its parents are made here, traversable (the real ones, such as /root, may
            # not be): nothing but the path itself is visible.
            parents = []
            parent = os.path.dirname(path)
            while parent != "/":
                parents.append(parent)
                parent = os.path.dirname(parent)
            for d in reversed(parents):
                cmd += ["--perms", "0755", "--dir", d]
            cmd += ["--ro-bind", path, path]
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        cmd += ["--size", str(lim.scratch_bytes), "--tmpfs", "/scratch"]
        # Every namespace but the user one, which is chosen below.
        cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        cmd += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
        cmd += ["--setenv", "HOME", "/scratch", "--setenv", "PATH", "/usr/bin:/bin"]
        cmd += ["--chdir", "/scratch"]
        if userns is not None:
            # A root worker's namespace (see userns.py): the launcher, root in it, drops to
            # nobody (and chowns /scratch), which empties the permitted and effective sets,
            # then clears the inheritable one: these four are all it starts with (it
            # empties the bounding set with the last).
            cmd += ["--userns", str(userns.fd), "--cap-drop", "ALL"]  # (the filter: no nesting)
            for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_SETPCAP"):
                cmd += ["--cap-add", cap]
        else:  # nobody in a user namespace of its own, no capability, none nested
            cmd += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
            cmd += ["--disable-userns"]
        if self.seccomp is not None:
            fd = os.memfd_create("podium-seccomp", 0)
            fds.append(fd)
            os.write(fd, self.seccomp)
            os.lseek(fd, 0, os.SEEK_SET)
            cmd += ["--seccomp", str(fd)]
        cmd += ["--remount-ro", "/"]
        return cmd

    async def call(self, module: str, qualname: str, kwargs: dict[str, Any]) -> Any:
        """Call the function ``module:qualname`` with JSON ``kwargs`` in the sandbox and
        return its JSON result. The import path (``sys.path``) is visible read-only.

        Raises :class:`SandboxUnavailable`, :class:`SandboxError` (the function raised or a
        limit stopped it)."""
        paths = _import_paths()
        code = _CALL.format(
            paths=json.dumps(paths),
            module=json.dumps(module),
            qualname=json.dumps(qualname),
            kwargs=json.dumps(json.dumps(kwargs)),
        )
        result = await self.run_python(code, read_only=tuple(paths))
        if result.killed is not None:
            raise SandboxError(f"stopped by the sandbox's {result.killed} limit")
        if result.truncated and result.exit_code == 0:
            raise SandboxError(
                f"its output (what it printed and its result) passed the sandbox's "
                f"output_bytes limit of {self.limits.output_bytes} bytes"
            )
        _, marker, tail = result.stdout.rpartition(_RESULT_MARK)
        if not marker or result.exit_code != 0:
            last = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.exit_code}"]
            raise SandboxError(last[0])
        return json.loads(tail)

    async def run_python(self, code: str, *, read_only: tuple[str, ...] = ()) -> SandboxResult:
        """Run ``code`` with ``python -I`` in the sandbox; raise :class:`SandboxUnavailable`
        when there is no sandbox. ``read_only``: more directories to show, read-only."""
        if not await asyncio.to_thread(self.available):
            raise SandboxUnavailable(f"refusing to run code without a sandbox: {self._why}")
        lim = self.limits
        uid = _take_uid()
        fds: list[int] = []
        ns = None
        try:
            if os.getuid() == 0:
                ns = await asyncio.to_thread(UserNamespace, uid)
            argv = [
                *self._command(fds, read_only, userns=ns),
                self.python,
                "-I",
                "-c",
                _LAUNCHER,
                *map(
                    str,
                    (lim.cpu_s, lim.memory_bytes, lim.processes, lim.file_bytes, lim.open_files),
                ),
                str(NOBODY),  # (as root in the namespace, the launcher drops to nobody)
            ]
            return await self._run(argv, code.encode(), (*fds, *_fd_of(ns)))
        finally:
            _give_uid(uid)
            if ns is not None:
                await asyncio.to_thread(ns.close)
            for fd in fds:
                os.close(fd)

    async def _run(self, argv: list[str], stdin: bytes, fds: tuple[int, ...]) -> SandboxResult:
        lim = self.limits
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: the deadline kills all of it
            env=_BWRAP_ENV,
            pass_fds=fds,
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        killed: str | None = None
        # Filled as the pipes are read, so a run stopped at the deadline keeps what it
        # printed before it.
        out, err = _Capped(lim.output_bytes), _Capped(lim.output_bytes)
        try:
            async with asyncio.timeout(lim.wall_s):
                await asyncio.gather(
                    out.read(proc.stdout), err.read(proc.stderr), _feed(proc.stdin, stdin)
                )
                code = await proc.wait()
        except TimeoutError:
            killed = "wall_time"
            _kill(proc)
            await _reap(proc)
            code = proc.returncode or -signal.SIGKILL
        except BaseException:
            _kill(proc)
            await asyncio.shield(_reap(proc))
            raise
        if killed is None:
            killed = _limit_hit(code, err.value())
        return SandboxResult(
            code,
            out.value().decode(errors="replace"),
            err.value().decode(errors="replace"),
            killed,
            out.size > out.limit or err.size > err.limit,
        )


def _fd_of(ns: UserNamespace | None) -> tuple[int, ...]:
    return () if ns is None else (ns.fd,)


def _import_paths() -> list[str]:
    """The directories of ``sys.path`` (a few stats; cheap, and done once per call)."""
    return [os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)]


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> bytes:
    with contextlib.suppress(ConnectionError):
        stream.write(data)
        await stream.drain()
        stream.close()
    return b""


class _Capped:
    """The first ``limit`` bytes of a pipe, and how many it carried in all."""

    __slots__ = ("chunks", "limit", "size")

    def __init__(self, limit: int) -> None:
        self.chunks: list[bytes] = []
        self.limit = limit
        self.size = 0

    async def read(self, stream: asyncio.StreamReader) -> None:
        # Read to the end (so the child never blocks on a full pipe), keeping ``limit``.
        while chunk := await stream.read(65536):
            if self.size < self.limit:
                self.chunks.append(chunk[: self.limit - self.size])
            self.size += len(chunk)

    def value(self) -> bytes:
        return b"".join(self.chunks)


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Wait for a killed sandbox and read its pipes to the end, so they close."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            await proc.communicate()


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _limit_hit(code: int, stderr: bytes) -> str | None:
    """Which limit ended the process, from how it ended: a signal, or the exception its
    traceback ends with. A program that exits 0 was stopped by nothing, whatever it wrote
    to stderr (a handled MemoryError, a log line that names one)."""
    if code == 0:
        return None
    if code in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL):
        return "cpu_time" if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU) else "killed"
    if code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return "file_size"
    last = stderr.rstrip().rpartition(b"\n")[2]
    if last.endswith(b"File too large"):
        return "file_size"
    if last.startswith(b"MemoryError"):
        return "memory"
    if last.startswith(b"BlockingIOError") and b"Resource temporarily unavailable" in last:
        return "processes"
    return None
