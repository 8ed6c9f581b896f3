"""systemConfigReconcile (koordlet-qos §4.7): sysctls and scheduler features, and restoring originals."""

from __future__ import annotations

from typing import Any

import pytest

from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object
from qosmanager.strategies.system_config_reconcile import feature_states, min_free_kbytes

NAME = "systemConfigReconcile"
GiB = 1 << 30
MIN_FREE = "proc/sys/vm/min_free_kbytes"
WSF = "proc/sys/vm/watermark_scale_factor"
REAPER = "sys/kernel/mm/memcg_reaper/reap_background"
GROUP_ID = "proc/sys/kernel/sched_group_identity_enabled"
IDLE_WMARK = "proc/sys/kernel/sched_idle_saver_wmark"
PAGECACHE = "sys/kernel/mm/pagecache_limit/enabled"
FEATURES = "sys/kernel/debug/sched_features"


def harness(*, anolis: bool = True, memory_bytes: int = 64 * GiB) -> Harness:
    h = Harness(version=2, gates={"SystemConfig": True}, strategies=[NAME], memory_bytes=memory_bytes)
    h.set_node(node_object(h.host))
    if anolis:
        for rel in (REAPER, GROUP_ID, IDLE_WMARK, PAGECACHE):
            h.write_file(rel, "0\n")
        h.write_file(FEATURES, "GENTLE_FAIR_SLEEPERS NO_HRTICK ID_ABSOLUTE_EXPEL\n")
    return h


def read(h: Harness, rel: str) -> str | None:
    v = h.read_file(rel)
    return None if v is None else v.strip()


def writes(h: Harness) -> list[tuple[str, str]]:
    return [(w["file"], w["value"]) for w in h.recorded.writes if w["strategy"] == NAME]


@pytest.mark.parametrize(("capacity", "factor", "want"), [
    (64 * GiB, 100, 671088),        # 67108864 KiB * 100 // 10000
    (64 * GiB, 1, 6710),            # below 10240: the strategy skips it
    (1000, 100, None),              # under 1 KiB of capacity: abort
    (3 * GiB + 512, 150, 47185),    # (3145728 KiB, the 512 B dropped) * 150 // 10000 = 47185.92
])
def test_min_free_kbytes_formula(capacity: int, factor: int, want: int | None) -> None:
    assert min_free_kbytes(capacity, factor) == want


def test_feature_states() -> None:
    assert feature_states("A NO_B  C\n") == {"A": True, "B": False, "C": True}


def test_every_field_is_written_and_scheduler_features_go_first() -> None:
    h = harness()
    h.set_nodeslo({"systemStrategy": {
        "minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 1,
        "schedGroupIdentityEnabled": 1, "schedIdleSaverWmark": 25000, "pageCacheLimitEnabled": 1,
        "schedFeatures": {"HRTICK": True, "ID_ABSOLUTE_EXPEL": False, "GENTLE_FAIR_SLEEPERS": True}}})
    h.tick(NAME, 1000.0)
    assert read(h, MIN_FREE) == "671088"  # 64 GiB = 67108864 KiB; * 100 // 10000
    assert (read(h, WSF), read(h, REAPER), read(h, GROUP_ID), read(h, IDLE_WMARK), read(h, PAGECACHE)) == (
        "150", "1", "1", "25000", "1")
    w = writes(h)
    # only the two features whose state differs are written, and before any other file
    assert w[:2] == [(FEATURES, "HRTICK"), (FEATURES, "NO_ID_ABSOLUTE_EXPEL")]
    assert all(f != FEATURES for f, _ in w[2:])
    # a second tick writes nothing new
    h.recorded.writes.clear()
    h.write_file(FEATURES, "GENTLE_FAIR_SLEEPERS HRTICK NO_ID_ABSOLUTE_EXPEL\n")  # what the kernel now prints
    h.tick(NAME, 1001.0)
    assert writes(h) == []


