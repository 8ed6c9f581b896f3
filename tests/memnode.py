"""A memory node for whole-agent tests of the memory levels (the memory trigger, the reaction times): a fake
host of 16 GiB with BE pods only, the agent on it in standalone mode, its clocks one fake clock."""

from __future__ import annotations

import json
from pathlib import Path

from qosmanager.agent import Agent, AgentConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from simclock import Clock

GiB = 1 << 30
CAP = 16 * GiB
T0 = 1000.0
SLO = {"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}}  # L 68: engage at 63 %


def be_pod(i: int) -> FakePod:
    return FakePod(f"{i:08d}-0000-4000-8000-00000000be00", "default", f"be-{i}", KubeQoS.BESTEFFORT,
                   [FakeContainer("c", f"containerd://{i:064x}")])


def make(tmp_path: Path, version: int, *, strategies: list[str], gates: dict[str, bool], pods: int = 1,
         react_mode: str = "fast", metrics_addr: str = "") -> tuple[FakeHost, Agent, Clock]:
    host = FakeHost(str(tmp_path / "host"), version=version, memory_bytes=CAP)
    fake = [be_pod(i) for i in range(1, pods + 1)]
    host.add_pods(fake)
    (tmp_path / "pods.json").write_text(json.dumps(pod_list(pod_object(p, memory=GiB, priority=5500) for p in fake)))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object(SLO)))
    clock = Clock(T0)
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", pods_file=str(tmp_path / "pods.json"),
                              node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "slo.json"),
                              strategies=strategies, feature_gates=gates, metrics_addr=metrics_addr,
                              react_mode=react_mode, cgroup_version=str(version), cgroup_driver="cgroupfs"),
                  clock=clock, monotonic=clock, seed=1)
    return host, agent, clock


def node_at(host: FakeHost, percent: float) -> None:
    """/proc/meminfo with MemTotal - MemAvailable at ``percent`` of the node; BE holds 1 GiB of anon."""
    total_kb = CAP // 1024
    avail = int(total_kb * (100 - percent) / 100)
    host.set_meminfo(total_kb, avail // 2, avail)
    host.set_memory(host.layout.qos_dir(KubeQoS.BESTEFFORT), 0, GiB, 0, 0, 0)
