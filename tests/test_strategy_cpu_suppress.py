"""cpuSuppress (koordlet-qos §4.1): the BE budget, both policies, step limits, CPU picking, recovery.

Expected values are worked out by hand from the spec's formulas in the comments next to them.
The fake host's 8 CPUs are 4 cores x 2 threads: CPU c and c+4 are siblings of core c % 4; with
two sockets / NUMA nodes, cores 0-1 (CPUs 0,1,4,5) are node 0 and cores 2-3 (CPUs 2,3,6,7) node 1.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pytest

from qosmanager.api.nodeslo import parse_nodeslo
from qosmanager.api.pod import pod_meta
from qosmanager.framework.strategy import QoSConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.kubelet_cpu import KubeletCPUSource
from qosmanager.host.sysfs import Processor
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.strategies import _helpers
from qosmanager.strategies.cpu_suppress import calculate_be_suppress_cpu, pick_be_cpus

NOW = 1000.0
BE_DIR = "kubepods/besteffort"


def cid(ch: str) -> str:
    return "containerd://" + ch * 64


def make(version: int = 1, *, n_cpus: int = 8, sockets: int = 1, numa: int = 1,
         gates: dict[str, bool] | None = None, node_annotations: dict[str, str] | None = None,
         cfg: QoSConfig | None = None, allocatable_milli: int | None = None) -> Harness:
    h = Harness(version=version, strategies=["cpuSuppress"], n_cpus=n_cpus, sockets=sockets, numa_nodes=numa,
                gates=gates, cfg=cfg)
    node = node_object(h.host)
    node["metadata"]["annotations"].update(node_annotations or {})
    if allocatable_milli is not None:
        node["status"]["allocatable"]["cpu"] = f"{allocatable_milli}m"
    h.set_node(node)
    return h


def slo(h: Harness, *, enable: bool = True, policy: str = "cpuset", threshold: int = 65,
        min_percent: int | None = None, host_apps: list[dict[str, Any]] | None = None) -> None:
    thr: dict[str, Any] = {"enable": enable, "cpuSuppressThresholdPercent": threshold, "cpuSuppressPolicy": policy}
    if min_percent is not None:
        thr["cpuSuppressMinPercent"] = min_percent
    spec: dict[str, Any] = {"resourceUsedThresholdWithBE": thr}
    if host_apps is not None:
        spec["hostApplications"] = host_apps
    h.set_nodeslo(spec)


LS = FakePod("ls-1", "default", "ls", KubeQoS.BURSTABLE, [FakeContainer("c", cid("b"))])
BE_POD = FakePod("be-1", "default", "be", KubeQoS.BESTEFFORT, [FakeContainer("c", cid("a"))], sandbox_id=cid("e"))


def with_pods(h: Harness, *extra: dict[str, Any]) -> None:
    """The LS pod and a BE pod with a sandbox dir (which only a walk of the tree finds)."""
    h.host.add_pod(FakePod(BE_POD.uid, BE_POD.namespace, BE_POD.name, BE_POD.qos, list(BE_POD.containers),
                           sandbox_id=BE_POD.sandbox_id))
    h.set_pods([pod_object(LS), pod_object(BE_POD), *extra])


def usage(h: Harness, t: float, node: float, **pods: float) -> None:
    h.add_samples("node_cpu_usage", [(t, node)])
    for uid, v in pods.items():
        h.add_samples("pod_cpu_usage", [(t, v)], pod=uid.replace("_", "-"))


def be_dirs(h: Harness) -> list[str]:
    pod = h.host.pod_dir("be-1")
    return [BE_DIR, pod, f"{pod}/{'a' * 64}", f"{pod}/{'e' * 64}"]


def read_quota(h: Harness) -> int:
    if h.host.version == 1:
        return int(h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us")) or "")
    q = (h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.max")) or "").split()[0]
    return -1 if q == "max" else int(q)


def set_quota(h: Harness, value: int) -> None:
    if h.host.version == 1:
        h.write_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us"), f"{value}\n")
    else:
        h.write_file(h.cgroup_file("cpu", BE_DIR, "cpu.max"), f"{'max' if value == -1 else value} 100000\n")


def read_cpuset(h: Harness, rel: str) -> str:
    return (h.read_file(h.cgroup_file("cpuset", rel, "cpuset.cpus")) or "").strip()


def read_effective(h: Harness, rel: str) -> str:
    """The CPUs in force: v1 ``cpuset.cpus`` (always within the parent's), v2 ``cpuset.cpus.effective``."""
    name = "cpuset.cpus" if h.host.version == 1 else "cpuset.cpus.effective"
    return (h.read_file(h.cgroup_file("cpuset", rel, name)) or "").strip()


def set_effective(h: Harness, rel: str, value: str) -> None:
    """v2: what a parent puts in effect (a layout write applies no rule, so it is laid out too)."""
    h.write_file(h.cgroup_file("cpuset", rel, "cpuset.cpus.effective"), value + "\n")


def set_cpuset(h: Harness, rel: str, value: str) -> None:
    h.write_file(h.cgroup_file("cpuset", rel, "cpuset.cpus"), value + "\n")


def files_written(h: Harness, suffix: str) -> list[str]:
    return [w["file"] for w in h.recorded.writes if w["file"].endswith(suffix)]


# ---------------------------------------------------------------------------------------------
# the BE budget (calculateBESuppressCPU / CalculateFilterPodsUsed)


def pod(uid: str, qos_label: str | None, kube_qos: str) -> Any:
    labels = {"koordinator.sh/qosClass": qos_label} if qos_label else {}
    return pod_meta({"metadata": {"uid": uid, "name": uid, "labels": labels},
                     "spec": {"containers": [{"name": "c"}]}, "status": {"qosClass": kube_qos}})


def test_be_suppress_quantity_by_hand() -> None:
    h = make(allocatable_milli=7500)  # capacity 8 cores, kept back 0.5 core
    assert h.store.node is not None
    pods = {p.uid: p for p in (pod("ls", "LS", "Burstable"), pod("be", "BE", "BestEffort"),
                               pod("ls-besteffort", "LS", "BestEffort"))}
    # dyadic usages so every float sum is exact
    pod_used = {"ls": 2.25, "be": 1.5, "unknown": 0.5, "ls-besteffort": 0.25}
    spec = parse_nodeslo({"spec": {"hostApplications": [
        {"name": "ls-app", "qos": "LS"},
        {"name": "be-app", "qos": "BE", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "x"}},
        {"name": "be-elsewhere", "qos": "BE"},
        {"name": "no-metric", "qos": "LS"},
    ]}})
    host_used = {"ls-app": 0.625, "be-app": 0.375, "be-elsewhere": 0.125}
    q = calculate_be_suppress_cpu(h.store.node, 6.0, pod_used, pods, spec.host_applications, host_used, 65, None)
    # high-priority pods: ls 2.25 + unknown 0.5 (no metadata) = 2.75; "ls-besteffort" is kube BestEffort -> BE
    # high-priority apps: ls-app 0.625 + be-elsewhere 0.125 (BE, but not under the BE QoS dir) = 0.75
    # system: 6.0 - (2.25+1.5+0.5+0.25) - (0.625+0.375+0.125) = 0.375 < reserved 0.5 -> 0.5
    assert (q.used.pods, q.used.host_apps, q.used.system) == (2.75, 0.75, 0.5)
    # 8000*65//100 = 5200; 5200 - 2750 - 750 - 500 = 1200
    assert q.milli == 1200
    # with cpuSuppressMinPercent 20: 8000*20//100 = 1600 > 1200
    q = calculate_be_suppress_cpu(h.store.node, 6.0, pod_used, pods, spec.host_applications, host_used, 65, 20)
    assert q.milli == 1600 and q.min_milli == 1600
    # each term is truncated to milli-cores on its own: system 3.0007 - 1.0 = 2.0007 -> 2000 (not 2001)
    q = calculate_be_suppress_cpu(h.store.node, 3.0007, {"ls": 1.0}, pods, (), {}, 50, None)
    assert q.milli == 4000 - 1000 - 2000
    # the budget may be negative (cfsQuota then floors it at the minimum quota)
    q = calculate_be_suppress_cpu(h.store.node, 8.0, {"ls": 7.0}, pods, (), {}, 50, None)
    assert q.milli == 4000 - 7000 - 1000


