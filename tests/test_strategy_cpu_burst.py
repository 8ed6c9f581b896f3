"""cpuBurst (koordlet-qos §4.2): static CFS burst, dynamic quota burst, share pool, token buckets.

Expected values come from the spec's formulas, worked out in the comments (period 100000 µs).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from qosmanager.api.nodeslo import CPUBurstConfig
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object
from qosmanager.strategies.cpu_burst import (
    ALWAYS,
    BUCKET,
    COOLING,
    IDLE,
    NEVER,
    OP_DOWN,
    OP_REMAIN,
    OP_RESET,
    OP_UP,
    OVERLOAD,
    UNKNOWN,
    BurstLimiters,
    change_operation_by_node,
    limiter_mode,
)

NOW = 1000.0


def cid(ch: str) -> str:
    return "containerd://" + ch * 64


def pod(uid: str, containers: list[tuple[str, str, int | None]], *, qos: str | None = "LS",
        kube_qos: str = "Burstable", phase: str = "Running", annotations: dict[str, str] | None = None,
        running: bool = True, request_milli: int | None = None) -> dict[str, Any]:
    """A pod; each container is (name, id char, cpu limit in milli or None)."""
    specs, statuses = [], []
    for name, ch, limit in containers:
        res: dict[str, Any] = {}
        if limit is not None:
            res = {"limits": {"cpu": f"{limit}m", "memory": "1Gi"},
                   "requests": {"cpu": f"{request_milli if request_milli is not None else limit // 2}m",
                                "memory": "1Gi"}}
        specs.append({"name": name, "resources": res})
        statuses.append({"name": name, "containerID": cid(ch),
                         "state": {"running": {}} if running else {"waiting": {}}})
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default", "labels": labels,
                         "annotations": annotations or {}},
            "spec": {"containers": specs},
            "status": {"phase": phase, "qosClass": kube_qos, "containerStatuses": statuses}}


def make(version: int = 1, *, burst: dict[str, Any] | None = None, pods: list[dict[str, Any]] = ()) -> Harness:
    h = Harness(version=version, strategies=["cpuBurst"], n_cpus=8)
    h.set_node(node_object(h.host))
    h.set_pods(pods)
    if burst is not None:
        h.set_nodeslo({"cpuBurstStrategy": burst})
    return h


def cdir(h: Harness, uid: str, ch: str) -> str:
    return f"{h.host.pod_dir(uid)}/{ch * 64}"


def get_burst(h: Harness, rel: str) -> int:
    name = "cpu.cfs_burst_us" if h.host.version == 1 else "cpu.max.burst"
    return int((h.read_file(h.cgroup_file("cpu", rel, name)) or "").strip())


def get_quota(h: Harness, rel: str) -> int:
    if h.host.version == 1:
        return int((h.read_file(h.cgroup_file("cpu", rel, "cpu.cfs_quota_us")) or "").strip())
    q = (h.read_file(h.cgroup_file("cpu", rel, "cpu.max")) or "").split()[0]
    return -1 if q == "max" else int(q)


def set_quota(h: Harness, rel: str, value: int) -> None:
    if h.host.version == 1:
        h.write_file(h.cgroup_file("cpu", rel, "cpu.cfs_quota_us"), f"{value}\n")
    else:
        h.write_file(h.cgroup_file("cpu", rel, "cpu.max"), f"{'max' if value == -1 else value} 100000\n")


def kubelet_quotas(h: Harness, uid: str, per_container: dict[str, int], pod_quota: int | None = None) -> None:
    for ch, q in per_container.items():
        set_quota(h, cdir(h, uid, ch), q)
    set_quota(h, h.host.pod_dir(uid), sum(per_container.values()) if pod_quota is None else pod_quota)


def idle_node(h: Harness, t: float) -> None:
    """Share pool well below 45 %: node 1 core of 8."""
    h.add_samples("node_cpu_usage", [(t, 1.0)])


def throttled(h: Harness, t: float, ch: str, ratio: float) -> None:
    h.add_samples("container_cpu_throttled", [(t, ratio)], container=cid(ch))


# ---------------------------------------------------------------------------------------------
# static burst (applyCPUBurst)


@pytest.mark.parametrize("version", [1, 2])
def test_static_burst_from_limits_and_pod_sum(version: int) -> None:
    p = pod("ls-1", [("a", "a", 2000), ("b", "b", 500), ("c", "c", None)])
    h = make(version, burst={"policy": "cpuBurstOnly"}, pods=[p])
    h.tick("cpuBurst", NOW)
    # a: 2 cores x 1000% x 100000 = 2000000, b: 0.5 x 10 x 100000 = 500000, both above the quota the
    # kernel caps a burst at (koordlet fix): 200000 and 50000; c: no limit -> 0
    assert get_burst(h, cdir(h, "ls-1", "a")) == 200_000
    assert get_burst(h, cdir(h, "ls-1", "b")) == 50_000
    assert get_burst(h, cdir(h, "ls-1", "c")) == 0
    assert get_burst(h, h.host.pod_dir("ls-1")) == 250_000


def test_static_burst_percent_truncation_clamp_and_policy_off() -> None:
    p1 = pod("ls-1", [("a", "a", 333)])
    p2 = pod("ls-2", [("a", "d", 16000)])
    p3 = pod("ls-3", [("a", "e", 2_000_000)])
    h = make(burst={"policy": "auto", "cpuBurstPercent": 30}, pods=[p1, p2, p3])
    h.tick("cpuBurst", NOW)
    # 0.333 x 0.3 x 100000 = 9990.000000000002 -> 9990
    assert get_burst(h, cdir(h, "ls-1", "a")) == 9990
    # 16 x 0.3 x 100000 = 480000
    assert get_burst(h, cdir(h, "ls-2", "d")) == 480_000
    h.set_nodeslo({"cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 10000}})
    h.tick("cpuBurst", NOW + 1)
    # 16 x 100 x 100000 = 160000000: capped at the quota, 1600000 (the kernel refuses more)
    assert get_burst(h, cdir(h, "ls-2", "d")) == 1_600_000
    # 2000 x 100 x 100000: above the knob's range as well as the quota: clamped to 100000000
    assert get_burst(h, cdir(h, "ls-3", "e")) == 100_000_000
    # a policy without the static burst writes 0 back (koordlet's way of turning it off)
    h.set_nodeslo({"cpuBurstStrategy": {"policy": "cfsQuotaBurstOnly"}})
    h.tick("cpuBurst", NOW + 2)
    assert get_burst(h, cdir(h, "ls-1", "a")) == 0 and get_burst(h, h.host.pod_dir("ls-2")) == 0


def test_a_dropped_burst_percent_leaves_the_static_burst_files_as_they_are() -> None:
    """koordlet computes a negative cfs_burst_us from cpuBurstPercent -7 and its validator skips the
    write: the containers with a limit, and their pod, keep what they have; the rest still runs."""
    ann = {"koordinator.sh/cpuBurst": json.dumps({"cpuBurstPercent": 30})}
    p1 = pod("ls-1", [("a", "a", 1000), ("b", "b", None)])
    p2 = pod("ls-2", [("a", "c", 1000)], annotations=ann)
    h = make(burst={"policy": "auto", "cpuBurstPercent": 20}, pods=[p1, p2])
    h.tick("cpuBurst", NOW)
    assert get_burst(h, cdir(h, "ls-1", "a")) == 20_000 and get_burst(h, h.host.pod_dir("ls-1")) == 20_000
    h.write_file(h.cgroup_file("cpu", cdir(h, "ls-1", "b"), "cpu.cfs_burst_us"), "7\n")
    h.set_nodeslo({"cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": -7}})
    assert [p for p, _ in h.store.nodeslo.invalid_fields] == ["spec.cpuBurstStrategy.cpuBurstPercent"]
    h.tick("cpuBurst", NOW + 100)  # past the forced re-send
    assert get_burst(h, cdir(h, "ls-1", "a")) == 20_000  # left as it is
    assert get_burst(h, h.host.pod_dir("ls-1")) == 20_000
    assert get_burst(h, cdir(h, "ls-1", "b")) == 0  # no CPU limit: 0, whatever the percentage
    assert get_burst(h, cdir(h, "ls-2", "c")) == 30_000  # the pod's own percentage still applies


def test_pod_annotation_overrides_node_config() -> None:
    ann = {"koordinator.sh/cpuBurst": json.dumps({"policy": "auto", "cpuBurstPercent": 40})}
    p1 = pod("ls-1", [("a", "a", 1000)], annotations=ann)
    p2 = pod("ls-2", [("a", "b", 1000)])
    p3 = pod("ls-3", [("a", "c", 1000)], annotations={"koordinator.sh/cpuBurst": "{bad json"})
    h = make(burst={"policy": "none"}, pods=[p1, p2, p3])
    h.tick("cpuBurst", NOW)
    assert get_burst(h, cdir(h, "ls-1", "a")) == 40_000  # 1 x 40% x 100000
    assert get_burst(h, cdir(h, "ls-2", "b")) == 0  # node policy none
    assert get_burst(h, cdir(h, "ls-3", "c")) == 0  # invalid annotation: left as it is (the default)


def test_a_garbled_annotation_leaves_the_pods_burst_and_quota_as_they_are() -> None:
    """koordlet fix: koordlet would give the pod the node's config (policy none: burst 0, quota back
    to the limit); the pod's files stay as its last good annotation left them."""
    good = {"koordinator.sh/cpuBurst": json.dumps({"policy": "auto", "cpuBurstPercent": 20})}
    h = make(burst={"policy": "none"}, pods=[pod("ls-1", [("a", "a", 1000)], annotations=good),
                                             pod("ls-2", [("a", "b", 1000)], annotations=good)])
    h.tick("cpuBurst", NOW)
    assert get_burst(h, cdir(h, "ls-1", "a")) == 20_000
    set_quota(h, cdir(h, "ls-1", "a"), 120_000)  # burst up earlier
    garbled = {"koordinator.sh/cpuBurst": "[" * 1000 + "]" * 1000}
    h.set_pods([pod("ls-1", [("a", "a", 1000)], annotations=garbled),
                pod("ls-2", [("a", "b", 1000)], annotations={"koordinator.sh/cpuBurst": "{}"})])
    h.recorded.writes.clear()
    for k in range(1, 4):
        h.tick("cpuBurst", NOW + k)
    assert get_burst(h, cdir(h, "ls-1", "a")) == 20_000 and get_quota(h, cdir(h, "ls-1", "a")) == 120_000
    assert not [w for w in h.recorded.writes if "ls-1" in w["file"]]
    assert get_burst(h, cdir(h, "ls-2", "b")) == 0  # the other pod follows its (now empty) annotation
    skips = [r for r in h.audit.recent if r["action"] == "skip"]
    assert [(r["strategy"], r["target"], r["uid"]) for r in skips] == [("cpuBurst", "default/ls-1", "ls-1")]
    assert "koordinator.sh/cpuBurst" in skips[0]["reason"] and "nested deeper" in skips[0]["reason"]


