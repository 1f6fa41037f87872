"""Attacks on the sandbox that need privileges it must not have: capabilities, new
namespaces, mounts, tracing another process, the kernel's keyring and BPF. Each runs a
program inside the sandbox that tries, and reports what the kernel said. Run as root
as the worker (root here, the kind the issue found thin) and, where the worker is root,
once more as an unprivileged uid (bubblewrap's own user namespace: the path an ordinary
worker takes), and each attack must be refused on both paths."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sys

import pytest
from _unprivileged import free_uid, run_as

from podium.security.sandbox import Sandbox, SandboxLimits
from podium.security.seccomp import DENIED, filter_program

pytestmark = [pytest.mark.slow]

BOX = Sandbox(SandboxLimits(cpu_s=5, wall_s=20))
if BOX.bwrap is None:
    pytest.skip(
        "bubblewrap (bwrap) is not installed (.ci/run installs it)", allow_module_level=True
    )

# Each attack is a libc call; the program prints {name: errno (0: it worked)}.
ATTACK = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def tried(rc):
    return 0 if rc == 0 else ctypes.get_errno()
out = {}
out["unshare_user"] = tried(libc.unshare(0x10000000))
out["unshare_mount"] = tried(libc.unshare(0x00020000))
out["unshare_net"] = tried(libc.unshare(0x40000000))
out["mount_tmpfs"] = tried(libc.mount(b"none", b"/scratch", b"tmpfs", 0, None))
out["remount_root_rw"] = tried(libc.mount(None, b"/", None, 0x20 | 0x1000, None))
out["ptrace_traceme"] = tried(libc.ptrace(0, 0, 0, 0))
out["ptrace_attach_1"] = tried(libc.ptrace(16, 1, 0, 0))
out["keyctl"] = tried(libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0, -3, 0, 0))
out["bpf"] = tried(libc.syscall(321 if os.uname().machine == "x86_64" else 280, 0, 0, 0))
out["chroot"] = tried(libc.chroot(b"/scratch"))
out["setuid_0"] = tried(libc.setuid(0))  # (EINVAL where no uid 0 is mapped)
# capset: ask for every capability back (version 3, this process, all bits set)
head = (ctypes.c_uint32 * 2)(0x20080522, 0)
full = (ctypes.c_uint32 * 6)(*([0xFFFFFFFF] * 6))
out["capset_all"] = tried(libc.capset(head, full))
status = dict(
    line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line
)
out["status"] = {k: status[k].strip() for k in
                 ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")}
out["uid"] = os.getuid()
# The host's services (Redis here) and files: a network and a filesystem of its own.
import socket
try:
    socket.create_connection(("127.0.0.1", 6379), timeout=3).close()
    out["redis"] = 0
except OSError as e:
    out["redis"] = e.errno
out["environs"] = []  # every process it can see: the worker's environment is none of them
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        out["environs"].append(open(f"/proc/{pid}/environ", "rb").read().decode("latin-1"))
    except OSError:
        pass
out["reads"] = {}
for path in ("/etc/shadow", "/etc/passwd", "/root", "/work", "/home"):
    try:
        out["reads"][path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()
    except OSError as e:
        out["reads"][path] = -e.errno
# Writes outside /scratch: the root, the system, the interpreter's own directory, the
# kernel's knobs (errno 0: the write went through).
out["writes"] = {}
for path in ("/evil", "/usr/evil", "/usr/lib/evil", sys.prefix + "/evil",
             os.path.dirname(sys.executable) + "/evil", "/proc/sys/kernel/core_pattern",
             "/proc/sysrq-trigger", "/scratch/../evil", "/proc/1/root/evil"):
    try:
        with open(path, "w") as f:
            f.write("x")
        out["writes"][path] = 0
    except OSError as e:
        out["writes"][path] = e.errno
out["uid_map"] = [line.split() for line in open("/proc/self/uid_map").read().splitlines()]
out["own_userns"] = os.readlink("/proc/self/ns/user")
print(json.dumps(out))
"""


# As an unprivileged uid: the sandbox is made and run there, and what the attack printed
# comes back as the last line (with the uid it ran as outside).
_UNPRIVILEGED = f"""
import asyncio, json, os, sys
from podium.security.sandbox import Sandbox, SandboxLimits
box = Sandbox(SandboxLimits(cpu_s=5, wall_s=20))
if not box.available():
    print(json.dumps({{"unavailable": box.unavailable_reason}}))
    sys.exit(0)
r = asyncio.run(box.run_python({ATTACK!r}))
print(json.dumps({{"worker_uid": os.getuid(), "exit_code": r.exit_code, "stderr": r.stderr,
                  "attacked": r.stdout}}))
"""


#: In the worker's environment as an API key would be; no sandboxed program may read it.
WORKER_SECRET = "sk-worker-env-7Hq2Lx9"


