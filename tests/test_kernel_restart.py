"""The agent killed and restarted on a real kernel: the suppression it left stays in force, and the new
agent takes over from what it finds without first undoing it.  Runs on the host's kernel only (the
logic is the same on both cgroup versions; the guest's time goes to version-specific tests)."""

from __future__ import annotations

import signal
import time

import pytest

from realnode import real_node

pytestmark = pytest.mark.kernel

QUOTA_FILES = ("/cpu.cfs_quota_us", "/cpu.max")
FAST = ("--strategies", "cpuSuppress", "--collect-interval", "500ms", "--cpu-suppress-interval-seconds", "0.5")


def suppress(floor: int) -> dict:
    """A threshold LS alone exceeds, so BE's quota is exactly its floor: ``floor`` % of the node."""
    return {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 10,
                                            "cpuSuppressMinPercent": floor, "cpuSuppressPolicy": "cfsQuota"}}


def test_sigkilled_agent_restarts_without_undoing_the_suppression(tmp_path) -> None:
    """SIGKILL leaves BE's quota in the kernel; the NodeSLO tightens while no agent runs; the restarted
    agent lowers the quota straight from what it found, never through unlimited, and BE stays throttled."""
    with real_node(tmp_path) as node:
        ls = node.add_pod("ls", "LS", cpu_milli=500, cpu_limit=True)
        be = node.add_pod("be", "BE")
        node.start(ls)
        node.start(be)
        node.start(be)
        be_dir = node.layout.qos_dir("BestEffort")
        node.write_nodeslo(suppress(40))
        left = 40 * node.cpus * 1000
        with node.agent(*FAST) as first:
            first.wait_for("BE quota", lambda: node.quota(be_dir) == left, 60)
            time.sleep(1.0)
            first.proc.send_signal(signal.SIGKILL)  # wherever it is in its tick
            first.proc.wait(10)
        assert node.quota(be_dir) == left
        node.write_nodeslo(suppress(20))  # half the budget for BE from now on
        restarted_at = time.time()
        throttled = node.cpu_stat(be_dir)["nr_throttled"]
        seen = [left]
        with node.agent(*FAST) as second:
            def lowered() -> bool:
                seen.append(node.quota(be_dir))
                return any(r["ts"] >= restarted_at and r["action"] == "write" and r["target"].endswith(QUOTA_FILES)
                           for r in second.audit("cpuSuppress"))
            second.wait_for("the restarted agent's BE quota", lowered, 60)
            for _ in range(20):
                time.sleep(0.05)
                seen.append(node.quota(be_dir))

            # BE, wanting two CPUs, is throttled by the quota in force as soon as it gets the CPU for its
            # quota's part of one period; beside busy neighbours that may take a while (BE weighs the least)
            def throttled_again() -> bool:
                seen.append(node.quota(be_dir))
                return node.cpu_stat(be_dir)["nr_throttled"] > throttled
            second.wait_for("BE throttled across the restart", throttled_again, 60)
            assert second.proc.poll() is None
        assert -1 not in seen, f"the restarted agent released BE for a while: {seen}"
        writes = [int(r["value"].split()[0]) for r in second.audit("cpuSuppress")
                  if r["ts"] >= restarted_at and r["action"] == "write" and r["target"].endswith(QUOTA_FILES)]
        assert writes[0] == left // 2 == node.quota(be_dir), f"left {left}, then {writes}: the new budget at once"