def test_only_ls_system_and_unlabelled_pending_or_running_pods_burst() -> None:
    pods = [
        pod("lsr-1", [("a", "a", 1000)], qos="LSR", kube_qos="Guaranteed"),
        pod("lse-1", [("a", "b", 1000)], qos="LSE", kube_qos="Guaranteed"),
        pod("be-1", [("a", "c", 1000)], qos="BE", kube_qos="Burstable"),
        pod("done-1", [("a", "d", 1000)], phase="Succeeded"),
        pod("plain-1", [("a", "e", 1000)], qos=None, kube_qos="Guaranteed"),  # raw QoS none: burstable
        pod("sys-1", [("a", "f", 1000)], qos="SYSTEM"),
        pod("pend-1", [("a", "1", 1000)], phase="Pending", running=False),
    ]
    h = make(burst={"policy": "cpuBurstOnly", "cpuBurstPercent": 40}, pods=pods)
    h.tick("cpuBurst", NOW)
    uids = ("lsr-1", "lse-1", "be-1", "done-1", "plain-1", "sys-1", "pend-1")
    touched = {u for u in uids if any(f"/{h.host.pod_dir(u)}/" in "/" + w["file"] for w in h.recorded.writes)}
    assert touched == {"plain-1", "sys-1", "pend-1"}
    assert get_burst(h, cdir(h, "pend-1", "1")) == 40_000  # not running yet, but it has a container id


