"""cpuset suppression on a real kernel: BE processes' allowed CPUs, as the scheduler sees them.

The policy never gives BE fewer than two CPUs (koordlet's ``beMinCPUSetCores``), and every way of
narrowing the pool it picks from (LSE, reserved or system-exclusive CPUs) leaves it fewer CPUs than
BE's two, when nothing is written: a node needs three or more CPUs to show a shrink.  The host has
two, so ``test_guest.py`` runs the suppression test in three-CPU guests, cgroup v2 and cgroup v1; on
a host with enough CPUs it runs on the host too.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from realnode import PERIOD_US, parse_cpus, real_node

pytestmark = pytest.mark.kernel

FAST = ("--collect-interval", "500ms", "--cpu-suppress-interval-seconds", "0.5")


def last_cpu(pid: int) -> int:
    """The CPU the process last ran on (``/proc/<pid>/stat`` field 39)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def test_cpuset_suppression_and_recovery(tmp_path) -> None:
    """With LS using a CPU, BE's processes are confined to the two CPUs the budget leaves (koordlet's
    minimum), run only there, and get every CPU back when the NodeSLO switches suppression off;
    the LS process keeps every CPU throughout."""
    with real_node(tmp_path, driver="systemd", controllers=("cpu", "cpuset")) as node:
        if node.cpus < 3:
            pytest.skip(f"BE keeps at least 2 CPUs: a shrink needs 3 or more, this node has {node.cpus}")
        ls = node.add_pod("ls", "LS", cpu_milli=1000, cpu_limit=True)
        be = node.add_pod("be", "BE")  # batch-cpu 1 core: koordlet's quota 100000 in the pod and container
        batch_quota = node.quota(be.dir)
        assert batch_quota == PERIOD_US
        ls_proc = node.start(ls)
        be_procs = [node.start(be), node.start(be)]  # busy, but leaving the agent a CPU of the guest
        every = node.cpus_allowed(be_procs[0].pid)
        assert len(every) == node.cpus
        # budget: 65 % of the node - one LS core - the system < 2 CPUs, so BE gets the minimum, 2
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset"}})
        with node.agent("--strategies", "cpuSuppress", *FAST) as agent:
            # every BE process: the kernel moves a cgroup's tasks one by one
            agent.wait_for("BE's CPUs to shrink",
                           lambda: all(node.cpus_allowed(p.pid) != every for p in be_procs), 60)
            narrowed = node.cpus_allowed(be_procs[0].pid)
            assert len(narrowed) == 2 and narrowed < every, narrowed
            allowed = [node.cpus_allowed(p.pid) for p in be_procs]
            assert all(a == narrowed for a in allowed), allowed
            effective = "cpuset.cpus" if node.version == 1 else "cpuset.cpus.effective"
            assert parse_cpus(node.read(be.containers[0], effective, "cpuset")) == narrowed
            ran_on = set()
            for _ in range(10):
                time.sleep(0.1)
                ran_on.update(last_cpu(p.pid) for p in be_procs)
            assert ran_on <= narrowed, f"BE ran on {ran_on}, allowed {narrowed}"
            assert node.cpus_allowed(ls_proc.pid) == every
            # cpuset policy lowers no quota: the batch pod keeps koordlet's (no child step, v1 or v2)
            assert node.quota(be.dir) == node.quota(be.containers[0]) == batch_quota

            node.write_nodeslo({"resourceUsedThresholdWithBE": {"enable": False}})
            agent.wait_for("BE's CPUs back", lambda: all(node.cpus_allowed(p.pid) == every for p in be_procs), 30)
            assert node.cpus_allowed(ls_proc.pid) == every


def test_static_cpu_manager_node_keeps_exclusive_cpus_out(tmp_path) -> None:
    """A static-policy kubelet gave an LSE pod a CPU of its own and every other container the shared
    pool; with the agent's cpuset suppression the BE dirs and processes stay off that CPU, and the
    LSE process keeps it to itself."""
    with real_node(tmp_path, controllers=("cpu", "cpuset")) as node:
        every = node.cpus_allowed(os.getpid())
        exclusive = max(every)
        shared = every - {exclusive}
        lse = node.add_pod("lse", "LSE", cpu_milli=1000, cpu_limit=True, annotations={
            "scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": str(exclusive)})})
        be = node.add_pod("be", "BE")
        # the kubelet's static policy: the LSE container on its CPU, the other containers in the shared pool
        node.write(lse.containers[0], "cpuset.cpus", str(exclusive), "cpuset")
        node.write(be.containers[0], "cpuset.cpus", format_cpus(shared), "cpuset")
        lse_proc, be_proc = node.start(lse), node.start(be)
        assert node.cpus_allowed(lse_proc.pid) == {exclusive} and node.cpus_allowed(be_proc.pid) == shared
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset"}})
        be_dir = node.layout.qos_dir("BestEffort")
        with node.agent("--strategies", "cpuSuppress", "--kubelet-cpu-manager-policy", "static", *FAST) as agent:
            agent.wait_for("the BE cpuset", lambda: any(r["executed"] for r in agent.audit("cpuSuppress")), 60)
            time.sleep(1.0)
            refused = [r for r in agent.audit("cpuSuppress") if not r["executed"]]
        assert not refused, f"writes the kernel refused: {refused[:3]}"
        for d in (be_dir, be.dir):  # static policy: the QoS and pod dirs hold every CPU BE may have
            assert parse_cpus(node.read(d, "cpuset.cpus", "cpuset")) == shared, d
        assert exclusive not in node.cpus_allowed(be_proc.pid)
        assert node.cpus_allowed(lse_proc.pid) == {exclusive}
        # cpuset policy lowers no quota: the batch pod keeps koordlet's, the BE dir stays unlimited
        assert node.quota(be.dir) == node.quota(be.containers[0]) == PERIOD_US
        assert node.quota(be_dir) == -1


