"""The seccomp filter's syscall numbers are the kernel's, for each architecture it knows,
and the program does what it says there: checked against the kernel's own headers (the
numbers) and by running the program on a small classic-BPF interpreter (the logic), then
on the real kernel (the architecture check).

AArch64 takes its numbers from the generic table (``asm-generic/unistd.h``); x86-64 has
its own (``asm/unistd_64.h``). Both come with linux-libc-dev; without it the header tests
skip.

Why not run the AArch64 filter under ``qemu-aarch64-static``: qemu's user mode refuses a
guest's ``PR_SET_SECCOMP``/``seccomp(2)`` (EINVAL; a filter would bind qemu's own host
calls), and the kernel would see qemu's x86-64 calls anyway, so the AArch64 branch of the
filter cannot be exercised there; the interpreter below runs it instead, and the real
kernel checks that a filter built for the other architecture kills the process."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import signal
import struct
from pathlib import Path

import pytest

from podium.security import seccomp
from podium.security.seccomp import DENIED, filter_program

HEADERS = {
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
}
AUDIT_ARCH = {"aarch64": 0xC00000B7, "x86_64": 0xC000003E}
#: A harmless call on each (read on AArch64 is 63, on x86-64 0).
READ = {"aarch64": 63, "x86_64": 0}
_DEFINE = re.compile(r"^#define\s+__NR_(\w+)\s+(\d+)\s*$", re.MULTILINE)


def kernel_numbers(arch: str) -> dict[str, set[int]]:
    header = HEADERS[arch]
    if not header.exists():
        pytest.skip(f"{header} is missing (install linux-libc-dev)")
    numbers: dict[str, set[int]] = {}
    for name, nr in _DEFINE.findall(header.read_text()):
        numbers.setdefault(name, set()).add(int(nr))
    assert len(numbers) > 250, header  # (the parse found the table)
    return numbers


@pytest.mark.parametrize("arch", sorted(HEADERS))
def test_every_number_is_the_kernels(arch: str) -> None:
    numbers = kernel_numbers(arch)
    _, table = seccomp._TABLES[arch]
    assert set(DENIED) | {"clone", "clone3"} <= set(table)
    wrong = {name: (nr, numbers.get(name)) for name, nr in table.items()
             if numbers.get(name) != {nr}}  # fmt: skip
    assert not wrong, f"ours, the kernel's: {wrong}"
    assert READ[arch] in numbers["read"]


# -- the program, run ----------------------------------------------------------------------

ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM, ENOSYS = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS


def run_filter(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What ``program`` returns for a call: a classic-BPF interpreter for the instructions
    a seccomp filter uses (absolute word loads, jumps on a constant, returns)."""
    data = struct.pack("=iI", nr, arch) + struct.pack("=Q", 0) + struct.pack("=Q", arg0)
    ops = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        elif code in (0x15, 0x35, 0x45):  # JEQ, JGE, JSET with a constant
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("arch", sorted(HEADERS))
def test_the_program_refuses_what_it_lists_and_allows_the_rest(arch: str) -> None:
    program = filter_program(arch)
    assert program is not None
    audit = AUDIT_ARCH[arch]
    _, table = seccomp._TABLES[arch]
    for name in DENIED:
        assert run_filter(program, audit, table[name]) == EPERM, name
    assert run_filter(program, audit, table["clone3"]) == ENOSYS
    clone = table["clone"]
    assert run_filter(program, audit, clone, 0x11) == ALLOW  # a plain fork (SIGCHLD)
    for flag in (
        0x10000000,
        0x20000,
        0x40000000,
        0x20000000,
        0x08000000,
        0x04000000,
        0x02000000,
        0x80,
    ):  # USER, NS, NET, PID, IPC, UTS, CGROUP, TIME
        assert run_filter(program, audit, clone, 0x11 | flag) == EPERM, hex(flag)
    assert run_filter(program, audit, READ[arch]) == ALLOW
    other = next(a for name, a in AUDIT_ARCH.items() if name != arch)
    assert run_filter(program, other, READ[arch]) == KILL  # another architecture
    assert run_filter(program, 0x40000003, 3) == KILL  # i386 (int 0x80 on x86-64)
    if arch == "x86_64":
        assert run_filter(program, audit, 0x40000000 | 101) == EPERM  # x32 ptrace


def test_the_kernel_kills_a_call_made_for_another_architecture() -> None:
    """The filter built for the other architecture than this machine's, installed for real
    in a child: its first call fails the architecture check, and the kernel kills it."""
    here = platform.machine().lower()
    if here not in AUDIT_ARCH:
        pytest.skip(f"no filter for {here}")
    other = next(name for name in AUDIT_ARCH if name != here)
    program = filter_program(other)
    assert program is not None
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(program)
        prog = ctypes.create_string_buffer(
            struct.pack("HL", len(program) // 8, ctypes.addressof(buf))
        )
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            os._exit(3)
        libc.prctl(22, 2, prog, 0, 0)  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER: killed here
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS, status
