"""The fake host's CPUs and memory as the kernel shows them: sysfs and ``/proc/cpuinfo``.

:class:`~qosmanager.sim.fakehost.FakeHost` lays these out when it is built; nothing here changes
afterwards (the CPU topology of a fake host is fixed).

Map of the file:

* :func:`topology`: the processors, numbered as Linux numbers them on x86 (the first threads of
  all cores socket by socket, then the second threads); cores split evenly over sockets and NUMA
  nodes; the L3 id is the socket;
* :func:`cpuinfo`: ``/proc/cpuinfo``, one block per CPU (the RDT flags with resctrl);
* :func:`build_sys`: ``devices/system/cpu`` (online CPUs, SMT, per CPU topology and caches),
  ``devices/system/node`` with each node's ``meminfo`` (:func:`node_meminfo`), ``bus/node``
  symlinks, and with resctrl ``fs/resctrl`` (schemata, tasks, info).
"""

from __future__ import annotations

import os

from qosmanager.host.cpuset import format_cpu_list
from qosmanager.host.roots import HostRoots
from qosmanager.host.sysfs import Processor

_CPU_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
              "sse2 ht syscall nx lm constant_tsc rep_good nopl xtopology cpuid pni ssse3 fma cx16 sse4_1 "
              "sse4_2 x2apic popcnt aes xsave avx rdrand hypervisor avx2 bmi1 bmi2")
_RDT_FLAGS = " cat_l3 cdp_l3 mba cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local"


