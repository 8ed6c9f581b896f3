"""The executor on fake cgroup trees: validation, cache, leveled order, ownership, audit.

The trees are the fake kernel's (:mod:`qosmanager.sim.fakekernel`): a directory :func:`put` makes holds
the files the kernel makes with a cgroup, and the executor's writes meet the kernel's rules.
"""

from __future__ import annotations

import os
import weakref

import numpy as np
import pytest

from qosmanager._native import sysio
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, Write
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.roots import HostRoots
from qosmanager.sim.fakefiles import V2_CONTROLLERS
from qosmanager.sim.fakekernel import FakeKernel, register

N_CPUS = 8
DISKS = {"sda": "8:0", "sdb": "8:16", "sdc": "8:32"}
_KERNEL_OF: weakref.WeakKeyDictionary[Executor, FakeKernel] = weakref.WeakKeyDictionary()


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(tmp_path, version: int = 1, **kw):
    roots = HostRoots(cgroup=str(tmp_path / "cgroup"), proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"))
    layout = CgroupLayout(roots, version, "cgroupfs")
    clock = Clock()
    audit = AuditLog(str(tmp_path / "audit.log"), clock=clock)
    kernel = FakeKernel(roots, version, n_cpus=N_CPUS)
    register(kernel)
    os.makedirs(roots.cgroup, exist_ok=True)
    if version == 2:  # the root hands every controller down, as on a node
        for f in ("cgroup.controllers", "cgroup.subtree_control"):
            with open(os.path.join(roots.cgroup, f), "w") as fh:
                fh.write(V2_CONTROLLERS + "\n")
    for disk, dev in DISKS.items():  # the node's whole disks (blkio and io.max name them)
        os.makedirs(os.path.join(roots.sys, "block", disk))
        with open(os.path.join(roots.sys, "block", disk, "dev"), "w") as fh:
            fh.write(dev + "\n")
    ex = Executor(layout, audit, clock=clock, **kw)
    _KERNEL_OF[ex] = kernel  # the kernel lives as long as its executor
    return ex, layout, clock, audit


def kernel_of(ex: Executor) -> FakeKernel:
    return _KERNEL_OF[ex]


def _makedirs(d: str) -> None:
    """mkdir -p through the sysio layer: in a cgroup tree the fake kernel makes each cgroup's files; on v2
    a parent hands its controllers to the new child (as the kubelet's cgroups do)."""
    if os.path.isdir(d):
        return
    parent = os.path.dirname(d)
    _makedirs(parent)
    controllers = os.path.join(parent, "cgroup.controllers")
    subtree = os.path.join(parent, "cgroup.subtree_control")
    if os.path.exists(subtree) and os.path.exists(controllers):
        with open(controllers) as f:
            want = f.read().split()
        with open(subtree) as f:
            have = f.read().split()
        if set(want) - set(have):
            fds = sysio.open_batch([subtree], os.O_WRONLY)
            try:
                sysio.pwrite_batch(fds, [" ".join("+" + c for c in want).encode()], np.zeros(1, dtype=np.uint8))
            finally:
                sysio.close_batch(fds)
    sysio.mkdir(d, 0o755)
    for f, whole in (("cpuset.cpus", f"0-{N_CPUS - 1}"), ("cpuset.mems", "0")):
        # a new v1 cpuset is empty: given its parent's, as the kubelet gives its cgroups (the root all)
        path = os.path.join(d, f)
        if os.path.exists(path) and not read(path).strip():
            above = os.path.join(parent, f)
            with open(path, "w") as fh:
                fh.write((read(above).strip() if os.path.exists(above) else whole) + "\n")


def put(layout: CgroupLayout, subsystem: str, rel: str, name: str, content: str) -> str:
    """``name`` of the cgroup ``rel`` (made by the fake kernel when it is new), then set to ``content``
    as by someone else: the state the test starts from."""
    path = layout.file(subsystem, rel, name)
    _makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(content)
    return path


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


BE = "kubepods/besteffort"


def test_write_audit_and_cache(tmp_path) -> None:
    ex, layout, clock, audit = make(tmp_path)
    p = put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE, reason="suppress BE")])
    assert read(p) == "120000\n"
    assert [r.status for r in res] == ["written"]
    rec = audit.recent[-1]
    assert rec["target"] == "cpu/kubepods/besteffort/cpu.cfs_quota_us"
    assert (rec["value"], rec["old"], rec["executed"]) == ("120000", "-1", True)
    assert rec["strategy"] == "cpuSuppress"
    # the same value again costs no syscall at all
    reads, writes = ex.stats.read_syscalls, ex.stats.write_syscalls
    clock.t += 30
    res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
    assert res[0].status == "cached"
    assert (ex.stats.read_syscalls, ex.stats.write_syscalls) == (reads, writes)
    with open(str(tmp_path / "audit.log")) as f:
        assert len(f.read().splitlines()) == 1


