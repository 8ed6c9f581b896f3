"""CPU burst scale-down on a real kernel: a throttled LS container's CFS quota rises above its limit and
comes back to it -- because the node got busy (the share pool), or because the container spent its
burst budget (the token bucket) -- with burst still on.  Judged by ``cpu.cfs_quota_us`` / ``cpu.max``
and ``cpu.stat`` as the kernel holds them.  The host runs this on cgroup v1 (the logic is the same on
v2, where ``test_kernel_cpu.py::test_cpu_burst`` proves the files).

The node's CPU use (``/proc/stat``) is the one input these tests set themselves: on a shared machine
other work decides whether the share pool is idle, so the agent gets a proc root that is ``/proc``
except for a ``stat`` whose busy share the test chooses (:class:`realnode.ProcView`).  The container's usage,
its throttling and every quota are the kernel's.
"""

from __future__ import annotations

import os
import time

import pytest

from realnode import Agent, RealNode, proc_view, real_node

pytestmark = pytest.mark.kernel

FAST = ("--strategies", "cpuBurst", "--collect-interval", "500ms", "--reconcile-interval-seconds", "0.5")
LIMIT = 10_000  # the LS container's quota: 100m; one busy loop needs 15 % of a CPU to be throttled at the
#                 ceiling (150 %), which it gets even when five other busy tasks share its CPU


def quota_writes(agent: Agent, rel: str) -> list[tuple[int, str]]:
    """The container quota writes the agent made: (value, reason)."""
    return [(int(r["value"].split()[0]), r["reason"]) for r in agent.audit("cpuBurst")
            if r["action"] == "write" and r["executed"] and r["target"].endswith(
                (f"{rel}/cpu.cfs_quota_us", f"{rel}/cpu.max"))]


def context(node: RealNode, agent: Agent, rel: str) -> str:
    """What the test knows when it fails: the load, the container's throttling as the kernel counts
    it, and the agent's quota writes with their reasons (its decisions)."""
    return (f"load {os.getloadavg()[0]:.1f}; quota {node.quota(rel)}; cpu.stat {node.cpu_stat(rel)}; "
            f"quota writes (value, reason): "
            f"{[(v, why.split('(')[-1]) for v, why in quota_writes(agent, rel)][-12:]}; "
            f"last audit records: {agent.audit('cpuBurst')[-3:]}")


def test_burst_scales_down_when_the_node_gets_busy(tmp_path) -> None:
    """No token bucket: a throttled LS container bursts to its ceiling (150 % of the limit) while the
    node's share pool is idle (30 % busy); the node gets busy, past the share pool threshold (90 %),
    and the quota steps back to the limit, where the kernel throttles the container again; when the
    node is idle again, the quota rises again."""
    with real_node(tmp_path) as node, proc_view(node, cpus=node.cpus, busy=0.3) as cpu:
        ls = node.add_pod("ls", "LS", cpu_milli=LIMIT // 100, cpu_limit=True)
        ctr = ls.containers[0]
        node.start(ls)  # one busy loop: a whole CPU wanted, a tenth of one allowed
        node.write_nodeslo({"cpuBurstStrategy": {"policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 150,
                                                 "sharePoolThresholdPercent": 90}})
        with node.agent(*FAST, "--proc-root", cpu.root) as agent:
            agent.wait_for("the quota at its ceiling", lambda: node.quota(ctr) == LIMIT * 3 // 2, 60,
                           lambda: context(node, agent, ctr))
            assert node.quota(ls.dir) == LIMIT * 3 // 2, "the pod's quota moves with its container's"
            cpu.busy = 1.0  # the node gets busy
            agent.wait_for("the quota back at the limit", lambda: node.quota(ctr) == LIMIT, 30,
                           lambda: context(node, agent, ctr))
            # the quota stays at the limit (at least 1 s) until the kernel has throttled the container
            # there: on a loaded machine one busy loop may wait some periods before it uses 10 ms of one
            throttled = node.cpu_stat(ctr)["nr_throttled"]
            since = time.monotonic()
            while True:
                assert node.quota(ctr) == LIMIT and node.quota(ls.dir) == LIMIT, context(node, agent, ctr)
                waited = time.monotonic() - since
                if waited >= 1.0 and node.cpu_stat(ctr)["nr_throttled"] > throttled:
                    break
                assert waited < 30, "the kernel never throttled it at the limit: " + context(node, agent, ctr)
                time.sleep(0.2)
            downs = [why for v, why in quota_writes(agent, ctr) if "scale down" in why]
            assert downs and all("share pool overload" in why for why in downs), context(node, agent, ctr)
            cpu.busy = 0.3
            agent.wait_for("the quota above the limit again", lambda: node.quota(ctr) > LIMIT, 30,
                           lambda: context(node, agent, ctr))


def test_burst_scales_down_when_the_budget_is_spent(tmp_path) -> None:
    """A token bucket (cfsQuotaBurstPeriodSeconds 2): an idle LS container fills it; busy and throttled,
    its quota rises above the limit while the bucket lasts, then returns to the limit and stays there
    although the container is still throttled, on an idle share pool (30 % busy)."""
    with real_node(tmp_path) as node, proc_view(node, cpus=node.cpus, busy=0.3) as cpu:
        ls = node.add_pod("ls", "LS", cpu_milli=LIMIT // 100, cpu_limit=True)
        ctr = ls.containers[0]
        node.write_nodeslo({"cpuBurstStrategy": {
            "policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 300, "cfsQuotaBurstPeriodSeconds": 2,
            "sharePoolThresholdPercent": 90}})
        with node.agent(*FAST, "--proc-root", cpu.root) as agent:
            time.sleep(5)  # idle: the bucket (capacity 2 s x 200 %) fills at 100 % a second
            node.start(ls)  # one busy loop: a whole CPU wanted, a tenth of one allowed
            agent.wait_for("a quota above the limit", lambda: node.quota(ctr) > LIMIT, 30,
                           lambda: context(node, agent, ctr))
            peak = [node.quota(ctr)]
            agent.wait_for("the quota back at the limit",
                           lambda: peak.append(node.quota(ctr)) or peak[-1] == LIMIT, 30)
            throttled = node.cpu_stat(ctr)["nr_throttled"]
            held = []
            for _ in range(10):
                time.sleep(0.2)
                held.append(node.quota(ctr))
            info = f"quotas seen {sorted(set(peak))}, then {held}; " + context(node, agent, ctr)
            assert max(peak) > LIMIT and held == [LIMIT] * 10, info
            assert node.quota(ls.dir) == LIMIT, info
            assert node.cpu_stat(ctr)["nr_throttled"] > throttled, "still throttled: it would burst"
            downs = [why for v, why in quota_writes(agent, ctr) if "scale down" in why]
            assert downs and not any("overload" in why for why in downs), info
