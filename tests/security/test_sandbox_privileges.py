"""Attacks on the sandbox that need privileges it must not have: capabilities, new
namespaces, mounts, tracing another process, the kernel's keyring and BPF. Each runs a
program inside the sandbox that tries, and reports what the kernel said. Run as root
here (the worker kind the issue found thin), and as any user elsewhere."""

from __future__ import annotations

import asyncio
import errno
import json
import os

import pytest

from podium.security.sandbox import Sandbox, SandboxLimits
from podium.security.seccomp import DENIED, filter_program

pytestmark = [pytest.mark.slow]

BOX = Sandbox(SandboxLimits(cpu_s=5, wall_s=20))
if BOX.bwrap is None:
    pytest.skip("bubblewrap (bwrap) is not installed (.ci/run installs it)",
                allow_module_level=True)

# Each attack is a libc call; the program prints {name: errno (0: it worked)}.
ATTACK = r"""
import ctypes, json, os
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
out["setuid_0"] = tried(libc.setuid(0))
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
out["uid_map"] = [line.split() for line in open("/proc/self/uid_map").read().splitlines()]
out["own_userns"] = os.readlink("/proc/self/ns/user")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def attacked() -> dict[str, object]:
    # One sandboxed run for all the checks (no loop runs here: a module-wide fixture).
    assert BOX.available(), BOX.unavailable_reason
    r = asyncio.run(BOX.run_python(ATTACK))
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


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
    # nobody inside is an unprivileged uid outside: as root, one of the sandbox's own
    outside = {inside: out for inside, out, _ in attacked["uid_map"]}  # type: ignore[union-attr]
    assert outside["65534"] != "0"
    if os.getuid() != 0:
        assert outside["65534"] == str(os.getuid())


def test_capabilities_cannot_be_regained(attacked: dict[str, object]) -> None:
    assert attacked["capset_all"] == errno.EPERM
    assert attacked["setuid_0"] == errno.EPERM
    assert attacked["uid"] != 0


@pytest.mark.parametrize(
    "attack",
    ["unshare_user", "unshare_mount", "unshare_net", "mount_tmpfs", "remount_root_rw",
     "ptrace_traceme", "ptrace_attach_1", "keyctl", "bpf", "chroot"],
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