def test_filters() -> None:
    assert _helpers.non_be_pod_filter(pod("a", "LS", "Burstable"))
    assert _helpers.non_be_pod_filter(pod("a", None, "Guaranteed"))
    assert not _helpers.non_be_pod_filter(pod("a", "BE", "Burstable"))
    assert not _helpers.non_be_pod_filter(pod("a", None, "BestEffort"))
    assert not _helpers.not_batch_or_free_pod_filter(pod("a", "BE", "BestEffort"))  # batch by default
    assert _helpers.not_batch_or_free_pod_filter(pod("a", "LS", "Burstable"))  # prod by default


# ---------------------------------------------------------------------------------------------
# cfsQuota policy


@pytest.mark.parametrize("version", [1, 2])
def test_cfs_quota_policy_steps(version: int) -> None:
    h = make(version)
    with_pods(h)
    slo(h, policy="cfsQuota", host_apps=[{"name": "agent", "qos": "LS"}])
    set_cpuset(h, BE_DIR, "0-3")  # left by an earlier cpuset policy: recovered to every CPU
    h.add_samples("hostapp_cpu_usage", [(NOW - 1, 0.5)], app="agent")
    # node 4.0 = ls 2.0 + be 1.0 + agent 0.5 + system 0.5
    usage(h, NOW - 1, 4.0, ls_1=2.0, be_1=1.0)
    h.tick("cpuSuppress", NOW)
    # 5200 - 2000 - 500 (agent) - 500 (system) = 2200m -> quota 220000; from unlimited: no step limit
    assert read_quota(h) == 220000
    assert all(read_cpuset(h, d) == "0-7" for d in be_dirs(h))
    assert h.strategy("cpuSuppress").policy_status == {"cfsQuota": "using", "cpuset": "recovered"}

    # LS calms down: 5200 - 200 - 500 - 500 = 4000m -> 400000, but the step is 10 % of 8 cores
    usage(h, NOW, 2.2, ls_1=0.2, be_1=1.0)
    h.tick("cpuSuppress", NOW + 1)
    assert read_quota(h) == 220000 + 80000
    h.add_samples("hostapp_cpu_usage", [(NOW + 1, 0.5)], app="agent")
    usage(h, NOW + 1, 2.2, ls_1=0.2, be_1=1.0)
    h.tick("cpuSuppress", NOW + 2)
    assert read_quota(h) == 380000  # 300000 + 80000
    h.add_samples("hostapp_cpu_usage", [(NOW + 2, 0.5)], app="agent")
    usage(h, NOW + 2, 2.2, ls_1=0.2, be_1=1.0)
    h.tick("cpuSuppress", NOW + 3)
    assert read_quota(h) == 400000  # the last 20000 is under the 80000 step

    # |395000 - 400000| = 5000 < 1 % of 8 cores (8000): bypassed
    h.add_samples("hostapp_cpu_usage", [(NOW + 3, 0.5)], app="agent")
    usage(h, NOW + 3, 2.25, ls_1=0.25, be_1=1.0)
    n = len(h.recorded.writes)
    h.tick("cpuSuppress", NOW + 4)
    assert read_quota(h) == 400000 and len(h.recorded.writes) == n

    # scale-down is immediate: 5200 - 4000 - 500 - 500 = 200m -> 20000
    h.add_samples("hostapp_cpu_usage", [(NOW + 4, 0.5)], app="agent")
    usage(h, NOW + 4, 6.0, ls_1=4.0, be_1=1.0)
    h.tick("cpuSuppress", NOW + 5)
    assert read_quota(h) == 20000

    # a negative budget floors at the minimum quota 2000
    h.add_samples("hostapp_cpu_usage", [(NOW + 5, 0.5)], app="agent")
    usage(h, NOW + 5, 8.0, ls_1=6.0, be_1=1.0)
    h.tick("cpuSuppress", NOW + 6)
    assert read_quota(h) == 2000
    # the minimum is never bypassed: |2000 - 5000| = 3000 < 8000, still written
    set_quota(h, 5000)
    h.add_samples("hostapp_cpu_usage", [(NOW + 6, 0.5)], app="agent")
    usage(h, NOW + 6, 8.0, ls_1=6.0, be_1=1.0)
    h.tick("cpuSuppress", NOW + 7)
    assert read_quota(h) == 2000


