"""cpuSuppress on a koordinator node, on a real kernel: a BE pod with the CFS quota koordlet's
batch-resource hook writes for a 1.5-core ``kubernetes.io/batch-cpu`` limit (150000 in the pod's and
its container's cgroup), and the real agent (``qosmanager run``) deciding a BE budget below it.

cgroup v1 (the host) refuses a parent quota below a child's: the test first shows the kernel
refusing the BE dir's quota, then the agent putting its budget in force (read back from the kernel)
and giving the pod its quota back when the budget rises, also after a restart.  cgroup v2 (the guest,
``test_guest.py``) takes a parent ``cpu.max`` below its children's: the same run leaves the pod's
quota alone.  ``/proc/stat`` is the test's own (``realnode.ProcView``), so a shared machine's load
does not move the budget.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

import pytest

from realnode import RealNode, proc_view, real_node

pytestmark = pytest.mark.kernel

FAST = ("--collect-interval", "500ms", "--cpu-suppress-interval-seconds", "0.5")
BATCH_QUOTA = 150_000  # koordlet's hook for batch-cpu 1500 (1.5 cores)


def suppress_slo(threshold: int) -> dict:
    return {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": threshold,
                                            "cpuSuppressPolicy": "cfsQuota"}}


def low_threshold(node: RealNode) -> int:
    """A threshold that leaves BE at most one core (100000), below the pod's 1.5."""
    return max(1, 100 // node.cpus)


def refused(node: RealNode, rel: str, quota: int) -> int:
    """The errno the kernel answers a quota write with (0: taken)."""
    try:
        node.set_quota(rel, quota)
    except OSError as e:
        return e.errno or -1
    return 0


def refused_writes(agent_audit: list[dict]) -> list[dict]:
    return [r for r in agent_audit if r.get("action") == "write" and not r["executed"] and r.get("error")]


def batch_pod(node: RealNode):
    be = node.add_pod("be", "BE", cpu_milli=1500, cpu_limit=True)  # quotas as koordlet's hook writes them
    assert node.quota(be.dir) == node.quota(be.containers[0]) == BATCH_QUOTA
    node.start(be)
    return be


def test_be_budget_below_a_batch_pod_quota(tmp_path) -> None:
    """The budget below the pod's quota is in force in the kernel; when it rises, the pod and its
    container hold 150000 again."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs: a budget above 1.5 cores")
    with real_node(tmp_path) as node, proc_view(node, cpus=node.cpus, busy=0.1) as view:
        be = batch_pod(node)
        ctr = be.containers[0]
        be_dir = node.layout.qos_dir("BestEffort")
        # the kernel's rule the agent has to live with
        if node.version == 1:
            assert refused(node, be_dir, 50_000) == errno.EINVAL
        else:
            assert refused(node, be_dir, 50_000) == 0
            node.write(be_dir, "cpu.max", "max 100000")  # unlimited again
        assert node.quota(be_dir) == -1
        node.write_nodeslo(suppress_slo(low_threshold(node)))
        with node.agent("--strategies", "cpuSuppress", *FAST, "--proc-root", view.root) as agent:
            agent.wait_for("a BE quota below the batch pod's", lambda: 0 < node.quota(be_dir) < BATCH_QUOTA, 60)
            budget = node.quota(be_dir)
            if node.version == 1:  # in force: the pod and its container were lowered first
                assert node.quota(be.dir) <= budget and node.quota(ctr) <= budget
            else:  # v2 takes it as it is: nothing else written
                assert node.quota(be.dir) == node.quota(ctr) == BATCH_QUOTA
            assert not refused_writes(agent.audit("cpuSuppress")), refused_writes(agent.audit("cpuSuppress"))[:3]

            node.write_nodeslo(suppress_slo(100))  # the budget rises past 1.5 cores (10 % of the node a tick)
            agent.wait_for("a BE quota above the batch pod's",
                           lambda: node.quota(be_dir) > BATCH_QUOTA or node.quota(be_dir) == -1, 60)
            agent.wait_for("the pod's own quota back",
                           lambda: node.quota(be.dir) == node.quota(ctr) == BATCH_QUOTA, 30)
            assert not refused_writes(agent.audit("cpuSuppress"))


def test_batch_pod_quota_back_after_an_agent_restart(tmp_path) -> None:
    """An agent stopped while the budget is below the pod's quota leaves the pod at most at the BE
    quota (the kernel's limit either way); the next agent gives it its 150000 back once the budget
    allows, knowing it only from the pod's batch-cpu limit."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs: a budget above 1.5 cores")
    with real_node(tmp_path) as node, proc_view(node, cpus=node.cpus, busy=0.1) as view:
        be = batch_pod(node)
        ctr = be.containers[0]
        be_dir = node.layout.qos_dir("BestEffort")
        node.write_nodeslo(suppress_slo(low_threshold(node)))
        with node.agent("--strategies", "cpuSuppress", *FAST, "--proc-root", view.root) as agent:
            agent.wait_for("a BE quota below the batch pod's", lambda: 0 < node.quota(be_dir) < BATCH_QUOTA, 60)
        left = (node.quota(be_dir), node.quota(be.dir), node.quota(ctr))
        assert 0 < left[0] < BATCH_QUOTA
        if node.version == 1:
            assert left[1] == left[2] == left[0], f"BE dir, pod, container after the first agent: {left}"
        else:
            assert left[1:] == (BATCH_QUOTA, BATCH_QUOTA)

        node.write_nodeslo(suppress_slo(100))
        with node.agent("--strategies", "cpuSuppress", *FAST, "--proc-root", view.root) as agent:
            agent.wait_for("a BE quota above the batch pod's",
                           lambda: node.quota(be_dir) > BATCH_QUOTA or node.quota(be_dir) == -1, 60)
            agent.wait_for("the pod's own quota back",
                           lambda: node.quota(be.dir) == node.quota(ctr) == BATCH_QUOTA, 30)
            assert not refused_writes(agent.audit("cpuSuppress"))


def test_a_kubelet_resetting_the_be_quota_is_undone_every_time_without_backoff(tmp_path) -> None:
    """The kubelet's systemd driver puts the BE slice's quota back to unlimited about once a minute
    (koordinator #1734).  Six such resets, each some ticks after the last one was undone: every one is
    written over (the audit's write finds the kernel at -1), none is held back as a fight, and the log
    never reports a conflict.  The BE quota is at its floor (a steady budget, so the ticks in between
    write nothing: the resets are far apart, not checks in a row), the batch pod lowered under it (the
    kernel takes -1 on a parent over a limited child).  cgroup v1 only: the guest's v2 run is kept
    short, and the executor's fight rule is the same there (``test_kubelet_reset.py``)."""
    with real_node(tmp_path, version=1) as node, proc_view(node, cpus=node.cpus, busy=0.5) as view:
        be = batch_pod(node)
        be_dir = node.layout.qos_dir("BestEffort")
        floor = 25 * node.cpus * 1000  # cpuSuppressMinPercent 25: the budget is the floor
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "cpuSuppressThresholdPercent": 1, "cpuSuppressMinPercent": 25,
            "cpuSuppressPolicy": "cfsQuota"}})
        with node.agent("--strategies", "cpuSuppress", *FAST, "--proc-root", view.root) as agent:
            agent.wait_for("the BE quota at its floor", lambda: node.quota(be_dir) == floor, 60)
            assert node.quota(be.dir) <= floor
            resets = 0
            for _ in range(6):
                time.sleep(2.0)  # pacing, no bound: some ticks with nothing to write before the next reset
                node.set_quota(be_dir, -1)
                resets += 1
                agent.wait_for(f"reset {resets} undone", lambda: node.quota(be_dir) == floor, 30)
            log = agent.log()
        records = agent.audit("cpuSuppress")
        undone = [r for r in records if r.get("action") == "write" and r["executed"]
                  and r["target"].endswith("/cpu.cfs_quota_us") and be_dir in r["target"]
                  and str(r.get("old")) == "-1"]
        assert len(undone) >= resets, [(r["old"], r["value"]) for r in undone]
        fights = [r for r in records if "conflict" in str(r.get("error") or "")]
        assert not fights, fights[:2]
        assert "changed back by another writer" not in log, log
        assert not refused_writes(records), refused_writes(records)[:3]


