"""The full agent at 2,000 containers, every strategy enabled: one tick of the collector plus one
tick of every strategy, against the collector's own tick.

Bound (the QoS-manager issue): the whole agent spends at most twice the collector's cost per tick,
i.e. all strategies together cost no more than collecting.  The collector here reads everything
(``--collect-mode all``): the demand-driven collector's own bounds are in test_bench_demand.py.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import pytest

from conftest import check_bounds, check_regression_fails, until_pods_in_force
from qosmanager.agent import Agent, AgentConfig
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

N = 2000
SCENARIO = "agent tick 2000c all strategies"

NODESLO = {
    "resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cfsQuota",
        "memoryEvictThresholdPercent": 70, "cpuEvictBESatisfactionLowerPercent": 60,
        "cpuEvictBESatisfactionUpperPercent": 80, "cpuEvictThresholdPercent": 90,
        "evictEnabledPriorityThreshold": 5999, "memoryAllocatableEvictThresholdPercent": 110,
        "memoryAllocatableEvictLowerPercent": 100, "cpuAllocatableEvictThresholdPercent": 110,
        "cpuAllocatableEvictLowerPercent": 100, "allocatableEvictPriorityThreshold": 5999,
    },
    "cpuBurstStrategy": {"policy": "auto", "cfsQuotaBurstPeriodSeconds": -1},
    "resourceQOSStrategy": {
        "lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 10, "lowLimitPercent": 20,
                                  "throttlingPercent": 80}, "resctrlQOS": {"enable": True}},
        "beClass": {"memoryQOS": {"enable": True}, "resctrlQOS": {"enable": True}},
    },
    "systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150},
}


@pytest.fixture(scope="module")
def agent(tmpfs_dir: str) -> Any:
    root = os.path.join(tmpfs_dir, "agent")
    host = FakeHost(os.path.join(root, "host"), version=1, n_cpus=32, resctrl=True, kernel=False)
    pods = FakeHost.make_pods(N, containers_per_pod=2, seed=31)
    host.add_pods(pods)
    for name, obj in (("pods.json", pod_list(pod_object(p) for p in pods)),
                      ("node.json", node_object(host, batch_cpu_milli=16000, batch_memory=32 << 30)),
                      ("nodeslo.json", nodeslo_object(NODESLO))):
        with open(os.path.join(root, name), "w") as f:
            json.dump(obj, f)
    # every container busy at a different level, so suppression, burst and evictions have work
    for i, p in enumerate(pods):
        for c in p.containers:
            host.set_cpu_usage(host.container_dir(p.uid, c.name), (i % 7) * 10**8)
    clock = itertools.count(10_000)
    now = [10_000.0]
    a = Agent(AgentConfig(roots=host.roots, pods_file=os.path.join(root, "pods.json"),
                          node_file=os.path.join(root, "node.json"), node_slo_file=os.path.join(root, "nodeslo.json"),
                          feature_gates={"AllAlpha": True, "AllBeta": True}, collect_mode="all"),
              clock=lambda: now[0])
    def tick() -> None:
        now[0] = float(next(clock))
        a.collect(now[0])
        for s in a.manager.enabled():
            a.manager.run_strategy(s, now[0])

    until_pods_in_force(a, len(pods), tick)
    for _ in range(3):  # warm up: discovery, first samples, first writes
        tick()
    assert a.collector.stats.containers == N and a.collector.stats.pending == 0
    yield a, now, clock
    a.close()


def test_collector_tick(bench: Any, agent: Any) -> None:
    a, now, clock = agent

    def run() -> None:
        now[0] = float(next(clock))
        a.collect(now[0])

    bench(SCENARIO, "collector", run, per=N, unit="container")
    assert a.collector.stats.containers == N, a.collector.stats  # it timed the whole node


def test_full_tick(bench: Any, agent: Any) -> None:
    a, now, clock = agent
    enabled = a.manager.enabled()
    assert len(enabled) >= 1

    def run() -> None:
        now[0] = float(next(clock))
        a.collect(now[0])
        for s in enabled:
            a.manager.run_strategy(s, now[0])

    bench(SCENARIO, "collector+strategies", run, per=N, unit="container")
    assert a.collector.stats.containers == N, a.collector.stats
    per = {n: f"{st.last_seconds * 1e3:.2f} ms" for n, st in a.manager.stats.items()}
    print(f"\nstrategies: {', '.join(s.name for s in enabled)}; last tick each: {per}")
    assert all(st.errors == 0 for st in a.manager.stats.values()), {n: st.last_error for n, st in
                                                                     a.manager.stats.items()}


BOUND = ("collector+strategies", "collector", "<=", 2.0)


def test_bounds(agent: Any) -> None:
    check_regression_fails(SCENARIO, BOUND)  # a full tick twice as costly misses the bound
    check_bounds(SCENARIO, [BOUND])