def test_cfs_quota_write_is_not_cached() -> None:
    """koordlet's Update(false): an outside change is corrected on the next tick, not after 60 s."""
    h = make()
    with_pods(h)
    slo(h, policy="cfsQuota")
    usage(h, NOW - 1, 3.0, ls_1=2.0, be_1=0.5)
    h.tick("cpuSuppress", NOW)
    # 5200 - 2000 - 500 = 2700m
    assert read_quota(h) == 270000
    set_quota(h, 500000)  # someone else raised it
    usage(h, NOW, 3.0, ls_1=2.0, be_1=0.5)
    h.tick("cpuSuppress", NOW + 1)
    assert read_quota(h) == 270000  # scale-down from 500000 is immediate


# ---------------------------------------------------------------------------------------------
# cpuset policy


def test_pick_be_cpus_by_hand() -> None:
    procs = [Processor(c, c % 4, 0 if c % 4 < 2 else 1, 0 if c % 4 < 2 else 1, 0) for c in range(8)]
    # buckets: node0 sorted by (core, cpu) = [0,4,1,5], node1 = [2,6,3,7]; equal sizes, node0 first
    assert pick_be_cpus(3, procs) == [0, 4, 2]  # pair (0,4); need 1 -> singles from node1: 2
    assert pick_be_cpus(5, procs) == [0, 4, 2, 6, 1]  # pairs (0,4), (2,6); single from node0: 1
    assert pick_be_cpus(8, procs) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert pick_be_cpus(9, procs) == []  # not enough CPUs
    assert pick_be_cpus(0, procs) == []
    # no hyper-threads: a round without pairs, then singles round-robin
    singles = [Processor(0, 0, 0, 0, 0), Processor(1, 1, 0, 0, 0), Processor(2, 2, 1, 1, 1),
               Processor(3, 3, 1, 1, 1)]
    assert pick_be_cpus(3, singles) == [0, 2, 1]
    # a bigger bucket comes first whatever its CPU ids
    uneven = [Processor(0, 0, 0, 0, 0), Processor(1, 1, 1, 1, 1), Processor(2, 2, 1, 1, 1)]
    assert pick_be_cpus(2, uneven) == [1, 0]


def test_pick_be_cpus_bucket_key_collision_is_fixed() -> None:
    """koordlet keys buckets by (NodeID + N) * (SocketID + 1): with N = 8, node 0 of socket 2 and node 4
    of socket 1 both give 24, so koordlet puts all 8 CPUs in one bucket and picks [0, 1, 2, 3] (two
    cores of one node).  Keyed by (node, socket), the picks spread over both: [0, 1, 4, 5]."""
    procs = [Processor(c, c // 2, 2, 0, 0) for c in range(4)] + [Processor(c, c // 2, 1, 4, 1) for c in range(4, 8)]
    assert pick_be_cpus(4, procs) == [0, 1, 4, 5]


@pytest.mark.parametrize("version", [1, 2])
def test_cpuset_policy_shrinks_at_once_and_grows_slowly(version: int) -> None:
    h = make(version, sockets=2, numa=2)
    with_pods(h)
    slo(h, policy="cpuset")
    set_quota(h, 300000)  # left by an earlier cfsQuota policy: recovered to unlimited
    usage(h, NOW - 1, 2.5, ls_1=2.0, be_1=0.0)
    h.tick("cpuSuppress", NOW)
    # 5200 - 2000 - 500 (system) = 2700m -> 3 CPUs; old is all 8 (on v2: inherited, cpuset.cpus empty);
    # picked [0,4] (a pair of node 0) then 2 (node 1)
    assert {d: read_cpuset(h, d) for d in be_dirs(h)} == {d: "0,2,4" for d in be_dirs(h)}
    assert read_quota(h) == -1
    assert h.strategy("cpuSuppress").policy_status == {"cpuset": "using", "cfsQuota": "recovered"}

    # LS drops: 5200 - 200 - 500 = 4500m -> 5 CPUs, but only ceil(8 * 0.1) = 1 more per tick -> 4
    usage(h, NOW, 0.7, ls_1=0.2, be_1=0.0)
    h.tick("cpuSuppress", NOW + 1)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0,2,4,6"}  # pairs (0,4), (2,6)
    usage(h, NOW + 1, 0.7, ls_1=0.2, be_1=0.0)
    h.tick("cpuSuppress", NOW + 2)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0-2,4,6"}  # 5: pairs, then single 1
    # at least 2 CPUs even when the budget is gone: 5200 - 6000 - 500 < 0
    usage(h, NOW + 2, 6.5, ls_1=6.0, be_1=0.0)
    h.tick("cpuSuppress", NOW + 3)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0,4"}


def nrt(reserved: str | None = None, system: str | None = None, policy: str | None = None) -> dict[str, str]:
    out = {}
    if reserved is not None:
        out["node.koordinator.sh/reservation"] = json.dumps({"reservedCPUs": reserved})
    if system is not None:
        out["node.koordinator.sh/system-qos-resource"] = json.dumps({"cpuset": system})
    if policy is not None:
        out["kubelet.koordinator.sh/cpu-manager-policy"] = json.dumps({"policy": policy})
    return out


def pinned_pod(uid: str, qos: str, cpuset: str) -> dict[str, Any]:
    p = FakePod(uid, "default", uid, KubeQoS.GUARANTEED, [FakeContainer("c", cid(uid[-1]))])
    return pod_object(p, labels={"koordinator.sh/qosClass": qos},
                      annotations={"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": cpuset})})


