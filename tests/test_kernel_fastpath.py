"""The fast path on the real cgroup v1 kernel of this host, beside a koordinator BE pod.

koordlet's batch-cpu hook gives a BE pod and its container a CFS quota of their own (150000 for 1.5
cores), and cgroup v1 refuses a BestEffort dir quota below a child's (EINVAL).  Here the real agent
(``qosmanager run``, the fast path on by default) settles with LS idle (BE's budget above the pod's quota),
then an LS busy loop starts: the fast path must put a BE budget below the pod's quota in force -- the pod
and its container lowered first -- well before cpuSuppress's next tick (its interval is 30 s here), and
no write of the agent's may be refused by the kernel.

The node's ``/proc/stat`` is the test's own (``realnode.ProcView``, nothing busy outside kubepods), so a
shared machine's load does not move the budget: it is capacity x threshold - the LS pod's use.  The tree
gets the weight of about eight busy tasks against the machine's other work (our own cgroup), so that the
LS loop gets CPU at all; a loop that still got less than 0.3 cores cannot show a reaction, and the test
says so and skips.
"""

from __future__ import annotations

import errno
import os

import pytest

from realnode import RealNode, proc_view, real_node

pytestmark = pytest.mark.kernel

BATCH_QUOTA = 150_000  # koordlet's hook for batch-cpu 1500 (1.5 cores)
TREE_SHARES = 8192
TICK = "30"  # cpuSuppress's interval: after its first decision, the next tick is 30 s away


def quota_below(node: RealNode, rel: str, limit: int) -> bool:
    return 0 <= node.quota(rel) < limit


def test_v1_fast_path_lowers_a_batch_pods_quota_before_the_be_dir(tmp_path) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs: an idle budget above the batch pod's 1.5 cores")
    with real_node(tmp_path, version=1) as node, proc_view(node, cpus=node.cpus, busy=0.0) as view:
        with open(os.path.join(node.tree.bases["cpu"], "cpu.shares"), "w") as f:
            f.write(str(TREE_SHARES))
        be = node.add_pod("be", "BE", cpu_milli=1500, cpu_limit=True)
        ctr = be.containers[0]
        ls = node.add_pod("ls", "LS", cpu_milli=1000)
        be_dir = node.layout.qos_dir("BestEffort")
        try:
            node.set_quota(be_dir, BATCH_QUOTA - 10_000)
        except OSError as e:  # the kernel's rule the fast path has to live with
            assert e.errno == errno.EINVAL
        else:
            pytest.fail("the kernel took a BE dir quota below its pod's")
        # capacity x 85 % - LS idle: 0.85 x the node, above 150000 on two CPUs or more
        threshold = 85
        idle_budget = node.cpus * 1000 * threshold // 100 * 100
        assert idle_budget > BATCH_QUOTA
        node.write_nodeslo({"resourceUsedThresholdWithBE": {
            "enable": True, "cpuSuppressThresholdPercent": threshold, "cpuSuppressPolicy": "cfsQuota"}})
        with node.agent("--strategies", "cpuSuppress", "--cpu-suppress-interval-seconds", TICK,
                        "--proc-root", view.root) as agent:
            agent.wait_for("cpuSuppress's first decision: BE's quota above the pod's",
                           lambda: node.quota(be_dir) > BATCH_QUOTA, 60)
            assert node.quota(be.dir) == node.quota(ctr) == BATCH_QUOTA
            start = len(agent.audit())
            node.start(ls)  # LS demand: one busy loop
            used, _ = node.rates([ls.dir], 1.0)
            if used[0] < 0.3:
                pytest.skip(f"the LS busy loop got {used[0]:.2f} cores on this loaded machine: no rise to react to")
            agent.wait_for("a BE quota below the pod's", lambda: quota_below(node, be_dir, BATCH_QUOTA), 25)
            budget = node.quota(be_dir)
            assert node.quota(be.dir) <= budget and node.quota(ctr) <= budget, "v1: the children went first"
            records = agent.audit()[start:]
            refused = [r for r in records if r.get("action") == "write" and not r["executed"] and r.get("error")]
            assert not refused, refused[:3]
            lowered = [r for r in records if r.get("action") == "write" and r["executed"]
                       and str(r.get("target", "")).endswith("cpu.cfs_quota_us")
                       and 0 <= int(str(r["value"]).split()[0]) < BATCH_QUOTA]
            assert lowered, "no write lowered a quota below the pod's"
            assert all("(fast path)" in r["reason"] for r in lowered), [r["reason"] for r in lowered]
            targets = [r["target"] for r in lowered]

            def first(rel: str) -> int:
                return next(i for i, t in enumerate(targets) if t.endswith(f"{rel}/cpu.cfs_quota_us"))

            assert first(ctr) < first(be.dir) < first(be_dir), targets