# ---------------------------------------------------------------------------------------------
# dynamic CFS quota burst (applyCFSQuotaBurst)


@pytest.mark.parametrize("version", [1, 2])
def test_quota_scales_up_to_the_ceiling_and_down_on_overload(version: int) -> None:
    p = pod("ls-1", [("a", "a", 2000), ("b", "b", 1000)])
    h = make(version, burst={"policy": "auto"}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 200000, "b": 100000})
    a, pdir = cdir(h, "ls-1", "a"), h.host.pod_dir("ls-1")
    # a: base 200000, ceiling 300% = 600000; x1.2 per tick, truncated:
    expected_up = [240000, 288000, 345600, 414720, 497664, 597196, 600000, 600000]
    for k, want in enumerate(expected_up):
        idle_node(h, NOW + k - 0.5)
        throttled(h, NOW + k - 0.5, "a", 0.25)
        h.tick("cpuBurst", NOW + k)
        assert get_quota(h, a) == want
        assert get_quota(h, pdir) == want + 100000  # the pod moves with its container; b stays
    assert get_quota(h, cdir(h, "ls-1", "b")) == 100000
    # overload (node 6 of 8 CPUs, 75% >= 50%; the earlier idle samples are out of the 5 s average
    # window by then): x0.8 per tick down to the base
    expected_down = [480000, 384000, 307200, 245760, 200000, 200000]
    t = NOW + len(expected_up) + 10
    for k, want in enumerate(expected_down):
        h.add_samples("node_cpu_usage", [(t + k - 0.5, 6.0)])
        throttled(h, t + k - 0.5, "a", 0.25)
        h.tick("cpuBurst", t + k)
        assert get_quota(h, a) == want and get_quota(h, pdir) == want + 100000