def pools_scenario(version: int, **kw: Any) -> Harness:
    """CPU 0 reserved, CPU 4 system-exclusive, LSR pod on 1,5, LSE pod on 3,7: LSR pool [1,5], LS pool [2,6]."""
    h = make(version, sockets=2, numa=2, **kw)
    with_pods(h, pinned_pod("lsr-1", "LSR", "1,5"), pinned_pod("lse-2", "LSE", "3,7"))
    slo(h, policy="cpuset")
    # non-BE pods: lsr 1.0 + lse 0.5 = 1.5; system max(2.0 - 1.5, 0) = 0.5 < reserved 1 CPU -> 1.0
    usage(h, NOW - 1, 2.0, lsr_1=1.0, lse_2=0.5)
    return h


@pytest.mark.parametrize("version", [1, 2])
def test_cpuset_pools_exclude_reserved_system_and_lse(version: int) -> None:
    h = pools_scenario(version, node_annotations=nrt(reserved="0", system="4"))
    h.tick("cpuSuppress", NOW)
    # 5200 - 1500 - 1000 = 2700m -> 3 CPUs; nLSR = 3 * 2 // 4 = 1 -> [1]; the LS pool gives the pair (2,6)
    assert {d: read_cpuset(h, d) for d in be_dirs(h)} == {d: "1-2,6" for d in be_dirs(h)}


@pytest.mark.parametrize("how", ["annotation", "config"])
def test_static_cpu_manager_narrows_only_containers(how: str) -> None:
    if how == "annotation":
        h = pools_scenario(1, node_annotations=nrt(reserved="0", system="4", policy="static"))
    else:
        h = pools_scenario(1, node_annotations=nrt(reserved="0", system="4"),
                           cfg=QoSConfig(cpu_manager_policy="static"))
    h.tick("cpuSuppress", NOW)
    qos, pod_dir, ctr, sandbox = be_dirs(h)
    # QoS and pod dirs: every CPU - system 4 - reserved 0 - LSE 3,7 (LSR CPUs stay) = 1,2,5,6
    assert (read_cpuset(h, qos), read_cpuset(h, pod_dir)) == ("1-2,5-6", "1-2,5-6")
    assert (read_cpuset(h, ctr), read_cpuset(h, sandbox)) == ("1-2,6", "1-2,6")


def kubelet_checkpoint(h: Harness, text: str) -> None:
    """The kubelet's cpu_manager_state on the node, read the way the agent reads it."""
    kubelet_dir = os.path.join(h.root, "kubelet")
    os.makedirs(kubelet_dir, exist_ok=True)
    with open(os.path.join(kubelet_dir, "cpu_manager_state"), "w") as f:
        f.write(text)
    h.shared.kubelet_cpu = KubeletCPUSource(h.store.conditions, kubelet_dir).current


@pytest.mark.parametrize("version", [1, 2])
def test_static_policy_from_the_kubelet_checkpoint_without_any_flag(version: int) -> None:
    """No flag, no policy annotation: the checkpoint says static and gives a Guaranteed LS pod CPU 6."""
    h = pools_scenario(version, node_annotations=nrt(reserved="0", system="4"))
    entries = json.dumps({LS.uid: {"c": "6"}})
    kubelet_checkpoint(h, f'{{"policyName":"static","defaultCpuSet":"0-5,7","entries":{entries},"checksum":1}}')
    h.tick("cpuSuppress", NOW)
    qos, pod_dir, ctr, sandbox = be_dirs(h)
    # QoS and pod dirs: every CPU - system 4 - reserved 0 - LSE 3,7 - the kubelet's exclusive 6; on v1
    # with the kubelet's shared pool 0-5,7 too (the containers carry BE's set)
    parents = "0-5,7" if version == 1 else "1-2,5"
    assert (read_cpuset(h, qos), read_cpuset(h, pod_dir)) == (parents, parents)
    # containers: 3 CPUs, nLSR = 3 * 2 // 3 = 2 -> [1,5] and one from the LS pool, now [2] only
    assert (read_cpuset(h, ctr), read_cpuset(h, sandbox)) == ("1-2,5", "1-2,5")


@pytest.mark.parametrize("version", [1, 2])
def test_the_kubelet_can_start_a_be_container_with_its_shared_pool_under_a_static_cpu_manager(version: int) -> None:
    """The kubelet creates every container without exclusive CPUs with its shared pool (the checkpoint's
    defaultCpuSet, 0-5,7 here: the reserved CPU 0 and the system CPU 4 among them), and the runtime
    writes it to the new container's cpuset.  v1 refuses a cpuset outside its parent's (EACCES): with its
    pod dir at the BE set only, the pod's next container could not start.  v2 takes it and clamps it."""
    h = pools_scenario(version, node_annotations=nrt(reserved="0", system="4"))
    entries = json.dumps({LS.uid: {"c": "6"}})
    kubelet_checkpoint(h, f'{{"policyName":"static","defaultCpuSet":"0-5,7","entries":{entries},"checksum":1}}')
    h.tick("cpuSuppress", NOW)
    _, pod_dir, ctr, _ = be_dirs(h)
    kernel = h.host.kernel
    assert kernel is not None
    new = f"{pod_dir}/{'f' * 64}"  # the runtime: a new container cgroup, then the kubelet's cpuset for it
    kernel.mkdir(h.layout.abs_dir("cpuset", new))
    assert kernel.write(h.layout.file("cpuset", new, "cpuset.cpus"), b"0-5,7") == 0
    assert read_effective(h, new) == ("0-5,7" if version == 1 else "1-2,5")
    assert read_effective(h, ctr) == "1-2,5"  # the containers the agent narrowed keep BE's set


def test_none_policy_from_the_kubelet_checkpoint_beats_the_annotation() -> None:
    """The checkpoint is what the kubelet runs: a stale static annotation does not narrow containers only."""
    h = pools_scenario(1, node_annotations=nrt(reserved="0", system="4", policy="static"))
    kubelet_checkpoint(h, '{"policyName":"none","defaultCpuSet":"","checksum":3242152201}')
    h.tick("cpuSuppress", NOW)
    assert {d: read_cpuset(h, d) for d in be_dirs(h)} == {d: "1-2,6" for d in be_dirs(h)}


