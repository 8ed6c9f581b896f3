"""Churn leaves nothing behind: pods replaced one after another on a fake tree, the agent's maps that
follow the pods (the collector's demand selections, the executor's cache, claims, plans, originals and
descriptors, the eviction coordinator's pending and back-off maps) come back to the size the live pods
explain, and no entry names a pod that went."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from qosmanager.agent import Agent, AgentConfig
from qosmanager.sim.fakehost import FakeHost, FakePod
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

NODESLO = {
    "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                    "cpuSuppressPolicy": "cpuset", "memoryEvictThresholdPercent": 70,
                                    "cpuEvictBESatisfactionLowerPercent": 60,
                                    "cpuEvictBESatisfactionUpperPercent": 80, "cpuEvictTimeWindowSeconds": 30},
    "cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 1000, "sharePoolThresholdPercent": 50},
}
UID = re.compile(r"pod([0-9a-f]{8}(?:[-_][0-9a-f]{4}){3}[-_][0-9a-f]{12})")


def _sizes(a: Agent) -> dict[str, int]:
    ex, co = a.executor, a.coordinator
    return {"selections": len(a.collector._selections), "cache": len(ex.cache.entries),
            "claims": len(ex.claims.claims), "where": len(ex.locator.where), "originals": len(ex.originals.table),
            "plans": len(ex.plans.plans), "conflicts": len(ex.claims.lost), "held": len(ex.fights.held),
            "fds": len(ex.files._fds),
            "pending": len(co.pending), "backoff": len(co.backoff)}


def _keys(a: Agent) -> list[str]:
    ex = a.executor
    keys = [*map(str, ex.cache.entries), *map(str, ex.claims.claims), *map(str, ex.locator.where),
            *map(str, ex.originals.table), *map(str, ex.plans.plans), *map(str, ex.plans.groups),
            *map(str, ex.files._fds), *a.coordinator.pending,
            *a.coordinator.backoff]
    return keys


def _stale(a: Agent, live: set[str]) -> list[str]:
    return [k for k in _keys(a) if any(u.replace("_", "-") not in live for u in UID.findall(k))]


def test_churning_100_pods_leaves_the_maps_at_their_size(tmp_path: Any) -> None:
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=8)
    pods: dict[str, FakePod] = {p.uid: p for p in FakeHost.make_pods(60, containers_per_pod=2, seed=3)}
    host.add_pods(pods.values())

    def write_pods() -> None:
        with open(tmp_path / "pods.json", "w") as f:
            json.dump(pod_list(pod_object(p) for p in pods.values()), f)

    write_pods()
    for name, obj in (("node.json", node_object(host, batch_cpu_milli=4000, batch_memory=8 << 30)),
                      ("nodeslo.json", nodeslo_object(NODESLO))):
        with open(tmp_path / name, "w") as f:
            json.dump(obj, f)
    now = [10_000.0]
    a = Agent(AgentConfig(roots=host.roots, cgroup_version="1", pods_file=str(tmp_path / "pods.json"),
                          node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "nodeslo.json"),
                          metrics_addr="", feature_gates={"BECPUEvict": True, "BEMemoryEvict": True,
                                                          "CPUBurst": True}),
              clock=lambda: now[0])
    clock = itertools.count(10_001)
    usage = itertools.count(10**9, 10**8)

    def tick() -> None:
        now[0] = float(next(clock))
        # a live node's /proc/stat moves (counters standing still are the proc-stat-frozen condition)
        host.set_proc_stat([int(now[0] * 50)] * host.n_cpus, [int(now[0] * 50)] * host.n_cpus)
        for p in pods.values():
            for c in p.containers:
                host.set_cpu_usage(host.container_dir(p.uid, c.name), next(usage))
        a.collect(now[0])
        for s in a.manager.enabled():
            a.manager.run_strategy(s, now[0])

    try:
        for _ in range(40):  # every cadence's turn, every strategy's first plans
            tick()
        before = _sizes(a)
        assert before["selections"] > 0 and before["where"] > 0 and before["fds"] > 0
        # 100 pods replaced (of 30 live), 4 at a time, each round seen by a few ticks
        for generation in range(1, 26):
            for uid in sorted(pods)[:4]:
                host.remove_pod(uid)
                del pods[uid]
            for p in FakeHost.make_pods(8, containers_per_pod=2, seed=100 + generation):
                host.add_pod(p)
                pods[p.uid] = host.pods[p.uid]
            write_pods()
            for _ in range(3):
                tick()
        for _ in range(40):  # the same quiet stretch as before the churn
            tick()
        after = _sizes(a)
        assert a.collector.stats.pods == len(pods) == 30
        assert sum(bool(UID.search(k)) for k in _keys(a)) >= len(pods)  # the keys do name the pods
        assert not _stale(a, set(pods)), _stale(a, set(pods))[:5]
        # the selections kept are those of the tracked set now; before, those of every earlier tracked
        # set stayed (arrays of the node's size each) until 256 had piled up
        assert after["selections"] <= before["selections"], (before, after)
        for k in ("where", "fds", "originals", "plans", "claims", "cache"):
            assert after[k] <= before[k] + 4, (k, before, after)  # the QoS mix of the new pods may differ
        assert after["pending"] == after["backoff"] == after["conflicts"] == 0
        assert after["held"] <= before["held"]  # the QoS dirs' files only
    finally:
        a.close()
