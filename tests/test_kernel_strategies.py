"""Every strategy at once on a koordinator node, on a real kernel: nothing refused, each strategy's
values in force, and what the kubelet and koordlet's batch-resource hook wrote left to them.

The node (``realnode``, koordinator-shaped by default): a BE pod whose ``kubernetes.io/batch-cpu``
limit is the whole node (koordlet's hook: that quota in the pod and its container, shares from the
request, ``memory.max`` / ``memory.limit_in_bytes`` from ``batch-memory``) with a busy process; an LS
pod limited to a fifth of a CPU (the kubelet's quota) with two busy processes, throttled.  One agent
runs cpuSuppress (cfsQuota, the BE budget at its floor, 25 % of the node: below the BE pod's own
quota), cpuBurst, cgroupReconcile (memory QoS), memoryHigh and memoryEvict (the node's memory, the
test's own, between memoryHigh's engage level and the eviction threshold).  The host runs this on
cgroup v1, ``test_guest.py`` in the cgroup v2 guest.

The other strategies' koordinator-node runs: eviction (``test_kernel_evict.py``: BE pods with their batch
quotas and memory limits), cpuset suppression (``test_kernel_cpuset.py``), blkio / io
(``test_kernel_blkio.py`` v1, ``test_kernel_io.py`` v2: a block device of their own).  Not here:
resctrlReconcile (neither kernel has resctrl: ``test_replay_resctrl.py`` on the fake one) and
systemConfigReconcile (node-wide ``/proc/sys`` files, not cgroups: the node's shape does not reach
them, and a test must not change a shared machine's sysctls).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from realnode import PERIOD_US, Pod, RealNode, proc_view, real_node

pytestmark = pytest.mark.kernel

MiB = 1 << 20
CAPACITY = 2048 * MiB  # the node's memory, as its Node object and the test's /proc/meminfo say
USED = 1300 * MiB  # 63 %: memoryHigh engages (at 68 - 5 %), memoryEvict (at 70 %) does not evict
BE_MEMORY = 256 * MiB  # the BE pod's batch-memory request and limit
LS_LIMIT = 20_000  # the LS container's quota: a fifth of a CPU
STRATEGIES = "cpuSuppress,cpuBurst,cgroupReconcile,memoryHigh,memoryEvict"
GATES = "CgroupReconcile=true,BEMemoryHigh=true,BEMemoryEvict=true"


@dataclass
class Run:
    node: RealNode
    be: Pod
    ls: Pod
    hooks: dict[tuple[str, str, str], str]  # (dir, file, hierarchy) -> what the kubelet / hook wrote
    audit: list[dict[str, Any]]
    seen: dict[tuple[str, str, str], str]  # the same files while the agent ran
    be_quota: int  # the BE dir's quota then
    child_quotas: tuple[int, int]  # the BE pod's and its container's then
    be_cap: str  # the BE dir's memory.high (v2) or memory.soft_limit_in_bytes (v1) then


def memory_file(node: RealNode) -> tuple[str, str]:
    return ("memory.max", "cpu") if node.version == 2 else ("memory.limit_in_bytes", "memory")


def kept_files(node: RealNode, be: Pod, ls: Pod) -> list[tuple[str, str, str]]:
    """The files only the kubelet and koordlet's hook write here: shares (v2 weights) of every pod,
    container and QoS dir, and the memory limits of the pods and containers."""
    shares = "cpu.shares" if node.version == 1 else "cpu.weight"
    mem, mem_h = memory_file(node)
    dirs = [*be.containers, be.dir, *ls.containers, ls.dir]
    qos = [node.layout.qos_dir("Burstable"), node.layout.qos_dir("BestEffort")]
    return [(d, shares, "cpu") for d in dirs + qos] + [(d, mem, mem_h) for d in dirs]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with real_node(tmp_path_factory.mktemp("every-strategy"), controllers=("cpu", "memory")) as node, \
            proc_view(node, cpus=node.cpus, busy=0.5, memory=(CAPACITY, lambda: USED)) as view:
        node.write_node(memory=CAPACITY)
        be = node.add_pod("be", "BE", cpu_milli=1000 * node.cpus, memory=BE_MEMORY)
        ls = node.add_pod("ls", "LS", cpu_milli=LS_LIMIT * 1000 // PERIOD_US)
        node.start(be)
        node.start(ls)
        node.start(ls)  # two busy loops under a fifth of a CPU: throttled in every period
        hooks = {f: node.read(*f) for f in kept_files(node, be, ls)}
        node.write_nodeslo({
            "resourceUsedThresholdWithBE": {
                "enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 10,
                "cpuSuppressMinPercent": 25, "memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 68},
            "cpuBurstStrategy": {"policy": "auto", "sharePoolThresholdPercent": 100},
            "resourceQOSStrategy": {
                "lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 50, "lowLimitPercent": 75}},
                "beClass": {"memoryQOS": {"enable": True, "minLimitPercent": 10, "lowLimitPercent": 20}}},
        })
        be_dir = node.layout.qos_dir("BestEffort")
        cap_file = ("memory.high", "cpu") if node.version == 2 else ("memory.soft_limit_in_bytes", "memory")
        floor = 25 * node.cpus * 1000
        ctr = ls.containers[0]
        with node.agent("--strategies", STRATEGIES, "--feature-gates", GATES, "--evict-mode", "kill",
                        "--collect-interval", "500ms", "--cpu-suppress-interval-seconds", "0.5",
                        "--reconcile-interval-seconds", "0.5", "--memory-evict-interval-seconds", "0.5",
                        "--react-mode", "tick", "--proc-root", view.root) as agent:
            def written(strategy: str) -> bool:
                return any(r["action"] == "write" and r["executed"] for r in agent.audit(strategy))

            agent.wait_for("the BE quota at its floor", lambda: node.quota(be_dir) == floor, 60)
            agent.wait_for("a CFS burst on the throttled LS container", lambda: node.burst(ctr) > 0, 60)
            for strategy in ("cgroupReconcile", "memoryHigh") if node.version == 2 else ("memoryHigh",):
                agent.wait_for(f"{strategy}'s writes", lambda s=strategy: written(s), 60)
            time.sleep(1.0)  # a few more rounds of every strategy
            seen = {f: node.read(*f) for f in hooks}
            be_quota = node.quota(be_dir)
            child_quotas = (node.quota(be.dir), node.quota(be.containers[0]))
            be_cap = node.read(be_dir, *cap_file)
            audit = agent.audit()
        assert agent.proc.returncode == 0, agent.log()
        yield Run(node, be, ls, hooks, audit, seen, be_quota, child_quotas, be_cap)


def test_no_write_refused_and_no_pod_evicted(run: Run) -> None:
    refused = [r for r in run.audit if r["action"] == "write" and not r["executed"] and r.get("error")]
    assert not refused, refused[:3]
    assert not [r for r in run.audit if r["action"] == "error"], [r for r in run.audit if r["action"] == "error"][:3]
    assert not [r for r in run.audit if r["action"] == "evict"], "the node's memory stays under the threshold"
    assert all(p.poll() is None for p in run.be.procs + run.ls.procs)


def test_cpu_suppress_holds_be_under_a_batch_quota_above_its_budget(run: Run) -> None:
    """The BE budget, below the BE pod's own quota, is in force; v1 lowered the pod and its container
    first (the kernel refuses a parent below a child), v2 needs no such step: they keep koordlet's."""
    own = run.node.cpus * PERIOD_US
    assert 0 < run.be_quota < own
    if run.node.version == 1:
        assert run.child_quotas == (run.be_quota, run.be_quota)
    else:
        assert run.child_quotas == (own, own)


