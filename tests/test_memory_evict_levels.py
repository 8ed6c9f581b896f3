"""memoryEvict as level 3 of graduated memory protection (gate ``BEMemoryHigh``), on the fake kernel.

Graduated: evict only when BE keeps the node over the threshold (one cool-down, 4 s, in spite of
the cap) or stalls LS (PSI: the LS classes' ``memory.pressure`` on v2, ``/proc/pressure/memory``
``full`` otherwise).  Plain mode (the gate off) keeps koordlet's: evict at the first tick over.
Ticks are one second apart.
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
    return f"{i:08d}-0000-4000-8000-00000000cafe"


@dataclass
class Node:
    agent: Agent
    host: FakeHost
    pods: dict[str, FakePod]
    now: list[float]
    clock: Iterator[int]
    psi: dict[str, int]

    def tick(self) -> None:
        self.now[0] = float(next(self.clock))
        self.agent.collect(self.now[0])
        self.agent.manager.run_strategy(self.agent.manager.strategies["memoryEvict"], self.now[0])

    def node_used(self, pct: float) -> None:
        kb = MEMORY // 1024
        used = int(kb * pct / 100)
        self.host.set_meminfo(kb, kb - used, kb - used)

    def pod_memory(self, name: str, anon: int) -> None:
        pod = self.pods[name]
        for d in (self.host.container_dir(pod.uid, pod.containers[0].name), self.host.pod_dir(pod.uid)):
            self.host.set_memory(d, anon // 3, anon - anon // 3, 0, 0, 0)

    def stall(self, where: str, us: int) -> None:
        """``us`` more microseconds of memory stall: ``"ls"`` in the Burstable dir's memory.pressure
        (v2), ``"node"`` in /proc/pressure/memory (some and full alike)."""
        self.psi[where] = self.psi.get(where, 0) + us
        total = self.psi[where]
        text = (f"some avg10=0.00 avg60=0.00 avg300=0.00 total={total}\n"
                f"full avg10=0.00 avg60=0.00 avg300=0.00 total={total}\n")
        lay = self.host.layout
        path = (lay.file("", lay.qos_dir(KubeQoS.BURSTABLE), "memory.pressure") if where == "ls"
                else self.host.roots.proc_path("pressure/memory"))
        with open(path, "w") as f:
            f.write(text)

    def evicted(self) -> list[str]:
        return [d.pod.name for d in self.agent.coordinator.history if d.action == "evicted"]

    def skips(self) -> list[str]:
        self.agent.executor.audit.flush()
        with open(self.agent.cfg.audit_log) as f:
            records = [json.loads(line) for line in f]
        return [r["reason"] for r in records if r["action"] == "skip" and r["strategy"] == "memoryEvict"]


def make_node(tmp_path: Any, version: int, graduated: bool) -> Node:
    host = FakeHost(str(tmp_path / "host"), version=version, n_cpus=4, memory_bytes=MEMORY)
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
                          metrics_addr="", strategies=["memoryEvict"], audit_log=str(tmp_path / "audit.jsonl"),
                          feature_gates={"BEMemoryEvict": True, "BEMemoryHigh": graduated}),
              clock=lambda: now[0])
    n = Node(a, host, {p.name: p for p in pods}, now, itertools.count(10_001), {})
    n.stall("node", 0)
    if version == 2:
        n.stall("ls", 0)
    n.pod_memory("be-hog", 15 * PCT)
    n.pod_memory("be-small", 1 * PCT)
    n.node_used(40)
    for _ in range(3):
        n.tick()
    return n


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def version(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def graduated(tmp_path: Any, version: int) -> Iterator[Node]:
    n = make_node(tmp_path, version, graduated=True)
    yield n
    n.agent.close()


def test_plain_mode_evicts_at_the_first_tick_over(tmp_path: Any, version: int) -> None:
    n = make_node(tmp_path, version, graduated=False)
    try:
        n.node_used(80)
        n.tick()
        assert n.evicted() == ["be-hog"]
    finally:
        n.agent.close()


def test_a_transient_spike_evicts_nothing(graduated: Node) -> None:
    n = graduated
    n.node_used(80)
    for _ in range(4):  # over at +0 s .. +3 s: under one cool-down
        n.tick()
    n.node_used(60)
    for _ in range(6):
        n.tick()
    assert n.evicted() == []
    skips = n.skips()
    assert len(skips) == 1 and "level 3 holds back" in skips[0], skips  # said once per spell


def test_be_keeping_the_node_over_is_evicted_after_one_cool_down(graduated: Node) -> None:
    n = graduated
    n.node_used(80)
    for _ in range(4):  # +0 .. +3 s
        n.tick()
    assert n.evicted() == []
    n.tick()  # +4 s: over for one cool-down
    assert n.evicted() == ["be-hog"]  # koordlet's order and release: the hog alone covers 12 %
    reason = next(d.reason for d in n.agent.coordinator.history if d.action == "evicted")
    assert "BE keeps the node over the threshold for 4.0 s" in reason


def test_ls_stalling_is_evicted_at_once(graduated: Node, version: int) -> None:
    n = graduated
    n.node_used(80)
    n.stall("ls" if version == 2 else "node", 50_000)  # 50 ms in the last second: 5 %
    n.tick()
    assert n.evicted() == ["be-hog"]
    reason = next(d.reason for d in n.agent.coordinator.history if d.action == "evicted")
    assert "LS stalled on memory 5.0% of the time" in reason


def test_a_small_ls_stall_holds_back(graduated: Node, version: int) -> None:
    n = graduated
    n.node_used(80)
    n.stall("ls" if version == 2 else "node", 5_000)  # 0.5 %
    n.tick()
    assert n.evicted() == []


def test_v2_counts_only_the_ls_classes_stalls(tmp_path: Any) -> None:
    """cgroup v2: BE held at its cap stalls, and so does the node's ``some``/``full`` with it; the LS
    classes' own memory.pressure says LS does not stall: no eviction."""
    n = make_node(tmp_path, 2, graduated=True)
    try:
        n.node_used(80)
        n.stall("node", 500_000)
        n.tick()
        assert n.evicted() == []
    finally:
        n.agent.close()
