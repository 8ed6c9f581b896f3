"""The collector end to end on fake hosts (v1 and v2) and on real kernel cgroups."""

from __future__ import annotations

import gc
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

import kernelcg
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.roots import HostRoots
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import (
    COND_PROC_MEMINFO,
    COND_PROC_STAT,
    COND_PROC_STAT_BACKWARDS,
    COND_PROC_STAT_FROZEN,
    COND_QOS,
    PROC_STAT_BACKWARDS_RESET,
    QOS_GRACE_PASSES,
    Collector,
)
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import pod_object
from qosmanager.states.store import StateStore

S = 1_000_000_000  # ns per second


class Clocks:
    """Wall (seconds) and monotonic (ns) clocks the test advances together."""

    def __init__(self) -> None:
        self.wall = 1000.0
        self.mono = 50 * S

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += int(seconds * S)


def setup(tmp_path, version: int, n_containers: int = 8, driver: str = "cgroupfs", **kw):
    host = FakeHost(str(tmp_path / "host"), version=version, driver=driver, n_cpus=4)
    pods = FakeHost.make_pods(n_containers, containers_per_pod=2, seed=1)
    host.add_pods(pods)
    store = StateStore()
    store.set_pods([pod_object(p) for p in pods])
    cache = MetricCache()
    clk = Clocks()
    col = Collector(host.layout, cache, store, clock=lambda: clk.wall, mono=lambda: clk.mono, **kw)
    return host, pods, store, cache, clk, col