def test_forced_recheck_corrects_outside_change(tmp_path) -> None:
    ex, layout, clock, _audit = make(tmp_path)
    p = put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
    with open(p, "w") as f:
        f.write("-1\n")  # someone else resets it
    clock.t += 59
    assert ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])[0].status == "cached"
    assert read(p) == "-1\n"
    clock.t += 2  # past the 60 s force interval: read-compare, then correct
    res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
    assert res[0].status == "written" and read(p) == "120000\n"
    # an unchanged file is only read, not written
    clock.t += 61
    w = ex.stats.write_syscalls
    assert ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])[0].status == "unchanged"
    assert ex.stats.write_syscalls == w


def test_invalid_values_are_refused_and_audited(tmp_path) -> None:
    ex, layout, _, audit = make(tmp_path)
    p = put(layout, "cpu", BE, "cpu.shares", "1024\n")
    res = ex.apply([Write("x", "cpu.shares", "1", BE), Write("x", "cpu.cfs_quota_us", "500", BE),
                    Write("x", "cpuset.cpus", "0-a", BE), Write("x", "nope.file", "1", BE)])
    assert [r.status for r in res] == ["invalid"] * 4
    assert read(p) == "1024\n"
    assert all(r["executed"] is False and "error" in r for r in audit.recent)
    assert "outside [2, 262144]" in audit.recent[0]["error"]


def test_failed_write_is_not_cached(tmp_path) -> None:
    ex, layout, _clock, _audit = make(tmp_path)
    os.makedirs(layout.file("cpu", BE, "cpu.cfs_quota_us"))  # a directory: open fails with EISDIR
    res = ex.apply([Write("s", "cpu.cfs_quota_us", "120000", BE)])
    assert res[0].status == "failed"
    res = ex.apply([Write("s", "cpu.cfs_quota_us", "120000", BE)])
    assert res[0].status == "failed"  # retried, not served from the cache
    assert ex.stats.failed == 2


def test_missing_cgroup_is_skipped_quietly(tmp_path) -> None:
    ex, _layout, _, audit = make(tmp_path)
    res = ex.apply([Write("s", "cpu.cfs_quota_us", "120000", "kubepods/besteffort/podgone")])
    assert res[0].status == "missing"
    assert not audit.recent and ex.stats.missing == 1