def test_no_throttling_or_no_metric_keeps_the_quota() -> None:
    p = pod("ls-1", [("a", "a", 2000)])
    h = make(burst={"policy": "auto"}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 300000})  # already burst to 300000
    idle_node(h, NOW - 0.5)
    throttled(h, NOW - 0.5, "a", 0.0)
    h.tick("cpuBurst", NOW)
    assert get_quota(h, cdir(h, "ls-1", "a")) == 300000  # not throttled: remain
    idle_node(h, NOW + 1.5)
    h.tick("cpuBurst", NOW + 2)  # the throttled ratio is older than 2 x 1 s: remain
    assert get_quota(h, cdir(h, "ls-1", "a")) == 300000
    assert [w for w in h.recorded.writes if w["file"].endswith("cpu.cfs_quota_us")] == []


def test_policy_without_quota_burst_resets_to_the_limit_and_unlimited_pods_stay_unlimited() -> None:
    p1 = pod("ls-1", [("a", "a", 2000), ("b", "b", 1000)])
    p2 = pod("ls-2", [("a", "c", 1000), ("b", "d", None)])  # b has no limit: pod unlimited
    h = make(burst={"policy": "cpuBurstOnly"}, pods=[p1, p2])
    kubelet_quotas(h, "ls-1", {"a": 450000, "b": 100000})
    kubelet_quotas(h, "ls-2", {"c": 180000, "d": -1}, pod_quota=-1)
    idle_node(h, NOW - 0.5)
    h.tick("cpuBurst", NOW)
    # reset: a -> base 200000 (delta -250000), pod 550000 - 250000 = 300000
    assert get_quota(h, cdir(h, "ls-1", "a")) == 200000 and get_quota(h, h.host.pod_dir("ls-1")) == 300000
    # c -> 100000; the pod quota is unlimited and stays so; d has no limit and is not touched
    assert get_quota(h, cdir(h, "ls-2", "c")) == 100000
    assert get_quota(h, h.host.pod_dir("ls-2")) == -1 and get_quota(h, cdir(h, "ls-2", "d")) == -1