def test_cpu_burst_acts_on_ls_only(run: Run) -> None:
    bursts = [r for r in run.audit if r["strategy"] == "cpuBurst" and r["action"] == "write" and r["executed"]]
    assert bursts
    be_targets = [r["target"] for r in bursts if run.node.layout.qos_dir("BestEffort") in r["target"]]
    assert not be_targets, be_targets


def test_memory_high_caps_the_be_dir_under_koordlets_pod_limits(run: Run) -> None:
    """memoryHigh's cap on the BE QoS dir is in force; the BE pod's own memory limit stays koordlet's."""
    writes = [r for r in run.audit if r["strategy"] == "memoryHigh" and r["action"] == "write" and r["executed"]]
    assert writes and writes[-1]["value"].split()[0] == run.be_cap
    assert run.be_cap != "max" and int(run.be_cap) < CAPACITY


def test_cgroup_reconcile_writes_what_this_kernel_has(run: Run) -> None:
    """v2: memory.min and memory.low of the pods; v1 (no such files upstream): nothing, and nothing refused."""
    writes = [r for r in run.audit if r["strategy"] == "cgroupReconcile" and r["action"] == "write" and r["executed"]]
    if run.node.version == 2:
        files = {os.path.basename(r["target"]) for r in writes}
        assert {"memory.min", "memory.low"} <= files, files
        assert run.node.read(run.be.dir, "memory.min") == str(BE_MEMORY * 10 // 100 // 4096 * 4096)
    else:
        assert not writes, [r["target"] for r in writes]


def test_the_kubelets_and_koordlets_values_stay_theirs(run: Run) -> None:
    """No strategy writes the shares or the memory limits the kubelet and koordlet's hook own."""
    changed = {f: (run.hooks[f], v) for f, v in run.seen.items() if v != run.hooks[f]}
    assert not changed, changed
    mem, _ = memory_file(run.node)
    assert run.hooks[(run.be.containers[0], mem, memory_file(run.node)[1])] == str(BE_MEMORY)
