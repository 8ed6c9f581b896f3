"""Collector reads on a tmpfs fake tree of 2,000 containers (1,000 pods), cgroup v1 and v2.

Bounds (the data-path issue): native >= 10x faster than the naive agent, and at most 3x
the pread-only floor.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from collect_common import naive_collector, reference_readers, tracked_files
from conftest import check_bounds
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import pod_object
from qosmanager.states.store import StateStore

N_CONTAINERS = 2000


@pytest.fixture(scope="module", params=[1, 2], ids=["v1", "v2"])
def node(request: Any, tmpfs_dir: str) -> Any:
    version = request.param
    host = FakeHost(os.path.join(tmpfs_dir, f"collect-v{version}"), version=version, n_cpus=32, kernel=False)
    pods = FakeHost.make_pods(N_CONTAINERS, containers_per_pod=2, seed=7)
    host.add_pods(pods)
    store = StateStore()
    store.set_pods([pod_object(p) for p in pods])
    col = Collector(host.layout, MetricCache(), store)
    col.sync()
    assert col.stats.pending == 0 and col.stats.containers == N_CONTAINERS
    yield version, col
    col.close()


def scenario(version: int) -> str:
    return f"collect tmpfs v{version} 2000c"


def test_native(bench: Any, node: Any) -> None:
    version, col = node
    n = col.pod_reader.high_water + col.ctr_reader.high_water

    def run() -> int:
        return col.pod_reader.read() + col.ctr_reader.read()

    assert bench(scenario(version), "native", run, per=n, unit="cgroup") == n


def test_reference(bench: Any, node: Any) -> None:
    version, col = node
    readers = reference_readers(col)
    n = sum(r.high_water for r in readers)
    assert bench(scenario(version), "reference", lambda: sum(r.read() for r in readers), per=n,
                 unit="cgroup", remeasure=False) == n


def test_naive(bench: Any, node: Any) -> None:
    version, col = node
    files = tracked_files(col)
    run = naive_collector(files, version)
    assert bench(scenario(version), "naive", run, per=len(files), unit="cgroup") == len(files)


def test_floor(bench: Any, node: Any) -> None:
    version, col = node
    n = col.pod_reader.high_water + col.ctr_reader.high_water
    assert bench(scenario(version), "floor", lambda: col.pod_reader.pread_only() + col.ctr_reader.pread_only(),
                 per=n, unit="cgroup") > 0


def test_bounds(node: Any) -> None:
    version, _ = node
    # read passes without state: each timed in its steady state (check_bounds, warm)
    check_bounds(scenario(version), [("native", "naive", ">=", 10.0), ("native", "floor", "<=", 3.0)], warm=True)