def test_quotas_are_read_once_per_force_window_and_after_their_own_writes() -> None:
    """The candidates' quotas are kept between ticks: all read when the plan is new and once per
    force window, in between only those written last tick (and those unreadable)."""
    p = pod("ls-1", [("a", "a", 2000)])
    h = make(burst={"policy": "auto"}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 200000})
    a = cdir(h, "ls-1", "a")
    idle_node(h, NOW - 0.5)
    throttled(h, NOW - 0.5, "a", 0.5)
    h.tick("cpuBurst", NOW)
    assert get_quota(h, a) == 240000
    # written last tick: read again, and it moves on from what the file holds
    idle_node(h, NOW + 0.5)
    throttled(h, NOW + 0.5, "a", 0.5)
    h.tick("cpuBurst", NOW + 1)
    assert get_quota(h, a) == 288000
    # not throttled (remain) for a while: the kept value stands, so a change made outside the agent ...
    set_quota(h, h.host.pod_dir("ls-1"), 800000)  # the pod's first: v1 refuses a child above its parent
    set_quota(h, a, 500000)
    read_many, asked = h.executor.read_many, []

    def counted(resource: str, cgroups: Any) -> Any:
        asked.extend(cgroups)
        return read_many(resource, cgroups)

    h.executor.read_many = counted  # type: ignore[method-assign]
    for k in range(2, 10):
        idle_node(h, NOW + k - 0.5)
        throttled(h, NOW + k - 0.5, "a", 0.0)
        h.tick("cpuBurst", NOW + k)
    assert get_quota(h, a) == 500000
    assert asked == [a]  # once, after the write of NOW + 1; then nothing
    # ... is found by the next full read, one force window after the last (and after the executor's
    # own window for the value it wrote), and scaled from there
    t = NOW + 1 + h.cfg.force_update_seconds
    idle_node(h, t - 0.5)
    throttled(h, t - 0.5, "a", 0.5)
    h.tick("cpuBurst", t)
    assert get_quota(h, a) == 600000  # 500000 x 1.2 = 600000, the ceiling (3 x 200000)


def test_a_reset_only_policy_decides_again_only_when_a_quota_was_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """koordinator's default policy bursts no quota: every quota goes back to its limit, a decision from the
    quotas alone.  After a decision that changed nothing, a tick that read no quota (none written, none
    unreadable, no full read due) decides nothing again; a change made outside the agent is found at the
    next full read and reset."""
    from qosmanager.strategies import cpu_burst

    p = pod("ls-1", [("a", "a", 2000), ("b", "b", 1000)])
    h = make(burst={"policy": "cpuBurstOnly"}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 450000, "b": 100000})
    a = cdir(h, "ls-1", "a")
    decided = []
    real = cpu_burst.change_operation_by_node
    monkeypatch.setattr(cpu_burst, "change_operation_by_node", lambda *args: decided.append(1) or real(*args))
    h.tick("cpuBurst", NOW)
    assert get_quota(h, a) == 200000  # reset to its limit
    h.tick("cpuBurst", NOW + 1)  # the written quota read again: decided, nothing to change
    assert len(decided) == 2
    set_quota(h, h.host.pod_dir("ls-1"), 800000)  # the pod's first: v1 refuses a child above its parent
    set_quota(h, a, 500000)
    writes = len(h.recorded.writes)
    for k in range(2, 10):
        h.tick("cpuBurst", NOW + k)
    assert len(decided) == 2 and len(h.recorded.writes) == writes and get_quota(h, a) == 500000
    t = NOW + h.cfg.force_update_seconds + 0.5  # the next full read
    h.tick("cpuBurst", t)
    assert len(decided) == 3 and get_quota(h, a) == 200000


def test_unreadable_pod_quota_leaves_the_container_alone() -> None:
    p = pod("ls-1", [("a", "a", 2000)])
    h = make(burst={"policy": "auto"}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 200000})
    import os

    os.unlink(h.path(h.cgroup_file("cpu", h.host.pod_dir("ls-1"), "cpu.cfs_quota_us")))
    idle_node(h, NOW - 0.5)
    throttled(h, NOW - 0.5, "a", 0.5)
    h.tick("cpuBurst", NOW)
    assert get_quota(h, cdir(h, "ls-1", "a")) == 200000
    assert h.manager.stats["cpuBurst"].errors == 0