def test_a_stopped_agent_leaves_the_batch_pod_under_the_be_quota_and_restore_gives_it_back(tmp_path) -> None:
    """SIGTERM leaves every file as it is, so BE stays suppressed between two agents.  On v1 the
    lowered pod and container stay at the BE quota: the kernel refuses a child above its parent, so
    their own 150000 cannot come back while the BE quota is in force (a restarted agent gives it back
    as the budget allows, ``test_batch_pod_quota_back_after_an_agent_restart``).  Uninstall does:
    ``qosmanager restore`` writes the BE dir's -1, then the pod's and the container's 150000 (parents
    first), none refused.  cgroup v1 only: v2 takes a parent below its children, so nothing is lowered."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs: a budget above 1.5 cores")
    originals = str(tmp_path / "originals.jsonl")
    with real_node(tmp_path, version=1) as node, proc_view(node, cpus=node.cpus, busy=0.1) as view:
        be = batch_pod(node)
        ctr = be.containers[0]
        be_dir = node.layout.qos_dir("BestEffort")
        node.write_nodeslo(suppress_slo(low_threshold(node)))
        with node.agent("--strategies", "cpuSuppress", *FAST, "--proc-root", view.root,
                        "--originals-file", originals) as agent:
            agent.wait_for("a BE quota below the batch pod's", lambda: 0 < node.quota(be_dir) < BATCH_QUOTA, 60)
        assert agent.proc.returncode == 0, agent.log()
        budget = node.quota(be_dir)
        assert 0 < budget < BATCH_QUOTA, "a stop keeps BE suppressed"
        assert node.quota(be.dir) == node.quota(ctr) == budget
        assert refused(node, ctr, BATCH_QUOTA) == errno.EINVAL  # the kernel's rule: not while BE is held
        assert not refused_writes(agent.audit("cpuSuppress"))

        audit = str(tmp_path / "restore-audit.jsonl")
        done = subprocess.run([sys.executable, "-m", "qosmanager", "restore", *node.tree.agent_flags(),
                               "--originals-file", originals, "--audit-log", audit],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert node.quota(be_dir) == -1
        assert node.quota(be.dir) == node.quota(ctr) == BATCH_QUOTA
        with open(audit) as f:
            writes = [json.loads(line) for line in f]
        order = [w["target"] for w in writes if w["action"] == "write" and w["executed"]]
        # parents first: the kernel refuses anything else
        assert [t.rsplit("/", 1)[0].removeprefix("cpu/") for t in order] == [be_dir, be.dir, ctr], order
        assert not [w for w in writes if w.get("error")], writes
