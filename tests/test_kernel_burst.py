"""CPU burst scale-down on a real kernel: a throttled LS container's CFS quota rises above its limit and
comes back to it -- because the node got busy (the share pool), or because the container spent its
burst budget (the token bucket) -- with burst still on.  Judged by ``cpu.cfs_quota_us`` / ``cpu.max``
and ``cpu.stat`` as the kernel holds them.  The host runs this on cgroup v1 (the logic is the same on
v2, where ``test_kernel_cpu.py::test_cpu_burst`` proves the files).

The node's CPU use (``/proc/stat``) is the one input these tests set themselves: on a shared machine
other work decides whether the share pool is idle, so the agent gets a proc root that is ``/proc``
except for a ``stat`` whose busy share the test chooses (:class:`NodeCPU`).  The container's usage,
its throttling and every quota are the kernel's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import pytest

from realnode import CLK_TCK, Agent, RealNode, real_node

pytestmark = pytest.mark.kernel

FAST = ("--strategies", "cpuBurst", "--collect-interval", "500ms", "--reconcile-interval-seconds", "0.5")
LIMIT = 20_000  # the LS container's quota: 200m, which one busy loop exceeds even on a loaded machine


class NodeCPU:
    """A proc root: ``/proc``'s entries (symlinks; no pid dirs), and a ``stat`` whose CPUs are busy
    ``busy`` (0..1) of the time, advanced every 0.1 s in place (the agent keeps the file open)."""

    def __init__(self, root: str, cpus: int, busy: float) -> None:
        self.root, self.cpus, self.busy = root, cpus, busy
        os.makedirs(root)
        for name in os.listdir("/proc"):
            if not name.isdigit() and name != "stat":
                os.symlink(f"/proc/{name}", os.path.join(root, name))
        self._busy_ticks = self._idle_ticks = 0.0
        self._at = time.monotonic()
        self._stop = threading.Event()
        self._write()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        now = time.monotonic()
        elapsed = (now - self._at) * CLK_TCK
        self._at = now
        self._busy_ticks += elapsed * self.busy
        self._idle_ticks += elapsed * (1 - self.busy)
        row = f"{int(self._busy_ticks):012d} 000000000000 000000000000 {int(self._idle_ticks):012d} " \
              "000000000000 000000000000 000000000000 000000000000 000000000000 000000000000"
        total = f"{int(self._busy_ticks * self.cpus):012d} 000000000000 000000000000 " \
                f"{int(self._idle_ticks * self.cpus):012d} " + " ".join(["000000000000"] * 6)
        text = f"cpu  {total}\n" + "".join(f"cpu{i:<4d}{row}\n" for i in range(self.cpus))
        fd = os.open(os.path.join(self.root, "stat"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, text.encode(), 0)  # the same length every time: no truncation to race with
        finally:
            os.close(fd)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._write()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@contextlib.contextmanager
def node_cpu(node: RealNode, busy: float) -> Iterator[NodeCPU]:
    ctl = NodeCPU(os.path.join(node.workdir, "proc"), node.cpus, busy)
    try:
        yield ctl
    finally:
        ctl.close()


def quota_writes(agent: Agent, rel: str) -> list[tuple[int, str]]:
    """The container quota writes the agent made: (value, reason)."""
    return [(int(r["value"].split()[0]), r["reason"]) for r in agent.audit("cpuBurst")
            if r["action"] == "write" and r["executed"] and r["target"].endswith(
                (f"{rel}/cpu.cfs_quota_us", f"{rel}/cpu.max"))]


def context(node: RealNode, agent: Agent, rel: str) -> str:
    return (f"load {os.getloadavg()[0]:.1f}; quota writes (value, reason): "
            f"{[(v, why.split('(')[-1]) for v, why in quota_writes(agent, rel)][-12:]}")


def test_burst_scales_down_when_the_node_gets_busy(tmp_path) -> None:
    """No token bucket: a throttled LS container bursts to its ceiling (150 % of the limit) while the
    node's share pool is idle (30 % busy); the node gets busy, past the share pool threshold (90 %),
    and the quota steps back to the limit, where the kernel throttles the container again; when the
    node is idle again, the quota rises again."""
    with real_node(tmp_path) as node, node_cpu(node, busy=0.3) as cpu:
        ls = node.add_pod("ls", "LS", cpu_milli=200, cpu_limit=True)
        ctr = ls.containers[0]
        node.start(ls)  # one busy loop: a whole CPU wanted, a fifth of one allowed
        node.write_nodeslo({"cpuBurstStrategy": {"policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 150,
                                                 "sharePoolThresholdPercent": 90}})
        with node.agent(*FAST, "--proc-root", cpu.root) as agent:
            agent.wait_for("the quota at its ceiling", lambda: node.quota(ctr) == LIMIT * 3 // 2, 60)
            assert node.quota(ls.dir) == LIMIT * 3 // 2, "the pod's quota moves with its container's"
            cpu.busy = 1.0  # the node gets busy
            agent.wait_for("the quota back at the limit", lambda: node.quota(ctr) == LIMIT, 30)
            throttled = node.cpu_stat(ctr)["nr_throttled"]
            time.sleep(1.0)
            assert node.quota(ctr) == LIMIT and node.quota(ls.dir) == LIMIT, context(node, agent, ctr)
            assert node.cpu_stat(ctr)["nr_throttled"] > throttled, "the kernel throttles it at the limit"
            downs = [why for v, why in quota_writes(agent, ctr) if "scale down" in why]
            assert downs and all("share pool overload" in why for why in downs), context(node, agent, ctr)
            cpu.busy = 0.3
            agent.wait_for("the quota above the limit again", lambda: node.quota(ctr) > LIMIT, 30)


def test_burst_scales_down_when_the_budget_is_spent(tmp_path) -> None:
    """A token bucket (cfsQuotaBurstPeriodSeconds 2): an idle LS container fills it; busy and throttled,
    its quota rises above the limit while the bucket lasts, then returns to the limit and stays there
    although the container is still throttled, on an idle share pool (30 % busy)."""
    with real_node(tmp_path) as node, node_cpu(node, busy=0.3) as cpu:
        ls = node.add_pod("ls", "LS", cpu_milli=200, cpu_limit=True)
        ctr = ls.containers[0]
        node.write_nodeslo({"cpuBurstStrategy": {
            "policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 300, "cfsQuotaBurstPeriodSeconds": 2,
            "sharePoolThresholdPercent": 90}})
        with node.agent(*FAST, "--proc-root", cpu.root) as agent:
            agent.wait_for("a first burst decision", lambda: agent.audit("cpuBurst") or node.burst(ctr) == 0, 60)
            time.sleep(4.5)  # idle: the bucket (capacity 2 s x 200 %) fills at 100 % a second
            node.start(ls)  # one busy loop: a whole CPU wanted, a fifth of one allowed
            agent.wait_for("a quota above the limit", lambda: node.quota(ctr) > LIMIT, 30)
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
            assert node.cpu_stat(ctr)["nr_throttled"] > throttled, "still throttled: it would burst if it could"
            downs = [why for v, why in quota_writes(agent, ctr) if "scale down" in why]
            assert downs and not any("overload" in why for why in downs), info