def test_v2_rendering(tmp_path) -> None:
    ex, layout, _, audit = make(tmp_path, version=2)
    q = put(layout, "cpu", BE, "cpu.max", "max 100000\n")
    w = put(layout, "cpu", BE, "cpu.weight", "100\n")
    m = put(layout, "memory", BE, "memory.max", "max\n")
    ex.apply([Write("s", "cpu.cfs_quota_us", "50000", BE), Write("s", "cpu.shares", "2", BE),
              Write("s", "memory.limit_in_bytes", "1073741824", BE)])
    assert read(q) == "50000 100000\n" and read(w) == "1\n" and read(m) == "1073741824\n"
    assert "kubepods/besteffort/cpu.max" in {r["target"] for r in audit.recent}
    ex.apply([Write("s", "cpu.cfs_quota_us", "-1", BE), Write("s", "memory.limit_in_bytes", "-1", BE)])
    assert read(q) == "max 100000\n" and read(m) == "max\n"
    # reads give canonical values back
    assert ex.read("cpu.cfs_quota_us", BE) == "-1"
    put(layout, "cpu", BE, "cpu.weight", "39\n")
    ex.cache.entries.clear()
    assert ex.read("cpu.shares", BE) == str((39 - 1) * 262142 // 9999 + 2)


def test_unlimited_equivalences_skip_writes(tmp_path) -> None:
    ex, layout, _, _ = make(tmp_path, version=2)
    put(layout, "memory", BE, "memory.high", "max\n")
    res = ex.apply([Write("s", "memory.high", "9223372036854775807", BE)])
    assert res[0].status == "unchanged"
    put(layout, "cpuset", BE, "cpuset.cpus", "0-3\n")
    assert ex.apply([Write("s", "cpuset.cpus", "0,1,2,3", BE)])[0].status == "unchanged"


def tree(layout, subsystem, name, values: dict[str, str]) -> dict[str, str]:
    return {rel: put(layout, subsystem, rel, name, v) for rel, v in values.items()}


QOS, POD, CTR = "kubepods/burstable", "kubepods/burstable/poda", "kubepods/burstable/poda/c1"


def order_of(audit) -> list[str]:
    return [r["target"].split("/", 1)[1].rsplit("/", 1)[0] for r in audit.recent if r["executed"]]


def test_leveled_quota_raise_parents_first_lower_children_first(tmp_path) -> None:
    ex, layout, _, audit = make(tmp_path)
    tree(layout, "cpu", "cpu.cfs_quota_us", {QOS: "100000", POD: "50000", CTR: "20000"})
    # given children first on purpose: the executor reorders
    ex.apply([Write("s", "cpu.cfs_quota_us", v, d) for d, v in ((CTR, "80000"), (POD, "150000"),
                                                                  (QOS, "200000"))])
    assert order_of(audit) == [QOS, POD, CTR]
    audit.recent.clear()
    ex.apply([Write("s", "cpu.cfs_quota_us", v, d) for d, v in ((QOS, "30000"), (POD, "20000"),
                                                                  (CTR, "10000"))])
    assert order_of(audit) == [CTR, POD, QOS]


def test_leveled_cpuset_union_then_exact(tmp_path) -> None:
    ex, layout, _, audit = make(tmp_path)
    paths = tree(layout, "cpuset", "cpuset.cpus", {QOS: "0-1", POD: "0-1", CTR: "0-1"})
    ex.apply([Write("s", "cpuset.cpus", "2-3", d) for d in (CTR, POD, QOS)])
    got = [(r["target"].split("/", 1)[1].rsplit("/", 1)[0], r["value"]) for r in audit.recent]
    assert got == [(QOS, "0-3"), (POD, "0-3"), (CTR, "0-3"), (CTR, "2-3"), (POD, "2-3"), (QOS, "2-3")]
    assert all(read(p) == "2-3\n" for p in paths.values())


def test_ownership_lower_quota_wins_and_loser_audited_once(tmp_path) -> None:
    ex, layout, clock, audit = make(tmp_path)
    p = put(layout, "cpu", POD, "cpu.cfs_quota_us", "-1\n")
    ex.apply([Write("cpuBurst", "cpu.cfs_quota_us", "300000", POD)])
    assert read(p) == "300000\n"
    # another strategy wants a lower quota while cpuBurst's claim is live: it wins
    ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "100000", POD)])
    assert read(p) == "100000\n" and ex.owner("cpu.cfs_quota_us", POD) == "cpuSuppress"
    lost = [r for r in audit.recent if not r["executed"]]
    assert len(lost) == 1 and lost[0]["strategy"] == "cpuBurst" and "lower CFS quota" in lost[0]["reason"]
    # the higher wish keeps losing, audited only once
    for _ in range(3):
        clock.t += 1
        res = ex.apply([Write("cpuBurst", "cpu.cfs_quota_us", "300000", POD),
                        Write("cpuSuppress", "cpu.cfs_quota_us", "100000", POD)])
        assert read(p) == "100000\n"
    # the same standing conflict (cpuBurst wants 300000, cpuSuppress holds the file) is audited once
    assert len([r for r in audit.recent if not r["executed"]]) == 1
    assert res[0].status == "lost"
    # when the owner stops claiming, its lease runs out and the other may take the file
    clock.t += 10
    ex.apply([Write("cpuBurst", "cpu.cfs_quota_us", "300000", POD)])
    assert read(p) == "300000\n"


