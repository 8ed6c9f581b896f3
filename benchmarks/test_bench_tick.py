"""The full collector tick (sync + native reads + node metrics + store in the metric cache) at
2,000 and 5,000 containers on a tmpfs fake tree (cgroup v1), and its cost per container.

A second variant replaces 5 % of the containers between ticks (the issue's churn rate per
minute, compressed into one tick) to show that discovery costs work in proportion to what
changed, not a re-walk of the tree.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import pod_object
from qosmanager.states.store import StateStore


@pytest.fixture(scope="module", params=[2000, 5000], ids=["2000c", "5000c"])
def node(request: Any, tmpfs_dir: str) -> Any:
    n = request.param
    host = FakeHost(os.path.join(tmpfs_dir, f"tick-{n}"), version=1, n_cpus=64, kernel=False)
    pods = FakeHost.make_pods(n, containers_per_pod=2, seed=21)
    host.add_pods(pods)
    spare = FakeHost.make_pods(n // 10, containers_per_pod=2, seed=22)
    host.add_pods(spare)
    store = StateStore()
    objs = [pod_object(p) for p in pods]
    store.set_pods(objs)
    col = Collector(host.layout, MetricCache(), store)
    col.sync()
    while col.backlog:  # a pass starts at most TRACK_PER_PASS new pods
        col.sync()
    assert col.stats.containers == n and col.stats.pending == 0
    yield n, col, store, objs, [pod_object(p) for p in spare]
    col.close()


def test_tick(bench: Any, node: Any) -> None:
    n, col, *_ = node
    t = itertools.count(1000)
    bench(f"full tick {n}c", "tick", lambda: col.collect(float(next(t))), per=n, unit="container")
    reopen = sum(col.ctr_reader.is_reopen(s, f) for s in range(col.ctr_reader.high_water) for f in range(4))
    print(f"\n{n} containers: {col.pod_reader.open_fds + col.ctr_reader.open_fds} descriptors held, "
          f"{reopen} container files in reopen mode (descriptor limit)")


def test_tick_with_churn(bench: Any, node: Any) -> None:
    """Each round swaps 5 % of the pods for others, then ticks."""
    n, col, store, objs, spare = node
    k = max(1, len(objs) // 20)
    rounds = itertools.count()
    t = itertools.count(100_000)

    def run() -> None:
        i = next(rounds)
        lo = (i * k) % (len(objs) - k)
        swap = spare[(i * k) % (len(spare) - k):][:k]
        store.set_pods(objs[:lo] + swap + objs[lo + k:])
        col.collect(float(next(t)))

    bench(f"full tick {n}c", "tick+5% churn", run, per=n, unit="container")
