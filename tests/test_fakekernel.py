"""The fake kernel's rules, one by one, and the sysio interposition that puts them under the agent's
own write path (the comparison with real kernels is ``test_fake_vs_kernel.py``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from qosmanager._native import sysio
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, MakeDir, Write
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.fakekernel import (
    KNOWN_LIMITS,
    V1_MEMORY_UNLIMITED,
    FakeKernel,
    KernelError,
    cpulist_parse,
    kstrtoull,
    memparse_pages,
)


def _v1(tmp_path: Path, **kw: object) -> FakeHost:
    return FakeHost(str(tmp_path / "h"), version=1, n_cpus=4, **kw)  # type: ignore[arg-type]


def _v2(tmp_path: Path, **kw: object) -> FakeHost:
    return FakeHost(str(tmp_path / "h"), version=2, n_cpus=4, **kw)  # type: ignore[arg-type]


def _k(h: FakeHost) -> FakeKernel:
    assert h.kernel is not None
    return h.kernel


def _mk(h: FakeHost, hierarchy: str, rel: str) -> str:
    path = h.layout.abs_dir(hierarchy, rel)
    _k(h).mkdir(path)
    return path


def _write(h: FakeHost, path: str, value: str) -> int:
    return _k(h).write(path, value.encode())


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


# ------------------------------------------------------------------ parsers
@pytest.mark.parametrize(("text", "want"), [("5", 5), ("5\n", 5), ("+5", 5), ("0x10", 16), ("010", 8)])
def test_kstrtoull_takes_what_the_kernel_takes(text: str, want: int) -> None:
    assert kstrtoull(text) == want


@pytest.mark.parametrize("text", ["", " 5", "5 ", "5\n\n", "-1", "abc", "5k", "0x"])
def test_kstrtoull_refuses_what_the_kernel_refuses(text: str) -> None:
    with pytest.raises(KernelError) as e:
        kstrtoull(text)
    assert e.value.errno == errno.EINVAL


def test_memparse_rounds_down_to_pages_and_takes_suffixes() -> None:
    assert memparse_pages("4097", "max") == 1
    assert memparse_pages("1M\n", "max") == 256
    assert memparse_pages("max", "max") == memparse_pages("-1", "-1")
    with pytest.raises(KernelError):
        memparse_pages("lots", "max")
    with pytest.raises(KernelError):
        memparse_pages("12 34", "max")


def test_cpulist_parse() -> None:
    assert cpulist_parse("0-2,3", 4) == {0, 1, 2, 3}
    assert cpulist_parse("0-7:1/4", 8) == {0, 4}
    assert cpulist_parse("\n", 4) == set()
    with pytest.raises(KernelError) as e:
        cpulist_parse("0-9", 4)
    assert e.value.errno == errno.ERANGE
    with pytest.raises(KernelError):
        cpulist_parse("3-1", 4)


# ------------------------------------------------------------------ v1
def test_v1_mkdir_creates_each_hierarchys_files_with_initial_values(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    cpu = _mk(h, "cpu", "fresh")
    assert _read(f"{cpu}/cpu.cfs_quota_us") == "-1\n"
    assert _read(f"{cpu}/cpu.cfs_period_us") == "100000\n"
    assert _read(f"{cpu}/cpu.shares") == "1024\n"
    assert _read(f"{cpu}/tasks") == ""
    assert not os.path.exists(f"{cpu}/memory.limit_in_bytes")
    cpuset = _mk(h, "cpuset", "fresh")
    assert _read(f"{cpuset}/cpuset.cpus") == "\n"  # a new v1 cpuset is empty
    mem = _mk(h, "memory", "fresh")
    assert _read(f"{mem}/memory.limit_in_bytes") == f"{V1_MEMORY_UNLIMITED}\n"


def test_v1_quota_rules(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    parent = _mk(h, "cpu", "p")
    child = _mk(h, "cpu", "p/c")
    assert _write(h, f"{child}/cpu.cfs_quota_us", "999") == errno.EINVAL  # below 1 ms
    assert _write(h, f"{child}/cpu.cfs_quota_us", "-5") == 0
    assert _read(f"{child}/cpu.cfs_quota_us") == "-1\n"
    assert _write(h, f"{child}/cpu.cfs_quota_us", "50000") == 0
    # a parent's quota below a child's is refused on v1 (koordnode's hooks rely on it)
    assert _write(h, f"{parent}/cpu.cfs_quota_us", "20000") == errno.EINVAL
    assert _write(h, f"{parent}/cpu.cfs_quota_us", "60000") == 0
    assert _write(h, f"{child}/cpu.cfs_quota_us", "70000") == errno.EINVAL  # above the parent's
    assert _read(f"{child}/cpu.cfs_quota_us") == "50000\n"
    # burst above the quota
    assert _write(h, f"{child}/cpu.cfs_burst_us", "50001") == errno.EINVAL
    assert _write(h, f"{child}/cpu.cfs_burst_us", "50000") == 0
    assert _write(h, f"{child}/cpu.cfs_quota_us", "40000") == errno.EINVAL  # now below the burst
    assert _write(h, f"{child}/cpu.cfs_period_us", "500") == errno.EINVAL
    assert _write(h, f"{child}/cpu.cfs_period_us", "2000000") == errno.EINVAL
    assert _write(h, f"{child}/cpu.cfs_quota_us", "abc") == errno.EINVAL
    root = h.layout.abs_dir("cpu", "")
    assert _write(h, f"{root}/cpu.cfs_quota_us", "50000") == errno.EINVAL


def test_v1_shares_are_clamped(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    d = _mk(h, "cpu", "s")
    assert _write(h, f"{d}/cpu.shares", "1") == 0
    assert _read(f"{d}/cpu.shares") == "2\n"
    assert _write(h, f"{d}/cpu.shares", "999999") == 0
    assert _read(f"{d}/cpu.shares") == "262144\n"
    assert _write(h, f"{d}/cpu.shares", "-3") == errno.EINVAL


def test_v1_cpuset_rules(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    parent = _mk(h, "cpuset", "p")
    assert _write(h, f"{parent}/cpuset.cpus", "0-1") == 0
    child = _mk(h, "cpuset", "p/c")
    assert _write(h, f"{child}/cpuset.cpus", "2") == errno.EACCES  # outside the parent's
    assert _write(h, f"{child}/cpuset.cpus", "1,0") == 0
    assert _read(f"{child}/cpuset.cpus") == "0-1\n"
    assert _write(h, f"{parent}/cpuset.cpus", "0") == errno.EBUSY  # below the child's
    assert _write(h, f"{child}/cpuset.cpus", "x") == errno.EINVAL
    _k(h).spawn([4242])
    assert _write(h, f"{child}/tasks", "4242") == errno.ENOSPC  # no memory nodes yet
    assert _write(h, f"{child}/cpuset.mems", "0") == errno.EACCES  # the parent has none either
    assert _write(h, f"{parent}/cpuset.mems", "0") == 0
    assert _write(h, f"{child}/cpuset.mems", "0") == 0
    assert _write(h, f"{child}/tasks", "4242") == 0


def test_v2_cpuset_outside_the_parents_is_taken_and_what_is_in_effect_follows_the_parent(tmp_path: Path) -> None:
    """v2 takes a list outside the parent's and masks it in cpuset.cpus.effective; a parent's change
    reaches the effective lists of its whole subtree (the kernel's update_cpumasks_hier)."""
    h = _v2(tmp_path)
    q = _mk(h, "", "q")
    assert _write(h, f"{q}/cgroup.subtree_control", "+cpuset") == 0
    leaf = _mk(h, "", "q/leaf")
    assert _read(f"{leaf}/cpuset.cpus.effective") == "0-3\n"
    assert _write(h, f"{leaf}/cpuset.cpus", "2-3") == 0
    assert _write(h, f"{q}/cpuset.cpus", "0-1") == 0
    assert _read(f"{leaf}/cpuset.cpus") == "2-3\n"  # kept as written
    assert _read(f"{leaf}/cpuset.cpus.effective") == "0-1\n"  # none of it in the parent's: the parent's
    assert _write(h, f"{q}/cpuset.cpus", "1-2") == 0
    assert _read(f"{leaf}/cpuset.cpus.effective") == "2\n"
    assert _write(h, f"{q}/cpuset.cpus", "") == 0  # an empty write is a no-op
    assert _read(f"{q}/cpuset.cpus.effective") == "1-2\n"


def test_v1_tasks_need_a_living_pid_and_move_it(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    a, b = _mk(h, "cpu", "a"), _mk(h, "cpu", "b")
    assert _write(h, f"{a}/cgroup.procs", "31337") == errno.ESRCH
    assert _write(h, f"{a}/cgroup.procs", "nope") == errno.EINVAL
    _k(h).spawn([31337])
    assert _write(h, f"{a}/cgroup.procs", "31337") == 0
    assert _read(f"{a}/tasks").split() == ["31337"]
    assert _write(h, f"{b}/tasks", "31337\n") == 0
    assert _read(f"{a}/tasks") == "" and _read(f"{a}/cgroup.procs") == ""
    assert _read(f"{b}/cgroup.procs").split() == ["31337"]


def test_v1_memory_limit(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    d = _mk(h, "memory", "m")
    assert _write(h, f"{d}/memory.limit_in_bytes", "1000000") == 0
    assert _read(f"{d}/memory.limit_in_bytes") == "999424\n"  # whole pages
    assert _write(h, f"{d}/memory.limit_in_bytes", "-1") == 0
    assert _read(f"{d}/memory.limit_in_bytes") == f"{V1_MEMORY_UNLIMITED}\n"
    assert _write(h, f"{d}/memory.limit_in_bytes", "max") == errno.EINVAL


def test_blkio_throttle_needs_a_whole_disk(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    h.write("sys/block/vda/dev", "253:0\n")
    h.write("sys/block/vda/vda1/dev", "253:1\n")
    d = _mk(h, "blkio", "b")
    f = f"{d}/blkio.throttle.read_bps_device"
    assert _write(h, f, "253:0 1048576") == 0
    assert _read(f) == "253:0 1048576\n"
    assert _write(h, f, "253:1 100") == errno.ENODEV
    assert _write(h, f, "garbage") == errno.EINVAL
    assert _write(h, f, "253:0 0") == 0  # 0 removes the limit
    assert _read(f) == ""


# ------------------------------------------------------------------ v2
def test_v2_mkdir_follows_subtree_control(tmp_path: Path) -> None:
    h = _v2(tmp_path)
    k = _k(h)
    d = h.layout.abs_dir("", "plain")
    k.mkdir(d)
    assert _read(f"{d}/cgroup.controllers") == "cpuset cpu io memory pids\n"
    assert _read(f"{d}/cpu.max") == "max 100000\n"
    assert _read(f"{d}/memory.high") == "max\n"
    assert _read(f"{d}/cgroup.subtree_control") == ""
    leaf = f"{d}/leaf"
    k.mkdir(leaf)  # nothing enabled below "plain": core files only
    assert _read(f"{leaf}/cgroup.controllers") == ""
    assert not os.path.exists(f"{leaf}/cpu.max")
    assert os.path.exists(f"{leaf}/cpu.stat") and os.path.exists(f"{leaf}/cgroup.procs")
    assert _write(h, f"{d}/cgroup.subtree_control", "+cpu +memory") == 0
    assert _read(f"{d}/cgroup.subtree_control") == "cpu memory\n"
    assert _read(f"{leaf}/cpu.max") == "max 100000\n" and _read(f"{leaf}/cgroup.controllers") == "cpu memory\n"
    assert _write(h, f"{d}/cgroup.subtree_control", "+bogus") == errno.EINVAL
    assert _write(h, f"{leaf}/cgroup.subtree_control", "+io") == errno.ENOENT  # not given to leaf
    assert _write(h, f"{leaf}/cgroup.subtree_control", "+cpu") == 0
    assert _write(h, f"{d}/cgroup.subtree_control", "-cpu") == errno.EBUSY  # the leaf uses it
    assert _write(h, f"{leaf}/cgroup.subtree_control", "-cpu") == 0
    assert _write(h, f"{d}/cgroup.subtree_control", "-memory") == 0
    assert not os.path.exists(f"{leaf}/memory.high")


def test_v2_cpu_max_and_burst(tmp_path: Path) -> None:
    h = _v2(tmp_path)
    d = h.layout.abs_dir("", "c")
    _k(h).mkdir(d)
    assert _write(h, f"{d}/cpu.max", "50000") == 0
    assert _read(f"{d}/cpu.max") == "50000 100000\n"
    assert _write(h, f"{d}/cpu.max", "max 200000") == 0
    assert _read(f"{d}/cpu.max") == "max 200000\n"
    assert _write(h, f"{d}/cpu.max", "500") == errno.EINVAL
    assert _write(h, f"{d}/cpu.max", "lots") == errno.EINVAL
    assert _write(h, f"{d}/cpu.max", "20000 100000") == 0
    assert _write(h, f"{d}/cpu.max.burst", "30000") == errno.EINVAL
    assert _write(h, f"{d}/cpu.weight", "0") == errno.ERANGE
    assert _write(h, f"{d}/cpu.weight", "10001") == errno.ERANGE
    child = f"{d}/child"
    _k(h).mkdir(child)  # "c" hands nothing down; enable cpu first
    assert _write(h, f"{d}/cgroup.subtree_control", "+cpu") == 0
    assert _write(h, f"{child}/cpu.max", "90000") == 0  # v2 clamps instead of refusing


def test_v2_memory_and_io_max(tmp_path: Path) -> None:
    h = _v2(tmp_path)
    h.write("sys/block/vda/dev", "253:0\n")
    d = h.layout.abs_dir("", "m")
    _k(h).mkdir(d)
    assert _write(h, f"{d}/memory.high", "10000") == 0
    assert _read(f"{d}/memory.high") == "8192\n"
    assert _write(h, f"{d}/memory.high", "max\n") == 0
    assert _read(f"{d}/memory.high") == "max\n"
    assert _write(h, f"{d}/memory.high", "-1") == errno.EINVAL
    assert _write(h, f"{d}/memory.high", "1G") == 0
    assert _read(f"{d}/memory.high") == f"{1 << 30}\n"
    assert _write(h, f"{d}/io.max", "253:0 rbps=1048576") == 0
    assert _read(f"{d}/io.max") == "253:0 rbps=1048576 wbps=max riops=max wiops=max\n"
    assert _write(h, f"{d}/io.max", "253:0 speed=1") == errno.EINVAL
    assert _write(h, f"{d}/io.max", "253:0 rbps=0") == errno.ERANGE
    assert _write(h, f"{d}/io.max", "9:9 rbps=1") == errno.ENODEV
    assert _write(h, f"{d}/io.max", "nonsense") == errno.EINVAL
    assert _write(h, f"{d}/io.max", "253:0 rbps=max") == 0
    assert _read(f"{d}/io.max") == ""


def _charge(h: FakeHost, d: str, anon: int, file: int) -> None:
    """What a load model does: the cgroup holds ``anon`` + ``file`` bytes (the fake charges nothing)."""
    h.set_memory(os.path.relpath(d, h.roots.cgroup), 0, anon, 0, file // 2, file - file // 2)


def test_v2_memory_high_below_usage_reclaims_page_cache_only(tmp_path: Path) -> None:
    h = _v2(tmp_path)
    parent = h.layout.abs_dir("", "p")
    _k(h).mkdir(parent)
    assert _write(h, f"{parent}/cgroup.subtree_control", "+memory") == 0
    d = f"{parent}/c"
    _k(h).mkdir(d)
    _charge(h, d, 64 << 20, 32 << 20)
    h.write("cgroup/p/memory.current", f"{96 << 20}\n")
    assert _write(h, f"{d}/memory.high", str(80 << 20)) == 0  # 16 MiB of the 32 MiB cache goes
    assert _read(f"{d}/memory.current") == f"{80 << 20}\n"
    assert _read(f"{parent}/memory.current") == f"{80 << 20}\n"  # the parent's count shrinks with it
    assert f"file {16 << 20}\n" in _read(f"{d}/memory.stat")
    assert _write(h, f"{d}/memory.high", str(32 << 20)) == 0  # below anon: the writer gets no error ...
    assert _read(f"{d}/memory.current") == f"{64 << 20}\n"  # ... and anon stays (no swap)
    assert _k(h).take_reclaimed(d) == 32 << 20
    assert _k(h).take_reclaimed(d) == 0
    assert _k(h).memory_high(d) == 32 << 20
    assert _write(h, f"{parent}/memory.high", str(16 << 20)) == 0
    assert _k(h).memory_high(d) == 16 << 20  # the lowest of the cgroup's and its ancestors'


def test_v2_memory_reclaim(tmp_path: Path) -> None:
    h = _v2(tmp_path)
    d = h.layout.abs_dir("", "r")
    _k(h).mkdir(d)
    assert _read(f"{d}/memory.reclaim") == ""
    _charge(h, d, 10 << 20, 8 << 20)
    for bad in ("abc", "-1", "", "\n", "max", "1M junk", "1M swappiness=201", "1Mx", "08"):
        assert _write(h, f"{d}/memory.reclaim", bad) == (0 if bad == "" else errno.EINVAL), bad
    assert _write(h, f"{d}/memory.reclaim", "0") == 0
    assert _write(h, f"{d}/memory.reclaim", "3M swappiness=60") == 0
    assert _read(f"{d}/memory.current") == f"{15 << 20}\n"
    assert _write(h, f"{d}/memory.reclaim", "1000") == 0  # less than a page: nothing to do
    assert _read(f"{d}/memory.current") == f"{15 << 20}\n"
    assert _write(h, f"{d}/memory.reclaim", "8M") == errno.EAGAIN  # only 5 MiB of cache left: it goes
    assert _read(f"{d}/memory.current") == f"{10 << 20}\n"
    assert _k(h).take_reclaimed(d) == 8 << 20
    assert _read(f"{d}/memory.reclaim") == ""


def test_v2_memory_events_count_up_the_tree(tmp_path: Path) -> None:
    h = _v2(tmp_path)
    parent = h.layout.abs_dir("", "p")
    _k(h).mkdir(parent)
    assert _write(h, f"{parent}/cgroup.subtree_control", "+memory") == 0
    d = f"{parent}/c"
    _k(h).mkdir(d)
    assert _read(f"{d}/memory.events") == "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"
    _k(h).memory_event(d, "high", 3)
    assert "high 3\n" in _read(f"{d}/memory.events") and "high 3\n" in _read(f"{d}/memory.events.local")
    assert "high 3\n" in _read(f"{parent}/memory.events")  # hierarchical
    assert "high 0\n" in _read(f"{parent}/memory.events.local")


def test_fake_host_cgroups_have_the_memory_protection_files(tmp_path: Path) -> None:
    for h in (_v2(tmp_path / "a"), _v2(tmp_path / "b", kernel=False)):
        be = h.layout.qos_dir("BestEffort")
        for name in ("memory.high", "memory.events", "memory.events.local", "memory.reclaim"):
            assert os.path.exists(h.layout.file("", be, name)), name
    h1 = _v1(tmp_path / "c", kernel=False)
    assert os.path.exists(h1.layout.file("memory", h1.layout.qos_dir("BestEffort"), "memory.soft_limit_in_bytes"))


def test_v2_no_internal_processes(tmp_path: Path) -> None:
    h = _v2(tmp_path)
    k = _k(h)
    d = h.layout.abs_dir("", "n")
    k.mkdir(d)
    k.spawn([777])
    assert _write(h, f"{d}/cgroup.procs", "777") == 0
    assert _write(h, f"{d}/cgroup.subtree_control", "+memory") == errno.EBUSY  # a domain controller
    k.mkdir(f"{d}/leaf")
    assert _write(h, f"{d}/leaf/cgroup.procs", "777") == 0
    assert _write(h, f"{d}/cgroup.subtree_control", "+memory") == 0
    assert _write(h, f"{d}/cgroup.procs", "777") == errno.EBUSY
    assert _write(h, f"{d}/cgroup.subtree_control", "-memory +cpu") == 0  # threaded controllers only
    assert _write(h, f"{d}/cgroup.procs", "777") == 0


# ------------------------------------------------------------------ resctrl
def test_resctrl_mkdir_schemata_and_tasks(tmp_path: Path) -> None:
    h = FakeHost(str(tmp_path / "h"), version=1, n_cpus=4, sockets=2, numa_nodes=2, resctrl=True)
    k = _k(h)
    root = h.roots.sys_path("fs/resctrl")
    g = f"{root}/BE"
    k.mkdir(g)
    assert _read(f"{g}/schemata") == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"
    assert _read(f"{g}/tasks") == "" and os.path.exists(f"{g}/cpus") and os.path.exists(f"{g}/cpus_list")
    assert _write(h, f"{g}/schemata", "L3:0=f0\n") == 0
    assert _read(f"{g}/schemata") == "L3:0=f0;1=7ff\nMB:0=100;1=100\n"  # every cache id, both lines
    assert _write(h, f"{g}/schemata", "MB:1=35;\n") == 0
    assert _read(f"{g}/schemata") == "L3:0=f0;1=7ff\nMB:0=100;1=40\n"  # rounded up to the granularity
    for bad in ("L3:0=f0", "L3:0=0\n", "L3:0=fff\n", "L3:0=505\n", "L3:7=1\n", "L2:0=1\n", "MB:0=5\n",
                "MB:0=101\n", "L3:0=3\nMB:0=5\n"):
        assert _write(h, f"{g}/schemata", bad) == errno.EINVAL, bad
    assert _read(f"{g}/schemata") == "L3:0=f0;1=7ff\nMB:0=100;1=40\n"  # nothing of a refused write
    k.spawn([99])
    assert _write(h, f"{g}/tasks", "98") == errno.ESRCH
    assert _write(h, f"{g}/tasks", "99") == 0
    k.mkdir(f"{root}/LS")
    assert _write(h, f"{root}/LS/tasks", "99") == 0
    assert _read(f"{g}/tasks") == "" and _read(f"{root}/LS/tasks") == "99\n"
    with pytest.raises(FileExistsError):
        k.mkdir(g)
    for i in range(13):  # 16 CLOSIDs: the root and 15 groups
        k.mkdir(f"{root}/g{i}")
    with pytest.raises(OSError) as e:
        k.mkdir(f"{root}/one-too-many")
    assert e.value.errno == errno.ENOSPC


# ------------------------------------------------------------------ the agent's path
def test_the_executor_write_path_meets_the_rules(tmp_path: Path) -> None:
    h = _v1(tmp_path)
    pod = FakeHost.make_pods(1, containers_per_pod=1)[0]
    h.add_pod(pod)
    # the container: on a koordinator node its pod dir's quota may not go below the container's own
    # (koordlet's batch quota, 100000), a rule of its own, tested above
    rel = h.container_dir(pod.uid, pod.containers[0].name)
    ex = Executor(h.layout, AuditLog(None), clock=lambda: 100.0)
    try:
        res = ex.apply([Write("t", "cpu.cfs_quota_us", "50000", cgroup=rel, reason="x")])
        assert res[0].status == "written"
        res = ex.apply([Write("t", "cpu.cfs_burst_us", "60000", cgroup=rel, reason="burst above quota")])
        assert res[0].status == "failed" and res[0].error is not None and res[0].error.startswith("EINVAL")
        res = ex.apply([Write("t", "memory.limit_in_bytes", "1000000", cgroup=rel, reason="x")])
        assert res[0].status == "written"
        assert h.read(f"cgroup/memory/{rel}/memory.limit_in_bytes") == "999424\n"
    finally:
        ex.close()


def test_a_one_shot_write_meets_the_rules_too(tmp_path: Path) -> None:
    """With no descriptor to keep (the budget spent) the executor writes a file one shot: through the
    sysio layer like any write, so the fake kernel refuses it where the kernel would (it reached the
    plain file before)."""
    h = _v1(tmp_path)
    pod = FakeHost.make_pods(1, containers_per_pod=1)[0]
    h.add_pod(pod)
    # the container: on a koordinator node its pod dir's quota may not go below the container's own
    # (koordlet's batch quota, 100000), a rule of its own, tested above
    rel = h.container_dir(pod.uid, pod.containers[0].name)
    ex = Executor(h.layout, AuditLog(None), clock=lambda: 100.0, max_open_files=0)
    try:
        res = ex.apply([Write("t", "cpu.cfs_quota_us", "50000", cgroup=rel, reason="x"),
                        Write("t", "memory.limit_in_bytes", "1000000", cgroup=rel, reason="x")])
        res += ex.apply([Write("t", "cpu.cfs_burst_us", "60000", cgroup=rel, reason="burst above quota")])
        assert ex.files.one_shot_writes == 3 and len(ex.files) == 0
        assert [r.status for r in res] == ["written", "written", "failed"]
        assert res[2].error is not None and res[2].error.startswith("EINVAL")
        assert h.read(f"cgroup/cpu/{rel}/cpu.cfs_burst_us") == "0\n"
        assert h.read(f"cgroup/memory/{rel}/memory.limit_in_bytes") == "999424\n"  # page-rounded
    finally:
        ex.close()


def test_the_executor_mkdir_populates_a_resctrl_group(tmp_path: Path) -> None:
    h = FakeHost(str(tmp_path / "h"), version=1, n_cpus=4, resctrl=True)
    ex = Executor(h.layout, AuditLog(None), clock=lambda: 100.0)
    try:
        assert ex.mkdir(MakeDir("t", "sys", "fs/resctrl/BE", reason="x")) == "created"
        assert h.read("sys/fs/resctrl/BE/schemata") == "L3:0=7ff\nMB:0=100\n"
        assert h.read("sys/fs/resctrl/BE/tasks") == ""
    finally:
        ex.close()


def test_paths_outside_fake_trees_go_to_the_real_functions(tmp_path: Path) -> None:
    _v1(tmp_path)  # a live fake kernel
    plain = tmp_path / "plain.txt"
    plain.write_text("old contents")
    fds = sysio.open_batch([str(plain)], os.O_RDWR)
    try:
        err = sysio.pwrite_batch(fds, [b"new"], np.ones(1, dtype=np.uint8))
        assert err.tolist() == [0]
    finally:
        sysio.close_batch(fds)
    assert plain.read_text() == "new"
    sysio.mkdir(str(tmp_path / "d"))
    assert os.listdir(tmp_path / "d") == []


def test_without_a_kernel_the_host_is_plain_files(tmp_path: Path) -> None:
    h = FakeHost(str(tmp_path / "h"), version=1, n_cpus=4, kernel=False)
    assert h.kernel is None
    path = h.layout.abs_dir("cpu", "x")
    sysio.mkdir(path)
    assert os.listdir(path) == []


def test_known_limits_are_documented() -> None:
    assert KNOWN_LIMITS and all(isinstance(v, str) and v for v in KNOWN_LIMITS.values())
