"""The machine's CPUs as Linux describes them in /sys: cores, SMT siblings, NUMA nodes.

:func:`read_topology` reads what this process may use (its affinity mask);
:func:`place_workers` decides where ``n`` worker processes go: node by node,
one per physical core before any shares a core with an SMT sibling.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ("Cpu", "Placement", "Topology", "parse_cpulist", "place_workers", "read_topology")


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` → ``[0, 1, 2, 3, 8, 10, 11]`` (the /sys list format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


@dataclass(frozen=True, slots=True)
class Cpu:
    """One logical CPU: its id, its physical core ``(package, core_id)`` and NUMA node."""

    id: int
    core: tuple[int, int]
    node: int


@dataclass(frozen=True, slots=True)
class Topology:
    cpus: tuple[Cpu, ...]

    @property
    def nodes(self) -> dict[int, tuple[Cpu, ...]]:
        out: dict[int, list[Cpu]] = {}
        for cpu in self.cpus:
            out.setdefault(cpu.node, []).append(cpu)
        return {node: tuple(cpus) for node, cpus in sorted(out.items())}

    def physical_cores(self, node: int | None = None) -> int:
        return len({c.core for c in self.cpus if node is None or c.node == node})


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one worker process runs: its CPU, its node's CPUs, its thread-pool size."""

    index: int
    cpu: int
    node: int
    node_cpus: tuple[int, ...]
    threads: int


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_topology(sys_root: str | Path = "/sys", allowed: set[int] | None = None) -> Topology:
    """The CPUs this process may run on, with their cores and NUMA nodes.

    Missing files (containers, other systems) degrade gracefully: one node, one
    core per CPU.
    """
    root = Path(sys_root)
    if allowed is None:
        allowed = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(
            range(os.cpu_count() or 1)
        )
    node_of: dict[int, int] = {}
    for node_dir in sorted(root.glob("devices/system/node/node[0-9]*")):
        text = _read(node_dir / "cpulist")
        match = re.fullmatch(r"node(\d+)", node_dir.name)
        if text is None or match is None:
            continue
        for cpu in parse_cpulist(text):
            node_of[cpu] = int(match.group(1))
    cpus: list[Cpu] = []
    for cpu in sorted(allowed):
        topo = root / f"devices/system/cpu/cpu{cpu}/topology"
        core_id = _read(topo / "core_id")
        package = _read(topo / "physical_package_id")
        core = (int(package or 0), int(core_id)) if core_id is not None else (0, cpu)
        cpus.append(Cpu(cpu, core, node_of.get(cpu, 0)))
    return Topology(tuple(cpus))


def place_workers(topology: Topology, procs: int | None = None) -> list[Placement]:
    """Placements for ``procs`` workers (default: one per CPU), grouped by NUMA node.

    Within a node, the first CPU of every physical core is used before any SMT
    sibling; nodes are filled in turn, so neighbouring workers share a node.
    Each worker's thread pool gets as many threads as its node has physical cores.
    """
    order: list[Cpu] = []
    for cpus in topology.nodes.values():
        seen: set[tuple[int, int]] = set()
        firsts: list[Cpu] = []
        siblings: list[Cpu] = []
        for cpu in cpus:
            (siblings if cpu.core in seen else firsts).append(cpu)
            seen.add(cpu.core)
        order.extend(firsts + siblings)
    if not order:
        order = [Cpu(0, (0, 0), 0)]
    count = len(order) if procs is None else procs
    nodes = topology.nodes
    placements = []
    for i in range(count):
        cpu = order[i % len(order)]  # more processes than CPUs: wrap around
        node_cpus = tuple(c.id for c in nodes.get(cpu.node, (cpu,)))
        threads = max(1, topology.physical_cores(cpu.node))
        placements.append(Placement(i, cpu.id, cpu.node, node_cpus, threads))
    return placements