# ---------------------------------------------------------------------------------------------
# the share pool (getNodeStateForBurst, changeOperationByNode)


def share_pool_scenario(node_used: float) -> Harness:
    pods = [
        pod("ls-1", [("a", "a", 2000)]),
        pod("lsr-1", [("a", "b", 2000)], qos="LSR", kube_qos="Guaranteed", request_milli=2000),
        pod("be-1", [("a", "c", 1000)], qos="BE", kube_qos="BestEffort"),
    ]
    h = make(burst={"policy": "auto"}, pods=pods)
    kubelet_quotas(h, "ls-1", {"a": 200000})
    # averages over min(5 x 1 s, 10 s) = 5 s: node (node_used - 1, node_used + 1) -> node_used
    h.add_samples("node_cpu_usage", [(NOW - 4, node_used - 1), (NOW - 1, node_used + 1)])
    h.add_samples("pod_cpu_usage", [(NOW - 4, 1.0), (NOW - 1, 1.0)], pod="lsr-1")
    h.add_samples("pod_cpu_usage", [(NOW - 4, 0.0), (NOW - 1, 1.0)], pod="be-1")  # avg 0.5
    h.add_samples("pod_cpu_usage", [(NOW - 1, 3.0)], pod="ls-1")  # LS usage stays in the pool
    throttled(h, NOW - 0.5, "a", 0.5)
    return h


@pytest.mark.parametrize(("node_used", "state", "quota"), [
    # pool = 8 CPUs - 2 (LSR request) = 6; used = node - 1.0 (LSR) - 0.5 (BE)
    (4.0, IDLE, 240000),  # 2.5 / 6 = 0.417 < 0.45 (90% of 50%): scale up
    (4.4, COOLING, 200000),  # 2.9 / 6 = 0.483: hold the up
    (5.5, OVERLOAD, 200000),  # 4.0 / 6 = 0.667 >= 0.5: down (already at the base)
])
def test_share_pool_states(node_used: float, state: str, quota: int) -> None:
    h = share_pool_scenario(node_used)
    h.tick("cpuBurst", NOW)
    assert h.strategy("cpuBurst").node_state == state  # type: ignore[attr-defined]
    assert get_quota(h, cdir(h, "ls-1", "a")) == quota


def test_unknown_share_pool_only_blocks_scale_up() -> None:
    p = pod("ls-1", [("a", "a", 2000)])
    h = make(burst={"policy": "auto"}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 300000})
    throttled(h, NOW - 0.5, "a", 0.5)
    h.tick("cpuBurst", NOW)  # no node metric at all
    assert h.strategy("cpuBurst").node_state == UNKNOWN  # type: ignore[attr-defined]
    assert get_quota(h, cdir(h, "ls-1", "a")) == 300000
    h.set_nodeslo({"cpuBurstStrategy": {"policy": "cpuBurstOnly"}})
    h.tick("cpuBurst", NOW + 1)
    assert get_quota(h, cdir(h, "ls-1", "a")) == 200000  # a reset is not blocked


def test_change_operation_by_node_table() -> None:
    ops = np.array([OP_UP, OP_REMAIN, OP_DOWN, OP_RESET], dtype=np.int8)
    assert change_operation_by_node(OVERLOAD, ops).tolist() == [OP_DOWN, OP_DOWN, OP_DOWN, OP_RESET]
    assert change_operation_by_node(COOLING, ops).tolist() == [OP_REMAIN, OP_REMAIN, OP_DOWN, OP_RESET]
    assert change_operation_by_node(UNKNOWN, ops).tolist() == [OP_REMAIN, OP_REMAIN, OP_DOWN, OP_RESET]
    assert change_operation_by_node(IDLE, ops).tolist() == ops.tolist()


# ---------------------------------------------------------------------------------------------
# token buckets (burstLimiter)


