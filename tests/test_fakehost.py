"""The fake host builder: files where the layout says, in formats our own parsers read."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from qosmanager._native import pure_reader
from qosmanager.host.cgroups import CgroupLayout, KubeQoS, detect_driver, detect_version
from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.host.procfs import ProcFS, memory_usage_bytes, memory_usage_with_cache_bytes, parse_proc_stat
from qosmanager.host.resctrl import parse_schemata, read_cbm_mask, schemata_path, supports_resctrl
from qosmanager.host.sysfs import Processor, numa_meminfo, read_node_cpu_info, read_topology
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod

# memory.stat keys as a 6.18 kernel prints them for a v1 memcg (copied from a real host).
KERNEL_V1_MEMORY_STAT = str.split("""
cache rss rss_huge shmem mapped_file dirty writeback workingset_refault_anon workingset_refault_file swap
swapcached pgpgin pgpgout pgfault pgmajfault inactive_anon active_anon inactive_file active_file unevictable
hierarchical_memory_limit hierarchical_memsw_limit total_cache total_rss total_rss_huge total_shmem
total_mapped_file total_dirty total_writeback total_workingset_refault_anon total_workingset_refault_file
total_swap total_swapcached total_pgpgin total_pgpgout total_pgfault total_pgmajfault total_inactive_anon
total_active_anon total_inactive_file total_active_file total_unevictable
""")
# the v2 keys the agent and the kernel docs rely on, in the kernel's relative order
KERNEL_V2_MEMORY_STAT_ORDER = ["anon", "file", "kernel", "kernel_stack", "pagetables", "shmem", "file_mapped",
                               "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
                               "slab_reclaimable", "slab_unreclaimable", "slab", "pgfault", "pgmajfault"]

UID = "0a5d2f34-6baa-4455-a3e7-0682c2094cac"
CID = "containerd://" + "ab" * 32


@pytest.fixture
def root() -> Iterator[str]:
    """A scratch dir, on tmpfs when there is one: the fake host writes many small files."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="qm-fakehost-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def kv(path: str) -> dict[str, int]:
    with open(path) as f:
        return {k: int(v) for k, v in (line.split() for line in f if line.strip())}


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def one_pod(qos: KubeQoS = KubeQoS.BESTEFFORT, **kw: object) -> FakePod:
    return FakePod(uid=UID, namespace="ns", name="p", qos=qos,
                   containers=[FakeContainer("main", CID, pids=[11, 12]),
                               FakeContainer("side", "containerd://" + "cd" * 32)], **kw)  # type: ignore[arg-type]