def format_cpus(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def reserve_the_last_cpu(node, need: int, why: str) -> tuple[set[int], int]:
    """The CPUs this process may use and the highest of them, reserved in the Node's koordinator
    annotation; skips (saying ``why``) on a node with fewer than ``need`` CPUs."""
    every = node.cpus_allowed(os.getpid())
    if len(every) < need:
        pytest.skip(f"{why}: needs {need} CPUs, this node has {len(every)}")
    reserved = max(every)
    with open(node.node_file) as f:
        obj = json.load(f)
    obj["metadata"]["annotations"] = {
        "node.koordinator.sh/reservation": json.dumps({"reservedCPUs": str(reserved)})}
    with open(node.node_file, "w") as f:
        json.dump(obj, f)
    return every, reserved


def test_v1_parents_keep_the_cpus_of_containers_left_as_they_are(tmp_path) -> None:
    """cgroup v1 refuses a parent cpuset without a child's CPUs (EBUSY).  With the BE CPU manager the
    agent only recovers BE cpusets, to every CPU but the reserved one, and leaves alone the containers
    of pods the BE cpuset hook manages; this one is bound to every CPU, the reserved one among them.
    The other BE pod is narrowed (containers before their pod dir); the hook-managed pod's dir and the
    BE QoS dir keep the CPUs of that container, and the kernel refuses nothing."""
    with real_node(tmp_path, version=1, controllers=("cpu", "cpuset")) as node:
        every, reserved = reserve_the_last_cpu(node, 2, "a reserved CPU and one for BE")
        hooked = node.add_pod("hooked", "BE", annotations={
            "scheduling.koordinator.sh/resource-status": json.dumps({"numaNodeResources": [{"node": 0}]})})
        plain = node.add_pod("plain", "BE")
        for d in (hooked.containers[0], plain.containers[0]):
            assert parse_cpus(node.read(d, "cpuset.cpus", "cpuset")) == every
        proc = node.start(plain)
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset"}})
        be_dir = node.layout.qos_dir("BestEffort")
        with node.agent("--strategies", "cpuSuppress", "--feature-gates", "BECPUManager=true", *FAST) as agent:
            agent.wait_for("the plain BE pod off the reserved CPU",
                           lambda: reserved not in node.cpus_allowed(proc.pid), 60)
            time.sleep(1.0)  # a few more ticks: each re-checks what it wrote
            audit = agent.audit("cpuSuppress")
        refused = [r for r in audit if r["action"] == "write" and not r["executed"]]
        assert not refused, f"writes the kernel refused: {refused[:3]}"
        for d in (plain.containers[0], plain.dir):
            assert parse_cpus(node.read(d, "cpuset.cpus", "cpuset")) == every - {reserved}, d
        for d in (hooked.containers[0], hooked.dir, be_dir):
            assert parse_cpus(node.read(d, "cpuset.cpus", "cpuset")) == every, d
        written = [r["target"] for r in audit if r["action"] == "write" and r["executed"]]
        assert written.index(next(t for t in written if plain.containers[0] in t)) < \
            written.index(next(t for t in written if t.endswith(f"{plain.dir}/cpuset.cpus"))), written


def test_v1_static_cpu_manager_pod_dirs_keep_the_kubelets_shared_pool(tmp_path) -> None:
    """A static-policy kubelet (its checkpoint: the shared pool is every CPU, a reserved one among them)
    creates every BE container with that pool, and the runtime writes it to the new container's cpuset:
    v1 refuses a cpuset outside its parent's (EACCES).  With cpuset suppression the BE containers are
    narrowed off the reserved CPU; the QoS and pod dirs keep the pool, so the pod's next container
    starts."""
    with real_node(tmp_path, version=1, controllers=("cpu", "cpuset")) as node:
        every, reserved = reserve_the_last_cpu(node, 3, "BE keeps at least 2 CPUs besides a reserved one")
        kubelet_dir = tmp_path / "kubelet"
        kubelet_dir.mkdir()
        (kubelet_dir / "cpu_manager_state").write_text(json.dumps(
            {"policyName": "static", "defaultCpuSet": format_cpus(every), "entries": {}, "checksum": 1}))
        be = node.add_pod("be", "BE")
        proc = node.start(be)
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cpuset"}})
        be_dir = node.layout.qos_dir("BestEffort")
        with node.agent("--strategies", "cpuSuppress", "--kubelet-root-dir", str(kubelet_dir), *FAST) as agent:
            agent.wait_for("the BE container off the reserved CPU",
                           lambda: reserved not in node.cpus_allowed(proc.pid), 60)
            time.sleep(1.0)
            audit = agent.audit("cpuSuppress")
            refused = [r for r in audit if r["action"] == "write" and not r["executed"]]
            assert not refused, f"writes the kernel refused: {refused[:3]}"
            for d in (be_dir, be.dir):
                assert parse_cpus(node.read(d, "cpuset.cpus", "cpuset")) == every, d
            # the runtime starts the pod's next container with the kubelet's pool
            new = f"{be.dir}/{'f' * 64}"
            node.tree.mkdir(new)
            node.write(new, "cpuset.cpus", format_cpus(every), "cpuset")
            assert parse_cpus(node.read(new, "cpuset.cpus", "cpuset")) == every
