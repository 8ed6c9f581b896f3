"""The files the kernel makes with a cgroup, and their initial contents: v1 per hierarchy, v2 per
controller enabled for the cgroup.

A room of :class:`~qosmanager.sim.fakekernel.FakeKernel` (its mkdir and ``cgroup.subtree_control``
writes lay these out) and of :class:`~qosmanager.sim.fakehost.FakeHost` (its templates use the tables).

Map of the file: the kernel's tables (hierarchies, controllers in subsystem order, stat keys in kernel
order, the throttle files, empty memory events and pressure); :func:`v1_files`; :func:`v2_files`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from qosmanager.sim.kparse import PAGE_COUNTER_MAX, PAGE_SIZE, _kv, _read_or

V1_MEMORY_UNLIMITED = PAGE_COUNTER_MAX * PAGE_SIZE  # 9223372036854771712: what v1 prints for "no limit"
CFS_PERIOD_US = 100_000

V1_HIERARCHIES = ("cpu", "cpuacct", "cpuset", "memory", "blkio")
# v2 controllers in the kernel's subsystem order (how cgroup.controllers and subtree_control print)
V2_ORDER = ("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc")
V2_CONTROLLERS = "cpuset cpu io memory pids"

# memory.stat of a cgroup v1 memcg on a 6.x kernel, in kernel order.
V1_MEMORY_STAT_KEYS = (
    "cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback", "workingset_refault_anon",
    "workingset_refault_file", "swap", "swapcached", "pgpgin", "pgpgout", "pgfault", "pgmajfault",
    "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
    "hierarchical_memory_limit", "hierarchical_memsw_limit",
    "total_cache", "total_rss", "total_rss_huge", "total_shmem", "total_mapped_file", "total_dirty",
    "total_writeback", "total_workingset_refault_anon", "total_workingset_refault_file", "total_swap",
    "total_swapcached", "total_pgpgin", "total_pgpgout", "total_pgfault", "total_pgmajfault",
    "total_inactive_anon", "total_active_anon", "total_inactive_file", "total_active_file",
    "total_unevictable",
)
# memory.stat of a cgroup v2 memcg on a 6.x kernel, in kernel order.
V2_MEMORY_STAT_KEYS = (
    "anon", "file", "kernel", "kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc",
    "shmem", "zswap", "zswapped", "file_mapped", "file_dirty", "file_writeback", "swapcached", "anon_thp",
    "file_thp", "shmem_thp", "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
    "slab_reclaimable", "slab_unreclaimable", "slab", "workingset_refault_anon", "workingset_refault_file",
    "workingset_activate_anon", "workingset_activate_file", "workingset_restore_anon",
    "workingset_restore_file", "workingset_nodereclaim", "pgscan", "pgsteal", "pgscan_kswapd",
    "pgscan_direct", "pgscan_khugepaged", "pgsteal_kswapd", "pgsteal_direct", "pgsteal_khugepaged",
    "pgfault", "pgmajfault", "pgrefill", "pgactivate", "pgdeactivate", "pglazyfree", "pglazyfreed",
    "zswpin", "zswpout", "zswpwb", "thp_fault_alloc", "thp_collapse_alloc", "thp_swpout",
    "thp_swpout_fallback",
)
V1_CPU_STAT_KEYS = ("nr_periods", "nr_throttled", "throttled_time", "nr_bursts", "burst_time")
V2_CPU_STAT_KEYS = ("usage_usec", "user_usec", "system_usec", "nr_periods", "nr_throttled", "throttled_usec",
                    "nr_bursts", "burst_usec")
V2_ROOT_CPU_STAT_KEYS = ("usage_usec", "user_usec", "system_usec")
BLKIO_THROTTLE_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                        "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device")
MEMORY_EVENT_KEYS = ("low", "high", "max", "oom", "oom_kill", "oom_group_kill")
MEMORY_EVENTS_ZERO = "".join(f"{k} 0\n" for k in MEMORY_EVENT_KEYS)
PSI_ZERO = ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def v1_files(hierarchy: str) -> dict[str, str]:
    """The files mkdir makes in a v1 cgroup of ``hierarchy``, with their initial contents (a new cpuset
    starts empty, as without ``cgroup.clone_children``)."""
    files: dict[str, str] = {"tasks": "", "cgroup.procs": "", "notify_on_release": "0\n",
                             "cgroup.clone_children": "0\n"}
    if hierarchy == "cpu":
        files.update({"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": f"{CFS_PERIOD_US}\n",
                      "cpu.cfs_burst_us": "0\n", "cpu.shares": "1024\n", "cpu.idle": "0\n",
                      "cpu.stat": _kv(V1_CPU_STAT_KEYS)})
    elif hierarchy == "cpuacct":
        files.update({"cpuacct.usage": "0\n", "cpuacct.stat": "user 0\nsystem 0\n"})
    elif hierarchy == "cpuset":
        files.update({"cpuset.cpus": "\n", "cpuset.mems": "\n", "cpuset.cpu_exclusive": "0\n",
                      "cpuset.mem_exclusive": "0\n"})
    elif hierarchy == "memory":
        stat = {"hierarchical_memory_limit": V1_MEMORY_UNLIMITED,
                "hierarchical_memsw_limit": V1_MEMORY_UNLIMITED}
        files.update({"memory.limit_in_bytes": f"{V1_MEMORY_UNLIMITED}\n",
                      "memory.soft_limit_in_bytes": f"{V1_MEMORY_UNLIMITED}\n",
                      "memory.usage_in_bytes": "0\n", "memory.max_usage_in_bytes": "0\n",
                      "memory.stat": _kv(V1_MEMORY_STAT_KEYS, stat)})
    elif hierarchy == "blkio":
        files.update(dict.fromkeys(BLKIO_THROTTLE_FILES, ""))
    return files


def v2_files(controllers: Sequence[str], parent: str) -> dict[str, str]:
    """The files of a v2 cgroup below ``parent`` with ``controllers`` enabled for it, with their initial
    contents (the core files, then each controller's)."""
    files = {
        "cgroup.controllers": " ".join(controllers) + "\n" if controllers else "",
        "cgroup.subtree_control": "", "cgroup.procs": "", "cgroup.threads": "",
        "cgroup.type": "domain\n", "cgroup.events": "populated 0\nfrozen 0\n", "cgroup.freeze": "0\n",
        "cgroup.max.depth": "max\n", "cgroup.max.descendants": "max\n",
        "cgroup.stat": "nr_descendants 0\nnr_dying_descendants 0\n",
        "cpu.stat": _kv(V2_ROOT_CPU_STAT_KEYS),
        "cpu.pressure": PSI_ZERO, "memory.pressure": PSI_ZERO, "io.pressure": PSI_ZERO,
    }
    if "cpu" in controllers:
        files.update({"cpu.max": f"max {CFS_PERIOD_US}\n", "cpu.max.burst": "0\n", "cpu.weight": "100\n",
                      "cpu.weight.nice": "0\n", "cpu.idle": "0\n", "cpu.stat": _kv(V2_CPU_STAT_KEYS)})
    if "cpuset" in controllers:
        files.update({"cpuset.cpus": "\n", "cpuset.mems": "\n",
                      "cpuset.cpus.effective": _read_or(os.path.join(parent, "cpuset.cpus.effective"),
                                                        "\n"),
                      "cpuset.mems.effective": _read_or(os.path.join(parent, "cpuset.mems.effective"),
                                                        "\n"),
                      "cpuset.cpus.partition": "member\n"})
    if "memory" in controllers:
        files.update({"memory.current": "0\n", "memory.min": "0\n", "memory.low": "0\n",
                      "memory.high": "max\n", "memory.max": "max\n", "memory.peak": "0\n",
                      "memory.oom.group": "0\n", "memory.stat": _kv(V2_MEMORY_STAT_KEYS),
                      "memory.events": MEMORY_EVENTS_ZERO, "memory.events.local": MEMORY_EVENTS_ZERO,
                      "memory.reclaim": "",
                      "memory.swap.current": "0\n", "memory.swap.max": "max\n"})
    if "io" in controllers:
        files.update({"io.max": "", "io.weight": "default 100\n", "io.stat": ""})
    if "pids" in controllers:
        files.update({"pids.max": "max\n", "pids.current": "0\n", "pids.peak": "0\n"})
    return files