def test_limiter_mode_from_config() -> None:
    assert limiter_mode(CPUBurstConfig(cfs_quota_burst_period_seconds=None)) == ALWAYS
    assert limiter_mode(CPUBurstConfig(cfs_quota_burst_period_seconds=-1, cfs_quota_burst_percent=300)) == ALWAYS
    assert limiter_mode(CPUBurstConfig(cfs_quota_burst_period_seconds=0, cfs_quota_burst_percent=None)) == NEVER
    assert limiter_mode(CPUBurstConfig(cfs_quota_burst_period_seconds=10, cfs_quota_burst_percent=300)) == BUCKET


def test_bucket_arithmetic_by_hand() -> None:
    lim = BurstLimiters()
    s = lim.slots(["x", "y"], np.array([10, 1]), np.array([200, 300]), 0.0)
    # capacities: 10 x (200-100) = 1000; 1 x (300-100) = 200; initial fill in [0, capacity/2)
    assert lim.capacity[s].tolist() == [1000, 200]
    assert 0 <= lim.token[s[0]] < 500 and 0 <= lim.token[s[1]] < 100
    lim.token[s] = 0
    # 150% of the limit spends (150-100) per second; 10% earns (100-10); 80% does nothing
    assert lim.allow(s, 2.0, np.array([150, 10])).tolist() == [False, True]
    assert lim.token[s].tolist() == [-100, 180]
    assert lim.allow(s, 3.0, np.array([80, 10])).tolist() == [False, True]
    assert lim.token[s].tolist() == [-100, 200]  # 270 clamped to the capacity 200
    assert lim.allow(s, 100.0, np.array([1000, 300])).tolist() == [False, False]
    assert lim.token[s].tolist() == [-1000, -200]  # clamped to -capacity


def test_bucket_keeps_fractions_of_seconds() -> None:
    """koordlet counts whole seconds and then forgets the rest: with 0.95 s between ticks its bucket
    never moves.  Ours carries the fraction."""
    lim = BurstLimiters()
    s = lim.slots(["x"], np.array([10]), np.array([200]), 0.0)
    lim.token[s] = 0
    for t in (0.95, 1.9, 2.85):
        lim.allow(s, t, np.array([10]))
    # at 1.9 one whole second has passed (+90), at 2.85 the second one (+90)
    assert lim.token[s].tolist() == [180]


def test_bucket_recreated_when_capacity_changes_and_recycled_when_idle() -> None:
    lim = BurstLimiters()
    s = lim.slots(["x"], np.array([10]), np.array([200]), 0.0)
    lim.token[s] = 7
    s2 = lim.slots(["x"], np.array([20]), np.array([150]), 1.0)  # 20 x 50 = 1000: same capacity
    assert s2.tolist() == s.tolist() and lim.token[s].tolist() == [7]
    lim.slots(["x"], np.array([10]), np.array([300]), 1.0)  # 10 x 200 = 2000: new bucket
    assert lim.capacity[s].tolist() == [2000]
    assert lim.recycle(20.0) == 0  # 19 s idle, expire is 2 x 10 s
    assert lim.recycle(21.5) == 1 and len(lim) == 0
    # slots are reused and the table grows past its first size
    ids = [f"c{k}" for k in range(40)]
    slots = lim.slots(ids, np.full(40, 10), np.full(40, 200), 30.0)
    assert len(set(slots.tolist())) == 40 and len(lim) == 40 and s[0] in slots.tolist()
    assert lim.recycle(45.0) == 0
    lim.allow(slots[:10], 45.0, np.full(10, 80))
    assert lim.recycle(51.0) == 30 and sorted(lim.index) == sorted(ids[:10])


def test_bucket_seed_is_deterministic() -> None:
    a, b = BurstLimiters(), BurstLimiters()
    sa = a.slots([cid("a")], np.array([100]), np.array([300]), NOW)
    sb = b.slots([cid("a")], np.array([100]), np.array([300]), NOW)
    assert a.token[sa].tolist() == b.token[sb].tolist()


