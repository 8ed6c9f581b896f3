"""CPU hot-plug between ticks, on a fake cgroup v1 host of 8 CPUs run by the whole agent (its
scheduler's jobs run one after the other on simulated clocks): four CPUs go offline (their
``/proc/stat`` lines and the sysfs online list change together), later they come back.

The node CPU usage follows the CPUs online and is never negative, nothing raises, and cpuSuppress's
BE cpuset is picked from the CPUs online once the topology is read again (every
``cpu_info_refresh`` seconds, koordlet's node-info interval).  A ``/proc/stat`` whose ``cpu`` line
falls (a view summing only the CPUs it shows) gives no sample while it is below the sample before
(which stays the baseline), never a negative one nor a burst.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from qosmanager.agent import Agent, AgentConfig
from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.host.sysfs import read_node_cpu_info
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

S = 10**9
SLO = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 30,
                                       "cpuSuppressPolicy": "cpuset"}}


class Node:
    def __init__(self, tmp: Path) -> None:
        self.host = FakeHost(str(tmp / "host"), version=1, n_cpus=8)
        pods = FakeHost.make_pods(12, seed=3)
        self.host.add_pods(pods)
        for name, obj in (("pods", pod_list(pod_object(p) for p in pods)), ("node", node_object(self.host)),
                          ("slo", nodeslo_object(SLO))):
            (tmp / f"{name}.json").write_text(json.dumps(obj))
        self.wall, self.mono = 1000.0, 50.0
        self.busy = [0] * 8
        self.agent = Agent(AgentConfig(roots=self.host.roots, pods_file=str(tmp / "pods.json"),
                                       node_file=str(tmp / "node.json"), node_slo_file=str(tmp / "slo.json"),
                                       metrics_addr="", strategies=["cpuSuppress"]),
                           clock=lambda: self.wall, monotonic=lambda: self.mono,
                           monotonic_ns=lambda: int(self.mono * S), seed=1)
        self.online = list(range(8))
        self.node_cpu: list[float] = []

    def plug(self, cpus: list[int]) -> None:
        """The CPUs online from now on: sysfs's online list and /proc/stat's per-CPU lines."""
        self.online = cpus
        self.host.write("sys/devices/system/cpu/online", f"{cpus[0]}-{cpus[-1]}\n")

    def tick(self, seconds: float = 1.0) -> None:
        self.wall += seconds
        self.mono += seconds
        for c in self.online:
            self.busy[c] += 10  # a tenth of each online CPU busy
        self.proc_stat()
        for job in self.agent.scheduler.jobs:
            self.agent.scheduler.run_job(job)
        got = self.agent.cache.query("node_cpu_usage", self.wall - 0.5, self.wall, "last")
        if got is not None:
            self.node_cpu.append(got)

    def proc_stat(self) -> None:
        """As Linux writes it: the ``cpu`` line sums every possible CPU (an offline one's counters stand
        still), a ``cpuN`` line is there for each online CPU."""
        def line(name: str, busy: int, idle: int) -> str:
            return f"{name} {busy} 0 0 {idle} 0 0 0 0 0 0"

        rows = [line("cpu ", sum(self.busy), 1000 * 8)]
        rows += [line(f"cpu{c}", self.busy[c], 1000) for c in self.online]
        self.host.write("proc/stat", "\n".join([*rows, "intr 0", "ctxt 0", "btime 1700000000"]) + "\n")

    def be_cpuset(self) -> set[int]:
        be = self.host.layout.qos_dir("BestEffort")
        return set(parse_cpu_list(self.host.read(f"cgroup/cpuset/{be}/cpuset.cpus")))


def test_cpus_going_offline_and_back_between_ticks(tmp_path: Path) -> None:
    node = Node(tmp_path)
    try:
        for _ in range(5):
            node.tick()
        before = node.be_cpuset()
        assert before and before <= set(range(8))
        node.plug([0, 1, 2, 3])
        assert [p.cpu for p in read_node_cpu_info(node.host.roots).processors] == [0, 1, 2, 3]
        node.tick()
        for _ in range(70):  # past the topology refresh
            node.tick()
        offline = node.be_cpuset()
        assert offline and offline <= {0, 1, 2, 3}, offline
        node.plug(list(range(8)))
        for _ in range(70):
            node.tick()
        assert node.be_cpuset() <= set(range(8)) and node.be_cpuset()
        stats = node.agent.manager.stats["cpuSuppress"]
        assert stats.errors == 0 and stats.runs > 100
        assert node.node_cpu and all(v >= 0 and not math.isnan(v) for v in node.node_cpu)
        # 4 online CPUs a tenth busy = 0.4 cores, 8 = 0.8: the rates follow the CPUs online
        assert min(node.node_cpu) == 0.4 and max(node.node_cpu) == 0.8
    finally:
        node.agent.close()


def test_a_proc_stat_total_that_falls_gives_no_sample_not_a_negative_one(tmp_path: Path) -> None:
    node = Node(tmp_path)
    try:
        for _ in range(3):
            node.tick()
        n = len(node.node_cpu)
        node.online = [0, 1, 2, 3]
        node.busy[4:] = [0, 0, 0, 0]  # a view that sums only what it shows: the total falls
        node.tick()
        assert len(node.node_cpu) == n  # that tick: no node CPU sample
        for _ in range(3):  # the sample before the fall stays the baseline until the total passes it
            node.tick()
        assert node.node_cpu[-1] == 0.4 and all(0 <= v <= 0.8 for v in node.node_cpu)  # no burst
        assert node.agent.manager.stats["cpuSuppress"].errors == 0
    finally:
        node.agent.close()
