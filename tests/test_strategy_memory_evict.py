"""memoryEvict (koordlet-qos §4.4): BEMemoryEvict, MemoryAllocatableEvict and MemoryEvict.

Node memory capacity is 100 GiB = 107374182400 bytes; expected numbers are worked out by hand
from the spec's formulas in the comments next to them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import pytest

from qosmanager.api.nodeslo import ResourceThresholdStrategy as RTS
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.strategies._eviction import check_allocatable_config, release_by_used_threshold
from qosmanager.strategies.memory_evict import (
    MemoryEvict,
    check_common_config,
    memory_allocatable_formula,
)

GiB = 1 << 30
CAP = 100 * GiB
T0 = 1000.0
OPT_IN = {"koordinator.sh/eviction-enabled": "true"}


def uid(i: int) -> str:
    return f"{i:08d}-0000-4000-8000-0000000a11ce"


def be(i: int, batch_memory: int = GiB, *, priority: int | None = 5500, labels: Mapping[str, str] | None = None,
       annotations: Mapping[str, str] | None = None, phase: str = "Running") -> dict[str, Any]:
    fp = FakePod(uid(i), "default", f"be-{i}", KubeQoS.BESTEFFORT, [FakeContainer("c", f"containerd://{i:064x}")])
    obj = pod_object(fp, memory=batch_memory, labels=labels, annotations=annotations, priority=priority,
                     phase=phase)
    if priority is None:
        del obj["spec"]["priority"]
    return obj


def ls(i: int, *, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    fp = FakePod(uid(i), "default", f"ls-{i}", KubeQoS.BURSTABLE, [FakeContainer("c", f"containerd://{i:064x}")])
    return pod_object(fp, memory=4 * GiB, labels=labels)


def harness(gates: Mapping[str, bool], pods: list[dict[str, Any]], slo: Mapping[str, Any], *, version: int = 1,
            batch_memory: int | None = None) -> Harness:
    h = Harness(version=version, gates=gates, strategies=["memoryEvict"], memory_bytes=CAP, now=T0)
    h.set_node(node_object(h.host, batch_memory=batch_memory))
    h.set_pods(pods)
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, **slo}})
    return h


def usage(h: Harness, now: float, node: float, pods: Mapping[int, float]) -> None:
    h.add_samples("node_memory_usage", [(now, node)])
    for i, v in pods.items():
        h.add_samples("pod_memory_usage", [(now, v)], pod=uid(i))


def evicted(h: Harness) -> list[tuple[str, str]]:
    return [(r["pod"].split("/")[1], r["feature"]) for r in h.recorded.evictions]


# --------------------------------------------------------------------------------------------
# BEMemoryEvict

SLO = {"memoryEvictThresholdPercent": 70}


@pytest.mark.parametrize("version", [1, 2])
def test_be_memory_evict_releases_usage_above_the_threshold(version: int) -> None:
    pods = [be(0), be(1), be(2), be(3), ls(4),
            be(5, annotations={"koordinator.sh/eviction-policy": '["MemoryEvict"]'})]  # policy excludes
    h = harness({"BEMemoryEvict": True}, pods, SLO, version=version)
    # 80 GiB used: usagePct = int(85899345920) * 100 // 107374182400 = 80 >= 70
    # release = 107374182400 * (80 - 68) // 100 = 12884901888 (12 GiB)
    usage(h, T0, 80 * GiB, {0: 5 * GiB, 1: 8 * GiB, 3: 3 * GiB, 4: 20 * GiB, 5: 30 * GiB})
    h.tick("memoryEvict", T0)  # no quiet start
    # usage descending: be-1 (8), be-0 (5) -> 13 GiB >= 12 GiB
    assert evicted(h) == [("be-1", "BEMemoryEvict"), ("be-0", "BEMemoryEvict")]
    assert "release 12884901888 bytes" in h.recorded.evictions[0]["reason"]
    assert f"usage={8 * GiB}" in h.recorded.evictions[0]["reason"]


def test_be_memory_evict_takes_pods_without_usage_last() -> None:
    h = harness({"BEMemoryEvict": True}, [be(0), be(1), be(2)], SLO)
    # 100 GiB used -> 100%: release = CAP * 32 // 100 = 34359738368 (32 GiB)
    usage(h, T0, CAP, {1: 2 * GiB})
    h.tick("memoryEvict", T0)
    # be-1 (2 GiB) first, then the pods without a sample by name descending: be-2, be-0
    assert [p for p, _ in evicted(h)] == ["be-1", "be-2", "be-0"]


def test_be_victim_order_is_total_with_missing_priorities() -> None:
    # koordlet fix (§6b item 1): spec.priority ascending with a missing one as 0, then usage
    # descending (pods with usage first), then name descending
    pods = [be(0, priority=None), be(1, priority=None), be(2, priority=None), be(3, priority=5100), be(4)]
    h = harness({"BEMemoryEvict": True}, pods, SLO)
    usage(h, T0, CAP, {0: GiB, 1: GiB, 3: 9 * GiB, 4: 2 * GiB})
    h.tick("memoryEvict", T0)
    # priority 0: be-1, be-0 (1 GiB each, name desc), be-2 (no usage); then be-3 (5100), be-4 (5500)
    assert [p for p, _ in evicted(h)] == ["be-1", "be-0", "be-2", "be-3", "be-4"]
    # each reason gives the priority the order used: 0 for a pod without spec.priority, not the
    # class default (5500 for koord-batch) that its priority value would say
    priorities = [re.search(r"priority=(\d+)", e["reason"]).group(1) for e in h.recorded.evictions]
    assert priorities == ["0", "0", "0", "5100", "5500"]


def test_below_threshold_and_stale_usage_do_nothing() -> None:
    h = harness({"BEMemoryEvict": True}, [be(0)], SLO)
    # 70 GiB - 1 byte: int(75161927679) * 100 // CAP = 69 < 70
    usage(h, T0, 70 * GiB - 1, {0: GiB})
    h.tick("memoryEvict", T0)
    assert evicted(h) == []
    # a full node, but the sample (1000) is older than 2 x collect interval at 1003
    h.add_samples("node_memory_usage", [(T0 + 0.5, CAP)])
    h.tick("memoryEvict", T0 + 3)
    assert evicted(h) == []
    usage(h, T0 + 4, 70 * GiB, {0: GiB})  # exactly 70% -> evict
    h.tick("memoryEvict", T0 + 4)
    assert evicted(h) == [("be-0", "BEMemoryEvict")]


def test_cool_down_after_a_new_eviction_only() -> None:
    h = harness({"BEMemoryEvict": True}, [be(i) for i in range(3)], SLO)
    strategy = h.strategy("memoryEvict")
    assert isinstance(strategy, MemoryEvict) and strategy.last_evict_time == 0.0
    # 71 GiB: release = CAP * (71 - 68) // 100 = 3221225472 (3 GiB)
    usage(h, T0, 71 * GiB, {0: 4 * GiB, 1: 2 * GiB, 2: GiB})
    h.tick("memoryEvict", T0)
    assert [p for p, _ in evicted(h)] == ["be-0"] and strategy.last_evict_time == T0
    # 80 GiB now (release 12 GiB), but 1003 < 1000 + 4: cool-down
    usage(h, T0 + 3, 80 * GiB, {0: 4 * GiB, 1: 2 * GiB, 2: GiB})
    h.tick("memoryEvict", T0 + 3)
    assert len(evicted(h)) == 1
    # at 1004 it runs: be-0 pending (4) + be-1 (2) + be-2 (1) = 7 < 12: every other BE pod goes
    usage(h, T0 + 4, 80 * GiB, {0: 4 * GiB, 1: 2 * GiB, 2: GiB})
    h.tick("memoryEvict", T0 + 4)
    assert [p for p, _ in evicted(h)] == ["be-0", "be-1", "be-2"] and strategy.last_evict_time == T0 + 4
    # at 1008 only pending pods are left: nothing new, the cool-down is not restarted
    usage(h, T0 + 8, 80 * GiB, {0: 4 * GiB, 1: 2 * GiB, 2: GiB})
    h.tick("memoryEvict", T0 + 8)
    assert len(evicted(h)) == 3 and strategy.last_evict_time == T0 + 4


# --------------------------------------------------------------------------------------------
# MemoryEvict

MEM_SLO = {**SLO, "evictEnabledPriorityThreshold": 6000}


def test_memory_evict_usage_in_bytes_not_times_1000() -> None:
    pods = [be(0, labels=OPT_IN), be(1, labels=OPT_IN), be(2, labels=OPT_IN),
            be(3, labels=OPT_IN),  # no usage sample: skipped
            be(4, labels=OPT_IN, phase="Succeeded"),  # not Pending/Running
            be(5, labels=OPT_IN, priority=6001),  # above the priority threshold
            be(6)]  # not opted in
    h = harness({"MemoryEvict": True}, pods, MEM_SLO)
    usage(h, T0, 80 * GiB, {0: 8 * GiB, 1: 4 * GiB, 2: 6 * GiB, 4: 50 * GiB, 5: 50 * GiB, 6: 50 * GiB})
    h.tick("memoryEvict", T0)
    # release 12 GiB; by usage: be-0 (8) + be-2 (6) = 14 >= 12.  koordlet fix: koordlet counts
    # be-0 as 8 GiB x 1000 and stops after it.
    assert evicted(h) == [("be-0", "MemoryEvict"), ("be-2", "MemoryEvict")]


def test_memory_evict_order_by_eviction_priority_priority_and_label() -> None:
    pods = [be(0, labels=OPT_IN), be(1, labels={**OPT_IN, "koordinator.sh/priority": "7"}),
            be(2, labels=OPT_IN, annotations={"koordinator.sh/eviction-priority": "-3"}),
            be(3, labels=OPT_IN, annotations={"koordinator.sh/eviction-priority": "99999999999"}),  # > int32: 0
            be(4, labels=OPT_IN, priority=5001)]
    h = harness({"MemoryEvict": True}, pods, MEM_SLO)
    usage(h, T0, CAP, {i: GiB * (i + 1) for i in range(5)})
    h.tick("memoryEvict", T0)
    # keys (eviction priority, priority, label priority, -used):
    # be-2 (-3, ...), be-4 (0, 5001), be-1 (0, 5500, 7), be-3 (0, 5500, 5500, -4), be-0 (0, 5500, 5500, -1)
    # 5 + 3 + 2 + 4 + 1 = 15 GiB < 32 GiB: all five
    assert [p for p, _ in evicted(h)] == ["be-2", "be-4", "be-1", "be-3", "be-0"]


def test_be_and_priority_features_share_what_was_released() -> None:
    pods = [be(0), be(1, labels=OPT_IN), be(2, labels=OPT_IN)]
    h = harness({"BEMemoryEvict": True, "MemoryEvict": True}, pods, MEM_SLO)
    usage(h, T0, 80 * GiB, {0: 13 * GiB, 1: 5 * GiB, 2: 4 * GiB})
    h.tick("memoryEvict", T0)
    # BEMemoryEvict evicts be-0 (13 GiB >= 12 GiB); MemoryEvict asks the same 12 GiB of podUsed
    # and is already satisfied
    assert evicted(h) == [("be-0", "BEMemoryEvict")]
    # BE pods that BEMemoryEvict may not take are left to MemoryEvict
    no_be = {"koordinator.sh/eviction-policy": '["MemoryEvict"]'}
    pods = [be(0, annotations=no_be, labels=OPT_IN), be(1, annotations=no_be, labels=OPT_IN)]
    h = harness({"BEMemoryEvict": True, "MemoryEvict": True}, pods, MEM_SLO)
    usage(h, T0, 80 * GiB, {0: 7 * GiB, 1: 6 * GiB})
    h.tick("memoryEvict", T0)
    assert evicted(h) == [("be-0", "MemoryEvict"), ("be-1", "MemoryEvict")]


# --------------------------------------------------------------------------------------------
# MemoryAllocatableEvict

ALLOC_SLO = {**SLO, "memoryAllocatableEvictThresholdPercent": 45, "memoryAllocatableEvictLowerPercent": 40,
             "allocatableEvictPriorityThreshold": 5999}


def test_memory_allocatable_evict_float_order() -> None:
    # requested batch-memory 10737418239 + 42949672961 = 53687091200 (50 GiB) of 100 GiB
    # allocatable: 0.5 > 0.45 -> release int((0.5 - 0.4) * 107374182400)
    # = int(0.09999999999999998 * 107374182400) = 10737418239 (CPU's order would give 10737418240)
    small, big = 10 * GiB - 1, 40 * GiB + 1
    pods = [be(0, small, labels=OPT_IN, priority=5100), be(1, big, labels=OPT_IN)]
    h = harness({"MemoryAllocatableEvict": True}, pods, ALLOC_SLO, batch_memory=CAP)
    usage(h, T0, GiB, {0: GiB, 1: GiB})
    h.tick("memoryEvict", T0)
    # be-0 (priority 5100) first releases exactly 10737418239: enough, be-1 stays
    assert evicted(h) == [("be-0", "MemoryAllocatableEvict")]
    assert "kubernetes.io/batch-memory=10737418239" in h.recorded.evictions[0]["reason"]


def test_memory_allocatable_evict_not_offered_releases_everything_requested() -> None:
    pods = [be(0, 2 * GiB, labels=OPT_IN), be(1, 3 * GiB, labels=OPT_IN), ls(2, labels=OPT_IN)]
    h = harness({"MemoryAllocatableEvict": True}, pods, ALLOC_SLO)  # the node offers no batch-memory
    usage(h, T0, GiB, {0: GiB, 1: GiB, 2: GiB})
    h.tick("memoryEvict", T0)
    # 5 GiB requested, all of it to release: request descending be-1 (3), be-0 (2); ls-2 is prod
    assert [p for p, _ in evicted(h)] == ["be-1", "be-0"]


# --------------------------------------------------------------------------------------------
# Switches and config


def test_nodeslo_switch_and_gates() -> None:
    h = harness({"BEMemoryEvict": True}, [be(0)], SLO)
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": False, **SLO}})
    usage(h, T0, CAP, {0: GiB})
    h.tick("memoryEvict", T0)
    assert evicted(h) == []
    h.set_nodeslo(None)  # no NodeSLO at all
    h.tick("memoryEvict", T0 + 0.5)
    assert evicted(h) == []
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, **SLO}})
    h.tick("memoryEvict", T0 + 1)
    assert evicted(h) == [("be-0", "BEMemoryEvict")]
    # MemoryEvict's gate alone does not run BEMemoryEvict
    h = harness({"MemoryEvict": True}, [be(0)], MEM_SLO)
    usage(h, T0, CAP, {0: GiB})
    h.tick("memoryEvict", T0)
    assert evicted(h) == []


def test_invalid_config_is_logged_once_and_other_features_keep_running(caplog: pytest.LogCaptureFixture) -> None:
    h = harness({"BEMemoryEvict": True, "MemoryEvict": True}, [be(0), be(1)], SLO)  # no priority threshold
    with caplog.at_level(logging.WARNING, logger="qosmanager.strategies.memory_evict"):
        usage(h, T0, 71 * GiB, {0: 4 * GiB, 1: GiB})
        h.tick("memoryEvict", T0)
        usage(h, T0 + 4, 80 * GiB, {0: 4 * GiB, 1: GiB})
        h.tick("memoryEvict", T0 + 4)
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("MemoryEvict skipped, invalid config: EvictEnabledPriorityThreshold not config" in m
               for m in msgs) == 1
    assert evicted(h) == [("be-0", "BEMemoryEvict"), ("be-1", "BEMemoryEvict")]
    # a lower percent at the threshold stops both usage features
    h = harness({"BEMemoryEvict": True}, [be(0)], {**SLO, "memoryEvictLowerPercent": 70})
    usage(h, T0, CAP, {0: GiB})
    h.tick("memoryEvict", T0)
    assert evicted(h) == []


@pytest.mark.parametrize("cfg, message", [
    (None, "resourceThresholdStrategy not config"),
    (RTS(), "threshold percent is nil"),
    (RTS(memory_evict_threshold_percent=-1), "threshold percent(-1) should equal or greater than 0"),
    (RTS(memory_evict_threshold_percent=70, memory_evict_lower_percent=71),
     "lower percent(71) should less than threshold percent(70)"),
    (RTS(memory_evict_threshold_percent=0), None),  # lower -2 < 0
    (RTS(memory_evict_threshold_percent=70), None),
])
def test_common_config_messages(cfg: RTS | None, message: str | None) -> None:
    assert check_common_config(cfg) == message


@pytest.mark.parametrize("cfg, message", [
    (None, "ResourceThresholdStrategy not config"),
    (RTS(), "MemoryAllocatableEvictThresholdPercent not config"),
    (RTS(memory_allocatable_evict_threshold_percent=-1), "threshold percent(-1) should greater than 0"),
    (RTS(memory_allocatable_evict_threshold_percent=110), "MemoryAllocatableEvictLowerPercent not config"),
    (RTS(memory_allocatable_evict_threshold_percent=110, memory_allocatable_evict_lower_percent=110),
     "lower percent(110) should less than threshold percent(110)"),
    (RTS(memory_allocatable_evict_threshold_percent=110, memory_allocatable_evict_lower_percent=100),
     "AllocatableEvictPriorityThreshold not config"),
    (RTS(memory_allocatable_evict_threshold_percent=110, memory_allocatable_evict_lower_percent=100,
         allocatable_evict_priority_threshold=9000),
     "priorityThresholdPercent(9000) should less than 7999, koor-prod pods should not be killed"),
])
def test_allocatable_config_messages(cfg: RTS | None, message: str | None) -> None:
    assert check_allocatable_config(cfg, "Memory") == message


def test_formulas() -> None:
    # 50 GiB of 100 GiB with L = 40: (0.5 - 0.4) = 0.09999999999999998 -> 10737418239
    assert memory_allocatable_formula(50 * GiB, 100 * GiB, 40) == 10737418239
    # CAP * (80 - 68) // 100 = 1288490188800 // 100 = 12884901888
    assert release_by_used_threshold(80, 68, CAP) == 12884901888
    # 1000 * (75 - 68) // 100 = 70
    assert release_by_used_threshold(75, 68, 1000) == 70