def test_out_of_range_values_are_skipped_and_missing_files_are_quiet() -> None:
    h = harness(anolis=False)
    before = read(h, MIN_FREE)
    # factor 1: 6710 < 10240; watermark 5 < 10; the Anolis files do not exist on this kernel
    h.set_nodeslo({"systemStrategy": {"minFreeKbytesFactor": 1, "watermarkScaleFactor": 5,
                                      "memcgReapBackGround": 1, "schedFeatures": {"HRTICK": True}}})
    res = h.tick(NAME, 1000.0)
    assert read(h, MIN_FREE) == before and read(h, WSF) == "10"
    assert [r.status for r in res] == ["missing"]  # the reaper file; sched_features could not be read
    assert h.manager.stats[NAME].errors == 0
    # a factor too large: 67108864 * 20000 // 10000 = 134217728 > 10485760: skipped too
    h.set_nodeslo({"systemStrategy": {"minFreeKbytesFactor": 20000}})
    assert h.tick(NAME, 1001.0) == []  # skipped by the strategy, not refused by the executor
    assert read(h, MIN_FREE) == before


def test_unset_fields_are_restored_to_what_the_host_had() -> None:
    h = harness()
    original_min_free = read(h, MIN_FREE)
    h.set_nodeslo({"systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150,
                                      "schedGroupIdentityEnabled": 1}})
    h.tick(NAME, 1000.0)
    assert (read(h, MIN_FREE), read(h, WSF), read(h, GROUP_ID)) == ("671088", "150", "1")
    # watermarkScaleFactor no longer set: back to the kernel's 10; the others stay
    h.set_nodeslo({"systemStrategy": {"minFreeKbytesFactor": 100, "schedGroupIdentityEnabled": 1}})
    h.tick(NAME, 1001.0)
    assert (read(h, MIN_FREE), read(h, WSF), read(h, GROUP_ID)) == ("671088", "10", "1")
    # the whole systemStrategy cleared: everything back
    h.set_nodeslo({"systemStrategy": {}})
    h.tick(NAME, 1002.0)
    assert (read(h, MIN_FREE), read(h, WSF), read(h, GROUP_ID)) == (original_min_free, "10", "0")
    # restored once, not every tick
    h.recorded.writes.clear()
    h.tick(NAME, 1003.0)
    assert writes(h) == []


def test_an_out_of_range_field_keeps_the_last_value_like_koordlet() -> None:
    h = harness()
    h.set_nodeslo({"systemStrategy": {"watermarkScaleFactor": 150}})
    h.tick(NAME, 1000.0)
    h.set_nodeslo({"systemStrategy": {"watermarkScaleFactor": 5}})  # configured but invalid: skipped
    h.tick(NAME, 1001.0)
    assert read(h, WSF) == "150"


def test_scheduler_features_are_restored_when_dropped_from_the_map() -> None:
    h = harness()
    h.set_nodeslo({"systemStrategy": {"schedFeatures": {"HRTICK": True, "ID_ABSOLUTE_EXPEL": False,
                                                        "NOT_A_FEATURE": True, "lower": True}}})
    h.tick(NAME, 1000.0)
    assert writes(h) == [(FEATURES, "HRTICK"), (FEATURES, "NO_ID_ABSOLUTE_EXPEL")]
    h.write_file(FEATURES, "GENTLE_FAIR_SLEEPERS HRTICK NO_ID_ABSOLUTE_EXPEL\n")  # what the kernel now prints
    h.recorded.writes.clear()
    h.set_nodeslo({"systemStrategy": {"schedFeatures": {"HRTICK": True}}})
    h.tick(NAME, 1001.0)
    assert writes(h) == [(FEATURES, "ID_ABSOLUTE_EXPEL")]  # its original state
    h.write_file(FEATURES, "GENTLE_FAIR_SLEEPERS HRTICK ID_ABSOLUTE_EXPEL\n")
    h.recorded.writes.clear()
    h.set_nodeslo({"systemStrategy": {}})
    h.tick(NAME, 1002.0)
    assert writes(h) == [(FEATURES, "NO_HRTICK")]


@pytest.mark.parametrize("slo", [None, {"systemStrategy": {"minFreeKbytesFactor": 100}}])
def test_nothing_without_a_nodeslo_or_a_node(slo: dict[str, Any] | None) -> None:
    h = Harness(version=1, gates={"SystemConfig": True}, strategies=[NAME])
    if slo is not None:
        h.set_nodeslo(slo)  # but no Node
    else:
        h.set_node(node_object(h.host))
    assert h.tick(NAME, 1000.0) == []
