"""CPU topology and NUMA meminfo from sysfs: a hand-built fake tree and the real /sys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.host.roots import HostRoots
from qosmanager.host.sysfs import (
    NodeCPUInfo,
    Processor,
    TopologyReader,
    numa_meminfo,
    numa_usage_bytes,
    online_cpus,
    parse_numa_meminfo,
    read_node_cpu_info,
    read_topology,
)


def put(base: Path, rel: str, text: str) -> None:
    p = base / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


# 2 sockets x 2 cores x 2 threads, Linux numbering: cpu0-3 are the first threads of
# (s0 core_id 0), (s0 core_id 4), (s1 core_id 0), (s1 core_id 4); cpu4-7 their siblings.
# core_id has gaps and restarts per socket, as on real servers.
CPUS = {  # cpu: (socket, core_id, node, l3 id)
    0: (0, 0, 0, 5), 1: (0, 4, 0, 5), 2: (1, 0, 1, 9), 3: (1, 4, 1, 9),
    4: (0, 0, 0, 5), 5: (0, 4, 0, 5), 6: (1, 0, 1, 9), 7: (1, 4, 1, 9),
}


def build(sys_root: Path, online: str | None = "0-7") -> None:
    if online is not None:
        put(sys_root, "devices/system/cpu/online", online + "\n")
    for cpu, (socket, core_id, _, l3) in CPUS.items():
        d = f"devices/system/cpu/cpu{cpu}"
        put(sys_root, f"{d}/topology/physical_package_id", f"{socket}\n")
        put(sys_root, f"{d}/topology/core_id", f"{core_id}\n")
        for idx, level in enumerate((1, 1, 2)):
            put(sys_root, f"{d}/cache/index{idx}/level", f"{level}\n")
            put(sys_root, f"{d}/cache/index{idx}/id", f"{cpu}\n")
        put(sys_root, f"{d}/cache/index3/level", "3\n")
        put(sys_root, f"{d}/cache/index3/id", f"{l3}\n")
    put(sys_root, "devices/system/node/node0/cpulist", "0-1,4-5\n")
    put(sys_root, "devices/system/node/node1/cpulist", "2-3,6-7\n")


def test_topology(tmp_path: Path) -> None:
    build(tmp_path)
    got = read_topology(HostRoots(sys=str(tmp_path)))
    # logical cores by first appearance of (socket, core_id): cpu0 -> 0, cpu1 -> 1, cpu2 -> 2, cpu3 -> 3
    assert got == [
        Processor(cpu=0, core=0, socket=0, node=0, l3=5),
        Processor(cpu=4, core=0, socket=0, node=0, l3=5),
        Processor(cpu=1, core=1, socket=0, node=0, l3=5),
        Processor(cpu=5, core=1, socket=0, node=0, l3=5),
        Processor(cpu=2, core=2, socket=1, node=1, l3=9),
        Processor(cpu=6, core=2, socket=1, node=1, l3=9),
        Processor(cpu=3, core=3, socket=1, node=1, l3=9),
        Processor(cpu=7, core=3, socket=1, node=1, l3=9),
    ]


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    build(tmp_path, online="0-2,4")
    assert sorted(p.cpu for p in read_topology(HostRoots(sys=str(tmp_path)))) == [0, 1, 2, 4]


def test_cpu_dirs_without_online_file(tmp_path: Path) -> None:
    build(tmp_path, online=None)
    (tmp_path / "devices/system/cpu/cpufreq").mkdir()
    (tmp_path / "devices/system/cpu/cpuidle").mkdir()
    roots = HostRoots(sys=str(tmp_path))
    assert online_cpus(roots) == list(range(8))
    assert len(read_topology(roots)) == 8


def test_defaults_when_files_are_missing(tmp_path: Path) -> None:
    put(tmp_path, "devices/system/cpu/online", "0-2\n")
    put(tmp_path, "devices/system/cpu/cpu1/topology/physical_package_id", "-1\n")  # some VMs
    put(tmp_path, "devices/system/cpu/cpu2/topology/core_id", "garbage\n")
    got = read_topology(HostRoots(sys=str(tmp_path)))
    # each CPU its own core, socket 0, node 0, L3 = socket
    assert got == [Processor(cpu=i, core=i, socket=0, node=0, l3=0) for i in range(3)]
    assert read_topology(HostRoots(sys=str(tmp_path / "nothing"))) == []


def test_l3_defaults_to_socket(tmp_path: Path) -> None:
    build(tmp_path)
    for cpu in CPUS:
        os.remove(tmp_path / f"devices/system/cpu/cpu{cpu}/cache/index3/id")
    got = read_topology(HostRoots(sys=str(tmp_path)))
    assert all(p.l3 == p.socket for p in got)
    assert {p.l3 for p in got} == {0, 1}


def test_node_cpu_info(tmp_path: Path) -> None:
    build(tmp_path / "sys")
    put(tmp_path / "sys", "fs/resctrl/info/L3/cbm_mask", "7ff\n")
    put(tmp_path / "sys", "devices/system/cpu/smt/active", "1\n")
    put(tmp_path / "proc", "cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
                                      "flags\t\t: fpu cat_l3 mba\n\n")
    info = read_node_cpu_info(HostRoots(sys=str(tmp_path / "sys"), proc=str(tmp_path / "proc")))
    assert info.number_cpus == 8
    assert (info.vendor, info.model, info.cbm_mask, info.ht) == ("AuthenticAMD", "AMD EPYC", "7ff", True)
    assert "cat_l3" in info.flags
    assert info.l3_ids == [5, 9]
    assert info.cpus_by_l3 == {5: [0, 1, 4, 5], 9: [2, 3, 6, 7]}
    assert info.numa_nodes == [0, 1] and info.sockets == [0, 1]


def test_node_cpu_info_without_proc_or_resctrl(tmp_path: Path) -> None:
    build(tmp_path)
    info = read_node_cpu_info(HostRoots(sys=str(tmp_path), proc=str(tmp_path / "noproc")))
    assert (info.vendor, info.cbm_mask) == ("", None)
    # no smt/active: HT from the topology (cores with two CPUs)
    assert info.ht is True
    single = NodeCPUInfo(processors=[Processor(0, 0, 0, 0, 0), Processor(1, 1, 0, 0, 0)])
    assert single.cpus_by_l3 == {0: [0, 1]}


def test_smt_inactive(tmp_path: Path) -> None:
    build(tmp_path)
    put(tmp_path, "devices/system/cpu/smt/active", "0\n")
    assert read_node_cpu_info(HostRoots(sys=str(tmp_path), proc=str(tmp_path))).ht is False


# -- NUMA meminfo ----------------------------------------------------------------------
NODE_MEMINFO = """\
Node {n} MemTotal:        4155112 kB
Node {n} MemFree:         3806720 kB
Node {n} MemUsed:          348392 kB
Node {n} Active(file):     110540 kB
Node {n} Inactive(file):    92516 kB
Node {n} SReclaimable:      43244 kB
Node {n} HugePages_Total:     7
Node {n} Broken:            x kB
"""


def test_numa_meminfo(tmp_path: Path) -> None:
    for n in (0, 1):
        put(tmp_path, f"bus/node/devices/node{n}/meminfo", NODE_MEMINFO.format(n=n))
    got = numa_meminfo(HostRoots(sys=str(tmp_path)))
    assert sorted(got) == [0, 1]
    assert got[1]["MemTotal"] == 4155112 and got[1]["HugePages_Total"] == 7 and got[1]["Broken"] == 0
    assert numa_usage_bytes(got[0]) == (4155112 - (3806720 + 110540 + 92516 + 43244)) * 1024
    assert numa_usage_bytes({"MemTotal": 1, "MemFree": 2}) == 0


def test_numa_generic_initiator_and_gaps(tmp_path: Path) -> None:
    for n in (0, 1, 2):
        put(tmp_path, f"bus/node/devices/node{n}/meminfo", NODE_MEMINFO.format(n=n))
    put(tmp_path, "devices/system/node/has_generic_initiator", "1\n")
    assert sorted(numa_meminfo(HostRoots(sys=str(tmp_path)))) == [0, 2]
    put(tmp_path, "bus/node/devices/node4/meminfo", NODE_MEMINFO.format(n=4))
    with pytest.raises(ValueError, match="not contiguous"):
        numa_meminfo(HostRoots(sys=str(tmp_path)))
    assert numa_meminfo(HostRoots(sys=str(tmp_path / "none"))) == {}


def test_parse_numa_meminfo_ignores_other_lines() -> None:
    assert parse_numa_meminfo("MemTotal: 5 kB\nNode 0 MemFree: 3 kB\n\nNode 0\n") == {"MemFree": 3}


# -- the topology re-read every minute: in full only when it can have changed -------
@pytest.mark.parametrize("change", ["cpu/online", "node/node1/cpulist", "cpu/smt/active", "a NUMA node gone"])
def test_the_topology_is_read_in_full_again_only_when_its_signature_changes(tmp_path: Path, change: str) -> None:
    build(tmp_path)
    put(tmp_path, "devices/system/cpu/smt/active", "1\n")
    roots = HostRoots(sys=str(tmp_path), proc=str(tmp_path / "noproc"))
    reader = TopologyReader(roots, full_every=1000)
    first = reader.read()
    assert first == read_node_cpu_info(roots) and reader.full_reads == 1
    # a per-CPU file that changes while the signature holds is not read (a CPU online keeps its topology):
    # the proof that the second call read none of them
    put(tmp_path, "devices/system/cpu/cpu1/topology/core_id", "5\n")
    assert reader.read() is first and reader.full_reads == 1
    if change == "cpu/online":
        put(tmp_path, "devices/system/cpu/online", "0-3\n")
    elif change == "node/node1/cpulist":
        put(tmp_path, "devices/system/node/node1/cpulist", "2-3\n")
    elif change == "cpu/smt/active":
        put(tmp_path, "devices/system/cpu/smt/active", "0\n")
    else:
        (tmp_path / "devices/system/node/node1/cpulist").unlink()
        (tmp_path / "devices/system/node/node1").rmdir()
    again = reader.read()
    assert reader.full_reads == 2 and again == read_node_cpu_info(roots) and again != first


def test_the_topology_is_read_in_full_every_nth_time_whatever_its_signature(tmp_path: Path) -> None:
    build(tmp_path)
    roots = HostRoots(sys=str(tmp_path), proc=str(tmp_path / "noproc"))
    reader = TopologyReader(roots, full_every=3)
    for _ in range(7):
        reader.read()
    assert reader.full_reads == 3  # calls 1, 4 and 7
    put(tmp_path, "devices/system/cpu/cpu1/topology/core_id", "5\n")  # a CPU replaced, offline and back
    for _ in range(3):
        reader.read()
    assert reader.info == read_node_cpu_info(roots)


# -- the real machine --------------------------------------------------------------
def test_real_sys_smoke() -> None:
    roots = HostRoots()
    if not os.path.exists(roots.sys_path("devices/system/cpu/online")):
        pytest.skip("no sysfs CPU topology here")
    with open(roots.sys_path("devices/system/cpu/online")) as f:
        online = parse_cpu_list(f.read())
    procs = read_topology(roots)
    assert sorted(p.cpu for p in procs) == online
    assert procs == sorted(procs, key=lambda p: (p.node, p.socket, p.core, p.cpu))
    info = read_node_cpu_info(roots)
    assert info.number_cpus == len(online) and info.vendor
    nodes = numa_meminfo(roots)
    assert nodes and all(m["MemTotal"] > 0 for m in nodes.values())
