"""cgroupReconcile (koordlet-qos §4.5): memory QoS at QoS, pod and container level.

Expected values are worked out by hand from the spec's formulas; the arithmetic is in the comments
(GiB = 1073741824, MiB = 1048576, PAGE = 4096).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from qosmanager.api.nodeslo import MemoryQOSCfg, PodMemoryQOSConfig
from qosmanager.api.pod import pod_meta
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object
from qosmanager.strategies.cgroup_reconcile import (
    NONE_MEMORY_QOS,
    container_knobs,
    merged_memory_qos,
    percent_of,
    throttling_high,
)

GiB, MiB = 1 << 30, 1 << 20
MAX = "9223372036854775807"
NAME = "cgroupReconcile"


def cid(n: int) -> str:
    return f"containerd://{n:064x}"


def pod(uid: str, kube_qos: str, containers: list[tuple[str, int | None, dict[str, str], dict[str, str]]], *,
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        phase: str = "Running") -> dict[str, Any]:
    """A hand-written Pod: containers are (name, container number or None when not started, requests, limits)."""
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "default", "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": {"containers": [{"name": n, "resources": {"requests": rq, "limits": lm}}
                                for n, _, rq, lm in containers]},
        "status": {"phase": phase, "qosClass": kube_qos,
                   "containerStatuses": [{"name": n, "containerID": cid(i), "state": {"running": {}}}
                                         for n, i, _, _ in containers if i is not None]},
    }


# The cluster of most tests:
#   LS pod "ls-a" (Burstable): app  request 1 GiB, limit 2 GiB; side request 256 MiB, no limit
#   BE pod "be-b" (BestEffort, label BE): job  batch-memory request 2 GiB, limit 4 GiB
#   LSR pod "lsr-c" (Guaranteed, no label -> LSR): main request = limit = 1 GiB
# Node: 64 GiB, allocatable 60 GiB.
LS_A = pod("ls-a", "Burstable", [("app", 1, {"memory": "1Gi"}, {"memory": "2Gi"}),
                                 ("side", 2, {"memory": "256Mi"}, {})], labels={"koordinator.sh/qosClass": "LS"})
BE_B = pod("be-b", "BestEffort", [("job", 3, {"kubernetes.io/batch-memory": "2Gi"},
                                   {"kubernetes.io/batch-memory": "4Gi"})],
           labels={"koordinator.sh/qosClass": "BE"})
LSR_C = pod("lsr-c", "Guaranteed", [("main", 4, {"memory": "1Gi", "cpu": "1"}, {"memory": "1Gi", "cpu": "1"})])

SLO = {"resourceQOSStrategy": {
    "lsrClass": {"memoryQOS": {"enable": True, "minLimitPercent": 100}},
    "lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 40, "lowLimitPercent": 50, "throttlingPercent": 80,
                              "wmarkRatio": 90, "priority": 5, "priorityEnable": 1, "oomKillGroup": 1}},
    "beClass": {"memoryQOS": {"enable": True, "minLimitPercent": 10, "throttlingPercent": 50}},
}}


def harness(version: int, pods: list[dict[str, Any]] = (LS_A, BE_B, LSR_C), slo: dict[str, Any] | None = SLO,
            **kw: Any) -> Harness:
    h = Harness(version=version, gates={"CgroupReconcile": True}, strategies=[NAME], **kw)
    h.set_node(node_object(h.host, reserved_memory=4 * GiB))
    h.set_pods(list(pods))
    if slo is not None:
        h.set_nodeslo(slo)
    return h


def dirs(h: Harness) -> dict[str, str]:
    L = h.layout
    return {
        "G": L.qos_dir("Guaranteed"), "Bu": L.qos_dir("Burstable"), "BE": L.qos_dir("BestEffort"),
        "ls-a": L.pod_dir("Burstable", "ls-a"), "app": L.container_dir(L.pod_dir("Burstable", "ls-a"), cid(1)),
        "side": L.container_dir(L.pod_dir("Burstable", "ls-a"), cid(2)),
        "be-b": L.pod_dir("BestEffort", "be-b"), "job": L.container_dir(L.pod_dir("BestEffort", "be-b"), cid(3)),
        "lsr-c": L.pod_dir("Guaranteed", "lsr-c"),
        "main": L.container_dir(L.pod_dir("Guaranteed", "lsr-c"), cid(4)),
    }


def mem(h: Harness, d: str, name: str) -> str | None:
    """A memory file as the kernel shows it: byte values rounded down to whole pages (4096), so the
    numbers below are the computed ones (in the comments) rounded down."""
    v = h.read_file(h.cgroup_file("memory", d, name))
    return None if v is None else v.strip()


def written(h: Harness) -> dict[str, str]:
    return {w["file"]: w["value"] for w in h.recorded.writes if w["strategy"] == NAME}


# ------------------------------------------------------------------------------------------------
# formulas
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("req", "limit", "alloc", "tp", "want"), [
    (0, 0, 0, 0, int(MAX)),                                   # throttling 0 -> unlimited
    (GiB, 2 * GiB, 60 * GiB, 80, 1932734464),                 # (1Gi + 1Gi*80//100 = 1932735283) // 4096 * 4096
    (GiB, -1, 8 * GiB, 50, 4831838208),                       # 1Gi + 7Gi*50//100 = 4.5Gi, page aligned already
    (100, 9000, 0, 1, 0),                                     # 100 + 8900//100 = 189 -> 0 pages
    (5000, 1000, 0, 50, 0),                                   # Go truncation: 5000 + (-4000*50/100 = -2000) = 3000 -> 0
    (8 * GiB, -1, 6 * GiB, 100, 6 * GiB),                     # request above allocatable: 8Gi - 2Gi = 6Gi
])
def test_throttling_high(req: int, limit: int, alloc: int, tp: int, want: int) -> None:
    assert throttling_high(req, limit, alloc, tp) == want


def test_go_truncation_toward_zero() -> None:
    # Go: -7 * 50 / 100 = -350 / 100 = -3 (Python floor division would give -4)
    assert percent_of(-7, 50) == -3
    assert percent_of(7, 50) == 3


def test_container_knobs_raise_low_and_high_to_min_and_never_write_a_zero_high() -> None:
    mq = MemoryQOSCfg(min_limit_percent=50, low_limit_percent=10, throttling_percent=1)
    # req 1 MiB, limit 1 MiB + 100 B: min 524288, low 104857 -> raised to min;
    # high = (1048576 + 100*1//100) // 4096 * 4096 = 1048576 (> min: kept)
    k = container_knobs(MiB, MiB + 100, 0, mq)
    assert (k.min, k.low, k.high) == (524288, 524288, 1048576)
    # req 0, limit 1000: high = (0 + 1000*1//100 = 10) // 4096 * 4096 = 0 -> not written (koordlet writes 0)
    k = container_knobs(0, 1000, 0, mq)
    assert k.high is None and k.min == 0


def test_memory_qos_annotation_policies() -> None:
    cfg_pod = pod_meta(pod("x", "Burstable", [("c", 1, {"memory": "1Gi"}, {})],
                           labels={"koordinator.sh/qosClass": "LS"}))
    node_mq = MemoryQOSCfg(enable=True, min_limit_percent=40, low_limit_percent=0, wmark_ratio=80,
                           wmark_scale_permill=30, wmark_min_adj=-10)
    from qosmanager.api.nodeslo import ResourceQOS
    cfg = ResourceQOS(memory_qos=node_mq)
    # no annotation: the class config
    assert merged_memory_qos(cfg_pod, cfg) is node_mq
    # "none": koordlet's None values (min/low/throttling 0, wmarkRatio 0, scale 50, minAdj 0)
    p = dataclasses.replace(cfg_pod, memory_qos=PodMemoryQOSConfig(policy="none", min_limit_percent=99))
    assert merged_memory_qos(p, cfg) == NONE_MEMORY_QOS
    # "auto": the LS template (0,0,0,95,20,-25,0,0,0) overlaid with the pod's lowLimitPercent 30
    p = dataclasses.replace(cfg_pod, memory_qos=PodMemoryQOSConfig(policy="auto", low_limit_percent=30))
    m = merged_memory_qos(p, cfg)
    assert (m.min_limit_percent, m.low_limit_percent, m.wmark_ratio, m.wmark_scale_permill, m.wmark_min_adj) == (
        0, 30, 95, 20, -25)
    # "default" / empty: the node config overlaid with the pod's fields
    for policy in ("default", "", None):
        p = dataclasses.replace(cfg_pod, memory_qos=PodMemoryQOSConfig(policy=policy, throttling_percent=70))
        m = merged_memory_qos(p, cfg)
        assert (m.min_limit_percent, m.throttling_percent, m.wmark_ratio) == (40, 70, 80)


# ------------------------------------------------------------------------------------------------
# the whole tree, cgroup v2
# ------------------------------------------------------------------------------------------------
def test_v2_qos_pod_and_container_values() -> None:
    h = harness(2)
    d = dirs(h)
    # the LS QoS dir supports priority/oom knobs on this "kernel"; no other dir does
    for f in ("memory.priority", "memory.use_priority_oom", "memory.oom.group"):
        h.write_file(h.cgroup_file("memory", d["Bu"], f), "0\n")
    h.tick(NAME, 1000.0)
    # LS pod: memReq = 1Gi + 256Mi = 1342177280; min 40% = 536870912, low 50% = 671088640
    assert mem(h, d["ls-a"], "memory.min") == "536870912"
    assert mem(h, d["ls-a"], "memory.low") == "671088640"
    # app: min = 1Gi*40//100 = 429496729, low = 1Gi*50//100 = 536870912,
    #      high = (1Gi + (2Gi-1Gi)*80//100 = 1932735283) // 4096 * 4096 = 1932734464
    assert (mem(h, d["app"], "memory.min"), mem(h, d["app"], "memory.low"), mem(h, d["app"], "memory.high")) == (
        "429494272", "536870912", "1932734464")
    # side (no limit -> allocatable 60Gi = 64424509440): min 268435456*40//100 = 107374182, low 134217728,
    #      high = (268435456 + (64424509440-268435456)*80//100 = 51593294643) // 4096 * 4096 = 51593293824
    assert (mem(h, d["side"], "memory.min"), mem(h, d["side"], "memory.low"), mem(h, d["side"], "memory.high")) == (
        "107372544", "134217728", "51593293824")
    # BE pod (raw label BE -> batch-memory): memReq 2Gi; min 10% = 214748364, low 0 (class default)
    assert (mem(h, d["be-b"], "memory.min"), mem(h, d["be-b"], "memory.low")) == ("214745088", "0")
    # job: high = 2Gi + (4Gi-2Gi)*50//100 = 3Gi = 3221225472
    assert (mem(h, d["job"], "memory.min"), mem(h, d["job"], "memory.high")) == ("214745088", "3221225472")
    # LSR pod: min 100% of 1Gi; throttling 0 (class default) -> high unlimited
    assert mem(h, d["lsr-c"], "memory.min") == str(GiB)
    assert (mem(h, d["main"], "memory.min"), mem(h, d["main"], "memory.high")) == (str(GiB), "max")
    # QoS sums: Burstable = the LS pod; BestEffort = the BE pod; Guaranteed (the pods root) = all three:
    #   min 1073741824 + 536870912 + 214748364 = 1825361100, low 0 + 671088640 + 0 = 671088640
    assert (mem(h, d["Bu"], "memory.min"), mem(h, d["Bu"], "memory.low")) == ("536870912", "671088640")
    assert (mem(h, d["BE"], "memory.min"), mem(h, d["BE"], "memory.low")) == ("214745088", "0")
    assert (mem(h, d["G"], "memory.min"), mem(h, d["G"], "memory.low")) == ("1825357824", "671088640")
    # per-directory support: the LS QoS dir got priority 5, use_priority_oom 1, oom.group 1
    assert [mem(h, d["Bu"], f) for f in ("memory.priority", "memory.use_priority_oom", "memory.oom.group")] == [
        "5", "1", "1"]
    # ... and no dir without the files got one (the executor skipped them quietly)
    assert mem(h, d["ls-a"], "memory.wmark_ratio") is None
    assert not [w for w in h.recorded.writes if "wmark" in w["file"] or "pagecache" in w["file"]]


def test_v2_protection_rises_parents_first_and_falls_children_first() -> None:
    h = harness(2)
    d = dirs(h)
    h.tick(NAME, 1000.0)
    order = [w["file"] for w in h.recorded.writes if w["file"].endswith("memory.min")]
    assert order.index(h.cgroup_file("memory", d["G"], "memory.min")) < order.index(
        h.cgroup_file("memory", d["ls-a"], "memory.min")) < order.index(h.cgroup_file("memory", d["app"], "memory.min"))
    h.recorded.writes.clear()
    slo = json.loads(json.dumps(SLO))
    slo["resourceQOSStrategy"]["lsClass"]["memoryQOS"]["minLimitPercent"] = 10
    h.set_nodeslo(slo)
    h.tick(NAME, 1001.0)
    order = [w["file"] for w in h.recorded.writes if w["file"].endswith("memory.min")]
    assert order.index(h.cgroup_file("memory", d["app"], "memory.min")) < order.index(
        h.cgroup_file("memory", d["ls-a"], "memory.min")) < order.index(h.cgroup_file("memory", d["G"], "memory.min"))
    # LS pod min 10% of 1342177280 = 134217728; Guaranteed = 1073741824 + 134217728 + 214748364 = 1422707916
    assert mem(h, d["ls-a"], "memory.min") == "134217728"
    assert mem(h, d["G"], "memory.min") == "1422704640"


def test_v2_page_cache_limit_at_pod_level_only() -> None:
    slo = {"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"enable": True, "pageCacheLimitPercent": 30,
                                                             "pageCacheReclaimSync": True}},
                                   "beClass": {"memoryQOS": {"enable": True, "pageCacheLimitSize": 8 * GiB}}}}
    h = harness(2, slo=slo)
    d = dirs(h)
    for key in ("ls-a", "be-b", "app", "job"):
        for f in ("enable", "size", "sync"):
            h.write_file(h.cgroup_file("memory", d[key], f"memory.pagecache_limit.{f}"), "0\n")
    h.tick(NAME, 1000.0)

    def pc(key: str) -> list[str | None]:
        return [mem(h, d[key], f"memory.pagecache_limit.{f}") for f in ("enable", "size", "sync")]

    # LS pod limit = PodLimits memory = 2Gi (only "app" sets one); 30% = 644245094 (2147483648*30//100)
    assert pc("ls-a") == ["1", "644245094", "1"]
    # BE pod: 8Gi capped at its batch-memory limit 4Gi; reclaim sync unset -> "0"
    assert pc("be-b") == ["1", str(4 * GiB), "0"]
    # containers get no page-cache knobs
    assert pc("app") == ["0", "0", "0"] and pc("job") == ["0", "0", "0"]


def test_page_cache_size_zero_disables_and_explicit_enable_wins() -> None:
    slo = {"resourceQOSStrategy": {"lsClass": {"memoryQOS": {"enable": True, "pageCacheLimitSize": 0}},
                                   "beClass": {"memoryQOS": {"enable": True, "pageCacheEnable": True}}}}
    h = harness(2, slo=slo)
    d = dirs(h)
    for key in ("ls-a", "be-b"):
        for f in ("enable", "size", "sync"):
            h.write_file(h.cgroup_file("memory", d[key], f"memory.pagecache_limit.{f}"), "7\n")
    h.tick(NAME, 1000.0)
    # size 0 -> enable 0, size 0, sync untouched
    assert [mem(h, d["ls-a"], f"memory.pagecache_limit.{f}") for f in ("enable", "size", "sync")] == ["0", "0", "7"]
    # no size but pageCacheEnable true -> only enable is written
    assert [mem(h, d["be-b"], f"memory.pagecache_limit.{f}") for f in ("enable", "size", "sync")] == ["1", "7", "7"]


# ------------------------------------------------------------------------------------------------
# cgroup v1
# ------------------------------------------------------------------------------------------------
ANOLIS = ("memory.min", "memory.low", "memory.high", "memory.wmark_ratio", "memory.wmark_scale_factor",
          "memory.wmark_min_adj", "memory.priority", "memory.use_priority_oom", "memory.oom.group")


def anolis(h: Harness, keys: list[str]) -> None:
    d = dirs(h)
    for key in keys:
        for f in ANOLIS:
            h.write_file(h.cgroup_file("memory", d[key], f), "0\n")


def test_v1_anolis_kernel_gets_every_knob_but_page_cache() -> None:
    h = harness(1)
    anolis(h, list(dirs(h)))
    h.tick(NAME, 1000.0)
    d = dirs(h)
    # (the fake kernel has no rules for Anolis's v1 memory.min/high: plain files, the numbers as written)
    assert mem(h, d["G"], "memory.min") == "1825361100"
    assert mem(h, d["app"], "memory.high") == "1932734464"
    assert mem(h, d["main"], "memory.high") == MAX  # v1 takes the number itself
    # LS pod/containers: wmarkRatio 90 (set), wmarkScalePermill 20, wmarkMinAdj -25 (LS template),
    # priority 5, use_priority_oom 1, oom.group 1
    for key in ("ls-a", "app", "side"):
        assert [mem(h, d[key], f) for f in ANOLIS[3:]] == ["90", "20", "-25", "5", "1", "1"]
    # BE: minAdj 50 (BE template); QoS dirs get no watermarks
    assert mem(h, d["job"], "memory.wmark_min_adj") == "50"
    assert mem(h, d["BE"], "memory.wmark_ratio") == "0"
    assert not any("pagecache" in f for f in written(h))


def test_v1_vanilla_kernel_is_checked_once_in_kubepods_and_nothing_is_written() -> None:
    h = harness(1)
    h.tick(NAME, 1000.0)
    assert written(h) == {}
    # the knobs were found unsupported once; later ticks do not even try
    assert h.tick(NAME, 1001.0) == []


def test_v1_kubepods_missing_at_first_check_is_not_cached_forever() -> None:
    h = harness(1)
    kubepods = h.layout.kubepods_dir()
    # hide the kubepods memory dir: no decision yet
    import os
    import shutil
    path = h.layout.abs_dir("memory", kubepods)
    shutil.move(path, path + ".away")
    h.tick(NAME, 1000.0)
    shutil.move(path + ".away", path)
    assert os.path.isdir(path)
    anolis(h, list(dirs(h)))
    h.set_pods([LS_A, BE_B, LSR_C, pod("late", "Burstable", [("c", 9, {"memory": "1Gi"}, {})],
                                          labels={"koordinator.sh/qosClass": "LS"})])
    h.tick(NAME, 1001.0)  # koordlet would stay "unsupported" until restart
    assert mem(h, dirs(h)["G"], "memory.min") is not None and int(mem(h, dirs(h)["G"], "memory.min")) > 0


# ------------------------------------------------------------------------------------------------
# NodeSLO changes, odd input, pod selection
# ------------------------------------------------------------------------------------------------
def test_disabling_memory_qos_writes_koordlets_none_values() -> None:
    h = harness(2)
    d = dirs(h)
    h.tick(NAME, 1000.0)
    assert mem(h, d["app"], "memory.high") == "1932734464"
    slo = json.loads(json.dumps(SLO))
    slo["resourceQOSStrategy"]["lsClass"]["memoryQOS"]["enable"] = False
    h.set_nodeslo(slo)
    h.tick(NAME, 1001.0)
    # None values: min 0, low 0, throttling 0 -> high max
    assert (mem(h, d["app"], "memory.min"), mem(h, d["app"], "memory.low"), mem(h, d["app"], "memory.high")) == (
        "0", "0", "max")
    assert (mem(h, d["ls-a"], "memory.min"), mem(h, d["Bu"], "memory.min")) == ("0", "0")
    # Guaranteed = 1Gi (LSR) + 0 (LS) + 214748364 (BE) = 1288490188
    assert mem(h, d["G"], "memory.min") == "1288486912"


def test_pod_annotation_policy_none_and_auto() -> None:
    none = pod("ls-n", "Burstable", [("c", 11, {"memory": "1Gi"}, {"memory": "2Gi"})],
               labels={"koordinator.sh/qosClass": "LS"}, annotations={"koordinator.sh/memoryQOS": '{"policy":"none"}'})
    auto = pod("ls-auto", "Burstable", [("c", 12, {"memory": "1Gi"}, {"memory": "2Gi"})],
               labels={"koordinator.sh/qosClass": "LS"},
               annotations={"koordinator.sh/memoryQOS": '{"policy":"auto","throttlingPercent":50}'})
    bad = pod("ls-bad", "Burstable", [("c", 13, {"memory": "1Gi"}, {"memory": "2Gi"})],
              labels={"koordinator.sh/qosClass": "LS"}, annotations={"koordinator.sh/memoryQOS": "{not json"})
    h = harness(2, pods=[none, auto, bad])
    L = h.layout

    def cdir(uid: str, n: int) -> str:
        return L.container_dir(L.pod_dir("Burstable", uid), cid(n))

    h.tick(NAME, 1000.0)
    # none: min 0, high max
    assert (mem(h, cdir("ls-n", 11), "memory.min"), mem(h, cdir("ls-n", 11), "memory.high")) == ("0", "max")
    # auto: LS template (min 0) + throttling 50: high = 1Gi + 1Gi*50//100 = 1610612736
    assert (mem(h, cdir("ls-auto", 12), "memory.min"), mem(h, cdir("ls-auto", 12), "memory.high")) == (
        "0", "1610612736")
    # unparsable annotation (koordlet fix): the pod's files are left as they are (the kernel's
    # defaults here; koordlet would write the class config: min 40% = 429496729, high 1932734464)
    bad_dir = cdir("ls-bad", 13)
    assert (mem(h, bad_dir, "memory.min"), mem(h, bad_dir, "memory.high")) == ("0", "max")
    assert not [w for w in h.recorded.writes if "ls-bad" in w["file"]]
    skips = [r for r in h.audit.recent if r["action"] == "skip"]
    assert [(r["strategy"], r["target"], r["uid"]) for r in skips] == [(NAME, "default/ls-bad", "ls-bad")]
    # ... and it counts in its class's sum by the class config: Burstable QoS min = 0 + 0 + 429496729
    # (pod memReq 1Gi at 40% each: the none/auto pods add 0)
    assert mem(h, L.qos_dir("Burstable"), "memory.min") == "429494272"


def test_a_garbled_annotation_leaves_the_pods_memory_files_as_they_are() -> None:
    """koordlet fix: koordlet resets such a pod to the class config; its files stay as its last good
    annotation left them, and the skip is audited once."""
    def ls(ann: str) -> dict[str, Any]:
        return pod("ls-x", "Burstable", [("c", 21, {"memory": "1Gi"}, {"memory": "2Gi"})],
                   labels={"koordinator.sh/qosClass": "LS"}, annotations={"koordinator.sh/memoryQOS": ann})

    h = harness(2, pods=[ls('{"minLimitPercent": 100, "throttlingPercent": 50}'), LSR_C])
    L = h.layout
    cdir = L.container_dir(L.pod_dir("Burstable", "ls-x"), cid(21))
    h.tick(NAME, 1000.0)
    # min 100% of 1Gi; high = 1Gi + (2Gi - 1Gi) * 50 // 100
    assert (mem(h, cdir, "memory.min"), mem(h, cdir, "memory.high")) == (str(GiB), "1610612736")
    h.set_pods([ls('{"minLimitPercent": 100, "throttlingPercent": "half"}'), LSR_C])
    h.recorded.writes.clear()
    for k in range(1, 90):  # past force_update_seconds: nothing re-asserts the class config either
        h.tick(NAME, 1000.0 + k)
    assert (mem(h, cdir, "memory.min"), mem(h, cdir, "memory.high")) == (str(GiB), "1610612736")
    assert not [w for w in h.recorded.writes if "ls-x" in w["file"]]
    skips = [r for r in h.audit.recent if r["action"] == "skip"]
    assert [(r["strategy"], r["target"], r["uid"]) for r in skips] == [(NAME, "default/ls-x", "ls-x")]
    assert "throttlingPercent" in skips[0]["reason"]


def test_nil_class_config_is_skipped_instead_of_panicking() -> None:
    h = harness(2)
    spec = h.store.nodeslo
    h.store.nodeslo = dataclasses.replace(
        spec, resource_qos_strategy=dataclasses.replace(spec.resource_qos_strategy, ls_class=None))
    h.tick(NAME, 1000.0)
    d = dirs(h)
    files = written(h)
    assert not any(f.startswith(h.cgroup_file("memory", d["ls-a"], "")) for f in files)  # LS pod skipped
    assert mem(h, d["job"], "memory.high") == "3221225472"  # the BE pod is still reconciled
    assert h.manager.stats[NAME].errors == 0
    # the Burstable QoS dir (configured by the missing lsClass) is skipped too; Guaranteed sums LSR + BE
    assert mem(h, d["Bu"], "memory.min") == "0"
    assert mem(h, d["G"], "memory.min") == str((GiB + 214748364) // 4096 * 4096)


def test_no_nodeslo_means_nothing_and_only_active_pods_count() -> None:
    done = pod("done", "Burstable", [("c", 21, {"memory": "4Gi"}, {})], labels={"koordinator.sh/qosClass": "LS"},
               phase="Succeeded")
    pending = pod("pend", "Burstable", [("c", None, {"memory": "2Gi"}, {})], labels={"koordinator.sh/qosClass": "LS"},
                  phase="Pending")
    h = harness(2, pods=[done, pending], slo=None)
    assert h.tick(NAME, 1000.0) == []
    h.set_nodeslo(SLO)
    h.tick(NAME, 1001.0)
    L = h.layout
    # the Pending pod counts (2Gi*40//100 = 858993459) and its pod dir is written; its container has no ID yet
    assert mem(h, L.qos_dir("Burstable"), "memory.min") == "858992640"
    assert mem(h, L.pod_dir("Burstable", "pend"), "memory.min") == "858992640"
    assert mem(h, L.pod_dir("Burstable", "done"), "memory.min") == "0"


# ------------------------------------------------------------------------------------------------
# steady state: what is sent, re-assertion, missing files
# ------------------------------------------------------------------------------------------------
def test_steady_state_sends_little_and_reasserts_every_force_period() -> None:
    h = harness(2)
    d = dirs(h)
    first = h.tick(NAME, 1000.0)
    n_knobs = len({(r.write.resource, r.write.cgroup) for r in first})
    # the next tick sends only its share of the periodic re-assertion (60 s / 1 s -> 1/60 of the knobs,
    # rounded up; knobs this kernel lacks are not re-sent at all)
    second = h.tick(NAME, 1001.0)
    assert len(second) <= -(-n_knobs // 60) and all(r.status == "cached" for r in second)
    # an outside change is corrected within one force period (plus one, for the write cache's age)
    h.write_file(h.cgroup_file("memory", d["app"], "memory.min"), "1\n")
    for t in range(1002, 1002 + 121):
        h.tick(NAME, float(t))
    assert mem(h, d["app"], "memory.min") == "429494272"
    # every knob was sent at least once in that window
    assert h.manager.stats[NAME].errors == 0


def test_a_pod_change_sends_only_what_changed() -> None:
    h = harness(2)
    h.tick(NAME, 1000.0)
    h.tick(NAME, 1001.0)
    bigger = json.loads(json.dumps(LS_A))
    bigger["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1536Mi"
    bigger["metadata"]["resourceVersion"] = "2"
    h.set_pods([bigger, BE_B, LSR_C])
    res = h.tick(NAME, 1002.0)
    d = dirs(h)
    sent = {r.write.cgroup for r in res if r.write.resource == "memory.min"}
    # the app container, its pod, Burstable and Guaranteed changed; BE and LSR did not
    assert {d["app"], d["ls-a"], d["Bu"], d["G"]} <= sent
    # changed: app min/low/high, pod min/low, Burstable min/low, Guaranteed min/low = 9 knobs, plus at most
    # one knob of this tick's re-assertion share (about 25 knobs / 60 ticks)
    assert len(res) <= 10
    # app: min = 1610612736*40//100 = 644245094
    assert mem(h, d["app"], "memory.min") == "644243456"


def test_missing_file_in_existing_dir_is_not_retried_but_new_cgroups_are() -> None:
    h = harness(2, pods=[LS_A])
    d = dirs(h)
    h.write_file(h.cgroup_file("memory", d["app"], "memory.wmark_ratio"), "0\n")
    res = h.tick(NAME, 1000.0)
    assert any(r.status == "missing" and r.write.resource == "memory.wmark_ratio" for r in res)
    assert mem(h, d["app"], "memory.wmark_ratio") == "90"
    for t in range(1001, 1070):
        for r in h.tick(NAME, float(t)):
            assert r.status != "missing", r.target  # never again for the knobs this kernel lacks


def test_a_pod_that_leaves_is_forgotten_and_the_sums_shrink() -> None:
    h = harness(2)
    d = dirs(h)
    h.tick(NAME, 1000.0)
    finished = json.loads(json.dumps(LS_A))
    finished["status"]["phase"] = "Succeeded"
    h.set_pods([finished, BE_B])  # the LS pod finished, the LSR pod is gone
    res = h.tick(NAME, 1001.0)
    assert not any(r.write.cgroup.startswith((d["ls-a"], d["lsr-c"])) for r in res)
    # koordlet fix: Burstable has no active pod left; koordlet would leave its 536870912 in place (the sum is
    # undefined), we write the empty sum 0.  Guaranteed = 0 (no LSR pod) + 0 + 214748364 (BE)
    assert (mem(h, d["Bu"], "memory.min"), mem(h, d["Bu"], "memory.low")) == ("0", "0")
    assert mem(h, d["G"], "memory.min") == "214745088"
    for t in range(1002, 1065):
        assert not any(r.write.cgroup.startswith((d["ls-a"], d["lsr-c"])) for r in h.tick(NAME, float(t)))
    assert not (h.strategy(NAME)._desired.keys() & {("memory.min", d["ls-a"]), ("memory.min", d["app"])})


def test_reassertion_is_staggered_over_the_force_period_and_covers_every_knob() -> None:
    """Pods that appear together are re-checked at different ticks of the second half of the force
    period (not all in one), every knob once, and each pod's knobs again one period later; the ticks in
    between cost one step for the whole table."""
    pods = [pod(f"ls-{k}", "Burstable", [("app", 10 + k, {"memory": "1Gi"}, {"memory": "2Gi"})],
                labels={"koordinator.sh/qosClass": "LS"}) for k in range(24)]
    h = harness(2, pods=pods)
    first = h.tick(NAME, 1000.0)
    knobs = {(r.write.resource, r.write.cgroup) for r in first if r.status != "missing"}  # this kernel's
    # what each tick re-checks: the writes handed to the executor's verifier (the files it finds as
    # they were are confirmed by one compare and come back with no result)
    checked: list[tuple[str, str]] = []
    verify = h.executor.plans.verify
    assert verify is not None

    def recording(writes: list, now: float, state: object = None) -> list:
        checked.extend((w.resource, w.cgroup) for w in writes)
        return verify(writes, now, state)  # type: ignore[arg-type]

    h.executor.plans.verify = recording
    per_tick: dict[int, set[tuple[str, str]]] = {}
    for t in range(1001, 1062):
        res = h.tick(NAME, float(t))
        # (of the writes handed over, those of knobs this kernel lacks are dropped when the plan is built
        # again: not read, not sent)
        per_tick[t] = {(r.write.resource, r.write.cgroup) for r in res} | (set(checked) & knobs)
        checked.clear()
    assert not any(per_tick[t] for t in range(1001, 1030))  # the first half: nothing re-sent
    busy = [t for t in per_tick if per_tick[t]]
    # 25 plans spread over ~30 ticks, walked every 6 s (a tenth of the period): several small
    # re-checks, not one burst
    assert len(busy) >= 3
    assert max(len(v) for v in per_tick.values()) <= len(knobs) // 2
    assert set().union(*per_tick.values()) == knobs  # every knob re-checked within one period
    # the next re-check of a plan comes one whole period after its last one
    skipped = h.executor.stats.plans_skipped
    again = {(r.write.resource, r.write.cgroup) for t in range(1062, 1090) for r in h.tick(NAME, float(t))}
    assert not again and not checked
    assert h.executor.stats.plans_sent == 25 * 2  # each plan sent once and re-checked once, no more
    assert h.executor.stats.plans_skipped - skipped == 28 * 25  # 28 ticks, each skipping the whole group