def topology(n_cpus: int, threads_per_core: int, sockets: int, numa_nodes: int) -> list[Processor]:
    """The processors of a host of this shape (see the module docstring for the numbering)."""
    n_cores = n_cpus // threads_per_core
    cores_per_socket = n_cores // sockets
    cores_per_node = n_cores // numa_nodes
    out = []
    for cpu in range(n_cpus):
        core = cpu % n_cores
        socket = core // cores_per_socket
        out.append(Processor(cpu=cpu, core=core, socket=socket, node=core // cores_per_node, l3=socket))
    return out


def cpuinfo(processors: list[Processor], vendor: str, resctrl: bool, threads_per_core: int,
            sockets: int) -> str:
    """``/proc/cpuinfo`` of these processors."""
    flags = _CPU_FLAGS + (_RDT_FLAGS if resctrl else "")
    amd = vendor == "AuthenticAMD"
    model = "AMD EPYC 7K62 48-Core Processor" if amd else "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"
    cores_per_socket = len(processors) // threads_per_core // sockets
    blocks = []
    for p in sorted(processors, key=lambda p: p.cpu):
        blocks.append(
            f"processor\t: {p.cpu}\nvendor_id\t: {vendor}\ncpu family\t: {25 if amd else 6}\n"
            f"model\t\t: {49 if amd else 85}\nmodel name\t: {model}\nstepping\t: 7\n"
            f"cpu MHz\t\t: 2500.000\ncache size\t: 36608 KB\nphysical id\t: {p.socket}\n"
            f"siblings\t: {cores_per_socket * threads_per_core}\n"
            f"core id\t\t: {p.core - p.socket * cores_per_socket}\ncpu cores\t: {cores_per_socket}\n"
            f"apicid\t\t: {p.cpu}\nfpu\t\t: yes\nflags\t\t: {flags}\n"
            f"bogomips\t: 5000.00\nclflush size\t: 64\n"
            f"address sizes\t: 46 bits physical, 48 bits virtual\n"
        )
    return "\n".join(blocks) + "\n"


def build_sys(roots: HostRoots, processors: list[Processor], *, threads_per_core: int, sockets: int,
              numa_nodes: int, memory_bytes: int, mb_max: int | None) -> None:
    """``mb_max``: resctrl's unlimited MB value (None: no resctrl)."""
    cpu_base = roots.sys_path("devices/system/cpu")
    node_base = roots.sys_path("devices/system/node")
    all_cpus = format_cpu_list(range(len(processors))) + "\n"
    for name in ("online", "possible", "present"):
        write_tree(cpu_base, {name: all_cpus})
    write_tree(cpu_base, {"smt/active": "1\n" if threads_per_core > 1 else "0\n", "smt/control": "on\n"})
    n_cores = len(processors) // threads_per_core
    cores_per_socket = n_cores // sockets
    by_core: dict[int, list[int]] = {}
    by_socket: dict[int, list[int]] = {}
    by_node: dict[int, list[int]] = {}
    for p in processors:
        by_core.setdefault(p.core, []).append(p.cpu)
        by_socket.setdefault(p.socket, []).append(p.cpu)
        by_node.setdefault(p.node, []).append(p.cpu)
    for p in processors:
        siblings = format_cpu_list(by_core[p.core]) + "\n"
        package = format_cpu_list(by_socket[p.socket]) + "\n"
        files = {
            "topology/core_id": f"{p.core - p.socket * cores_per_socket}\n",
            "topology/physical_package_id": f"{p.socket}\n",
            "topology/die_id": "0\n",
            "topology/thread_siblings_list": siblings,
            "topology/core_cpus_list": siblings,
            "topology/core_siblings_list": package,
            "topology/package_cpus_list": package,
        }
        caches = (("Data", 1, p.core, siblings), ("Instruction", 1, p.core, siblings),
                  ("Unified", 2, p.core, siblings), ("Unified", 3, p.l3, package))
        for i, (ctype, level, cid, shared) in enumerate(caches):
            files[f"cache/index{i}/type"] = ctype + "\n"
            files[f"cache/index{i}/level"] = f"{level}\n"
            files[f"cache/index{i}/id"] = f"{cid}\n"
            files[f"cache/index{i}/shared_cpu_list"] = shared
        write_tree(f"{cpu_base}/cpu{p.cpu}", files)
    nodes = format_cpu_list(range(numa_nodes)) + "\n"
    write_tree(node_base, {name: nodes for name in ("online", "possible", "has_cpu", "has_memory",
                                                          "has_normal_memory")})
    bus = roots.sys_path("bus/node/devices")
    os.makedirs(bus, exist_ok=True)
    per_node_kb = memory_bytes // 1024 // numa_nodes
    for node in range(numa_nodes):
        write_tree(f"{node_base}/node{node}", {
            "cpulist": format_cpu_list(by_node.get(node, [])) + "\n",
            "meminfo": node_meminfo(node, per_node_kb),
        })
        link = f"{bus}/node{node}"
        if not os.path.lexists(link):
            os.symlink(os.path.relpath(f"{node_base}/node{node}", bus), link)
    if mb_max is not None:
        l3_ids = sorted({p.l3 for p in processors})
        write_tree(roots.sys_path("fs/resctrl"), {
            "info/L3/cbm_mask": "7ff\n",
            "info/L3/min_cbm_bits": "1\n",
            "info/L3/num_closids": "16\n",
            "info/MB/min_bandwidth": "10\n" if mb_max == 100 else "0\n",
            "info/MB/bandwidth_gran": "10\n" if mb_max == 100 else "1\n",
            "schemata": ("L3:" + ";".join(f"{i}=7ff" for i in l3_ids) + "\n"
                         "MB:" + ";".join(f"{i}={mb_max}" for i in l3_ids) + "\n"),
            "tasks": "",
        })


def node_meminfo(node: int, total_kb: int) -> str:
    free = total_kb * 9 // 10
    active_file = inactive_file = total_kb // 100
    entries = [("MemTotal", total_kb), ("MemFree", free), ("MemUsed", total_kb - free),
               ("Active", active_file), ("Inactive", inactive_file), ("Active(anon)", 0),
               ("Inactive(anon)", 0), ("Active(file)", active_file), ("Inactive(file)", inactive_file),
               ("Unevictable", 0), ("Mlocked", 0), ("Dirty", 0), ("Writeback", 0),
               ("FilePages", active_file + inactive_file), ("Mapped", 0), ("AnonPages", 0), ("Shmem", 0),
               ("KernelStack", 0), ("PageTables", 0), ("KReclaimable", total_kb // 200),
               ("Slab", total_kb // 100), ("SReclaimable", total_kb // 200),
               ("SUnreclaim", total_kb // 100 - total_kb // 200)]
    lines = [f"Node {node} {k + ':':<15} {v:>8} kB" for k, v in entries]
    lines += [f"Node {node} {k + ':':<15} {0:>5}" for k in ("HugePages_Total", "HugePages_Free",
                                                           "HugePages_Surp")]
    return "\n".join(lines) + "\n"


def write_tree(base: str, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = f"{base}/{rel}"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(body)