def test_dry_run_writes_nothing(tmp_path) -> None:
    ex, layout, _, audit = make(tmp_path, dry_run=True)
    p = put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    res = ex.apply([Write("s", "cpu.cfs_quota_us", "120000", BE, reason="r")])
    assert res[0].status == "dry-run" and read(p) == "-1\n"
    assert audit.recent[-1]["executed"] is False and audit.recent[-1]["old"] == "-1"


def test_restore_writes_back_what_was_found(tmp_path) -> None:
    ex, layout, _, _ = make(tmp_path)
    p = put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    s = tmp_path / "proc" / "sys" / "vm"
    s.mkdir(parents=True)
    (s / "min_free_kbytes").write_text("67584\n")
    ex.apply([Write("sys", "min_free_kbytes", "100000"), Write("cpu", "cpu.cfs_quota_us", "50000", BE)])
    assert (s / "min_free_kbytes").read_text() == "100000"
    ex.restore("sys")
    assert (s / "min_free_kbytes").read_text() == "67584" and read(p) == "50000\n"


def test_blkio_entries_are_independent(tmp_path) -> None:
    ex, layout, _, audit = make(tmp_path)
    p = put(layout, "blkio", BE, "blkio.throttle.read_bps_device", "")
    ex.apply([Write("b", "blkio.throttle.read_bps_device", "8:0 1000", BE, entry="8:0")])
    # a plain file is given the table the kernel would show (one line per device)
    assert read(p) == "8:0 1000\n"
    # two entries of one file in one batch compose (the second is planned on the first's result)
    ex.apply([Write("b", "blkio.throttle.read_bps_device", "8:16 2000", BE, entry="8:16"),
              Write("b", "blkio.throttle.read_bps_device", "8:0 500", BE, entry="8:0")])
    assert sorted(read(p).splitlines()) == ["8:0 500", "8:16 2000"]
    assert [r["value"] for r in list(audit.recent)[-2:]] == ["8:16 2000", "8:0 500"]  # the audit names the entry
    res = ex.apply([Write("b", "blkio.throttle.read_bps_device", "8:16 2000", BE, entry="8:16"),
                    Write("b", "blkio.throttle.read_bps_device", "8:32 0", BE, entry="8:32")])
    assert [r.status for r in res] == ["cached", "unchanged"]  # delete of an absent device: nothing to do
    # a delete request removes the device's line
    ex.apply([Write("b", "blkio.throttle.read_bps_device", "8:0 0", BE, entry="8:0")])
    assert read(p) == "8:16 2000\n"


def test_schemata_lines_compose_in_one_batch(tmp_path) -> None:
    ex, _, _, _ = make(tmp_path)
    root = tmp_path / "sys" / "fs" / "resctrl"  # two L3 domains, as a two-socket node's
    for rel, body in (("info/L3/cbm_mask", "7ff"), ("info/L3/min_cbm_bits", "1"), ("info/L3/num_closids", "16"),
                      ("info/MB/min_bandwidth", "10"), ("info/MB/bandwidth_gran", "10"),
                      ("schemata", "L3:0=7ff;1=7ff\nMB:0=100;1=100"), ("tasks", "")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body + "\n" if body else "")
    _makedirs(str(root / "BE"))  # the kernel gives the new group the root's lines
    ex.apply([Write("r", "resctrl.schemata", "L3:0=f;1=f;\n", "BE", entry="L3"),
              Write("r", "resctrl.schemata", "MB:0=30;1=30;\n", "BE", entry="MB")])
    assert (root / "BE" / "schemata").read_text() == "L3:0=f;1=f\nMB:0=30;1=30\n"


@pytest.mark.parametrize("version", [1, 2])
def test_unsupported_resources_are_skipped(tmp_path, version: int) -> None:
    ex, _, _, audit = make(tmp_path, version=version)
    name = "io.max" if version == 1 else "blkio.cost.weight"
    res = ex.apply([Write("b", name, "8:0 rbps=1" if version == 1 else "8:0 50", BE)])
    assert res[0].status == "unsupported" and not audit.recent


