"""CPU topology from a fake /sys tree: cores, SMT siblings, NUMA nodes, worker placement."""

from __future__ import annotations

from pathlib import Path

from podium.worker.topology import parse_cpulist, place_workers, read_topology


def fake_sys(root: Path, nodes: dict[int, list[int]], core_of: dict[int, int]) -> Path:
    for node, cpus in nodes.items():
        d = root / f"devices/system/node/node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(",".join(map(str, cpus)) + "\n")
    for cpu, core in core_of.items():
        t = root / f"devices/system/cpu/cpu{cpu}/topology"
        t.mkdir(parents=True)
        (t / "core_id").write_text(f"{core}\n")
        (t / "physical_package_id").write_text(f"{0 if core < 10 else 1}\n")
    return root


def test_parse_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_two_nodes_with_smt(tmp_path: Path) -> None:
    # node 0: cores 0,1 with siblings 4,5; node 1: cores 10,11 with siblings 6,7
    root = fake_sys(
        tmp_path,
        {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]},
        {0: 0, 1: 1, 4: 0, 5: 1, 2: 10, 3: 11, 6: 10, 7: 11},
    )
    topo = read_topology(root, allowed=set(range(8)))
    assert topo.physical_cores() == 4 and topo.physical_cores(1) == 2
    placements = place_workers(topo)
    # node by node, physical cores before their SMT siblings
    assert [p.cpu for p in placements] == [0, 1, 4, 5, 2, 3, 6, 7]
    assert [p.node for p in placements] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert placements[0].node_cpus == (0, 1, 4, 5) and placements[0].threads == 2
    assert [p.cpu for p in place_workers(topo, 2)] == [0, 1]


def test_affinity_mask_and_missing_files(tmp_path: Path) -> None:
    topo = read_topology(tmp_path, allowed={3, 5})  # nothing under /sys: one node
    assert [c.id for c in topo.cpus] == [3, 5]
    assert [p.cpu for p in place_workers(topo, 3)] == [3, 5, 3]  # more workers than CPUs