# -- the tree ------------------------------------------------------------------------
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kubelet_root", ["/", "/kube.slice"])
def test_tree_matches_layout(root: str, version: int, driver: str, kubelet_root: str) -> None:
    # vanilla: this test checks the kernel's first values of a new cgroup and the kubelet's template
    # (test_koordinator_fakehost.py checks what a koordinator node writes over them)
    host = FakeHost(root, version=version, driver=driver, kubelet_cgroup_root=kubelet_root, n_cpus=4,
                    koordinator=False)  # a new cgroup's first values (see above)
    pods = FakeHost.make_pods(6, containers_per_pod=2, seed=3, be_fraction=0.34)
    host.add_pods(pods)
    # A fresh layout, built only from what detection finds, must name the same dirs.
    version_found = detect_version(host.roots.cgroup)
    assert version_found == version
    assert detect_driver(host.roots, version_found) == driver
    lay = CgroupLayout(host.roots, version_found, driver)
    subsystems = ["cpu", "cpuacct", "cpuset", "memory", "blkio"] if version == 1 else [""]
    for pod in pods:
        pod_rel = lay.pod_dir(pod.qos, pod.uid)
        for c in pod.containers:
            rel = lay.container_dir(pod_rel, c.container_id)
            for sub in subsystems:
                assert os.path.isdir(lay.abs_dir(sub, rel)), (sub, rel)
            if version == 1:
                assert read(lay.file("cpu", rel, "cpu.cfs_quota_us")) == "-1\n"
                assert read(lay.file("cpu", rel, "cpu.cfs_period_us")) == "100000\n"
                assert read(lay.file("memory", rel, "memory.limit_in_bytes")) == "9223372036854771712\n"
                assert parse_cpu_list(read(lay.file("cpuset", rel, "cpuset.cpus"))) == [0, 1, 2, 3]
                assert list(kv(lay.file("memory", rel, "memory.stat"))) == KERNEL_V1_MEMORY_STAT
                assert kv(lay.file("cpu", rel, "cpu.stat")) == dict.fromkeys(
                    ["nr_periods", "nr_throttled", "throttled_time", "nr_bursts", "burst_time"], 0)
                for f in ("blkio.throttle.read_bps_device", "blkio.throttle.write_iops_device"):
                    assert read(lay.file("blkio", rel, f)) == ""
            else:
                assert read(lay.file("", rel, "cpu.max")) == "max 100000\n"
                assert read(lay.file("", rel, "memory.max")) == "max\n"
                assert read(lay.file("", rel, "memory.high")) == "max\n"
                assert read(lay.file("", rel, "io.weight")) == "default 100\n"
                assert read(lay.file("", rel, "cpuset.cpus")).strip() == ""
                assert parse_cpu_list(read(lay.file("", rel, "cpuset.cpus.effective"))) == [0, 1, 2, 3]
                keys = list(kv(lay.file("", rel, "memory.stat")))
                assert [k for k in keys if k in KERNEL_V2_MEMORY_STAT_ORDER] == KERNEL_V2_MEMORY_STAT_ORDER
                assert len(keys) > 40
                cpu_keys = set(kv(lay.file("", rel, "cpu.stat")))
                assert cpu_keys >= {"usage_usec", "nr_periods", "throttled_usec"}
        # the kubelet's shares: BestEffort pods get the minimum, 2 (weight 1 on v2)
        if version == 1:
            expected = "2\n" if pod.qos is KubeQoS.BESTEFFORT else "1024\n"
            assert read(lay.file("cpu", pod_rel, "cpu.shares")) == expected
        elif pod.qos is KubeQoS.BESTEFFORT:
            assert read(lay.file("", pod_rel, "cpu.weight")) == "1\n"
    # walking the tree finds exactly the pods that were added, in their QoS dirs
    found = set()
    for qos in KubeQoS:
        parent = lay.qos_dir(qos)
        for d in lay.dirs_at_depth(subsystems[0] or "cpu", parent, 1):
            parsed = lay.parse_pod_dir(d)
            if parsed is not None:
                found.add(parsed)
    assert found == {(p.qos, p.uid) for p in pods}


def test_v2_root_and_v1_hierarchy_roots(root: str) -> None:
    v2 = FakeHost(root + "/a", version=2)
    assert read(v2.roots.cgroup + "/cgroup.controllers") == "cpuset cpu io memory pids\n"
    assert not os.path.exists(v2.roots.cgroup + "/cpu.max")  # the root cgroup has no limits
    v1 = FakeHost(root + "/b", version=1)
    assert sorted(os.listdir(v1.roots.cgroup)) == ["blkio", "cpu", "cpuacct", "cpuset", "memory"]
    assert read(v1.roots.cgroup + "/cpu/kubepods/cpu.shares") == f"{8 * 1024}\n"
    assert read(v1.roots.cgroup + "/cpu/kubepods/besteffort/cpu.shares") == "2\n"