def test_batch_larger_than_the_descriptor_table(tmp_path) -> None:
    """A batch bigger than the descriptor LRU must not have its own descriptors evicted mid-batch."""
    ex, layout, _, _ = make(tmp_path, max_open_files=4)
    dirs = [f"kubepods/burstable/pod{i}" for i in range(10)]
    paths = [put(layout, "cpu", d, "cpu.cfs_quota_us", "-1\n") for d in dirs]
    res = ex.apply([Write("s", "cpu.cfs_quota_us", str(10000 + i), d) for i, d in enumerate(dirs)])
    assert [r.status for r in res] == ["written"] * 10
    assert [read(p) for p in paths] == [f"{10000 + i}\n" for i in range(10)]
    ex.apply([Write("s", "cpu.cfs_quota_us", "5000", dirs[0])])
    assert len(ex.files) <= 10


def _strings_held(roots: list[object], needle: str, skip: tuple[object, ...]) -> set[int]:
    """Ids of the distinct strings containing ``needle`` reachable from ``roots`` (not through ``skip``)."""
    import gc
    import types

    seen: set[int] = {id(o) for o in skip}
    found: set[int] = set()
    todo = list(roots)
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, (type, types.ModuleType, types.FunctionType, types.MethodType)):
            continue
        seen.add(id(o))
        if isinstance(o, str):
            if needle in o:
                found.add(id(o))
            continue
        todo.extend(gc.get_referents(o))
    return found


@pytest.mark.parametrize("version", [1, 2])
def test_one_path_string_per_file_held(tmp_path, version: int) -> None:
    """What the executor keeps per file it wrote or read (location, write cache, claim, plan) names
    the file once: the display path, shared by the key; the absolute path is made again for each read
    and write.  (Three ~190-byte copies per file -- path, display path, a "path|resource" key --
    were 4 MiB of the first ticks' peak at 10,000 pods.)"""
    from qosmanager.executor.executor import Plan

    ex, layout, _, _ = make(tmp_path, version, max_open_files=4)
    sub, name = ("cpu", "cpu.cfs_burst_us") if version == 1 else ("", "cpu.max.burst")
    dirs = [f"kubepods/burstable/pod{i}" for i in range(100)]
    paths = [put(layout, sub, d, name, "0\n") for d in dirs]
    plan = Plan("s", "burst", 1, lambda: [Write("s", "cpu.cfs_burst_us", str(1000 + i), d)
                                          for i, d in enumerate(dirs[:60])])
    res = ex.apply([plan, *(Write("s", "cpu.cfs_burst_us", "7", d) for d in dirs[60:])])
    assert [r.status for r in res] == ["written"] * 100
    assert [read(p) for p in paths] == [f"{1000 + i}\n" for i in range(60)] + ["7\n"] * 40
    assert ex.read_many("cpu.cfs_burst_us", dirs) == [str(1000 + i) for i in range(60)] + ["7"] * 40
    # a dir spelled with a trailing slash: its display path is normalised, its absolute path kept
    assert [r.status for r in ex.apply([Write("s", "cpu.cfs_burst_us", "9", dirs[0] + "/")])] == ["written"]
    assert read(paths[0]) == "9\n"
    # (not through the executor itself, nor its descriptor table, which the plans reach through their
    # re-check: it keeps the paths of the 4 files it holds open)
    held = _strings_held([ex.locator.where, ex.cache.entries, ex.claims.claims, ex.plans.plans, ex.plans.groups,
                          ex.originals.table], "/" + name, skip=(ex, ex.files))
    # the dir with a trailing slash: its own display path and the absolute path kept for it
    assert len(held) == 100 + 2, len(held)


def test_blkio_cost_validators() -> None:
    from qosmanager.host.resources import blkio_cost_model_validator, blkio_cost_qos_validator

    assert blkio_cost_qos_validator("8:0 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000") is None
    assert "not 'MAJ:MIN" in (blkio_cost_qos_validator("sda enable=1") or "")
    assert "not key=value" in (blkio_cost_qos_validator("8:0 enable") or "")
    assert blkio_cost_qos_validator("8:0 rlat=-1") == "rlat must be >= 0"
    assert blkio_cost_qos_validator("8:0 rpct=x") == "rpct='x' is not a number"
    model = "8:0 ctrl=user rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6"
    assert blkio_cost_model_validator(model) is None
    assert blkio_cost_model_validator("8:0 ctrl=auto") is None
    assert blkio_cost_model_validator("8:0 rbps=0") == "rbps must be an integer >= 1"