def test_empty_bucket_scales_down_and_saving_lets_it_burst_again() -> None:
    p = pod("ls-1", [("a", "a", 1000)])
    # base 100000, ceiling 200% = 200000; bucket capacity 1 s x (200 - 100) = 100
    h = make(burst={"policy": "auto", "cfsQuotaBurstPeriodSeconds": 1, "cfsQuotaBurstPercent": 200}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 100000})
    a = cdir(h, "ls-1", "a")
    limiters = h.strategy("cpuBurst").limiters  # type: ignore[attr-defined]

    def tick(t: float, usage: float, throttle: bool = True) -> int:
        idle_node(h, t - 0.5)
        if throttle:
            throttled(h, t - 0.5, "a", 0.5)
        h.add_samples("container_cpu_usage", [(t - 0.5, usage)], container=cid("a"))
        h.tick("cpuBurst", t)
        return get_quota(h, a)

    # created with a random fill in [0, 50); not throttled and at the base: stays whatever it says
    assert tick(NOW, 1.5, throttle=False) == 100000
    assert len(limiters) == 1
    # 2 cores on a 1-core limit = 200%: -100 per second; twice -> clamped at exactly -100
    assert tick(NOW + 1, 2.0) == 100000  # not allowed: down, floored at the base
    assert tick(NOW + 2, 2.0) == 100000
    # 0.1 core = 10%: +90 per second: -10 (still no), then 80 > 0: throttled, so up x1.2
    assert tick(NOW + 3, 0.1) == 100000
    assert tick(NOW + 4, 0.1) == 120000
    assert tick(NOW + 5, 0.1) == 144000  # 170 clamped to 100
    assert tick(NOW + 6, 2.0) == 115200  # 100 - 100 = 0 is not > 0: down x0.8


def test_bucket_period_zero_never_allows_and_policy_off_still_consults() -> None:
    p = pod("ls-1", [("a", "a", 1000)])
    h = make(burst={"policy": "auto", "cfsQuotaBurstPeriodSeconds": 0}, pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 150000})
    idle_node(h, NOW - 0.5)
    throttled(h, NOW - 0.5, "a", 0.5)
    h.tick("cpuBurst", NOW)
    assert get_quota(h, cdir(h, "ls-1", "a")) == 120000  # never allowed: down although throttled
    # cpuBurstOnly with a bucket period: the bucket is still kept up to date (koordlet does so)
    h2 = make(burst={"policy": "cpuBurstOnly", "cfsQuotaBurstPeriodSeconds": 5}, pods=[p])
    kubelet_quotas(h2, "ls-1", {"a": 100000})
    h2.tick("cpuBurst", NOW)
    assert len(h2.strategy("cpuBurst").limiters) == 1  # type: ignore[attr-defined]
    h2.set_pods([])
    h2.tick("cpuBurst", NOW + 10)
    h2.tick("cpuBurst", NOW + 10.5)
    assert len(h2.strategy("cpuBurst").limiters) == 0  # idle for more than 2 x 5 s: recycled


# ---------------------------------------------------------------------------------------------
# NodeSLO presence


def test_without_nodeslo_nothing_and_after_it_goes_the_defaults_restore() -> None:
    p = pod("ls-1", [("a", "a", 2000)])
    h = make(pods=[p])
    kubelet_quotas(h, "ls-1", {"a": 300000})
    idle_node(h, NOW - 0.5)
    h.tick("cpuBurst", NOW)
    assert h.recorded.writes == []  # koordlet: no NodeSLO, no burst work
    h.set_nodeslo({"cpuBurstStrategy": {"policy": "auto"}})
    h.tick("cpuBurst", NOW + 1)
    # burst: 2 cores x 1000 %, capped at the limit's quota
    assert get_burst(h, cdir(h, "ls-1", "a")) == 200_000 and get_quota(h, cdir(h, "ls-1", "a")) == 300000
    h.set_nodeslo(None)
    h.tick("cpuBurst", NOW + 2)
    # the defaults (policy none): burst 0, quota back to the limit
    assert get_burst(h, cdir(h, "ls-1", "a")) == 0 and get_quota(h, cdir(h, "ls-1", "a")) == 200000
