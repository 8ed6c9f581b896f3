"""Demand-driven collection on real kernel cgroups (v1): 2,000 containers in 1,000 pods, created under
this process's own cgroup (tests/kernelcg.py) and removed afterwards; skips, saying why, where that is
not allowed.

Bound (the demand-driven collection issue): in a steady state the whole agent (demand-mode collector
and the strategies that read metrics: cpuSuppress, cpuBurst, cpuEvict, memoryEvict; ``--dry-run``, so
nothing is written) costs at most 0.3x what the read-everything collector alone costs per tick over
the same cgroups.  Both variants run on one agent (one set of descriptors), switching its collector's
mode, so they read exactly the same files.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import pytest

import kernelcg
from conftest import check_bounds, until_pods_in_force
from qosmanager.agent import Agent, AgentConfig
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.roots import HostRoots
from qosmanager.metrics.collector import COLLECT_ALL, COLLECT_DEMAND
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

N_CONTAINERS = 2000
SCENARIO = "demand kernel v1 2000c"
STRATEGIES = ["cpuSuppress", "cpuBurst", "cpuEvict", "memoryEvict"]
NODESLO = {"resourceUsedThresholdWithBE": {
    "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cfsQuota",
    "memoryEvictThresholdPercent": 95, "cpuEvictBESatisfactionLowerPercent": 10,
    "cpuEvictBESatisfactionUpperPercent": 20,
}}

pytestmark = pytest.mark.kernel


@dataclass
class _Machine:  # what node_object needs to describe this machine
    n_cpus: int
    memory_bytes: int


def _memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 1 << 30


@pytest.fixture(scope="module")
def node(tmp_path_factory: Any) -> Any:
    reason = kernelcg.unavailable(1)
    if reason:
        pytest.skip(f"real cgroups unavailable: {reason}")
    tree = kernelcg.KernelTree(1)
    agent = None
    try:
        layout = CgroupLayout(HostRoots(cgroup=tree.root), 1, "cgroupfs")
        pods = FakeHost.make_pods(N_CONTAINERS, containers_per_pod=2, seed=13)
        for q in (KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT):
            tree.mkdir(layout.qos_dir(q))
        for p in pods:
            pod_rel = layout.pod_dir(p.qos, p.uid)
            for c in p.containers:
                tree.mkdir(layout.container_dir(pod_rel, c.container_id))
        d = tmp_path_factory.mktemp("demand-kernel")
        machine = _Machine(os.cpu_count() or 2, _memory_bytes())
        node_obj = node_object(machine, batch_cpu_milli=1000, batch_memory=1 << 30)  # type: ignore[arg-type]
        files = {"pods.json": pod_list(pod_object(p) for p in pods), "node.json": node_obj,
                 "nodeslo.json": nodeslo_object(NODESLO)}
        for name, obj in files.items():
            with open(d / name, "w") as f:
                json.dump(obj, f)
        agent = Agent(AgentConfig(roots=HostRoots(cgroup=tree.root), cgroup_version="1",
                                  cgroup_driver="cgroupfs", pods_file=str(d / "pods.json"),
                                  node_file=str(d / "node.json"), node_slo_file=str(d / "nodeslo.json"),
                                  dry_run=True, metrics_addr="", strategies=STRATEGIES,
                                  feature_gates={"BECPUEvict": True, "BEMemoryEvict": True}))
        enabled = agent.manager.enabled()

        def demand_tick() -> None:
            agent.collector.mode = COLLECT_DEMAND
            now = time.time()
            agent.collect(now)
            for s in enabled:
                agent.manager.run_strategy(s, now)

        def everything() -> None:
            agent.collector.mode = COLLECT_ALL
            agent.collector.collect(time.time())

        until_pods_in_force(agent, len(pods), demand_tick)  # a pods file of >= 1 MiB is decoded beside the ticks
        for _ in range(11):  # discovery, first samples, the slow cadence's first round
            demand_tick()
        assert agent.collector.stats.pending == 0 and agent.collector.stats.containers == N_CONTAINERS
        yield agent, demand_tick, everything
    finally:
        if agent is not None:
            agent.close()
        tree.cleanup()


def test_read_everything(bench: Any, node: Any) -> None:
    agent, _, everything = node
    bench(SCENARIO, "read-everything collector", everything, per=N_CONTAINERS, unit="container")
    assert agent.collector.stats.pod_reads == agent.collector.stats.pods


def test_demand_agent(bench: Any, node: Any) -> None:
    agent, demand_tick, _ = node
    bench(SCENARIO, "demand agent (steady)", demand_tick, per=N_CONTAINERS, unit="container")
    st = agent.collector.stats
    assert agent.collector.plan is not None and not agent.collector.plan.near, agent.collector.plan
    assert st.pod_reads <= st.pods // 10 + 1
    assert all(s.errors == 0 for s in agent.manager.stats.values())
    print(f"\nkernel v1: {st.pod_reads} pod and {st.container_reads} container slots read per steady tick")


def test_bounds(node: Any) -> None:
    # steady states of both (a tick repeats its plan; the pass re-reads the same files): timed warm (check_bounds)
    check_bounds(SCENARIO, [("demand agent (steady)", "read-everything collector", "<=", 0.3)], warm=True)
