"""Uninstall on a real kernel: the agent keeps what each file held before it first changed it
(``--originals-file``); stopping it, as a rolling update does, leaves BestEffort suppressed; a restarted
agent keeps the first original; ``qosmanager restore`` then puts back what the node held before any
agent, and the kernel says so.  Runs on the host's kernel (cgroups under this test's own cgroup)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from realnode import PERIOD_US, real_node

pytestmark = pytest.mark.kernel

FAST = ("--strategies", "cpuSuppress", "--collect-interval", "500ms", "--cpu-suppress-interval-seconds", "0.5")
QUOTA_FILES = ("/cpu.cfs_quota_us", "/cpu.max")


def suppress(floor: int) -> dict:
    """A threshold LS alone exceeds, so BE's quota is its floor: ``floor`` % of the node."""
    return {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 10,
                                            "cpuSuppressMinPercent": floor, "cpuSuppressPolicy": "cfsQuota"}}


def test_restore_puts_back_what_the_node_held_and_a_stop_does_not(tmp_path) -> None:
    originals = str(tmp_path / "originals.jsonl")
    with real_node(tmp_path) as node:
        ls = node.add_pod("ls", "LS", cpu_milli=500, cpu_limit=True)
        be = node.add_pod("be", "BE")  # batch-cpu 1 core: koordlet's quota 100000 in the pod and container
        node.start(ls)
        node.start(be)
        be_dir = node.layout.qos_dir("BestEffort")
        assert node.quota(be_dir) == -1  # the kubelet leaves the BestEffort level unlimited
        batch = (node.quota(be.dir), node.quota(be.containers[0]))
        assert batch == (PERIOD_US, PERIOD_US)
        node.write_nodeslo(suppress(40))
        with node.agent(*FAST, "--originals-file", originals) as first:
            first.wait_for("BE quota", lambda: node.quota(be_dir) == 40 * node.cpus * 1000, 60)
        # a stop (a rolling update's) leaves the node as it is: BE stays suppressed
        assert node.quota(be_dir) == 40 * node.cpus * 1000
        node.write_nodeslo(suppress(20))
        with node.agent(*FAST, "--originals-file", originals) as second:
            second.wait_for("the new BE quota", lambda: node.quota(be_dir) == 20 * node.cpus * 1000, 60)
        with open(originals) as f:
            recs = [json.loads(line) for line in f]
        be_recs = [r for r in recs if r["cgroup"] == be_dir and r["target"].endswith(QUOTA_FILES)]
        assert len(be_recs) == 1 and be_recs[0]["strategy"] == "cpuSuppress", recs
        assert be_recs[0]["value"] in ("-1", "max 100000"), be_recs  # the first agent's find, kept

        audit = str(tmp_path / "restore-audit.jsonl")
        cmd = [sys.executable, "-m", "qosmanager", "restore", *node.tree.agent_flags(),
               "--originals-file", originals, "--audit-log", audit]
        dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, timeout=120)
        assert dry.returncode == 0, dry.stderr
        assert node.quota(be_dir) == 20 * node.cpus * 1000  # a dry run writes nothing
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "written" in done.stdout, done.stdout
        assert node.quota(be_dir) == -1, "BE is back to what the kubelet left"
        # the BE floor (20 % of the node) was below the batch pod's quota when the node has fewer than five
        # CPUs, and v1 lowered the pod and container first: they hold koordlet's values again
        assert (node.quota(be.dir), node.quota(be.containers[0])) == batch
        assert not os.path.exists(originals) and os.path.exists(originals + ".restored")
        with open(audit) as f:
            writes = [json.loads(line) for line in f]
        assert any(w["strategy"] == "restore" and w["executed"] and w["target"].endswith(QUOTA_FILES)
                   for w in writes), writes