@pytest.mark.parametrize("text", ["{not json", "[" * 1000 + "]" * 1000])
def test_unreadable_cpu_manager_annotation_writes_no_cpuset(text: str) -> None:
    h = pools_scenario(1, node_annotations={"kubelet.koordinator.sh/cpu-manager-policy": text})
    h.tick("cpuSuppress", NOW)
    assert files_written(h, "cpuset.cpus") == []
    assert h.manager.stats["cpuSuppress"].errors == 0


def test_topology_annotations_are_read_like_go_and_bounded() -> None:
    from qosmanager.strategies._helpers import cpu_manager_policy, system_qos_exclusive_cpus

    key = "node.koordinator.sh/system-qos-resource"
    assert system_qos_exclusive_cpus({key: '{"CPUSet": "0-1", "cpusetexclusive": true}'}) == {0, 1}
    assert system_qos_exclusive_cpus({key: '{"cpuset": "0-1", "CpusetExclusive": false}'}) == frozenset()
    assert system_qos_exclusive_cpus({key: "[" * 1000 + "]" * 1000}) == frozenset()
    policy = {"kubelet.koordinator.sh/cpu-manager-policy": '{"Policy": "static"}'}
    assert cpu_manager_policy(policy, "none") == "static"


def test_no_cpu_left_for_be_does_not_crash() -> None:
    """koordlet divides by zero (panics) when every CPU is reserved, system-exclusive or LSE."""
    h = make(node_annotations=nrt(reserved="0-3", system="4-5"))
    with_pods(h, pinned_pod("lse-2", "LSE", "6-7"))
    slo(h, policy="cpuset")
    usage(h, NOW - 1, 1.0, ls_1=0.5)
    h.tick("cpuSuppress", NOW)
    assert h.manager.stats["cpuSuppress"].errors == 0
    assert files_written(h, "cpuset.cpus") == []
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0-7"}


def test_unchanged_cpuset_plan_is_resent_only_after_the_force_interval() -> None:
    h = make(sockets=2, numa=2)
    with_pods(h)
    slo(h)
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0,2,4"}
    set_cpuset(h, be_dirs(h)[2], "0-7")  # changed behind the agent's back
    usage(h, NOW + 30, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW + 31)
    assert read_cpuset(h, be_dirs(h)[2]) == "0-7"  # within 60 s: trusted (as koordlet's write cache)
    usage(h, NOW + 60, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW + 61)
    assert read_cpuset(h, be_dirs(h)[2]) == "0,2,4"


# ---------------------------------------------------------------------------------------------
# switching off, switching policy, missing data


@pytest.mark.parametrize("version", [1, 2])
def test_disable_restores_quota_and_cpusets(version: int) -> None:
    h = make(version, sockets=2, numa=2)
    with_pods(h)
    slo(h, policy="cfsQuota")
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    assert read_quota(h) == 270000  # 5200 - 2000 - 500
    slo(h, enable=False, policy="cfsQuota")
    h.tick("cpuSuppress", NOW + 1)
    assert read_quota(h) == -1
    assert h.strategy("cpuSuppress").policy_status == {"cfsQuota": "recovered", "cpuset": "recovered"}
    # the quota recovery is done once: a later outside change is not reverted by the recovery
    set_quota(h, 123000)
    h.tick("cpuSuppress", NOW + 2)
    assert read_quota(h) == 123000

    slo(h, policy="cpuset")
    usage(h, NOW + 2, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW + 3)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0,2,4"}
    # the cpuset policy recovers the quota only while its status is not "recovered" (koordlet)
    assert read_quota(h) == 123000
    slo(h, enable=False)
    h.tick("cpuSuppress", NOW + 4)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0-7"}


def test_policy_switch_recovers_the_other_policy() -> None:
    h = make(sockets=2, numa=2)
    with_pods(h)
    slo(h, policy="cpuset")
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    assert read_cpuset(h, BE_DIR) == "0,2,4"
    slo(h, policy="cfsQuota")
    usage(h, NOW, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW + 1)
    assert read_quota(h) == 270000 and {read_cpuset(h, d) for d in be_dirs(h)} == {"0-7"}
    slo(h, policy="cpuset")
    usage(h, NOW + 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW + 2)
    assert read_quota(h) == -1 and read_cpuset(h, BE_DIR) == "0,2,4"


def test_without_nodeslo_nothing_happens_not_even_recovery() -> None:
    h = make()
    with_pods(h)
    set_quota(h, 50000)
    set_cpuset(h, BE_DIR, "0-1")
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    assert h.recorded.writes == []
    assert read_quota(h) == 50000


@pytest.mark.parametrize("policy", ["cpuset", "cfsQuota"])
def test_stale_node_metric_does_nothing(policy: str) -> None:
    h = make()
    with_pods(h)
    slo(h, policy=policy)
    set_quota(h, 50000)
    usage(h, NOW - 3, 2.5, ls_1=2.0)  # older than 2 x the 1 s collect interval
    h.tick("cpuSuppress", NOW)
    assert h.recorded.writes == []
    h.set_pods([])
    usage(h, NOW, 2.5)
    h.tick("cpuSuppress", NOW + 1)
    assert h.recorded.writes == []  # no pods: nothing either


def test_be_cpu_manager_gate_only_recovers_and_leaves_hook_managed_pods() -> None:
    h = make(gates={"BECPUManager": True}, node_annotations=nrt(reserved="0"))
    hooked = FakePod("be-3", "default", "be3", KubeQoS.BESTEFFORT, [FakeContainer("c", cid("c"))])
    h.host.add_pod(hooked)
    with_pods(h, pod_object(hooked, annotations={
        "scheduling.koordinator.sh/resource-status": json.dumps({"numaNodeResources": [{"node": 0}]})}))
    hooked_ctr = h.host.container_dir("be-3", "c")
    # a state a v1 kernel allows: every cpuset within its parent's
    set_cpuset(h, hooked_ctr, "2")
    set_cpuset(h, h.host.pod_dir("be-3"), "1-2")
    for d in be_dirs(h):
        set_cpuset(h, d, "1-2")
    set_quota(h, 90000)
    slo(h, policy="cpuset")
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    assert read_quota(h) == -1
    # every CPU but the reserved 0
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"1-7"}
    assert read_cpuset(h, h.host.pod_dir("be-3")) == "1-7"
    assert read_cpuset(h, hooked_ctr) == "2"