def _as_unprivileged() -> dict[str, object]:
    if os.getuid() != 0:
        pytest.skip("the worker is unprivileged already: the first run took this path")
    uid = free_uid()
    child = run_as(uid, _UNPRIVILEGED, env={"OPENAI_API_KEY": WORKER_SECRET})
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.splitlines()[-1])
    if "unavailable" in report:
        # bubblewrap needs unprivileged user namespaces (kernel.unprivileged_userns_clone,
        # user.max_user_namespaces, an AppArmor restriction): where they are off, an
        # ordinary worker has no sandbox at all, which test_sandbox_probe covers.
        pytest.skip(f"unprivileged user namespaces are off here: {report['unavailable']}")
    assert report["worker_uid"] == uid
    assert report["exit_code"] == 0, report["stderr"]
    out = json.loads(str(report["attacked"]))
    out["worker_uid"] = uid
    return out  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=["as the worker", "as an unprivileged uid"])
def attacked(request: pytest.FixtureRequest) -> dict[str, object]:
    # One sandboxed run per path for all the checks (no loop runs here: module-wide).
    if request.param == "as an unprivileged uid":
        return _as_unprivileged()
    assert BOX.available(), BOX.unavailable_reason
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", WORKER_SECRET)
        r = asyncio.run(BOX.run_python(ATTACK))
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    out["worker_uid"] = os.getuid()
    return out  # type: ignore[no-any-return]


def test_no_capability_in_any_set(attacked: dict[str, object]) -> None:
    status = attacked["status"]
    assert isinstance(status, dict)
    for key in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[key], 16) == 0, (key, status)
    assert status["NoNewPrivs"] == "1"
    if filter_program() is not None:
        assert status["Seccomp"] == "2", status  # a filter is installed


def test_it_runs_as_nobody_in_a_user_namespace_of_its_own(attacked: dict[str, object]) -> None:
    assert attacked["uid"] == 65534
    assert attacked["own_userns"] != os.readlink("/proc/self/ns/user")
    uid_map = attacked["uid_map"]
    assert isinstance(uid_map, list)
    mapped = {inside: (outside, count) for inside, outside, count in uid_map}
    assert mapped["65534"][1] == "1", uid_map  # nobody: one uid, not a range
    if attacked["worker_uid"] == 0:
        # A root worker's namespace maps nobody to a uid of the sandbox's own, never root;
        # root to root only so that bubblewrap can set up as it (see userns.py), and
        # nothing else.
        assert int(mapped["65534"][0]) >= 200_000, uid_map
        assert set(mapped) == {"0", "65534"} and mapped["0"] == ("0", "1"), uid_map
    else:
        # An ordinary worker's bubblewrap maps nobody alone (nested in a namespace of its
        # own, where nobody stands for the first one's 0: the worker's uid outside, the
        # only uid it can map).
        assert list(mapped) == ["65534"], uid_map


def test_capabilities_cannot_be_regained(attacked: dict[str, object]) -> None:
    assert attacked["capset_all"] == errno.EPERM
    # EPERM without CAP_SETUID; EINVAL where no uid 0 exists in the namespace at all
    assert attacked["setuid_0"] in (errno.EPERM, errno.EINVAL)
    assert attacked["uid"] != 0


def test_the_hosts_network_and_files_are_out_of_reach(attacked: dict[str, object]) -> None:
    # a loopback of its own, where nothing listens (not the host's Redis)
    assert attacked["redis"] in (errno.ECONNREFUSED, errno.ENETUNREACH), attacked["redis"]
    reads = attacked["reads"]
    assert isinstance(reads, dict)
    assert reads["/etc/shadow"] == reads["/etc/passwd"] == -errno.ENOENT, reads
    # A directory on the way to the interpreter or the import path (made, traversable, by
    # the sandbox) shows only the next step on that way; any other is not there at all.
    shown = {os.path.realpath(p) for p in (sys.base_prefix, *sys.path) if p}
    for path in ("/root", "/work", "/home"):
        if reads[path] != -errno.ENOENT:
            for entry in reads[path]:
                step = os.path.join(path, entry)
                assert any(s == step or s.startswith(step + "/") for s in shown), (step, reads)
    # No process it sees carries the worker's environment (an unprivileged worker's
    # bubblewrap is PID 1 in there, same uid: it once held the worker's API keys).
    environs = attacked["environs"]
    assert isinstance(environs, list)  # (as root's, none is readable: not even its own)
    assert not any(WORKER_SECRET in e for e in environs), environs


def test_nothing_outside_scratch_can_be_written(attacked: dict[str, object]) -> None:
    writes = attacked["writes"]
    assert isinstance(writes, dict) and len(writes) == 9
    refused = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT)
    assert all(e in refused for e in writes.values()), writes


@pytest.mark.parametrize(
    "attack",
    [
        "unshare_user",
        "unshare_mount",
        "unshare_net",
        "mount_tmpfs",
        "remount_root_rw",
        "ptrace_traceme",
        "ptrace_attach_1",
        "keyctl",
        "bpf",
        "chroot",
    ],
)
def test_privileged_calls_are_refused(attacked: dict[str, object], attack: str) -> None:
    # EPERM from the seccomp filter (or, without one, from the missing capabilities)
    assert attacked[attack] in (errno.EPERM, errno.ENOSYS), attacked


def test_the_filter_checks_the_architecture_and_denies_each_call() -> None:
    program = filter_program("x86_64")
    assert program is not None and len(program) % 8 == 0
    # (the arch load, its check, kill; the nr load; the x32 check; two per denied call;
    # clone3; the clone flags test; allow)
    assert len(program) // 8 == 4 + 2 + 2 * len(DENIED) + 2 + 5
    assert filter_program("sparc64") is None