# -- stat setters, read back by the collector's reference reader -----------------------
@pytest.mark.parametrize("version", [1, 2])
def test_setters_through_the_stat_reader(root: str, version: int) -> None:
    host = FakeHost(root, version=version)
    host.add_pod(one_pod())
    rel = host.container_dir(UID, "main")
    lay = host.layout
    reader = pure_reader.StatReader(4, version)
    paths = {
        "cpu_stat": lay.file("cpu", rel, "cpu.stat"),
        "memory_stat": lay.file("memory", rel, "memory.stat"),
        "cpuset": lay.file("cpuset", rel, "cpuset.cpus" if version == 1 else "cpuset.cpus.effective"),
    }
    if version == 1:
        paths["usage"] = lay.file("cpuacct", rel, "cpuacct.usage")
    assert reader.open(0, **paths) == 0

    host.set_cpu_usage(rel, 5_000_000_000)
    host.set_throttle(rel, nr_periods=100, nr_throttled=10, throttled_ns=7_000_000)
    host.set_memory(rel, inactive_anon=1 << 20, active_anon=2 << 20, unevictable=4 << 20,
                    inactive_file=8 << 20, active_file=16 << 20)
    assert reader.read(now_ns=1_000_000_000) == 1
    host.set_cpu_usage(rel, 6_500_000_000)  # +1.5 s of CPU over 1 s
    host.set_throttle(rel, nr_periods=200, nr_throttled=60, throttled_ns=9_000_000)
    assert reader.read(now_ns=2_000_000_000) == 1
    assert reader.errors[0] == 0
    assert reader.cpu_cores[0] == pytest.approx(1.5)
    assert reader.throttled_ratio[0] == pytest.approx(50 / 100)
    assert reader.memory_usage[0] == (1 + 2 + 4) << 20
    assert reader.memory_usage_with_cache[0] == (1 + 2 + 4 + 8 + 16) << 20
    assert reader.cpuset_count[0] == 8

    if version == 1:
        assert read(lay.file("cpuacct", rel, "cpuacct.usage")) == "6500000000\n"
        # 70 % user; USER_HZ ticks: 6.5 s * 0.7 = 4.55 s -> 455, 1.95 s -> 195
        assert kv(lay.file("cpuacct", rel, "cpuacct.stat")) == {"user": 455, "system": 195}
        stat = kv(lay.file("memory", rel, "memory.stat"))
        assert stat["total_inactive_file"] == stat["inactive_file"] == 8 << 20
        assert stat["total_rss"] == stat["rss"] == 3 << 20
        assert stat["total_cache"] == 24 << 20
        assert read(lay.file("memory", rel, "memory.usage_in_bytes")) == f"{31 << 20}\n"
        assert kv(lay.file("cpu", rel, "cpu.stat"))["throttled_time"] == 9_000_000
    else:
        stat = kv(lay.file("", rel, "cpu.stat"))
        assert (stat["usage_usec"], stat["user_usec"]) == (6_500_000, 4_550_000)
        assert stat["system_usec"] == 1_950_000
        assert stat["throttled_usec"] == 9_000
        assert list(stat) == ["usage_usec", "user_usec", "system_usec", "nr_periods", "nr_throttled",
                              "throttled_usec", "nr_bursts", "burst_usec"]
        mem = kv(lay.file("", rel, "memory.stat"))
        assert (mem["anon"], mem["file"]) == (3 << 20, 24 << 20)
        assert read(lay.file("", rel, "memory.current")) == f"{31 << 20}\n"


def test_setters_refuse_bad_input(root: str) -> None:
    host = FakeHost(root)
    with pytest.raises(FileNotFoundError, match="no cgroup dir"):
        host.set_cpu_usage("kubepods/podnope", 1)
    with pytest.raises(ValueError):
        host.set_throttle("kubepods", nr_periods=1, nr_throttled=2, throttled_ns=0)
    with pytest.raises(ValueError):
        host.set_memory("kubepods", -1, 0, 0, 0, 0)
    with pytest.raises(ValueError):
        host.set_proc_stat([1, 2], [1])
    with pytest.raises(ValueError):
        host.set_meminfo(10, 20, 5)
    with pytest.raises(ValueError, match="under the fake host root"):
        host.write("../escape", "x")


def test_tasks(root: str) -> None:
    host = FakeHost(root, version=1)
    host.add_pod(one_pod())
    rel = host.container_dir(UID, "main")
    for sub in ("cpu", "cpuacct", "memory"):
        assert read(host.layout.file(sub, rel, "tasks")) == "11\n12\n"
    host.set_tasks(rel, [5])
    assert read(host.layout.file("cpuset", rel, "cgroup.procs")) == "5\n"
    v2 = FakeHost(root + "/v2", version=2)
    v2.add_pod(one_pod())
    rel2 = v2.container_dir(UID, "main")
    assert read(v2.layout.file("", rel2, "cgroup.threads")) == "11\n12\n"