def refused(h: Harness) -> list[dict[str, Any]]:
    """Every write the (fake) kernel refused so far, from the audit log."""
    out: list[dict[str, Any]] = []
    h.audit.add_sink(lambda rec: out.append(rec) if rec["action"] == "write" and not rec["executed"] else None)
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_be_cpu_manager_recovery_keeps_parents_around_the_cpus_of_hook_managed_containers(version: int) -> None:
    """The BE CPU manager's recovery gives the QoS and pod dirs every BE CPU (1-7: CPU 0 reserved) and
    leaves the containers the hook manages alone; this one is bound to NUMA node 0's CPUs, the reserved
    CPU 0 among them.  v1 refuses a parent cpuset without a child's CPUs (EBUSY): its pod dir, and so
    the QoS dir, get 1-7 widened by the container's; v2 takes 1-7 (the container gets 1,4-5 in effect)."""
    h = make(version, sockets=2, numa=2, gates={"BECPUManager": True}, node_annotations=nrt(reserved="0"))
    hooked = FakePod("be-3", "default", "be3", KubeQoS.BESTEFFORT, [FakeContainer("c", cid("c"))])
    h.host.add_pod(hooked)
    with_pods(h, pod_object(hooked, annotations={
        "scheduling.koordinator.sh/resource-status": json.dumps({"numaNodeResources": [{"node": 0}]})}))
    hooked_ctr, hooked_pod = h.host.container_dir("be-3", "c"), h.host.pod_dir("be-3")
    set_cpuset(h, hooked_ctr, "0-1,4-5")
    slo(h, policy="cpuset")
    failed = refused(h)
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    assert read_cpuset(h, hooked_ctr) == "0-1,4-5"
    assert {read_cpuset(h, d) for d in be_dirs(h)[1:]} == {"1-7"}
    if version == 1:
        assert (read_cpuset(h, BE_DIR), read_cpuset(h, hooked_pod)) == ("0-7", "0-7")
    else:
        assert (read_cpuset(h, BE_DIR), read_cpuset(h, hooked_pod)) == ("1-7", "1-7")
        assert read_effective(h, hooked_ctr) == "1,4-5"
    assert failed == []


@pytest.mark.parametrize(("version", "threshold", "kubelet", "expected"), [
    # 90%: 7200 - 1500 - 1000 = 4700m -> 5 CPUs; nLSR = 5 * 2 // 4 = 2 -> [1,5]; the LS pool has only
    # 2 CPUs for the other 3 -> none from it: BE gets just 1,5 (koordlet's partial result)
    (1, 90, None, {"qos": "1,5", "pod": "1,5", "ctr": "1,5"}),
    # 100%: 8000 - 2500 = 5500m -> 6 CPUs; nLSR = 3 > 2 and 3 > 2: nothing at all, nothing written
    (1, 100, None, {"qos": "0-7", "pod": "0-7", "ctr": "0-7"}),
    # the same with a static CPU manager whose shared pool (every CPU but the LSE pod's exclusive 3,7,
    # the reserved 0 and system 4 among them) the containers hold: koordlet gives the QoS and pod dirs
    # every BE CPU, 1-2,5-6, and the containers nothing.  v1 refuses a parent cpuset without a child's
    # CPUs (EBUSY): the QoS and pod dirs get 1-2,5-6 widened by what the containers keep (the containers
    # carry BE's set under a static CPU manager: BE gains nothing by it) ...
    (1, 100, "0-2,4-6", {"qos": "0-2,4-6", "pod": "0-2,4-6", "ctr": "0-2,4-6"}),
    # ... v2 takes koordlet's values and puts 1-2,5-6 in effect in the containers (no step needed)
    (2, 100, "0-2,4-6", {"qos": "1-2,5-6", "pod": "1-2,5-6", "ctr": "0-2,4-6"}),
])
def test_pool_too_small_for_the_wanted_cpus(version: int, threshold: int, kubelet: str | None,
                                            expected: dict[str, str]) -> None:
    static = kubelet is not None
    h = pools_scenario(version, node_annotations=nrt(reserved="0", system="4", policy="static" if static else None))
    qos, pod_dir, ctr, sandbox = be_dirs(h)
    if kubelet is not None:
        for d in (ctr, sandbox, pod_dir, qos):  # children first: a state v1 allows
            set_cpuset(h, d, kubelet)
    slo(h, policy="cpuset", threshold=threshold)
    failed = refused(h)
    h.tick("cpuSuppress", NOW)
    assert {"qos": read_cpuset(h, qos), "pod": read_cpuset(h, pod_dir), "ctr": read_cpuset(h, ctr)} == expected
    assert failed == []
    if version == 2 and static:
        assert read_effective(h, ctr) == "1-2,5-6"


def test_fractional_capacity_rounds_up_for_the_quota_step() -> None:
    """§6 item 16: the step and bypass use Quantity.Value() of the capacity, which rounds 7.5 up to 8."""
    h = make()
    node = node_object(h.host)
    node["status"]["capacity"]["cpu"] = node["status"]["allocatable"]["cpu"] = "7500m"
    h.set_node(node)
    with_pods(h)
    slo(h, policy="cfsQuota")
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    # 7500*65//100 = 4875; 4875 - 2000 - 500 = 2375m -> 237500 (from unlimited: no step)
    assert read_quota(h) == 237500
    usage(h, NOW, 0.7, ls_1=0.2)
    h.tick("cpuSuppress", NOW + 1)
    # 4875 - 200 - 500 = 4175m -> 417500, step 8 cores x 100000 x 0.1 = 80000 (not 75000)
    assert read_quota(h) == 237500 + 80000