def test_reads_renew_the_cache_of_a_file_it_knows(tmp_path) -> None:
    """A file read every tick (cpuBurst's candidate quotas) costs one read per force window, also
    after the window of the write that put it in the cache has passed; a read never adds a file
    the cache does not know, and a changed file is seen as it is."""
    ex, layout, clock, _audit = make(tmp_path)
    put(layout, "cpu", BE, "cpu.cfs_quota_us", "-1\n")
    other = put(layout, "cpu", "kubepods/burstable", "cpu.cfs_quota_us", "50000\n")
    ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
    reads = ex.stats.read_syscalls
    clock.t += 30
    assert ex.read("cpu.cfs_quota_us", BE) == "120000" and ex.stats.read_syscalls == reads
    clock.t += 31  # the write's window is over: read once ...
    assert ex.read("cpu.cfs_quota_us", BE) == "120000" and ex.stats.read_syscalls == reads + 1
    for _ in range(59):  # ... then served for a whole window again
        clock.t += 1
        assert ex.read("cpu.cfs_quota_us", BE) == "120000"
    assert ex.stats.read_syscalls == reads + 1
    clock.t += 1
    assert ex.read("cpu.cfs_quota_us", BE) == "120000" and ex.stats.read_syscalls == reads + 2
    # a file it never wrote is read every time (nothing is cached for it)
    for _ in range(3):
        assert ex.read("cpu.cfs_quota_us", "kubepods/burstable") == "50000"
    assert ex.stats.read_syscalls == reads + 5
    with open(other, "w") as f:
        f.write("70000\n")
    assert ex.read("cpu.cfs_quota_us", "kubepods/burstable") == "70000"
    # changed behind our back: the next read after the window sees it, and a write of ours corrects it
    path = layout.file("cpu", BE, "cpu.cfs_quota_us")
    with open(path, "w") as f:
        f.write("-1\n")
    clock.t += 61
    assert ex.read("cpu.cfs_quota_us", BE) == "-1"
    res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
    assert res[0].status == "written" and read(path) == "120000\n"



def test_a_file_missing_in_a_directory_that_exists_is_a_failure_not_a_vanished_cgroup(tmp_path, caplog) -> None:
    """The kernel makes a cgroup's files with the dir: one missing there is reported (logged once,
    audited, counted), not skipped as a pod that went.  A knob marked optional (``if_exists``) and a
    dir that is gone stay quiet."""
    import logging

    ex, layout, clock, audit = make(tmp_path)
    put(layout, "cpu", BE, "cpu.shares", "2\n")
    # the dir exists, its cpu.cfs_quota_us does not (a tree that lost it), nor cpu.cfs_burst_us (a kernel
    # before 5.14, which has none)
    for name in ("cpu.cfs_quota_us", "cpu.cfs_burst_us"):
        os.unlink(layout.file("cpu", BE, name))
    with caplog.at_level(logging.WARNING, logger="qosmanager.executor.executor"):
        for _ in range(3):
            res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE, reason="suppress")])
            assert res[0].status == "failed" and "ENOENT" in (res[0].error or "")
            clock.t += 1
    assert ex.stats.failed == 3 and ex.stats.missing == 0
    failed = [r for r in audit.recent if not r["executed"]]
    assert len(failed) == 1 and failed[0]["target"] == "cpu/kubepods/besteffort/cpu.cfs_quota_us"
    assert len([r for r in caplog.records if "cpu.cfs_quota_us" in r.getMessage()]) == 1
    # optional knob in the same dir; a file of a dir that is gone
    res = ex.apply([Write("cpuBurst", "cpu.cfs_burst_us", "1000", BE),
                    Write("cpuSuppress", "cpu.cfs_quota_us", "120000", f"{BE}/podgone")])
    assert [r.status for r in res] == ["missing", "missing"]
    assert ex.stats.failed == 3 and len([r for r in audit.recent if not r["executed"]]) == 1