# -- pods come and go --------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2])
def test_remove(root: str, version: int) -> None:
    host = FakeHost(root, version=version, driver="systemd")
    host.add_pod(one_pod(KubeQoS.BURSTABLE, sandbox_id="containerd://" + "ef" * 32))
    pod_rel = host.pod_dir(UID)
    assert pod_rel == ("kubepods.slice/kubepods-burstable.slice/"
                       "kubepods-burstable-pod0a5d2f34_6baa_4455_a3e7_0682c2094cac.slice")
    sub = "memory" if version == 1 else ""
    names = sorted(n for n in os.listdir(host.layout.abs_dir(sub, pod_rel)) if n.endswith(".scope"))
    assert names == sorted(f"cri-containerd-{h * 32}.scope" for h in ("ab", "cd", "ef"))
    side = host.container_dir(UID, "side")
    host.remove_container(UID, "side")
    assert not os.path.exists(host.layout.abs_dir(sub, side))
    assert os.path.isdir(host.layout.abs_dir(sub, host.container_dir(UID, "main")))
    with pytest.raises(KeyError):
        host.container_dir(UID, "side")
    host.remove_pod(UID)
    assert not os.path.exists(host.layout.abs_dir(sub, pod_rel))
    assert os.path.isdir(host.layout.abs_dir(sub, host.layout.qos_dir(KubeQoS.BURSTABLE)))
    with pytest.raises(KeyError, match="no pod"):
        host.remove_pod(UID)


def test_bad_pod_leaves_nothing(root: str) -> None:
    host = FakeHost(root)
    bad = FakePod(uid=UID, namespace="ns", name="p", qos=KubeQoS.GUARANTEED,
                  containers=[FakeContainer("a", CID), FakeContainer("b", "rkt://abc")])
    with pytest.raises(ValueError, match="unknown container protocol"):
        host.add_pod(bad)
    assert not os.path.exists(host.layout.abs_dir("cpu", f"kubepods/pod{UID}"))
    assert host.pods == {}
    dup = FakePod(uid=UID, namespace="ns", name="p", qos=KubeQoS.GUARANTEED,
                  containers=[FakeContainer("a", CID), FakeContainer("a", CID)])
    with pytest.raises(ValueError, match="duplicate"):
        host.add_pod(dup)
    host.add_pod(one_pod())
    with pytest.raises(ValueError, match="already"):
        host.add_pod(one_pod())


def test_make_pods() -> None:
    pods = FakeHost.make_pods(7, containers_per_pod=2, seed=5, be_fraction=0.5)
    assert [len(p.containers) for p in pods] == [2, 2, 2, 1]
    assert sum(p.qos is KubeQoS.BESTEFFORT for p in pods) == 2
    assert all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", p.uid)
               for p in pods)
    ids = [c.container_id for p in pods for c in p.containers]
    assert all(re.fullmatch(r"containerd://[0-9a-f]{64}", i) for i in ids)
    assert len(set(ids)) == 7 and len({p.uid for p in pods}) == 4
    assert FakeHost.make_pods(7, 2, seed=5, be_fraction=0.5) == pods  # deterministic
    assert FakeHost.make_pods(7, 2, seed=6, be_fraction=0.5) != pods
    assert FakeHost.make_pods(0) == []
    assert all(p.qos is KubeQoS.BESTEFFORT for p in FakeHost.make_pods(10, 1, be_fraction=1.0))
    assert not any(p.qos is KubeQoS.BESTEFFORT for p in FakeHost.make_pods(10, 1, be_fraction=0.0))
    with pytest.raises(ValueError):
        FakeHost.make_pods(3, be_fraction=1.5)


