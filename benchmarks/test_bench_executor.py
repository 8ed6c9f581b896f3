"""Executor: 2,000 ``cpu.cfs_quota_us`` writes in one batch vs a per-file open/write/close loop,
and a batch of unchanged values, which must make no write (or read) syscall at all.  "Nothing
changed": the same 2,000 writes as one plan the executor skips (not even built), or as 1,000 plans of
two writes (one per pod) in a group, vs rebuilding them and letting the write cache answer each.

Runs on a tmpfs fake tree and, where allowed, on real kernel cgroups.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

import kernelcg
from conftest import check_bounds
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, Plan, PlanGroup, Write
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.roots import HostRoots
from qosmanager.sim.fakehost import FakeHost

N = 2000
PERIOD_US = 1_000_000  # cpu.cfs_period_us of the real cgroups written (see ``target``)


def container_dirs(layout: CgroupLayout) -> list[str]:
    pods = FakeHost.make_pods(N, containers_per_pod=2, seed=5, be_fraction=0.0)
    out = []
    for p in pods:
        pod_rel = layout.pod_dir(p.qos, p.uid)
        out.extend(layout.container_dir(pod_rel, c.container_id) for c in p.containers)
    return out


@pytest.fixture(scope="module", params=["tmpfs", pytest.param("kernel", marks=pytest.mark.kernel)])
def target(request: Any, tmpfs_dir: str) -> Any:
    if request.param == "tmpfs":
        host = FakeHost(os.path.join(tmpfs_dir, "executor"), version=1, n_cpus=8, kernel=False)
        pods = FakeHost.make_pods(N, containers_per_pod=2, seed=5, be_fraction=0.0)
        host.add_pods(pods)
        yield "tmpfs", host.layout, container_dirs(host.layout), tmpfs_dir
        return
    reason = kernelcg.unavailable(1)
    if reason:
        pytest.skip(f"real cgroups unavailable: {reason}")
    tree = kernelcg.KernelTree(1)
    try:
        layout = CgroupLayout(HostRoots(cgroup=tree.root), 1, "cgroupfs")
        dirs = container_dirs(layout)
        for d in dirs:
            tree.mkdir(d)
            # A quota write arms the cgroup's bandwidth period timer; it fires once or twice a period
            # later, in an interrupt charged to whatever thread is on the CPU then: with the default
            # 100 ms period, ~2,000 timer interrupts per round landed in the next variant's CPU time
            # (the one taking longer on the wall clock got more).  At the longest period (1 s) they
            # are ~9x fewer; the writes themselves cost the kernel the same.
            with open(layout.file("cpu", d, "cpu.cfs_period_us"), "w") as f:
                f.write(str(PERIOD_US))
        yield "kernel", layout, dirs, tmpfs_dir
    finally:
        tree.cleanup()


def scenario(kind: str) -> str:
    return f"executor {kind} 2000 quota writes"


def test_batch(bench: Any, target: Any) -> None:
    kind, layout, dirs, tmp = target
    ex = Executor(layout, AuditLog(os.path.join(tmp, f"audit-{kind}.log")))
    values = itertools.cycle(["200000", "300000"])

    def run() -> int:
        v = next(values)
        res = ex.apply([Write("bench", "cpu.cfs_quota_us", v, d) for d in dirs])
        return sum(r.status == "written" for r in res)

    assert bench(scenario(kind), "batch", run, per=N, unit="write") == N
    ex.close()


def test_naive_loop(bench: Any, target: Any) -> None:
    kind, layout, dirs, _ = target
    paths = [layout.file("cpu", d, "cpu.cfs_quota_us") for d in dirs]
    values = itertools.cycle(["200000", "300000"])

    def run() -> int:
        v = next(values)
        for p in paths:
            with open(p, "w") as f:
                f.write(v)
        return len(paths)

    assert bench(scenario(kind), "naive", run, per=N, unit="write") == N


def test_unchanged_batch_makes_no_syscall(bench: Any, target: Any) -> None:
    kind, layout, dirs, tmp = target
    ex = Executor(layout, AuditLog(os.path.join(tmp, f"audit2-{kind}.log")))
    writes = [Write("bench", "cpu.cfs_quota_us", "250000", d) for d in dirs]
    ex.apply(writes)
    reads, wr = ex.stats.read_syscalls, ex.stats.write_syscalls

    def run() -> int:
        return sum(r.status == "cached" for r in ex.apply(writes))

    assert bench(scenario(kind), "unchanged", run, per=N, unit="write") == N
    assert (ex.stats.read_syscalls, ex.stats.write_syscalls) == (reads, wr), "a cached value cost a syscall"
    ex.close()


def nothing_changed(kind: str) -> str:
    return f"executor {kind} 2000 unchanged writes: plan vs rebuilt"


def test_nothing_changed_plan_skip(bench: Any, target: Any) -> None:
    kind, layout, dirs, tmp = target
    ex = Executor(layout, AuditLog(os.path.join(tmp, f"audit3-{kind}.log")))
    version = ("quota", 250000)
    built = []

    def build() -> list[Write]:
        built.append(1)
        return [Write("bench", "cpu.cfs_quota_us", "250000", d) for d in dirs]

    ex.apply([Plan("bench", "quota", version, build)])
    reads, wr = ex.stats.read_syscalls, ex.stats.write_syscalls

    def run() -> int:
        return len(ex.apply([Plan("bench", "quota", version, build)]))

    assert bench(nothing_changed(kind), "plan", run, per=N, unit="write") == 0
    assert len(built) == 1, "an unchanged plan was built again"
    assert (ex.stats.read_syscalls, ex.stats.write_syscalls) == (reads, wr)
    ex.close()


def test_nothing_changed_plan_group(bench: Any, target: Any) -> None:
    kind, layout, dirs, tmp = target
    # a window longer than the measurement: the steady state between re-checks
    ex = Executor(layout, AuditLog(os.path.join(tmp, f"audit5-{kind}.log")), force_seconds=3600.0)

    def pod_plan(k: int) -> Plan:
        pair = dirs[2 * k:2 * k + 2]
        return Plan("bench", f"pod{k}", 250000,
                    lambda: [Write("bench", "cpu.cfs_quota_us", "250000", d) for d in pair], spread=True)

    group = PlanGroup("bench", "pods", [pod_plan(k) for k in range(N // 2)])
    ex.apply([group])
    sent = ex.stats.plans_sent

    def run() -> int:
        return len(ex.apply([group]))

    assert bench(nothing_changed(kind), "group", run, per=N, unit="write") == 0
    assert ex.stats.plans_sent == sent, "an unchanged plan of the group was built again"
    ex.close()


def test_nothing_changed_rebuilt(bench: Any, target: Any) -> None:
    kind, layout, dirs, tmp = target
    ex = Executor(layout, AuditLog(os.path.join(tmp, f"audit4-{kind}.log")))
    ex.apply([Write("bench", "cpu.cfs_quota_us", "250000", d) for d in dirs])

    def run() -> int:
        res = ex.apply([Write("bench", "cpu.cfs_quota_us", "250000", d) for d in dirs])
        return sum(r.status == "cached" for r in res)

    assert bench(nothing_changed(kind), "rebuilt", run, per=N, unit="write") == N
    ex.close()


def test_bounds(target: Any) -> None:
    """On real cgroups the batch beats the per-file loop.  On tmpfs a write costs the kernel almost
    nothing (and a fake file needs an extra ftruncate), so the executor's per-write validation, ordering
    and audit dominate: there the bound only guards against regressions."""
    kind = target[0]
    batch_bound = 1.0 if kind == "kernel" else 0.7
    check_bounds(scenario(kind), [("batch", "naive", ">=", batch_bound), ("unchanged", "naive", ">=", 5.0)])
    # an unchanged plan costs a lookup and a comparison, not 2,000 writes built and looked up
    check_bounds(nothing_changed(kind), [("plan", "rebuilt", ">=", 50.0), ("group", "rebuilt", ">=", 50.0)])