# ---------------------------------------------------------------------------------------------
# fail safe: node CPU usage cannot be read (no node_cpu_usage sample in the window)

COND = "cpuSuppress/node-cpu"


def condition(h: Harness) -> str | None:
    c = h.store.conditions.get(COND)
    return None if c is None else c.message


@pytest.mark.parametrize("version", [1, 2])
def test_cfs_quota_is_held_and_reasserted_while_node_cpu_is_missing(version: int) -> None:
    h = make(version)
    with_pods(h)
    slo(h, policy="cfsQuota")
    usage(h, NOW - 1, 3.0, ls_1=2.0, be_1=0.5)
    h.tick("cpuSuppress", NOW)
    assert read_quota(h) == 270000 and condition(h) is None  # 5200 - 2000 - 500
    # /proc/stat goes bad: the last sample ages out of the 2 s window; someone sets BE unlimited
    set_quota(h, -1)
    h.tick("cpuSuppress", NOW + 3)
    assert read_quota(h) == 270000  # re-asserted on the first tick without data
    msg = condition(h)
    assert msg is not None and "node CPU usage cannot be read" in msg and "BE quota 270000" in msg
    # a higher quota is brought down again on the next tick (the write is not cached)
    set_quota(h, 500000)
    h.tick("cpuSuppress", NOW + 4)
    assert read_quota(h) == 270000
    # a lower quota someone else set stays: missing data never raises a limit
    set_quota(h, 100000)
    n = len(h.recorded.writes)
    h.tick("cpuSuppress", NOW + 5)
    assert read_quota(h) == 100000 and len(h.recorded.writes) == n
    assert h.strategy("cpuSuppress").policy_status == {"cfsQuota": "using", "cpuset": "recovered"}
    # data returns: the formula decides again (from 100000 up by at most the 80000 step) and the
    # condition clears
    usage(h, NOW + 6, 3.0, ls_1=2.0, be_1=0.5)
    h.tick("cpuSuppress", NOW + 6)
    assert read_quota(h) == 180000 and condition(h) is None