# -- proc and sys --------------------------------------------------------------------------
def test_proc(root: str) -> None:
    host = FakeHost(root, n_cpus=4, memory_bytes=64 << 30, vendor="AuthenticAMD", resctrl=True)
    proc = ProcFS(host.roots)
    host.set_proc_stat([100, 250, 0, 40], [900, 750, 1000, 960])
    total, per_cpu = proc.stat()
    assert per_cpu == {0: 100, 1: 250, 2: 0, 3: 40}
    assert total == 390
    host.set_meminfo(total_kb=1000, free_kb=200, available_kb=600)
    m = proc.meminfo()
    assert memory_usage_bytes(m) == 400 * 1024
    assert memory_usage_with_cache_bytes(m) == 800 * 1024
    assert {"Active(file)", "Inactive(file)", "SReclaimable", "HugePages_Total", "DirectMap1G"} <= set(m)
    info = proc.cpuinfo()
    assert info.vendor_id == "AuthenticAMD" and info.processors == 4
    assert supports_resctrl(info)
    for res in ("cpu", "memory", "io"):
        psi = proc.pressure(res)
        assert psi is not None and psi.full_supported
    # int_sqrt(64 GiB in KiB * 16) = sqrt(2^26 * 2^4) = 2^15
    assert proc.read_int("sys/vm/min_free_kbytes") == 32768
    assert proc.read_int("sys/vm/watermark_scale_factor") == 10
    # the initial /proc/stat is valid too
    assert FakeHost(root + "/x", n_cpus=2).n_cpus == 2
    t, p = parse_proc_stat(read(root + "/x/proc/stat"))
    assert t == sum(p.values()) and sorted(p) == [0, 1]


def test_sys_topology(root: str) -> None:
    host = FakeHost(root, n_cpus=8, sockets=2, numa_nodes=2, resctrl=True)
    # 4 cores of 2 threads; cpu i and i+4 are siblings; sockets and nodes take 2 cores each
    assert read_topology(host.roots) == [
        Processor(cpu=0, core=0, socket=0, node=0, l3=0), Processor(cpu=4, core=0, socket=0, node=0, l3=0),
        Processor(cpu=1, core=1, socket=0, node=0, l3=0), Processor(cpu=5, core=1, socket=0, node=0, l3=0),
        Processor(cpu=2, core=2, socket=1, node=1, l3=1), Processor(cpu=6, core=2, socket=1, node=1, l3=1),
        Processor(cpu=3, core=3, socket=1, node=1, l3=1), Processor(cpu=7, core=3, socket=1, node=1, l3=1),
    ]
    assert set(host.processors) == set(read_topology(host.roots))
    # sysfs core_id restarts per socket, as on real hardware
    assert read(host.roots.sys_path("devices/system/cpu/cpu2/topology/core_id")) == "0\n"
    info = read_node_cpu_info(host.roots)
    assert info.ht and info.cbm_mask == "7ff" and info.cpus_by_l3 == {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}
    nodes = numa_meminfo(host.roots)
    assert sorted(nodes) == [0, 1] and nodes[1]["MemTotal"] == (64 << 30) // 1024 // 2
    assert os.path.islink(host.roots.sys_path("bus/node/devices/node0"))
    schemata = parse_schemata(read(schemata_path(host.roots)))
    assert schemata == {"L3": {0: 0x7FF, 1: 0x7FF}, "MB": {0: 100, 1: 100}}
    assert read_cbm_mask(host.roots) == 0x7FF


def test_sys_without_smt(root: str) -> None:
    host = FakeHost(root, n_cpus=3, threads_per_core=1)
    info = read_node_cpu_info(host.roots)
    assert not info.ht
    assert [(p.cpu, p.core) for p in info.processors] == [(0, 0), (1, 1), (2, 2)]
    with pytest.raises(ValueError, match="threads"):
        FakeHost(root + "/odd", n_cpus=3)
    with pytest.raises(ValueError, match="evenly"):
        FakeHost(root + "/uneven", n_cpus=6, sockets=2, numa_nodes=3)


def test_write_and_read(root: str) -> None:
    host = FakeHost(root)
    host.write("cgroup/cpu/kubepods/besteffort/cpu.cfs_quota_us", "1500000")
    assert host.read("cgroup/cpu/kubepods/besteffort/cpu.cfs_quota_us") == "1500000"
    host.write("sys/fs/resctrl/info/L3/cbm_mask", "fff\n")
    assert read_cbm_mask(host.roots) == 0xFFF
    assert Path(host.path("proc/stat")).is_file()