def window(clk: Clocks) -> tuple[float, float]:
    return clk.wall - 2.0, clk.wall


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_pod_and_container_usage(tmp_path, version: int, driver: str) -> None:
    host, pods, _, cache, clk, col = setup(tmp_path, version, driver=driver)
    col.collect(clk.wall)
    assert col.stats.pods == 4 and col.stats.containers == 8 and col.stats.pending == 0
    # second tick: pod 0 used 1.5 s of CPU in 1 s, its first container 0.5 s; memory as set
    p0, c0 = pods[0], pods[0].containers[0]
    pod_dir, ctr_dir = host.pod_dir(p0.uid), host.container_dir(p0.uid, c0.name)
    host.set_cpu_usage(pod_dir, 3 * S // 2)
    host.set_cpu_usage(ctr_dir, S // 2)
    host.set_throttle(ctr_dir, 100, 25, 5_000_000)
    host.set_memory(ctr_dir, 100, 200, 3, 40, 50)
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = window(clk)
    assert cache.query("pod_cpu_usage", lo, hi, "last", pod=p0.uid) == pytest.approx(1.5)
    assert cache.query("container_cpu_usage", lo, hi, "last", container=c0.container_id) == pytest.approx(0.5)
    assert cache.query("container_memory_usage", lo, hi, "last", container=c0.container_id) == 303
    assert cache.query("container_memory_usage_with_page_cache", lo, hi, "last",
                       container=c0.container_id) == 393
    assert cache.query("pod_cpu_usage", lo, hi, "last", pod=pods[1].uid) == 0.0
    # throttling: first sample skipped, then delta ratio
    host.set_throttle(ctr_dir, 200, 75, 9_000_000)
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = window(clk)
    assert cache.query("container_throttled_ratio", lo, hi, "last", container=c0.container_id) == 0.5


def test_node_metrics(tmp_path) -> None:
    host, pods, _store, cache, clk, col = setup(tmp_path, 1)
    host.set_proc_stat([100, 100, 100, 100], [1000] * 4)
    host.set_meminfo(total_kb=64 << 20, free_kb=10 << 20, available_kb=40 << 20)
    col.collect(clk.wall)
    be = [p for p in pods if p.qos is KubeQoS.BESTEFFORT]
    # node: 4 CPUs at 100 ticks/s each during 2 s = 4 cores x (2 s x 100 ticks/s)/(2 s x 100) = ...
    host.set_proc_stat([300, 300, 100, 100], [1000] * 4)  # +400 busy ticks
    for p in pods:
        host.set_cpu_usage(host.pod_dir(p.uid), S // 4)  # 0.25 cores each over 1 s
    be_qos = host.layout.qos_dir(KubeQoS.BESTEFFORT)
    host.set_cpu_usage(be_qos, S // 2)
    clk.advance(2.0)
    col.collect(clk.wall)
    lo, hi = window(clk)
    tck = os.sysconf("SC_CLK_TCK")
    node_cpu = 400 / (2.0 * tck)
    assert cache.query("node_cpu_usage", lo, hi, "last") == pytest.approx(node_cpu)
    assert cache.query("node_memory_usage", lo, hi, "last") == (64 << 20) * 1024 - (40 << 20) * 1024
    assert cache.query("node_memory_usage_with_page_cache", lo, hi, "last") == (54 << 20) * 1024
    pods_cpu = len(pods) * 0.25 / 2.0
    assert cache.query("sys_cpu_usage", lo, hi, "last") == pytest.approx(max(node_cpu - pods_cpu, 0.0))
    assert cache.query("be_cpu_usage", lo, hi, "last") == 250.0  # 0.5 s in 2 s = 250 milli-cores
    assert cache.query("be_cpu_request", lo, hi, "last") == 1000.0 * sum(len(p.containers) for p in be)
    assert cache.query("be_cpu_real_limit", lo, hi, "last") == 4000.0  # all 4 CPUs, no quota
    # BE limit: a container's smaller cpuset and a BE quota both bound it
    c = be[0].containers[0]
    host.write(os.path.relpath(host.layout.file("cpuset", host.container_dir(be[0].uid, c.name), "cpuset.cpus"),
                               host.root), "2-3\n")
    host.write(os.path.relpath(host.layout.file("cpu", be_qos, "cpu.cfs_quota_us"), host.root), "150000\n")
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = window(clk)
    assert cache.query("be_cpu_real_limit", lo, hi, "last") == 1500.0  # min(2 CPUs, 1.5 cores of quota)


def test_incremental_discovery(tmp_path) -> None:
    host, pods, store, cache, clk, col = setup(tmp_path, 2, n_containers=40)
    col.collect(clk.wall)
    opened = col.stats.opened
    assert opened == 20 + 40
    for _ in range(3):  # nothing changed: no opens, no closes
        clk.advance(1.0)
        col.collect(clk.wall)
    assert col.stats.opened == opened and col.stats.closed == 0
    # replace 2 of 40 containers (5 %): a container restarts with a new ID, a pod goes, a pod comes
    p0 = pods[0]
    old_id = p0.containers[0].container_id
    host.remove_pod(p0.uid)
    p0.containers[0] = FakeContainer(p0.containers[0].name, "containerd://" + "ab" * 32)
    host.add_pod(p0)
    gone = pods.pop(5)
    host.remove_pod(gone.uid)
    new = FakePod("0000aaaa-0000-4000-8000-000000000001", "default", "new", KubeQoS.BURSTABLE,
                  [FakeContainer("c0", "containerd://" + "cd" * 32)])
    host.add_pod(new)
    pods.append(new)
    store.set_pods([pod_object(p) for p in pods])
    clk.advance(1.0)
    col.collect(clk.wall)
    # closed: the old container, the gone pod and its 2 containers; opened: the new container, new pod + 1
    assert col.stats.closed == 1 + 1 + 2
    assert col.stats.opened - opened == 1 + 2
    assert cache.containers.lookup(old_id) is None and cache.pods.lookup(gone.uid) is None
    assert cache.containers.lookup("containerd://" + "ab" * 32) is not None


@pytest.mark.parametrize("version", [1, 2])
def test_tracked_cgroups_keep_their_dir_not_their_file_paths(tmp_path, version: int) -> None:
    """A tracked cgroup holds its relative dir; its files' absolute paths are made when they are
    opened (three or four ~190-byte strings per cgroup were 12 MiB at 10,000 pods).  What
    :meth:`Collector.files` makes is what the readers opened: the stat files of that dir, the
    cpuset file for BE containers only."""
    host, _pods, _store, _cache, clk, col = setup(tmp_path, version, n_containers=8)
    col.collect(clk.wall)
    root = host.roots.cgroup
    tracked = [(tp.cg, False) for tp in col.tracked_pods().values()]
    for tp in col.tracked_pods().values():
        be = tp.meta.kube_qos == KubeQoS.BESTEFFORT.value
        tracked.extend((tr, be) for tr in tp.containers.values())
    assert len(tracked) == 4 + 8 and any(be for _, be in tracked)
    for tr, be in tracked:
        held = [x for x in gc.get_referents(tr) if isinstance(x, (str, dict))]
        assert not any(isinstance(x, dict) or x.startswith(root) for x in held), held
        files = col.files(tr)
        names = {k: os.path.basename(p) for k, p in files.items() if p is not None}
        want = ({"usage": "cpuacct.usage", "cpu_stat": "cpu.stat", "memory_stat": "memory.stat"}
                if version == 1 else {"cpu_stat": "cpu.stat", "memory_stat": "memory.stat"})
        if be:
            want["cpuset"] = "cpuset.cpus" if version == 1 else "cpuset.cpus.effective"
        assert names == want
        for p in files.values():
            if p is not None:
                assert os.path.exists(p) and tr.rel in p


def test_cgroup_created_later_is_picked_up(tmp_path) -> None:
    host, pods, store, _cache, clk, col = setup(tmp_path, 1, n_containers=2)
    late = FakePod("0000bbbb-0000-4000-8000-000000000002", "default", "late", KubeQoS.BESTEFFORT,
                   [FakeContainer("c0", "containerd://" + "ef" * 32)])
    store.set_pods([pod_object(p) for p in [*pods, late]])
    col.collect(clk.wall)
    assert col.stats.pending == 2  # the pod and its container have no cgroup yet
    host.add_pod(late)
    clk.advance(0.5)
    col.collect(clk.wall)
    assert col.stats.pending == 2  # backoff: not retried before 1 s
    clk.advance(1.0)
    col.collect(clk.wall)
    assert col.stats.pending == 0 and col.stats.containers == 3


def test_garbled_file_affects_only_its_container(tmp_path) -> None:
    host, pods, _store, cache, clk, col = setup(tmp_path, 1, n_containers=4)
    col.collect(clk.wall)
    bad, good = pods[0].containers[0], pods[0].containers[1]
    for c in (bad, good):
        host.set_cpu_usage(host.container_dir(pods[0].uid, c.name), S)
    host.write(os.path.relpath(host.layout.file("memory", host.container_dir(pods[0].uid, bad.name),
                                                "memory.stat"), host.root), "total_rss garbage\n")
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = clk.wall - 0.5, clk.wall  # this tick only (a 2 s window would still see the last good one)
    assert cache.query("container_memory_usage", lo, hi, "last", container=bad.container_id) is None
    assert cache.query("container_cpu_usage", lo, hi, "last", container=bad.container_id) == pytest.approx(1.0)
    assert cache.query("container_memory_usage", lo, hi, "last", container=good.container_id) == 0
    assert col.stats.read_errors == 1


def test_removed_pod_reports_dirs(tmp_path) -> None:
    host, pods, store, _cache, clk, col = setup(tmp_path, 1, n_containers=4)
    seen: list[list[str]] = []
    col.on_pod_removed.append(seen.append)
    col.collect(clk.wall)
    store.set_pods([pod_object(p) for p in pods[1:]])
    col.collect(clk.wall + 1)
    assert seen == [[host.pod_dir(pods[0].uid)]]


def _drop_memory_hierarchy(host: FakeHost, how: str) -> None:
    """A v1 host whose memory hierarchy holds no kube cgroups: mounted but empty (``cgroup_disable=memory``
    beside a memory mount point, or the kubelet not using it), or not there at all."""
    mem = host.layout.abs_dir("memory", "")
    shutil.rmtree(mem)
    if how == "empty":
        os.mkdir(mem)


@pytest.mark.parametrize("how", ["empty", "absent"])
def test_v1_without_memory_cgroups_pods_still_have_cpu_usage(tmp_path, how: str) -> None:
    host, pods, store, cache, clk, _ = setup(tmp_path, 1, n_containers=4)
    _drop_memory_hierarchy(host, how)
    col = Collector(host.layout, cache, store, clock=lambda: clk.wall, mono=lambda: clk.mono)
    host.set_proc_stat([100] * 4, [1000] * 4)
    col.collect(clk.wall)
    assert col.stats.pods == 2 and col.stats.containers == 4 and col.stats.pending == 0
    for p in pods:
        host.set_cpu_usage(host.pod_dir(p.uid), S)  # 1 core each over the next second
    c0 = pods[0].containers[0]
    host.set_cpu_usage(host.container_dir(pods[0].uid, c0.name), S // 2)
    tck = os.sysconf("SC_CLK_TCK")
    host.set_proc_stat([100 + tck] * 4, [1000] * 4)  # 4 cores busy for 1 s
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = window(clk)
    for p in pods:
        assert cache.query("pod_cpu_usage", lo, hi, "last", pod=p.uid) == pytest.approx(1.0)
        assert cache.query("pod_memory_usage", lo, hi, "last", pod=p.uid) is None
    assert cache.query("container_cpu_usage", lo, hi, "last", container=c0.container_id) == pytest.approx(0.5)
    # 4 cores used, 2 of them by the pods: the pods' usage is not counted as "system"
    assert cache.query("sys_cpu_usage", lo, hi, "last") == pytest.approx(2.0)
    assert col.stats.read_errors == 0
    assert col.stats.partial == (6 if how == "empty" else 0)  # memory.stat asked for only where mounted


def test_missing_kube_qos_cgroups_are_named_after_the_grace_period(tmp_path) -> None:
    host, pods, store, cache, clk, _ = setup(tmp_path, 1, n_containers=4)
    _drop_memory_hierarchy(host, "empty")
    col = Collector(host.layout, cache, store, clock=lambda: clk.wall, mono=lambda: clk.mono)
    for _ in range(QOS_GRACE_PASSES - 1):
        col.collect(clk.wall)
        clk.advance(1.0)
    assert store.conditions.get(COND_QOS) is None  # not before the grace period
    col.collect(clk.wall)
    cond = store.conditions.get(COND_QOS)
    assert cond is not None
    assert "memory/kubepods, memory/kubepods/burstable, memory/kubepods/besteffort" in cond.message
    assert "cpu/" not in cond.message and "cpuacct/" not in cond.message
    # the kubelet creates them (and the pods' memory cgroups): the condition clears, memory is sampled
    host2 = FakeHost(str(tmp_path / "host2"), version=1, n_cpus=4)
    host2.add_pods(pods)
    shutil.rmtree(host.layout.abs_dir("memory", ""))
    shutil.copytree(host2.layout.abs_dir("memory", ""), host.layout.abs_dir("memory", ""))
    host.set_memory(host.layout.qos_dir(KubeQoS.BESTEFFORT), 1, 2, 3, 4, 5)
    host.set_memory(host.pod_dir(pods[0].uid), 10, 20, 30, 40, 50)
    clk.advance(1.0)
    col.collect(clk.wall)
    assert store.conditions.get(COND_QOS) is None
    assert col.qos_reader.missing[2] == 0
    for _ in range(6):  # the pods' missing files are retried with backoff (1 s, 2 s, ...)
        clk.advance(1.0)
        col.collect(clk.wall)
    assert col.stats.partial == 0
    lo, hi = window(clk)
    assert cache.query("pod_memory_usage", lo, hi, "last", pod=pods[0].uid) == 60
    assert col.qos_reader.memory_usage[2] == 6


@pytest.mark.parametrize("version", [1, 2])
def test_vanished_memory_stat_keeps_the_pods_cpu_usage(tmp_path, version: int) -> None:
    """Reopen mode (descriptor budget 0): a removed fake file answers ENOENT, as cgroupfs does."""
    host, pods, _store, cache, clk, col = setup(tmp_path, version, n_containers=2, max_fds=0)
    p0 = pods[0]
    pod_dir = host.pod_dir(p0.uid)
    mem_stat = host.layout.file("memory", pod_dir, "memory.stat")
    col.collect(clk.wall)
    os.unlink(mem_stat)
    host.set_cpu_usage(pod_dir, S)
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = clk.wall - 0.5, clk.wall
    assert cache.query("pod_cpu_usage", lo, hi, "last", pod=p0.uid) == pytest.approx(1.0)
    assert cache.query("pod_memory_usage", lo, hi, "last", pod=p0.uid) is None
    assert col.stats.pending == 0 and col.stats.partial == 1 and col.stats.vanished == 0
    # it comes back (v2: the memory controller enabled again): retried after 1 s, memory sampled again
    host.set_memory(pod_dir, 100, 200, 300, 0, 0)  # writes a whole memory.stat again
    assert os.path.exists(mem_stat)
    host.set_cpu_usage(pod_dir, 2 * S)
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = clk.wall - 0.5, clk.wall
    assert col.stats.partial == 0
    assert cache.query("pod_memory_usage", lo, hi, "last", pod=p0.uid) == 600
    assert cache.query("pod_cpu_usage", lo, hi, "last", pod=p0.uid) == pytest.approx(1.0)


def test_garbled_proc_stat_drops_node_cpu_only(tmp_path) -> None:
    host, _pods, store, cache, clk, col = setup(tmp_path, 1, n_containers=2)
    host.set_proc_stat([100] * 4, [1000] * 4)
    host.set_meminfo(total_kb=64 << 20, free_kb=10 << 20, available_kb=40 << 20)
    col.collect(clk.wall)
    good = Path(host.roots.proc_path("stat")).read_text()
    host.write("proc/stat", "cpu  1 2 x 4 5 6 7 8\n")
    clk.advance(1.0)
    col.collect(clk.wall)  # no exception out of the collector
    lo, hi = clk.wall - 0.5, clk.wall
    assert cache.query("node_cpu_usage", lo, hi, "last") is None
    assert cache.query("sys_cpu_usage", lo, hi, "last") is None
    assert cache.query("node_memory_usage", lo, hi, "last") == (24 << 20) * 1024
    cond = store.conditions.get(COND_PROC_STAT)
    assert cond is not None and "garbled /proc/stat value" in cond.message
    assert host.roots.proc_path("stat") in cond.message
    host.write("proc/stat", good.replace("cpu  ", "cpu  1", 1))
    clk.advance(1.0)
    col.collect(clk.wall)
    assert cache.query("node_cpu_usage", clk.wall - 0.5, clk.wall, "last") is not None
    assert store.conditions.get(COND_PROC_STAT) is None


@pytest.mark.parametrize("text,present,absent,named", [
    ("MemTotal: 1000 kB\nMemFree: 200 kB\n", ["node_memory_usage_with_page_cache"],
     ["node_memory_usage", "sys_memory_usage"], "MemAvailable"),
    ("MemTotal: 1000 kB\nMemAvailable: 500 kB\n", ["node_memory_usage", "sys_memory_usage"],
     ["node_memory_usage_with_page_cache"], "MemFree"),
    ("MemFree: x kB\n", [], ["node_memory_usage", "node_memory_usage_with_page_cache", "sys_memory_usage"],
     "MemTotal, MemFree, MemAvailable"),
])
def test_meminfo_missing_fields_drop_only_their_series(tmp_path, text: str, present: list[str],
                                                       absent: list[str], named: str) -> None:
    host, _pods, store, cache, clk, col = setup(tmp_path, 2, n_containers=2)
    host.write("proc/meminfo", text)
    col.collect(clk.wall)
    clk.advance(1.0)
    col.collect(clk.wall)
    lo, hi = clk.wall - 0.5, clk.wall
    for name in present:
        assert cache.query(name, lo, hi, "last") is not None, name
    for name in absent:
        assert cache.query(name, lo, hi, "last") is None, name
    assert cache.query("node_cpu_usage", lo, hi, "last") is not None
    cond = store.conditions.get(COND_PROC_MEMINFO)
    assert cond is not None and f"has no valid {named}:" in cond.message


def test_missing_proc_files_at_start_do_not_stop_the_collector(tmp_path) -> None:
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=4)
    stat = host.roots.proc_path("stat")
    good = Path(stat).read_text()
    os.unlink(stat)
    store = StateStore()
    clk = Clocks()
    cache = MetricCache()
    col = Collector(host.layout, cache, store, clock=lambda: clk.wall, mono=lambda: clk.mono)
    col.collect(clk.wall)
    cond = store.conditions.get(COND_PROC_STAT)
    assert cond is not None and "No such file or directory" in cond.message and stat in cond.message
    assert cache.query("node_memory_usage", clk.wall - 0.5, clk.wall, "last") is not None
    with open(stat, "w") as f:
        f.write(good)
    for _ in range(2):
        clk.advance(1.0)
        col.collect(clk.wall)
    assert store.conditions.get(COND_PROC_STAT) is None
    assert cache.query("node_cpu_usage", clk.wall - 0.5, clk.wall, "last") is not None


def busy_pod_tree(tree: Any, version: int, uid: str, hex2: str, **mkdir: Any) -> tuple[Any, FakePod, str, str]:
    """A Burstable pod with one container in a real kubepods tree (cgroupfs layout): the layout, the
    pod, its cgroup and its container's cgroup (``mkdir`` options go to the container's mkdir)."""
    layout = CgroupLayout(HostRoots(cgroup=tree.root), version, "cgroupfs")
    pod = FakePod(uid, "default", "busy", KubeQoS.BURSTABLE, [FakeContainer("c0", "containerd://" + hex2 * 32)])
    pod_rel = layout.pod_dir(KubeQoS.BURSTABLE, pod.uid)
    ctr_rel = layout.container_dir(pod_rel, pod.containers[0].container_id)
    for q in (KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT):
        tree.mkdir(layout.qos_dir(q))
    tree.mkdir(ctr_rel, **mkdir)
    return layout, pod, pod_rel, ctr_rel


@pytest.mark.kernel
@pytest.mark.parametrize("version", [1, 2])
def test_real_kernel_busy_process(version: int) -> None:
    """A CPU-bound child in a real cgroup: the collector reports the CPU the kernel gave it."""
    reason = kernelcg.unavailable(version)
    if reason:
        pytest.skip(f"real cgroups v{version} unavailable: {reason}")
    with kernelcg.kernel_tree(version) as tree:
        layout, pod, _, ctr_rel = busy_pod_tree(tree, version, "1111cccc-0000-4000-8000-000000000003", "12")
        busy = psutil.Process(tree.spawn_busy(ctr_rel, seconds=20).pid)
        store = StateStore()
        store.set_pods([pod_object(pod)])
        cache = MetricCache()
        col = Collector(layout, cache, store)
        assert col.stats.pods == 0

        def cpu_seconds() -> float:
            t = busy.cpu_times()
            return t.user + t.system

        def bracketed_collect() -> tuple[float, float, float, float, float]:
            """A collect between two readings of the process's CPU time and the monotonic clock (the
            reader's clock): the cgroup's counter was read between them, whatever the scheduler did."""
            cpu0, t0 = cpu_seconds(), time.monotonic()
            now = time.time()
            col.collect(now)
            return cpu0, t0, cpu_seconds(), time.monotonic(), now

        first = bracketed_collect()
        assert col.stats.pending == 0, "the real cgroups must be found"
        samples, bounds, prev = [], [], first
        for _ in range(3):
            time.sleep(0.5)
            cur = bracketed_collect()
            now = cur[4]
            got = cache.query("container_cpu_usage", now - 1, now, "last", container=pod.containers[0].container_id)
            # the rate the collector may report: the CPU the process got between the two reads over the
            # time between them, each read somewhere inside its bracket; the process's times count in
            # 10 ms ticks (one tick of slack at each end)
            used_lo, used_hi = max(cur[0] - prev[2] - 0.02, 0.0), cur[2] - prev[0] + 0.02
            dt_lo, dt_hi = cur[1] - prev[3], cur[3] - prev[1]
            samples.append(got)
            bounds.append((used_lo / dt_hi, used_hi / dt_lo, cur[2] - prev[2]))
            prev = cur
        pod_cpu = cache.query("pod_cpu_usage", now - 1, now, "last", pod=pod.uid)
        # the kernel's cgroup counter through the collector agrees with the process's own CPU time over
        # the same interval, however much of a core the shared machine gave it and however late this
        # test ran: a load-independent check, as tight as the brackets (a few ms each on an idle machine)
        assert all(s is not None for s in samples), samples
        assert sum(b[2] for b in bounds) > 0.05, f"the busy process hardly ran: {bounds}"
        for got, (lo, hi, _) in zip(samples, bounds):
            assert got is not None and lo <= got <= hi, (samples, bounds)
        assert pod_cpu is not None and pod_cpu >= samples[-1] * 0.9
        if version == 1:
            mem = cache.query("container_memory_usage", now - 1, now, "last",
                              container=pod.containers[0].container_id)
            assert mem is not None and not math.isnan(mem)  # real memory.stat parsed
        assert np.count_nonzero(col.ctr_reader.errors[: col.ctr_reader.high_water]) == 0


@pytest.mark.kernel
def test_real_kernel_cgroup_without_memory_cgroup_yields_cpu_usage() -> None:
    """A pod and container that exist in the cpu, cpuacct and cpuset hierarchies but not in memory
    (the memory hierarchy is there): the collector samples their CPU usage, memory stays absent."""
    reason = kernelcg.unavailable(1)
    if reason:
        pytest.skip(f"real cgroups v1 unavailable: {reason}")
    with kernelcg.kernel_tree(1) as tree:
        layout, pod, pod_rel, ctr_rel = busy_pod_tree(tree, 1, "1111dddd-0000-4000-8000-000000000004", "34",
                                                      hierarchies=("cpu", "cpuacct", "cpuset"))
        assert not os.path.exists(tree.path("memory", pod_rel))
        tree.spawn_busy(ctr_rel, seconds=20)
        store = StateStore()
        store.set_pods([pod_object(pod)])
        cache = MetricCache()
        col = Collector(layout, cache, store)
        col.collect(time.time())
        assert col.stats.pending == 0 and col.stats.pods == 1 and col.stats.containers == 1
        assert col.stats.partial == 2  # memory.stat of the pod and of its container
        cid = pod.containers[0].container_id
        for _ in range(2):
            time.sleep(0.5)
            now = time.time()
            col.collect(now)
            ctr_cpu = cache.query("container_cpu_usage", now - 1, now, "last", container=cid)
            pod_cpu = cache.query("pod_cpu_usage", now - 1, now, "last", pod=pod.uid)
            # a busy child on a shared machine: some CPU, never more than one core
            assert ctr_cpu is not None and 0.0 < ctr_cpu < 1.2, ctr_cpu
            assert pod_cpu is not None and pod_cpu >= ctr_cpu * 0.9
            assert cache.query("container_memory_usage", now - 1, now, "last", container=cid) is None
        assert np.count_nonzero(col.ctr_reader.errors[: col.ctr_reader.high_water]) == 0


def test_a_proc_stat_sample_that_goes_backwards_is_not_the_new_baseline(tmp_path) -> None:
    """Taken as the baseline, a backwards sample made the next good one a burst that pinned BE at the
    floor: it is skipped and the sample before stays the baseline; a run of them is a reset."""
    host, _pods, store, cache, clk, col = setup(tmp_path, 1, n_containers=2)
    tck = os.sysconf("SC_CLK_TCK")
    busy, idle = 10_000, 100_000

    def sample(b: int, i: int) -> float | None:
        host.set_proc_stat([b] * 4, [i] * 4)
        clk.advance(1.0)
        col.collect(clk.wall)
        return cache.query("node_cpu_usage", clk.wall - 0.5, clk.wall, "last")

    host.set_proc_stat([busy] * 4, [idle] * 4)
    col.collect(clk.wall)
    assert sample(busy + tck, idle) == pytest.approx(4.0)  # 4 CPUs busy for the second
    assert sample(busy - 5 * tck, idle - tck) is None  # backwards: skipped, not a baseline
    cond = store.conditions.get(COND_PROC_STAT_BACKWARDS)
    assert cond is not None and "skipped, the earlier sample stays the baseline" in cond.message
    # the next good sample: 2 s since the baseline, half a CPU each -> 2 cores, not a burst
    assert sample(busy + tck + tck, idle + 2 * tck) == pytest.approx(2.0)
    assert store.conditions.get(COND_PROC_STAT_BACKWARDS) is None
    # a counter that restarted: after a run of backwards samples the latest is the baseline
    base = busy + 2 * tck
    for k in range(PROC_STAT_BACKWARDS_RESET):
        assert sample(100 + k * tck, 1000 + k * tck) is None
    cond = store.conditions.get(COND_PROC_STAT_BACKWARDS)
    assert cond is not None and "taken as a counter reset" in cond.message
    last = 100 + (PROC_STAT_BACKWARDS_RESET - 1) * tck
    assert last < base
    assert sample(last + tck, 1000 + PROC_STAT_BACKWARDS_RESET * tck) == pytest.approx(4.0)


def test_frozen_proc_stat_counters_raise_a_condition(tmp_path) -> None:
    host, _pods, store, cache, clk, col = setup(tmp_path, 2, n_containers=2)
    host.set_proc_stat([100] * 4, [1000] * 4)
    col.collect(clk.wall)
    for _ in range(4):  # standing still for 4 s: a quiet moment is not frozen yet
        clk.advance(1.0)
        col.collect(clk.wall)
        assert store.conditions.get(COND_PROC_STAT_FROZEN) is None
    clk.advance(1.0)
    col.collect(clk.wall)
    cond = store.conditions.get(COND_PROC_STAT_FROZEN)
    assert cond is not None and "have not moved for 5 s" in cond.message
    assert cache.query("node_cpu_usage", clk.wall - 0.5, clk.wall, "last") is None
    host.set_proc_stat([150] * 4, [1050] * 4)
    clk.advance(1.0)
    col.collect(clk.wall)
    assert store.conditions.get(COND_PROC_STAT_FROZEN) is None
    assert cache.query("node_cpu_usage", clk.wall - 0.5, clk.wall, "last") is not None


def test_a_node_beyond_what_one_pass_starts_is_read_over_several_with_a_condition(
        tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """At 100,000 pods the first pass took 8.7 s and no BE limit was decided for 28 s: a pass starts at
    most TRACK_PER_PASS new pods; the node and QoS-dir counters are read from the first pass on."""
    from qosmanager.metrics import collector as collector_module

    monkeypatch.setattr(collector_module, "TRACK_PER_PASS", 4)
    host, _pods, store, cache, clk, col = setup(tmp_path, 2, n_containers=20)  # 10 pods
    host.set_proc_stat([100] * 4, [1000] * 4)
    col.collect(clk.wall)
    assert col.stats.pods == 4
    cond = store.conditions.get(collector_module.COND_POD_BACKLOG)
    assert cond is not None and cond.message.startswith("6 of 10 pods not sampled yet")
    warned = [r.getMessage() for r in caplog.records if "not sampled yet" in r.getMessage()]
    assert len(warned) == 1
    host.set_proc_stat([200] * 4, [1100] * 4)
    clk.advance(1.0)
    col.collect(clk.wall)  # the node's counters do not wait for the pods
    assert cache.query("node_cpu_usage", clk.wall - 0.5, clk.wall, "last") is not None
    assert cache.query("besteffort_cpu_usage", clk.wall - 0.5, clk.wall, "last") is not None
    assert col.stats.pods == 8
    clk.advance(1.0)
    col.collect(clk.wall)
    assert col.stats.pods == 10 and store.conditions.get(collector_module.COND_POD_BACKLOG) is None
    assert len([r for r in caplog.records if "not sampled yet" in r.getMessage()]) == 1  # said once
