"""Collector reads on real kernel cgroups: 2,000 containers in 1,000 pods (cgroup v1).

The cgroups are created under this process's own cgroup in each hierarchy and removed
afterwards (see tests/kernelcg.py); the benchmark skips, saying why, where that is not
allowed.  Bounds (the data-path issue): native >= 4x faster than the naive agent, and at
most 1.3x the pread-only floor (the kernel's own cost of producing the files).
"""

from __future__ import annotations

from typing import Any

import pytest

import kernelcg
from collect_common import naive_collector, reference_readers, tracked_files
from conftest import check_bounds
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.roots import HostRoots
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import pod_object
from qosmanager.states.store import StateStore

N_CONTAINERS = 2000
SCENARIO = "collect kernel v1 2000c"

pytestmark = pytest.mark.kernel  # every test here reads real cgroups


@pytest.fixture(scope="module")
def node() -> Any:
    reason = kernelcg.unavailable(1)
    if reason:
        pytest.skip(f"real cgroups unavailable: {reason}")
    tree = kernelcg.KernelTree(1)
    try:
        layout = CgroupLayout(HostRoots(cgroup=tree.root), 1, "cgroupfs")
        pods = FakeHost.make_pods(N_CONTAINERS, containers_per_pod=2, seed=11)
        for q in (KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT):
            tree.mkdir(layout.qos_dir(q))
        for p in pods:
            pod_rel = layout.pod_dir(p.qos, p.uid)
            for c in p.containers:
                tree.mkdir(layout.container_dir(pod_rel, c.container_id))
        store = StateStore()
        store.set_pods([pod_object(p) for p in pods])
        col = Collector(layout, MetricCache(), store)
        col.sync()
        assert col.stats.pending == 0 and col.stats.containers == N_CONTAINERS
        yield col
        col.close()
    finally:
        tree.cleanup()


def test_native(bench: Any, node: Collector) -> None:
    n = node.pod_reader.high_water + node.ctr_reader.high_water
    got = bench(SCENARIO, "native", lambda: node.pod_reader.read() + node.ctr_reader.read(), per=n, unit="cgroup")
    assert got == n


def test_reference(bench: Any, node: Collector) -> None:
    readers = reference_readers(node)
    n = sum(r.high_water for r in readers)
    assert bench(SCENARIO, "reference", lambda: sum(r.read() for r in readers), per=n, unit="cgroup",
                 remeasure=False) == n


def test_naive(bench: Any, node: Collector) -> None:
    files = tracked_files(node)
    assert bench(SCENARIO, "naive", naive_collector(files, 1), per=len(files), unit="cgroup") == len(files)


def test_floor(bench: Any, node: Collector) -> None:
    n = node.pod_reader.high_water + node.ctr_reader.high_water
    assert bench(SCENARIO, "floor", lambda: node.pod_reader.pread_only() + node.ctr_reader.pread_only(),
                 per=n, unit="cgroup") > 0


def test_bounds(node: Collector) -> None:
    # read passes without state: each timed in its steady state (check_bounds, warm)
    check_bounds(SCENARIO, [("native", "naive", ">=", 4.0), ("native", "floor", "<=", 1.3)], warm=True)
