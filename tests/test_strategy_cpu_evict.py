"""cpuEvict (koordlet-qos §4.3): BECPUEvict, CPUAllocatableEvict and CPUEvict.

Expected numbers are worked out by hand from the spec's formulas in the comments next to them.
The node has 8 CPUs (capacity 8000m) unless a test says otherwise.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import pytest

from qosmanager.api.nodeslo import ResourceThresholdStrategy as RTS
from qosmanager.framework.strategy import QoSConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.strategies._eviction import check_allocatable_config
from qosmanager.strategies._helpers import go_div
from qosmanager.strategies.cpu_evict import (
    CPUEvict,
    be_usage_high_enough,
    check_satisfaction_config,
    check_used_threshold_config,
    release_by_satisfaction,
)

T0 = 1000.0  # first tick: starts the 20 s quiet period
T1 = 1020.0  # first tick allowed to evict
OPT_IN = {"koordinator.sh/eviction-enabled": "true"}


def uid(i: int) -> str:
    return f"{i:08d}-0000-4000-8000-00000000c0de"


def be(i: int, batch_cpu: int = 1000, *, priority: int | None = 5500, labels: Mapping[str, str] | None = None,
       annotations: Mapping[str, str] | None = None, phase: str = "Running") -> dict[str, Any]:
    fp = FakePod(uid(i), "default", f"be-{i}", KubeQoS.BESTEFFORT, [FakeContainer("c", f"containerd://{i:064x}")])
    obj = pod_object(fp, cpu_milli=batch_cpu, labels=labels, annotations=annotations, priority=priority, phase=phase)
    if priority is None:
        del obj["spec"]["priority"]
    return obj


def ls(i: int, *, labels: Mapping[str, str] | None = None, priority: int | None = None) -> dict[str, Any]:
    fp = FakePod(uid(i), "default", f"ls-{i}", KubeQoS.BURSTABLE, [FakeContainer("c", f"containerd://{i:064x}")])
    return pod_object(fp, cpu_milli=2000, labels=labels, priority=priority)


def harness(gates: Mapping[str, bool], pods: list[dict[str, Any]], slo: Mapping[str, Any], *, version: int = 1,
            batch_cpu: int | None = None, cfg: QoSConfig | None = None) -> Harness:
    h = Harness(version=version, gates=gates, strategies=["cpuEvict"], n_cpus=8, cfg=cfg, now=T0)
    h.set_node(node_object(h.host, batch_cpu_milli=batch_cpu))
    h.set_pods(pods)
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, **slo}})
    h.tick("cpuEvict", T0)  # the quiet start: nothing can happen on this tick
    return h


def usage(h: Harness, now: float, cores: Mapping[int, float]) -> None:
    for i, v in cores.items():
        h.add_samples("pod_cpu_usage", [(now, v)], pod=uid(i))


def evicted(h: Harness) -> list[tuple[str, str]]:
    return [(r["pod"].split("/")[1], r["feature"]) for r in h.recorded.evictions if r["error"] is None
            and "refused" not in r["reason"] and "skipped" not in r["reason"]]


# --------------------------------------------------------------------------------------------
# CPUEvict

CPU_EVICT_SLO = {"cpuEvictThresholdPercent": 60, "evictEnabledPriorityThreshold": 6000}


@pytest.mark.parametrize("version", [1, 2])
def test_cpu_evict_releases_node_usage_above_the_threshold(version: int) -> None:
    pods = [be(0, labels=OPT_IN), be(1, labels=OPT_IN), be(2, labels=OPT_IN),
            be(3),  # not opted in
            be(4, labels=OPT_IN, priority=7000)]  # above evictEnabledPriorityThreshold 6000
    h = harness({"CPUEvict": True}, pods, CPU_EVICT_SLO, version=version)
    # node usage avg over window max(1 s, unset) = [1019, 1020]: (6.0 + 6.4) / 2 = 6.2 cores
    # usagePct = int(6.2 * 1000) * 100 // 8000 = 620000 // 8000 = 77 >= 60
    # release = 8000 * (77 - (60 - 2)) // 100 = 8000 * 19 // 100 = 1520m
    h.add_samples("node_cpu_usage", [(1019.0, 6.0), (1020.0, 6.4)])
    usage(h, 1020.0, {0: 0.6, 1: 1.0, 2: 0.8, 3: 3.0, 4: 3.0})
    h.tick("cpuEvict", T1)
    # same priority: used descending -> be-1 (1000m), be-2 (800m): 1800 >= 1520
    assert evicted(h) == [("be-1", "CPUEvict"), ("be-2", "CPUEvict")]
    assert "release 1520m" in h.recorded.evictions[0]["reason"]
    assert "usage=1000m" in h.recorded.evictions[0]["reason"]


def test_cpu_evict_below_threshold_or_without_fresh_node_usage_does_nothing() -> None:
    h = harness({"CPUEvict": True}, [be(0, labels=OPT_IN)], CPU_EVICT_SLO)
    # window [1019, 1020]: avg(4.78, 4.8) = 4.79 -> int(4790.0) * 100 // 8000 = 479000 // 8000 = 59 < 60
    h.add_samples("node_cpu_usage", [(1019.0, 4.78), (1020.0, 4.8)])
    usage(h, T1, {0: 2.0})
    h.tick("cpuEvict", T1)
    assert evicted(h) == []
    # at 1030 the window [1029, 1030] holds no node sample (the 8 cores are from 1025): nothing
    h.add_samples("node_cpu_usage", [(1025.0, 8.0)])
    usage(h, 1030.0, {0: 2.0})
    h.tick("cpuEvict", 1030.0)
    assert evicted(h) == []
    # the same 8 cores inside the window: 100% -> evicted
    h.add_samples("node_cpu_usage", [(1031.0, 8.0)])
    usage(h, 1031.0, {0: 2.0})
    h.tick("cpuEvict", 1031.0)
    assert evicted(h) == [("be-0", "CPUEvict")]


def test_cpu_evict_victims_without_recent_usage_are_skipped() -> None:
    h = harness({"CPUEvict": True}, [be(0, labels=OPT_IN), be(1, labels=OPT_IN)], CPU_EVICT_SLO)
    h.add_samples("node_cpu_usage", [(1020.0, 8.0)])  # 100% -> release 8000 * 42 // 100 = 3360m
    usage(h, 1017.0, {0: 5.0})  # older than 2 x collect interval: be-0 is no victim
    usage(h, 1020.0, {1: 1.0})
    h.tick("cpuEvict", T1)
    assert evicted(h) == [("be-1", "CPUEvict")]


def test_cpu_evict_order_eviction_priority_then_priority_then_label_priority() -> None:
    pods = [be(0, labels=OPT_IN),  # (0, 5500, 5500)
            be(1, labels={**OPT_IN, "koordinator.sh/priority": "10"}),  # (0, 5500, 10)
            be(2, labels=OPT_IN, priority=5100),  # (0, 5100, 5100)
            be(3, labels=OPT_IN, annotations={"koordinator.sh/eviction-priority": "-1"}),  # (-1, 5500, 5500)
            be(4, labels={**OPT_IN, "koordinator.sh/priority": "1_0"})]  # invalid label -> 5500, like be-0
    h = harness({"CPUEvict": True}, pods, CPU_EVICT_SLO)
    h.add_samples("node_cpu_usage", [(1020.0, 8.0)])  # release 3360m
    usage(h, 1020.0, {0: 0.5, 1: 0.5, 2: 0.5, 3: 0.5, 4: 0.9})
    h.tick("cpuEvict", T1)
    # -> be-3, be-2, be-1, then be-4 (900m) before be-0 (500m); 4 * 500 + 900 = 2900 < 3360: all five
    assert [p for p, _ in evicted(h)] == ["be-3", "be-2", "be-1", "be-4", "be-0"]


def test_quiet_start_and_cool_down_refreshed_only_by_new_evictions() -> None:
    h = harness({"CPUEvict": True}, [be(i, labels=OPT_IN) for i in range(3)], CPU_EVICT_SLO)
    strategy = h.strategy("cpuEvict")
    assert isinstance(strategy, CPUEvict)
    assert strategy.last_evict_time == T0

    def hot(now: float) -> None:
        # 6.0 cores: int(6000) * 100 // 8000 = 75 -> release 8000 * (75 - 58) // 100 = 1360m
        h.add_samples("node_cpu_usage", [(now, 6.0)])
        usage(h, now, {0: 1.0, 1: 0.9, 2: 0.5})

    hot(1019.0)
    h.tick("cpuEvict", 1019.0)  # 19 s < 20 s after the first tick
    assert evicted(h) == []
    hot(T1)
    h.tick("cpuEvict", T1)
    assert [p for p, _ in evicted(h)] == ["be-0", "be-1"]  # 1000 + 900 >= 1360
    assert strategy.last_evict_time == T1
    hot(1039.0)
    h.tick("cpuEvict", 1039.0)  # cool-down
    assert len(evicted(h)) == 2
    hot(1040.0)
    h.tick("cpuEvict", 1040.0)  # be-0, be-1 still listed: pending release covers 1360, no new eviction
    assert len(evicted(h)) == 2 and strategy.last_evict_time == T1
    hot(1041.0)
    h.tick("cpuEvict", 1041.0)  # not refreshed -> it runs again at once
    assert len(evicted(h)) == 2
    assert h.manager.stats["cpuEvict"].runs == 6


def test_configurable_cool_time() -> None:
    h = harness({"CPUEvict": True}, [be(0, labels=OPT_IN)], CPU_EVICT_SLO,
                cfg=QoSConfig(cpu_evict_cool_time=5.0))
    h.add_samples("node_cpu_usage", [(1005.0, 8.0)])
    usage(h, 1005.0, {0: 1.0})
    h.tick("cpuEvict", 1005.0)
    assert evicted(h) == [("be-0", "CPUEvict")]


# --------------------------------------------------------------------------------------------
# BECPUEvict

BE_SLO = {"cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 60,
          "cpuEvictTimeWindowSeconds": 6}


def be_series(h: Harness, now: float, usage_m: list[float], request_m: list[float], limit_m: list[float]) -> None:
    """Samples ending at ``now``, one per second."""
    for name, values in (("be_cpu_usage", usage_m), ("be_cpu_request", request_m), ("be_cpu_real_limit", limit_m)):
        n = len(values)
        h.add_samples(name, [(now - (n - 1 - k), v) for k, v in enumerate(values)])


@pytest.mark.parametrize("version", [1, 2])
def test_be_cpu_evict_by_satisfaction(version: int) -> None:
    pods = [be(0, 2000), be(1, 2000), be(2, 2000), be(3, 2000, priority=5100),
            be(4, 2000, annotations={"koordinator.sh/eviction-policy": '["CPUEvict"]'}),  # policy excludes
            ls(5)]  # not BE
    h = harness({"BECPUEvict": True}, pods, BE_SLO, version=version)
    # six samples over the 6 s window (count 6 * 1 s >= 6 // 3): usage 2900, request 10000, limit 3000
    # usage 2900 / 3000 = 0.967 >= 0.9; satisfaction 3000 / 10000 = 0.3 <= 0.4
    # release = int(10000 * (0.6 - 0.3)) = 3000m; current values equal the averages -> 3000m
    be_series(h, T1, [2900.0] * 6, [10000.0] * 6, [3000.0] * 6)
    # CpuUsage = used / batch-cpu request: be-0 1900/2000, be-1 500/2000, be-2 1000/2000, be-3 0.1
    usage(h, T1, {0: 1.9, 1: 0.5, 2: 1.0, 3: 0.2, 4: 2.0})
    h.tick("cpuEvict", T1)
    # be-3 first (spec.priority 5100 < 5500), then by CpuUsage: be-0; 2000 + 2000 >= 3000
    assert evicted(h) == [("be-3", "BECPUEvict"), ("be-0", "BECPUEvict")]
    assert "release 3000m batch-cpu" in h.recorded.evictions[0]["reason"]


def test_be_cpu_evict_reasons_give_the_priority_the_victims_were_sorted_on() -> None:
    """A BE pod without spec.priority sorts as 0; its reason says 0, not its class-default priority value
    (5500 for koord-batch) that would contradict the order."""
    pods = [be(0, 2000, priority=None), be(1, 2000, priority=5100)]
    h = harness({"BECPUEvict": True}, pods, BE_SLO)
    be_series(h, T1, [2900.0] * 6, [10000.0] * 6, [3000.0] * 6)  # release 3000m, as above
    usage(h, T1, {0: 1.0, 1: 1.9})
    h.tick("cpuEvict", T1)
    assert evicted(h) == [("be-0", "BECPUEvict"), ("be-1", "BECPUEvict")]  # 0 before 5100
    priorities = [re.search(r"priority=(\d+)", e["reason"]).group(1) for e in h.recorded.evictions]
    assert priorities == ["0", "5100"]


def test_be_cpu_evict_counts_a_killed_pod_still_listed_before_evicting_another() -> None:
    """A killed pod's usage is 0, so it sorts last among the BE victims; while it is still listed its
    pending release must count before any pod above it is picked: one eviction, not one per round."""
    h = harness({"BECPUEvict": True}, [be(0, 4000), be(1, 4000)], BE_SLO, cfg=QoSConfig(cpu_evict_cool_time=1.0))
    # usage 2900 / limit 3000 >= 0.9; satisfaction 3000 / 10000 = 0.3 <= 0.4 -> release 3000m
    be_series(h, T1, [2900.0] * 6, [10000.0] * 6, [3000.0] * 6)
    usage(h, T1, {0: 1.9, 1: 1.0})
    h.tick("cpuEvict", T1)
    assert evicted(h) == [("be-0", "BECPUEvict")]  # CpuUsage 1900/4000 before 1000/4000; 4000 >= 3000
    # two seconds on: be-0 is killed (usage 0) but still listed, BE still starved (its request still counts)
    be_series(h, T1 + 2, [2900.0] * 2, [10000.0] * 2, [3000.0] * 2)
    usage(h, T1 + 2, {0: 0.0, 1: 1.0})
    h.tick("cpuEvict", T1 + 2)  # order now be-1, be-0: be-0's pending 4000m covers the 3000m first
    assert evicted(h) == [("be-0", "BECPUEvict")] and h.coordinator.evicted_total == 1


def test_be_cpu_evict_current_values_cap_the_release() -> None:
    h = harness({"BECPUEvict": True}, [be(i, 1000) for i in range(3)], BE_SLO)
    # request: five samples of 10400 then 8000 -> avg (52000 + 8000) / 6 = 10000, last 8000
    # window: int(10000 * (0.6 - 0.3)) = 3000; now: rate 3000 / 8000 = 0.375 <= 0.4,
    # int(8000 * (0.6 - 0.375)) = int(8000 * 0.22499999999999998) = int(1799.9999999999998) = 1799
    be_series(h, T1, [2900.0] * 6, [10400.0] * 5 + [8000.0], [3000.0] * 6)
    usage(h, T1, {0: 0.9, 1: 0.8, 2: 0.7})
    h.tick("cpuEvict", T1)
    assert evicted(h) == [("be-0", "BECPUEvict"), ("be-1", "BECPUEvict")]  # 1000 + 1000 >= 1799
    assert "release 1799m batch-cpu" in h.recorded.evictions[0]["reason"]


def test_be_cpu_evict_needs_enough_samples_high_usage_and_current_data() -> None:
    pods = [be(i, 2000) for i in range(3)]
    # one sample per series in the 6 s window: 1 * 1 s < 6 // 3 = 2 -> not enough samples
    h = harness({"BECPUEvict": True}, pods, BE_SLO)
    be_series(h, T1, [2900.0], [10000.0], [3000.0])
    h.tick("cpuEvict", T1)
    assert evicted(h) == []
    # usage too low: 2600 / 3000 = 0.867 < 0.9
    h = harness({"BECPUEvict": True}, pods, BE_SLO)
    be_series(h, T1, [2600.0] * 6, [10000.0] * 6, [3000.0] * 6)
    h.tick("cpuEvict", T1)
    assert evicted(h) == []
    # ... but a usage threshold of 85% makes it high enough
    h = harness({"BECPUEvict": True}, pods, {**BE_SLO, "cpuEvictBEUsageThresholdPercent": 85})
    be_series(h, T1, [2600.0] * 6, [10000.0] * 6, [3000.0] * 6)
    usage(h, T1, {0: 1.0})
    h.tick("cpuEvict", T1)
    # release 3000m: be-0 (CpuUsage 0.5), then be-2 before be-1 (both 0: name descending)
    assert [p for p, _ in evicted(h)] == ["be-0", "be-2"]
    # koordlet fix: averages say evict but nothing in the last 2 s -> no eviction
    h = harness({"BECPUEvict": True}, pods, BE_SLO)
    be_series(h, T1 - 3, [500.0] * 4, [4000.0] * 4, [800.0] * 4)  # limit < 1000: usage check bypassed
    h.tick("cpuEvict", T1)
    assert evicted(h) == []


def test_be_cpu_evict_limit_under_one_core_bypasses_the_usage_check() -> None:
    h = harness({"BECPUEvict": True}, [be(0, 1000), be(1, 1000)], BE_SLO)
    # limit 800 < 1000: "high enough" although 100 / 800 = 0.125; rate 800 / 4000 = 0.2
    # release = int(4000 * (0.6 - 0.2)) = int(4000 * 0.39999999999999997) = 1599
    be_series(h, T1, [100.0] * 6, [4000.0] * 6, [800.0] * 6)
    h.tick("cpuEvict", T1)
    assert [p for p, _ in evicted(h)] == ["be-1", "be-0"]  # no usage samples: name descending
    assert "release 1599m batch-cpu" in h.recorded.evictions[0]["reason"]


def test_be_cpu_evict_by_allocatable_uses_the_nodes_batch_cpu() -> None:
    slo = {**BE_SLO, "cpuEvictPolicy": "evictByAllocatable"}
    h = harness({"BECPUEvict": True}, [be(0, 1000), be(1, 1000), be(2, 1000)], slo, batch_cpu=3000)
    # limit = allocatable 3000 (the real limit 9000 is ignored): 2900 / 3000 >= 0.9,
    # rate 3000 / 10000 = 0.3 -> release 3000m
    be_series(h, T1, [2900.0] * 6, [10000.0] * 6, [9000.0] * 6)
    h.tick("cpuEvict", T1)
    assert len(evicted(h)) == 3
    # batch-cpu allocatable 0 counts as 1m: under one core -> usage check bypassed, rate 1 / 10000
    h = harness({"BECPUEvict": True}, [be(0, 1000)], slo, batch_cpu=0)
    be_series(h, T1, [0.0] * 6, [10000.0] * 6, [9000.0] * 6)
    h.tick("cpuEvict", T1)
    assert len(evicted(h)) == 1
    # no batch-cpu on the node: -1 -> never high enough
    h = harness({"BECPUEvict": True}, [be(0, 1000)], slo)
    be_series(h, T1, [2900.0] * 6, [10000.0] * 6, [3000.0] * 6)
    h.tick("cpuEvict", T1)
    assert evicted(h) == []


def test_be_victim_order_is_total_with_missing_priorities() -> None:
    # koordlet fix (§6b item 1): missing spec.priority = 0, then CpuUsage desc, then name desc
    pods = [be(0, 1000, priority=None), be(1, 1000, priority=None), be(2, 1000), be(3, 1000, priority=None)]
    h = harness({"BECPUEvict": True}, pods, BE_SLO)
    be_series(h, T1, [2900.0] * 6, [100000.0] * 6, [3000.0] * 6)  # release int(100000 * 0.57) = 57000
    usage(h, T1, {0: 0.5, 1: 0.5, 2: 0.9, 3: 0.1})
    h.tick("cpuEvict", T1)
    # priority 0: be-1, be-0 (0.5, name desc), be-3 (0.1); then be-2 (5500)
    assert [p for p, _ in evicted(h)] == ["be-1", "be-0", "be-3", "be-2"]


# --------------------------------------------------------------------------------------------
# CPUAllocatableEvict

ALLOC_SLO = {"cpuAllocatableEvictThresholdPercent": 100, "cpuAllocatableEvictLowerPercent": 80,
             "allocatableEvictPriorityThreshold": 5999}


def test_allocatable_evict_by_batch_cpu_request() -> None:
    pods = [be(0, 1500, labels=OPT_IN), be(1, 2000, labels=OPT_IN), be(2, 1000, labels=OPT_IN),
            be(3, 3000, labels=OPT_IN, phase="Succeeded"),  # finished: holds nothing (koordlet fix)
            ls(4, labels=OPT_IN)]  # prod (9500) > 5999: neither counted nor a victim
    h = harness({"CPUAllocatableEvict": True}, pods, ALLOC_SLO, batch_cpu=4000)
    # requested batch-cpu 1500 + 2000 + 1000 = 4500; 4500 / 4000 = 1.125 > 1.0
    # release = int(4500 - 80 / 100 * 4000) = int(4500 - 3200.0) = 1300
    usage(h, T1, {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.1, 4: 0.1})
    h.tick("cpuEvict", T1)
    # request descending: be-1 (2000) alone covers 1300 (counting the Succeeded pod's 3000 would
    # make it 4300 and take every pod)
    assert evicted(h) == [("be-1", "CPUAllocatableEvict")]
    assert "kubernetes.io/batch-cpu=1300" in h.recorded.evictions[0]["reason"]


def test_allocatable_evict_below_threshold_or_not_offered() -> None:
    pods = [be(0, 1500, labels=OPT_IN), be(1, 2000, labels=OPT_IN)]
    h = harness({"CPUAllocatableEvict": True}, pods, ALLOC_SLO, batch_cpu=4000)  # 3500 / 4000 <= 1.0
    usage(h, T1, {0: 0.1, 1: 0.1})
    h.tick("cpuEvict", T1)
    assert evicted(h) == []
    # no batch-cpu on the node: everything requested is released (3500): both
    h = harness({"CPUAllocatableEvict": True}, pods, ALLOC_SLO)
    usage(h, T1, {0: 0.1, 1: 0.1})
    h.tick("cpuEvict", T1)
    assert [p for p, _ in evicted(h)] == ["be-1", "be-0"]


def test_allocatable_evict_standard_cpu_entry_is_audited_not_chased() -> None:
    free = {**OPT_IN, "koordinator.sh/priority-class": "koord-free"}
    pods = [be(0, 2500, labels=OPT_IN), be(1, 2500, labels=OPT_IN), ls(2, labels=free, priority=3500)]
    slo = {**ALLOC_SLO, "cpuAllocatableEvictThresholdPercent": 10, "cpuAllocatableEvictLowerPercent": 5}
    h = harness({"CPUAllocatableEvict": True}, pods, slo, batch_cpu=8000)
    # batch-cpu: 5000 / 8000 = 0.625 > 0.1 -> int(5000 - 0.05 * 8000) = 4600
    # cpu (the koord-free pod, request 1000m of allocatable 8000m): 0.125 > 0.1 -> int(1000 - 400.0) = 600
    usage(h, T1, {0: 0.1, 1: 0.1, 2: 0.1})
    h.tick("cpuEvict", T1)
    # victims by priority: the koord-free pod (3500) first -- it releases nothing the task asks
    # for, but koordlet evicts it all the same -- then be-0, be-1 (equal keys: pod-list order);
    # batch-cpu 2500 + 2500 >= 4600
    assert [p for p, _ in evicted(h)] == ["ls-2", "be-0", "be-1"]
    unsat = [r for r in h.audit.recent if r["action"] == "evict" and not r["target"]]
    assert len(unsat) == 1 and "'cpu': 600" in unsat[0]["reason"]


# --------------------------------------------------------------------------------------------
# All three together, gates, NodeSLO switch


def test_features_run_in_order_and_share_released_amounts() -> None:
    pods = [be(0, 2000), be(1, 2000, labels=OPT_IN), be(2, 2000, labels=OPT_IN)]
    slo = {**BE_SLO, **CPU_EVICT_SLO}
    h = harness({"BECPUEvict": True, "CPUEvict": True}, pods, slo)
    be_series(h, T1, [2900.0] * 6, [6000.0] * 6, [2000.0] * 6)
    # BECPUEvict: 2900 / 2000 >= 0.9; rate 2000 / 6000 = 0.333 -> int(6000 * (0.6 - 0.3333)) = 1600
    # CPUEvict: 6.0 cores -> 75% -> release 8000 * 17 // 100 = 1360m of usage
    h.add_samples("node_cpu_usage", [(T1, 6.0)])
    usage(h, T1, {0: 1.5, 1: 0.5, 2: 0.4})
    h.tick("cpuEvict", T1)
    # BECPUEvict evicts be-0 (CpuUsage 0.75, 2000 >= 1600); be-0 is no CPUEvict victim (no
    # opt-in label) but its 1500m usage still counts for CPUEvict: 1500 >= 1360 -> done
    assert evicted(h) == [("be-0", "BECPUEvict")]


def test_nodeslo_switch_and_gates() -> None:
    pods = [be(0, labels=OPT_IN)]
    h = harness({"CPUEvict": True}, pods, CPU_EVICT_SLO)
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": False, **CPU_EVICT_SLO}})
    h.add_samples("node_cpu_usage", [(T1, 8.0)])
    usage(h, T1, {0: 1.0})
    h.tick("cpuEvict", T1)
    assert evicted(h) == []
    h.set_nodeslo({"resourceUsedThresholdWithBE": CPU_EVICT_SLO})  # enable unset: default false
    h.tick("cpuEvict", T1 + 0.5)
    assert evicted(h) == []
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, **CPU_EVICT_SLO}})
    h.tick("cpuEvict", T1 + 1)
    assert evicted(h) == [("be-0", "CPUEvict")]
    # the gate of the feature, not just of the strategy, must be on
    h = harness({"BECPUEvict": True}, pods, {**CPU_EVICT_SLO, **BE_SLO})
    h.add_samples("node_cpu_usage", [(T1, 8.0)])
    usage(h, T1, {0: 1.0})
    h.tick("cpuEvict", T1)
    assert evicted(h) == []
    assert not Harness(strategies=["cpuEvict"]).strategy("cpuEvict").enabled()  # every gate off by default


def test_no_node_or_zero_capacity_does_nothing() -> None:
    h = Harness(gates={"CPUEvict": True}, strategies=["cpuEvict"])
    h.set_pods([be(0, labels=OPT_IN)])
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, **CPU_EVICT_SLO}})
    h.tick("cpuEvict", T0)
    h.add_samples("node_cpu_usage", [(T1, 8.0)])
    usage(h, T1, {0: 1.0})
    h.tick("cpuEvict", T1)  # no node yet
    assert evicted(h) == []


def test_invalid_config_is_logged_once_and_other_features_keep_running(caplog: pytest.LogCaptureFixture) -> None:
    slo = {**CPU_EVICT_SLO, "cpuEvictBESatisfactionLowerPercent": 70, "cpuEvictBESatisfactionUpperPercent": 80}
    h = harness({"BECPUEvict": True, "CPUEvict": True}, [be(0, labels=OPT_IN)], slo)
    with caplog.at_level(logging.WARNING, logger="qosmanager.strategies.cpu_evict"):
        h.tick("cpuEvict", T1)  # no node usage yet: CPUEvict releases nothing
        h.add_samples("node_cpu_usage", [(T1 + 1, 8.0)])
        usage(h, T1 + 1, {0: 1.0})
        h.tick("cpuEvict", T1 + 1)
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("CPUEvictBESatisfactionLowerPercent(70) is not valid! must (0,60]" in m for m in msgs) == 1
    assert evicted(h) == [("be-0", "CPUEvict")]


# --------------------------------------------------------------------------------------------
# Config checks: koordlet's messages


@pytest.mark.parametrize("cfg, message", [
    (None, "ResourceThresholdStrategy not config"),
    (RTS(), "CPUEvictBESatisfactionLowerPercent or CPUEvictBESatisfactionUpperPercent not config"),
    (RTS(cpu_evict_be_satisfaction_lower_percent=40), "CPUEvictBESatisfactionLowerPercent or "
     "CPUEvictBESatisfactionUpperPercent not config"),
    (RTS(cpu_evict_be_satisfaction_lower_percent=0, cpu_evict_be_satisfaction_upper_percent=50),
     "CPUEvictBESatisfactionLowerPercent(0) is not valid! must (0,60]"),
    (RTS(cpu_evict_be_satisfaction_lower_percent=61, cpu_evict_be_satisfaction_upper_percent=70),
     "CPUEvictBESatisfactionLowerPercent(61) is not valid! must (0,60]"),
    (RTS(cpu_evict_be_satisfaction_lower_percent=60, cpu_evict_be_satisfaction_upper_percent=100),
     "CPUEvictBESatisfactionUpperPercent(100) is not valid,must (0,100)"),
    (RTS(cpu_evict_be_satisfaction_lower_percent=50, cpu_evict_be_satisfaction_upper_percent=40),
     "CPUEvictBESatisfactionUpperPercent(40) < CPUEvictBESatisfactionLowerPercent(50)"),
    (RTS(cpu_evict_be_satisfaction_lower_percent=60, cpu_evict_be_satisfaction_upper_percent=60), None),
])
def test_satisfaction_config_messages(cfg: RTS | None, message: str | None) -> None:
    assert check_satisfaction_config(cfg) == message


@pytest.mark.parametrize("cfg, message", [
    (None, "ResourceThresholdStrategy not config"),
    (RTS(), "CPUEvictThresholdPercent not config"),
    (RTS(cpu_evict_threshold_percent=-1), "threshold percent(-1) should greater than 0"),
    (RTS(cpu_evict_threshold_percent=60, cpu_evict_lower_percent=60),
     "lower percent(60) should less than threshold percent(60)"),
    (RTS(cpu_evict_threshold_percent=1), "EvictEnabledPriorityThreshold not config"),  # lower -1 < 1
    (RTS(cpu_evict_threshold_percent=60, evict_enabled_priority_threshold=6000), None),
])
def test_used_threshold_config_messages(cfg: RTS | None, message: str | None) -> None:
    assert check_used_threshold_config(cfg) == message


@pytest.mark.parametrize("cfg, message", [
    (None, "ResourceThresholdStrategy not config"),
    (RTS(), "CPUAllocatableEvictThresholdPercent not config"),
    (RTS(cpu_allocatable_evict_threshold_percent=-5), "threshold percent(-5) should equal or greater than 0"),
    (RTS(cpu_allocatable_evict_threshold_percent=110), "CPUAllocatableEvictLowerPercent not config"),
    (RTS(cpu_allocatable_evict_threshold_percent=110, cpu_allocatable_evict_lower_percent=120),
     "lower percent(120) should less than threshold percent(110)"),
    (RTS(cpu_allocatable_evict_threshold_percent=110, cpu_allocatable_evict_lower_percent=100),
     "AllocatableEvictPriorityThreshold not config"),
    (RTS(cpu_allocatable_evict_threshold_percent=110, cpu_allocatable_evict_lower_percent=100,
         allocatable_evict_priority_threshold=8000),
     "priorityThresholdPercent(8000) should less than 7999, koor-prod pods should not be killed"),
    (RTS(cpu_allocatable_evict_threshold_percent=110, cpu_allocatable_evict_lower_percent=100,
         allocatable_evict_priority_threshold=7999), None),
])
def test_allocatable_config_messages(cfg: RTS | None, message: str | None) -> None:
    assert check_allocatable_config(cfg, "CPU") == message


# --------------------------------------------------------------------------------------------
# Formula helpers


@pytest.mark.parametrize("usage_m, limit_m, thr, high", [
    (900.0, 0.0, None, False),  # no limit
    (0.0, 999.0, None, True),  # under one core: always high
    (899.0, 1000.0, None, False),  # 0.899 < 0.9 (default 90)
    (900.0, 1000.0, None, True),
    (500.0, 1000.0, 50, True),
])
def test_be_usage_high_enough(usage_m: float, limit_m: float, thr: int | None, high: bool) -> None:
    assert be_usage_high_enough(usage_m, limit_m, thr) is high


@pytest.mark.parametrize("request_m, limit_m, lower, upper, release", [
    (0.0, 1000.0, 40, 60, 0),  # no request
    (10000.0, 4001.0, 40, 60, 0),  # rate 0.4001 > 0.4
    # rate 0.4 <= 0.4: 0.6 - 0.4 = 0.19999999999999996; 10000 * that = 1999.9999999999995 -> 1999
    (10000.0, 4000.0, 40, 60, 1999),
    (10000.0, 3000.0, 40, 60, 3000),  # 0.6 - 0.3 = 0.3 exactly -> 3000
    (10000.0, 3000.0, 40, 30, 0),  # gap 0.3 - 0.3 = 0
])
def test_release_by_satisfaction(request_m: float, limit_m: float, lower: int, upper: int, release: int) -> None:
    assert release_by_satisfaction(request_m, limit_m, lower, upper) == release


def test_go_div_truncates_toward_zero() -> None:
    assert go_div(7, 2) == 3 and go_div(-7, 2) == -3 and go_div(7, -2) == -3 and go_div(-7, -2) == 3
