"""The sandbox's seccomp filter: a classic BPF program, assembled here, that bubblewrap
installs (``--seccomp FD``) just before it runs the sandboxed program.

No library is needed (libseccomp's Python bindings are not on PyPI as wheels): the
program is a dozen instructions per denied call, built from the syscall numbers of the
machine's architecture. It

1. kills the process if the call is made for another architecture than the one the
   table is for (``seccomp_data.arch``): a 32-bit or x32 entry would otherwise reach
   other numbers (on x86-64, numbers with the x32 bit set are refused too);
2. refuses, with ``EPERM``, the calls a sandboxed program has no business making and an
   escape would start with: ``ptrace``, ``process_vm_readv/writev``, ``mount`` and the
   new mount API, ``umount2``, ``pivot_root``, ``chroot``, ``unshare``, ``setns``,
   ``keyctl``/``add_key``/``request_key``, ``bpf``, ``perf_event_open``,
   ``userfaultfd``, ``kexec_load``/``kexec_file_load``, ``init_module``/``finit_module``/
   ``delete_module``, ``open_by_handle_at``, ``swapon``/``swapoff``, ``reboot``,
   ``acct``;
3. refuses ``clone`` with any namespace flag (``EPERM``) and ``clone3`` (``ENOSYS``, so
   the C library falls back to ``clone``, whose flags the filter can read);
4. allows everything else.

Architectures: x86-64 and AArch64. Elsewhere :func:`filter_program` returns None and the
sandbox runs without a filter (namespaces, no capabilities and the limits still hold);
``Sandbox.seccomp`` says which.
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ("DENIED", "filter_program")

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
# Offsets in struct seccomp_data: nr, arch, then the arguments (u64 each; the low half
# of the first is at 16 on a little-endian machine).
_NR, _ARCH, _ARG0_LO = 0, 4, 16
_NAMESPACES = 0x7E020080  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET,TIME}
_X32_BIT = 0x40000000

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "open_by_handle_at", "swapon", "swapoff", "reboot",
    "acct", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr",
)  # fmt: skip

# The new mount API has the same numbers everywhere (424 and up).
_NEW = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "clone3": 435, "mount_setattr": 442}  # fmt: skip
_TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165,
        "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246,
        "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "open_by_handle_at": 304, "swapon": 167, "swapoff": 168,
        "reboot": 169, "acct": 163, "clone": 56, **_NEW,
    }),
    "aarch64": (0xC00000B7, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40,
        "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268,
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "open_by_handle_at": 265, "swapon": 224, "swapoff": 225,
        "reboot": 142, "acct": 89, "clone": 220, **_NEW,
    }),
}  # fmt: skip
_TABLES["amd64"] = _TABLES["x86_64"]
_TABLES["arm64"] = _TABLES["aarch64"]


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (``platform.machine()`` by default) as the raw
    ``struct sock_filter`` array bubblewrap reads, or None for an architecture without a
    table."""
    table = _TABLES.get((machine or platform.machine()).lower())
    if table is None:
        return None
    arch, numbers = table
    eperm = _ERRNO | errno.EPERM
    ops = [
        _op(_LD_W_ABS, _ARCH),
        _op(_JEQ_K, arch, jt=1),  # the right architecture: skip the kill
        _op(_RET_K, _KILL_PROCESS),
        _op(_LD_W_ABS, _NR),
    ]
    if arch == 0xC000003E:  # x32 calls are x86-64 numbers with a bit set: refused
        ops += [_op(_JGE_K, _X32_BIT, jf=1), _op(_RET_K, eperm)]
    for name in DENIED:
        ops += [_op(_JEQ_K, numbers[name], jf=1), _op(_RET_K, eperm)]
    ops += [_op(_JEQ_K, numbers["clone3"], jf=1), _op(_RET_K, _ERRNO | errno.ENOSYS)]
    ops += [
        _op(_JEQ_K, numbers["clone"], jf=3),
        _op(_LD_W_ABS, _ARG0_LO),
        _op(_JSET_K, _NAMESPACES, jf=1),
        _op(_RET_K, eperm),
        _op(_RET_K, _ALLOW),
    ]
    return b"".join(ops)
