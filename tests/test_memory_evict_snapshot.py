"""memoryEvict decides on readings of one moment, in one set of terms (the agent on the fake kernel).

The failure these pin, seen on a real v1 kernel (``test_kernel_evict.py``): the node's overage is
counted in ``MemTotal - MemAvailable`` terms from the collector's last sample, while a victim's
release was its ``anon + unevictable`` from whenever the pod was read.  A pod's kernel memory, and
memory that moved between the two readings, then look like an overage no victim covers, and the
round evicts a second, innocent BE pod.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

MEMORY = 64 << 30
PCT = MEMORY // 100


def _uid(i: int) -> str:
    return f"{i:08d}-0000-4000-8000-00000000beef"


@dataclass
class Node:
    agent: Agent
    host: FakeHost
    pods: dict[str, FakePod]
    now: list[float]
    clock: Iterator[int]

    def tick(self, collect: bool = True) -> None:
        """One collector tick (optional) and one memoryEvict tick at the same instant."""
        self.now[0] = float(next(self.clock))
        if collect:
            self.agent.collect(self.now[0])
        self.agent.manager.run_strategy(self.agent.manager.strategies["memoryEvict"], self.now[0])

    def node_used(self, pct: float) -> None:
        kb = MEMORY // 1024
        used = int(kb * pct / 100)
        self.host.set_meminfo(kb, kb - used, kb - used)

    def pod_memory(self, name: str, anon: int, kernel: int = 0, file: int = 0) -> None:
        """The pod's LRU sizes (in its one container and its pod dir) and its page counter, which
        also holds ``kernel`` bytes of kernel memory (page tables, slab, sockets)."""
        pod = self.pods[name]
        ctr = self.host.container_dir(pod.uid, pod.containers[0].name)
        pod_dir = self.host.pod_dir(pod.uid)
        for d in (ctr, pod_dir):
            self.host.set_memory(d, anon // 3, anon - anon // 3, 0, file // 2, file - file // 2)
            if kernel:
                v = self.host.version
                counter = self.host.layout.file("memory" if v == 1 else "", d,
                                                "memory.usage_in_bytes" if v == 1 else "memory.current")
                with open(counter, "w") as f:
                    f.write(f"{anon + file + kernel}\n")

    def evicted(self) -> list[str]:
        return [d.pod.name for d in self.agent.coordinator.history if d.action == "evicted"]


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def node(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Node]:
    host = FakeHost(str(tmp_path / "host"), version=request.param, n_cpus=4, memory_bytes=MEMORY)
    pods = [FakePod(_uid(i), "default", name, qos, [FakeContainer("c", f"containerd://{i:064x}")])
            for i, (name, qos) in enumerate([("be-hog", KubeQoS.BESTEFFORT), ("be-small", KubeQoS.BESTEFFORT),
                                             ("ls", KubeQoS.BURSTABLE)])]
    host.add_pods(pods)
    slo = {"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}}
    for name, obj in (("pods.json", pod_list(pod_object(p) for p in pods)),
                      ("node.json", node_object(host)), ("nodeslo.json", nodeslo_object(slo))):
        with open(tmp_path / name, "w") as f:
            json.dump(obj, f)
    now = [10_000.0]
    a = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"),
                          node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "nodeslo.json"),
                          metrics_addr="", strategies=["memoryEvict"], feature_gates={"BEMemoryEvict": True}),
              clock=lambda: now[0])
    n = Node(a, host, {p.name: p for p in pods}, now, itertools.count(10_001))
    n.node_used(40)
    for _ in range(3):
        n.tick()
    assert a.store.node is not None and a.store.node.memory_capacity == MEMORY
    assert n.evicted() == []
    yield n
    a.close()


def test_a_victims_kernel_memory_counts_in_its_release(node: Node) -> None:
    """Node at 80 % of 70 %: release 12 % (down to 68 %).  The hog holds 10 % anonymous memory and
    5 % kernel memory, both in the node's usage and both gone with it: it alone covers the 12 %."""
    node.pod_memory("be-hog", 10 * PCT, kernel=5 * PCT, file=3 * PCT)
    node.pod_memory("be-small", 1 * PCT)
    node.node_used(80)
    node.tick()
    assert node.evicted() == ["be-hog"]
    reason = next(d.reason for d in node.agent.coordinator.history if d.action == "evicted")
    assert f"usage={10 * PCT}" in reason  # koordlet's usage still orders the victims
    assert f"release memory={15 * PCT}" in reason  # page counter - file LRU


def test_memory_gone_since_the_collectors_sample_evicts_nothing(node: Node) -> None:
    """The collector's sample says 80 %; by the time memoryEvict decides, the hog has given most of
    its memory back (it exited, or the kernel reclaimed it) and the node is at 66 %.  The decision
    reads the node again with the pods: nothing to evict (the sample alone would have the hog's
    present 1 % count against 12 %, and take the small BE pod with it)."""
    node.pod_memory("be-hog", 15 * PCT)
    node.pod_memory("be-small", 1 * PCT)
    node.node_used(80)
    node.now[0] = float(next(node.clock))
    node.agent.collect(node.now[0])  # the sample: 80 %
    node.pod_memory("be-hog", 1 * PCT)
    node.node_used(66)
    node.agent.manager.run_strategy(node.agent.manager.strategies["memoryEvict"], node.now[0])
    assert node.evicted() == []


def test_the_lower_node_reading_sets_the_overage(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod dying while the decision reads: the node is read before and after the pods, and the
    lower reading counts (what the dying pod no longer holds is neither credited nor owed)."""
    from qosmanager.eviction import memsnap

    node.pod_memory("be-hog", 13 * PCT)
    node.pod_memory("be-small", 1 * PCT)
    node.node_used(80)
    real = memsnap.read_pod

    def dying(layout: Any, pod: Any) -> Any:  # the hog gives back 4 % between the two node readings
        m = real(layout, pod)
        if pod.name == "be-hog":
            node.pod_memory("be-hog", 9 * PCT)
            node.node_used(76)
            m = real(layout, pod)
        return m

    monkeypatch.setattr(memsnap, "read_pod", dying)
    node.tick()
    # 76 %: release 8 %; the hog's 9 % covers it (80 % against 9 % would also take be-small)
    assert node.evicted() == ["be-hog"]