@pytest.mark.parametrize("version", [1, 2])
def test_cpuset_is_held_and_an_outside_reset_undone_within_the_write_cache_window(version: int) -> None:
    h = make(version, sockets=2, numa=2)
    with_pods(h)
    slo(h, policy="cpuset")
    set_quota(h, 300000)
    usage(h, NOW - 1, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0,2,4"} and read_quota(h) == -1
    # 10 s later, well within the executor's 60 s write cache: a container's cpuset is reset
    # behind the agent's back and node CPU usage cannot be read
    set_cpuset(h, be_dirs(h)[2], "0-7")
    set_quota(h, 400000)
    h.tick("cpuSuppress", NOW + 10)
    assert {d: read_cpuset(h, d) for d in be_dirs(h)} == {d: "0,2,4" for d in be_dirs(h)}
    assert read_quota(h) == 400000  # nothing is recovered while holding
    msg = condition(h)
    assert msg is not None and "BE cpuset 0,2,4" in msg
    # an unchanged file costs a read, not a write
    n = len(h.recorded.writes)
    h.tick("cpuSuppress", NOW + 11)
    assert len(h.recorded.writes) == n
    set_cpuset(h, be_dirs(h)[3], "0-7")  # the sandbox, a dir only a walk of the tree finds
    h.tick("cpuSuppress", NOW + 12)
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0,2,4"}
    # data returns: normal work, condition cleared
    usage(h, NOW + 12, 2.5, ls_1=2.0)
    h.tick("cpuSuppress", NOW + 13)
    assert condition(h) is None and {read_cpuset(h, d) for d in be_dirs(h)} == {"0,2,4"}


@pytest.mark.parametrize("version", [1, 2])
def test_static_cpu_manager_holds_only_the_containers(version: int) -> None:
    """The hold re-asserts the containers only; someone else narrowed their pod dir meanwhile.  v1
    refuses a container cpuset outside its pod dir's (EACCES): there the held 1-2,6 is written within
    the pod dir's 1-2,5, which v2 puts in effect for the same write (no step needed on v2)."""
    h = pools_scenario(version, node_annotations=nrt(reserved="0", system="4", policy="static"))
    h.tick("cpuSuppress", NOW)
    _, pod_dir, ctr, sandbox = be_dirs(h)
    for d in (ctr, sandbox, pod_dir):  # children first: a state v1 allows
        set_cpuset(h, d, "1-2,5")
    if version == 2:
        set_effective(h, pod_dir, "1-2,5")
    failed = refused(h)
    h.tick("cpuSuppress", NOW + 5)
    held = "1-2" if version == 1 else "1-2,6"
    assert (read_cpuset(h, ctr), read_cpuset(h, sandbox)) == (held, held)
    assert read_cpuset(h, pod_dir) == "1-2,5"  # not a limit this strategy holds
    assert read_effective(h, ctr) == read_effective(h, sandbox) == "1-2"  # the same CPUs in force
    assert "BE cpuset 1-2,6 (containers)" in (condition(h) or "")
    assert failed == []


def test_v1_containers_held_within_a_narrowed_pod_dir_get_their_set_back_parents_first() -> None:
    """When the data returns after such a hold, the pod dir is widened back to every BE CPU first and
    then its containers get the BE set again, in the same tick (not at the next forced re-check of the
    write cache, a minute later), and the kernel refuses nothing on the way."""
    h = pools_scenario(1, node_annotations=nrt(reserved="0", system="4", policy="static"))
    h.tick("cpuSuppress", NOW)
    qos, pod_dir, ctr, sandbox = be_dirs(h)
    for d in (ctr, sandbox, pod_dir):
        set_cpuset(h, d, "1-2,5")
    failed = refused(h)
    h.tick("cpuSuppress", NOW + 5)  # the hold: containers within the pod dir's set
    usage(h, NOW + 6, 2.0, lsr_1=1.0, lse_2=0.5)
    n = len(h.recorded.writes)
    h.tick("cpuSuppress", NOW + 6)
    assert condition(h) is None
    assert {d: read_cpuset(h, d) for d in (qos, pod_dir)} == {qos: "1-2,5-6", pod_dir: "1-2,5-6"}
    assert (read_cpuset(h, ctr), read_cpuset(h, sandbox)) == ("1-2,6", "1-2,6")
    order = [w["file"].removeprefix("cpuset/").rsplit("/", 1)[0] for w in h.recorded.writes[n:]]
    assert order.index(pod_dir) < min(order.index(ctr), order.index(sandbox)), order
    assert failed == []


@pytest.mark.parametrize("policy", ["cpuset", "cfsQuota"])
def test_without_a_decision_nothing_is_invented(policy: str) -> None:
    """An agent started while /proc/stat is garbled: no limit was ever decided, so none is written."""
    h = make()
    with_pods(h)
    slo(h, policy=policy)
    set_quota(h, -1)
    h.tick("cpuSuppress", NOW)
    h.tick("cpuSuppress", NOW + 1)
    # the start: no rate before two samples, so no alarm for the first window and tick
    assert condition(h) is None
    h.tick("cpuSuppress", NOW + 4)
    assert h.recorded.writes == [] and read_quota(h) == -1
    assert {read_cpuset(h, d) for d in be_dirs(h)} == {"0-7"}
    assert "no BE limit decided yet" in (condition(h) or "")
    # suppression switched off meanwhile: recovery as usual, and the condition goes
    slo(h, enable=False, policy=policy)
    h.tick("cpuSuppress", NOW + 5)
    assert condition(h) is None


def test_switched_off_during_the_outage_recovers_and_stops_holding() -> None:
    h = make()
    with_pods(h)
    slo(h, policy="cfsQuota")
    usage(h, NOW - 1, 3.0, ls_1=2.0, be_1=0.5)
    h.tick("cpuSuppress", NOW)
    h.tick("cpuSuppress", NOW + 3)
    assert condition(h) is not None
    slo(h, enable=False, policy="cfsQuota")
    h.tick("cpuSuppress", NOW + 4)
    assert read_quota(h) == -1 and condition(h) is None
    slo(h, policy="cfsQuota")
    set_quota(h, -1)
    h.tick("cpuSuppress", NOW + 5)  # still no data: the recovery left no limit to hold
    assert read_quota(h) == -1 and "no BE limit decided yet" in (condition(h) or "")


# ---------------------------------------------------------------------------------------------
# with the real collector on the fake host: what it samples is what the strategy decides on

S = 1_000_000_000


def with_collector(h: Harness) -> Collector:
    return Collector(h.layout, h.cache, h.store, clock=lambda: h.now, mono=lambda: int(h.now * S))


def busy_ticks(cores: float) -> list[int]:
    """Per-CPU busy ticks adding up to ``cores`` x 1 s on the 8 fake CPUs."""
    total = round(cores * os.sysconf("SC_CLK_TCK"))
    return [total // 8 + (1 if i < total % 8 else 0) for i in range(8)]


def test_pods_without_memory_cgroups_count_as_pods_not_system() -> None:
    """v1 with a memory hierarchy that holds no kube cgroups: the pods' CPU usage still comes from
    cpuacct, so LS usage is LS usage (not "system") and BE is not charged for its own usage."""
    h = make(1)
    with_pods(h)
    slo(h, policy="cfsQuota")
    mem = h.layout.abs_dir("memory", "")
    shutil.rmtree(mem)
    os.mkdir(mem)
    col = with_collector(h)
    h.host.set_proc_stat([0] * 8, [0] * 8)
    h.now = NOW - 1
    col.collect()
    h.host.set_cpu_usage(h.host.pod_dir("ls-1"), 2 * S)
    h.host.set_cpu_usage(h.host.pod_dir("be-1"), S)
    # the kube QoS dirs sum their pods, as the kernel's counters do (both collect modes read them)
    h.host.set_cpu_usage(h.layout.kubepods_dir(), 3 * S)
    h.host.set_cpu_usage(h.layout.qos_dir("BestEffort"), S)
    h.host.set_cpu_usage(h.layout.qos_dir("Burstable"), 2 * S)
    h.host.set_proc_stat(busy_ticks(3.5), [100] * 8)  # node 3.5 = ls 2.0 + be 1.0 + system 0.5
    h.now = NOW
    col.collect()
    h.tick("cpuSuppress", NOW)
    # 5200 - 2000 (LS) - 500 (system) = 2700m; with the pods unsampled it was 5200 - 3500 = 1700m
    assert read_quota(h) == 270000
    q = h.strategy("cpuSuppress").last_suppress
    assert q is not None and q.used.pods == pytest.approx(2.0) and q.used.system == pytest.approx(0.5)


def test_garbled_proc_stat_holds_the_be_quota_end_to_end() -> None:
    h = make(2)
    with_pods(h)
    slo(h, policy="cfsQuota")
    col = with_collector(h)
    h.host.set_proc_stat([0] * 8, [0] * 8)
    h.now = NOW - 1
    col.collect()
    h.host.set_cpu_usage(h.host.pod_dir("ls-1"), 2 * S)
    h.host.set_proc_stat(busy_ticks(3.0), [100] * 8)
    h.now = NOW
    col.collect()
    h.tick("cpuSuppress", NOW)
    assert read_quota(h) == 220000  # 5200 - 2000 - system 1000
    good = h.read_file("proc/stat") or ""
    h.write_file("proc/stat", "cpu  1 2 garbage\n")
    for t in (NOW + 1, NOW + 2, NOW + 3):
        h.now = t
        col.collect()
    set_quota(h, -1)  # someone lifts the BE limit while the agent is blind
    h.tick("cpuSuppress", NOW + 3)
    assert read_quota(h) == 220000
    assert set(h.store.conditions.snapshot()) == {"collector/proc-stat", COND}
    h.write_file("proc/stat", good)
    h.now = NOW + 4
    col.collect()
    h.tick("cpuSuppress", NOW + 4)
    assert set(h.store.conditions.snapshot()) == set()
