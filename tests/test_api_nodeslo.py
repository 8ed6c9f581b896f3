"""NodeSLO defaults, merge and per-field validation, checked against koordlet-qos §2.4 and §3 by hand."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from qosmanager.api.nodeslo import (
    _FEATURE_ROOTS,
    FEATURE,
    UNSET,
    BlkIOQOS,
    BlockCfg,
    CPUBurstConfig,
    CPUBurstStrategy,
    MemoryQOSCfg,
    NodeSLOError,
    PodMemoryQOSConfig,
    ResourceQOS,
    ResourceThresholdStrategy,
    _SpecBody,
    default_memory_qos,
    default_spec_dict,
    from_dict,
    json_overlay,
    merge_spec,
    overlay_config,
    parse_nodeslo,
)


def nodeslo(spec: dict | None) -> dict:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "node-1", "resourceVersion": "42"},
        "spec": spec,
    }


# ---------------------------------------------------------------------------------------------
# Defaults (qos §3), written out independently from the spec tables.


def _memory(vals: tuple[int, ...]) -> dict:
    keys = ["minLimitPercent", "lowLimitPercent", "throttlingPercent", "wmarkRatio", "wmarkScalePermill"]
    keys += ["wmarkMinAdj", "priorityEnable", "priority", "oomKillGroup"]
    return dict(zip(keys, vals))


def _klass(cpu: tuple, resctrl: tuple, memory: tuple) -> dict:
    return {
        "cpuQOS": {"enable": False, "groupIdentity": cpu[0], "schedIdle": cpu[1], "coreExpeller": cpu[2]},
        "resctrlQOS": {
            "enable": False,
            "catRangeStartPercent": resctrl[0],
            "catRangeEndPercent": resctrl[1],
            "mbaPercent": resctrl[2],
        },
        "memoryQOS": {"enable": False, **_memory(memory)},
        "blkioQOS": {"enable": False, "blocks": []},
        "networkQOS": {
            "enable": False,
            "ingressRequest": 0,
            "ingressLimit": 0,
            "egressRequest": 0,
            "egressLimit": 0,
        },
    }


EXPECTED_DEFAULTS = {
    "resourceUsedThresholdWithBE": {
        "enable": False,
        "cpuSuppressThresholdPercent": 65,
        "cpuSuppressPolicy": "cpuset",
        "memoryEvictThresholdPercent": 70,
        "cpuEvictPolicy": "evictByRealLimit",
    },
    "resourceQOSStrategy": {
        "policies": {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"},
        "lsrClass": _klass((2, 0, True), (0, 100, 100), (0, 0, 0, 95, 20, -25, 0, 0, 0)),
        "lsClass": _klass((2, 0, True), (0, 100, 100), (0, 0, 0, 95, 20, -25, 0, 0, 0)),
        "beClass": _klass((-1, 0, False), (0, 30, 100), (0, 0, 0, 95, 20, 50, 0, 0, 0)),
        "systemClass": _klass((0, 0, False), (0, 100, 100), (0, 0, 0, 0, 50, 0, 0, 0, 0)),
        "cgroupRoot": {"blkioQOS": {"enable": False, "blocks": []}},
    },
    "cpuBurstStrategy": {
        "policy": "none",
        "cpuBurstPercent": 1000,
        "cfsQuotaBurstPercent": 300,
        "cfsQuotaBurstPeriodSeconds": -1,
        "sharePoolThresholdPercent": 50,
    },
    "systemStrategy": {"totalNetworkBandwidth": "0"},
    "extensions": {},
    "hostApplications": [],
}


def test_default_spec_dict_is_exactly_the_spec_table() -> None:
    assert default_spec_dict() == EXPECTED_DEFAULTS


def test_default_spec_dict_is_a_fresh_copy_each_time() -> None:
    first = default_spec_dict()
    first["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] = 1
    first["resourceQOSStrategy"]["beClass"]["blkioQOS"]["blocks"].append({"name": "x"})
    assert default_spec_dict() == EXPECTED_DEFAULTS


def test_parse_none_gives_typed_merged_defaults() -> None:
    spec = parse_nodeslo(None)
    thr = spec.resource_used_threshold_with_be
    assert (thr.enable, thr.cpu_suppress_threshold_percent, thr.cpu_suppress_policy) == (False, 65, "cpuset")
    assert (thr.memory_evict_threshold_percent, thr.cpu_evict_policy) == (70, "evictByRealLimit")
    # Pointer fields the defaults leave unset stay None (the "doc says 110" values are not applied).
    assert thr.memory_evict_lower_percent is None
    assert thr.cpu_allocatable_evict_threshold_percent is None
    assert thr.cpu_evict_be_usage_threshold_percent is None
    assert thr.evict_enabled_priority_threshold is None
    burst = spec.cpu_burst_strategy
    assert (burst.policy, burst.cpu_burst_percent, burst.cfs_quota_burst_percent) == ("none", 1000, 300)
    assert (burst.cfs_quota_burst_period_seconds, burst.share_pool_threshold_percent) == (-1, 50)
    system = spec.system_strategy
    assert system.min_free_kbytes_factor is None and system.watermark_scale_factor is None
    assert system.sched_features is None and system.total_network_bandwidth == 0
    policies = spec.resource_qos_strategy.policies
    assert policies is not None and (policies.cpu_policy, policies.net_qos_policy) == ("groupIdentity", "tc")
    assert spec.host_applications == () and dict(spec.extensions) == {}
    assert spec.warnings == () and spec.resource_version == ""


def test_merged_defaults_replace_disabled_lsr_ls_be_with_none_variants() -> None:
    root = parse_nodeslo(None).resource_qos_strategy
    for klass in (root.lsr_class, root.ls_class, root.be_class):
        assert klass is not None and klass.memory_qos is not None and klass.resctrl_qos is not None
        # NoneMemoryQOS = (0,0,0,0,50,0,0,0,0): e.g. BE's wmarkMinAdj 50 and wmarkRatio 95 are gone.
        mem = klass.memory_qos
        assert (mem.wmark_ratio, mem.wmark_scale_permill, mem.wmark_min_adj) == (0, 50, 0)
        assert mem.enable is False
        # NoneResctrlQOS = (0, 100, 100): BE's catRangeEndPercent 30 is gone too.
        res = klass.resctrl_qos
        assert (res.cat_range_start_percent, res.cat_range_end_percent, res.mba_percent) == (0, 100, 100)
        assert klass.cpu_qos is not None
        assert (klass.cpu_qos.group_identity, klass.cpu_qos.sched_idle, klass.cpu_qos.core_expeller) == (
            0,
            0,
            False,
        )


def test_system_class_is_not_rewritten_when_disabled() -> None:
    spec = parse_nodeslo(
        nodeslo({"resourceQOSStrategy": {"systemClass": {"memoryQOS": {"enable": False, "wmarkRatio": 90}}}})
    )
    system = spec.resource_qos_strategy.system_class
    assert system is not None and system.memory_qos is not None
    assert system.memory_qos.wmark_ratio == 90


def test_enabled_class_keeps_the_default_template_and_user_fields() -> None:
    spec = parse_nodeslo(
        nodeslo(
            {
                "resourceQOSStrategy": {
                    "beClass": {
                        "memoryQOS": {"enable": True, "minLimitPercent": 10},
                        "resctrlQOS": {"enable": True},
                        "cpuQOS": {"enable": True},
                    }
                }
            }
        )
    )
    be = spec.class_qos("BE")
    assert be is not None and be.memory_qos is not None and be.resctrl_qos is not None and be.cpu_qos
    assert be.memory_qos.enable is True
    assert (be.memory_qos.min_limit_percent, be.memory_qos.wmark_ratio, be.memory_qos.wmark_min_adj) == (
        10,
        95,
        50,
    )
    assert (be.resctrl_qos.cat_range_end_percent, be.cpu_qos.group_identity) == (30, -1)


def test_disabled_class_drops_user_inline_fields_but_keeps_enable() -> None:
    merged = merge_spec(
        {
            "resourceQOSStrategy": {
                "lsClass": {"memoryQOS": {"enable": False, "minLimitPercent": 30, "pageCacheLimitSize": 4096}}
            }
        }
    )
    mem = merged["resourceQOSStrategy"]["lsClass"]["memoryQOS"]
    assert mem == {"enable": False, **_memory((0, 0, 0, 0, 50, 0, 0, 0, 0))}


# ---------------------------------------------------------------------------------------------
# Merge semantics (qos §2.4)


def test_nested_overlay_merges_field_by_field() -> None:
    spec = parse_nodeslo(
        nodeslo({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 50}})
    )
    thr = spec.resource_used_threshold_with_be
    assert (thr.enable, thr.cpu_suppress_threshold_percent) == (True, 50)
    assert (thr.memory_evict_threshold_percent, thr.cpu_suppress_policy) == (70, "cpuset")
    assert spec.cpu_burst_strategy.cpu_burst_percent == 1000  # other sections untouched


def test_explicit_nulls_keep_the_default() -> None:
    spec = parse_nodeslo(
        nodeslo(
            {
                "resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": None, "enable": True},
                "cpuBurstStrategy": None,
            }
        )
    )
    assert spec.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 65
    assert spec.cpu_burst_strategy.cpu_burst_percent == 1000


def test_empty_string_keeps_a_string_default_like_go_omitempty() -> None:
    spec = parse_nodeslo(
        nodeslo({"resourceUsedThresholdWithBE": {"cpuSuppressPolicy": "", "cpuEvictPolicy": ""}})
    )
    assert spec.resource_used_threshold_with_be.cpu_suppress_policy == "cpuset"
    assert spec.resource_used_threshold_with_be.cpu_evict_policy == "evictByRealLimit"


def test_lists_replace() -> None:
    blocks = [{"name": "sda", "type": "device", "ioCfg": {"readIOPS": 100, "ioWeightPercent": 60}}]
    spec = parse_nodeslo(
        nodeslo({"resourceQOSStrategy": {"beClass": {"blkioQOS": {"enable": True, "blocks": blocks}}}})
    )
    be = spec.class_qos("BE")
    assert be is not None and be.blkio_qos is not None
    assert be.blkio_qos.enable is True
    assert [
        (b.name, b.type, b.io_cfg.read_iops, b.io_cfg.io_weight_percent) for b in be.blkio_qos.blocks
    ] == [("sda", "device", 100, 60)]
    assert be.blkio_qos.blocks[0].io_cfg.write_iops is None
    assert json_overlay({"a": [1, 2, 3]}, {"a": [9]}) == {"a": [9]}


def test_maps_merge_key_wise() -> None:
    assert json_overlay({"m": {"A": True, "B": True}}, {"m": {"B": False, "C": True}}) == {
        "m": {"A": True, "B": False, "C": True}
    }
    spec = parse_nodeslo(
        nodeslo(
            {
                "systemStrategy": {"schedFeatures": {"ID_ABSOLUTE_EXPEL": True}},
                "extensions": {"vendor": {"knob": 1}},
            }
        )
    )
    assert dict(spec.system_strategy.sched_features or {}) == {"ID_ABSOLUTE_EXPEL": True}
    assert spec.system_strategy.total_network_bandwidth == 0  # sibling default kept
    assert dict(spec.extensions) == {"vendor": {"knob": 1}}


def test_overlay_and_merge_do_not_mutate_their_inputs() -> None:
    user = {"resourceUsedThresholdWithBE": {"enable": True}, "hostApplications": [{"name": "a"}]}
    before = copy.deepcopy(user)
    merged = merge_spec(user)
    merged["hostApplications"][0]["name"] = "changed"
    merged["resourceUsedThresholdWithBE"]["enable"] = False
    assert user == before
    assert default_spec_dict() == EXPECTED_DEFAULTS


def test_host_applications_come_from_the_user() -> None:
    apps = [
        {
            "name": "nginx",
            "priority": "koord-prod",
            "qos": "LS",
            "cgroupPath": {
                "base": "CgroupRoot",
                "parentDir": "host-latency-sensitive/",
                "relativePath": "nginx/",
            },
        },
        {
            "name": "batch-agent",
            "qos": "BE",
            "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "agent"},
        },
    ]
    spec = parse_nodeslo(nodeslo({"hostApplications": apps}))
    first, second = spec.host_applications
    assert (first.name, first.priority, first.qos) == ("nginx", "koord-prod", "LS")
    assert first.cgroup_path is not None and first.cgroup_path.parent_dir == "host-latency-sensitive/"
    assert (second.priority, second.cgroup_path and second.cgroup_path.base) == ("", "KubepodsBesteffort")
    assert second.cgroup_path is not None and second.cgroup_path.parent_dir == ""


def test_resource_version_and_unknown_fields_are_reported() -> None:
    spec = parse_nodeslo(
        nodeslo(
            {
                "resourceUsedThresholdWithBE": {"futureKnob": 1},
                "newSection": {},
                "resourceQOSStrategy": {"lsClass": {"cpuQOS": {"enable": True, "turbo": True}}},
            }
        )
    )
    assert spec.resource_version == "42"
    assert spec.warnings == ()
    why = ("unknown field: koordlet ignores it (a misspelt name?), so what it would set keeps koordlet's "
           "default")
    assert set(spec.invalid_fields) == {
        ("spec.resourceUsedThresholdWithBE.futureKnob", why),
        ("spec.newSection", why),
        ("spec.resourceQOSStrategy.lsClass.cpuQOS.turbo", why),
    }


def test_a_misspelt_key_and_a_reinterpreted_enum_are_reported_like_dropped_fields() -> None:
    """cpuSuppressThresholdPercnt: 65 kept the default and cpuSuppressPolicy: cfsquota switched the node to
    cpuset suppression, both silently: koordlet's reading applies, and each is an invalid field."""
    spec = parse_nodeslo(nodeslo({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": "cfsquota", "cpuSuppressThresholdPercnt": 50,
        "CPUEvictPolicy": "evictByAllocatable"}}))  # a key differing in case only: Go matches it
    thr = spec.resource_used_threshold_with_be
    assert (thr.cpu_suppress_policy, thr.cpu_suppress_threshold_percent) == ("cpuset", 65)  # koordlet's
    assert thr.cpu_evict_policy == "evictByAllocatable"
    assert spec.invalid_fields == (
        (f"{THR}.cpuSuppressThresholdPercnt", "unknown field: koordlet ignores it (a misspelt name?), so what "
                                              "it would set keeps koordlet's default"),
        (f"{THR}.cpuSuppressPolicy", 'unknown value "cfsquota": koordlet reads it as "cpuset", which applies '
                                     '(one of "cpuset", "cfsQuota" was meant?)'),
    )
    assert spec.warnings == ()
    assert spec.invalid_summary().startswith("2 NodeSLO fields dropped, everything else applies: ")


def test_a_nodeslo_key_cannot_forge_a_log_line() -> None:
    key = "x\x1b[2K\r2026-01-01 00:00:00,000 ERROR forged\n" + "y" * 200
    spec = parse_nodeslo(nodeslo({"resourceUsedThresholdWithBE": {key: 1}}))
    (path, _), = spec.invalid_fields
    assert path.isprintable() and "\x1b" not in path and "\n" not in path
    assert path.startswith(f"{THR}.x\\x1b[2K\\r2026") and len(path) <= len(THR) + 1 + 64


# ---------------------------------------------------------------------------------------------
# Validation: per field, as koordlet (a bad value affects that field only)

THR = "spec.resourceUsedThresholdWithBE"
RQS = "spec.resourceQOSStrategy"


def invalid(spec: dict) -> dict[str, str]:
    """JSON path -> reason of every value parse_nodeslo dropped."""
    parsed = parse_nodeslo(nodeslo(spec))
    paths = [p for p, _ in parsed.invalid_fields]
    assert len(paths) == len(set(paths)), paths  # each problem once
    return dict(parsed.invalid_fields)


@pytest.mark.parametrize(
    ("spec", "path", "reason"),
    [
        ({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 150}},
         f"{THR}.cpuSuppressThresholdPercent", "must be an integer in [0, 100], got 150"),
        ({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": -1}},
         f"{THR}.cpuSuppressThresholdPercent", "must be an integer in [0, 100], got -1"),
        ({"resourceUsedThresholdWithBE": {"memoryEvictThresholdPercent": "70"}},
         f"{THR}.memoryEvictThresholdPercent", 'must be an integer in [0, 100], got "70"'),
        ({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 65.5}},
         f"{THR}.cpuSuppressThresholdPercent", "must be an integer in [0, 100], got 65.5"),
        ({"resourceUsedThresholdWithBE": {"enable": "true"}}, f"{THR}.enable",
         'must be a boolean, got "true"'),
        ({"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": True}},
         f"{THR}.cpuSuppressThresholdPercent", "must be an integer in [0, 100], got true"),
        ({"resourceUsedThresholdWithBE": {"cpuSuppressPolicy": 3}},
         f"{THR}.cpuSuppressPolicy", 'must be one of "cpuset", "cfsQuota", "", got 3'),
        ({"resourceUsedThresholdWithBE": {"allocatableEvictPriorityThreshold": 8000}},
         f"{THR}.allocatableEvictPriorityThreshold", "must be an integer in [0, 7999], got 8000"),
        ({"resourceUsedThresholdWithBE": {"cpuEvictTimeWindowSeconds": 0}},
         f"{THR}.cpuEvictTimeWindowSeconds", "must be an integer >= 1, got 0"),
        ({"resourceUsedThresholdWithBE": {"evictEnabledPriorityThreshold": 2**31}},
         f"{THR}.evictEnabledPriorityThreshold",
         "must be an integer in [-2147483648, 2147483647], got 2147483648"),
        ({"resourceQOSStrategy": {"beClass": {"blkioQOS": {
            "blocks": [{"name": "a", "ioCfg": {}}, {"ioCfg": {"ioWeightPercent": 0}}]}}}},
         f"{RQS}.beClass.blkioQOS.blocks[1].ioCfg.ioWeightPercent", "must be an integer in [1, 100], got 0"),
        ({"resourceQOSStrategy": {"beClass": {"blkioQOS": {"blocks": [{"type": "disk"}]}}}},
         f"{RQS}.beClass.blkioQOS.blocks[0].type", 'must be one of "device", "volumegroup", "podvolume", "", '
         'got "disk"'),
        ({"resourceQOSStrategy": {"lsrClass": {"memoryQOS": {"enable": True, "wmarkMinAdj": 60}}}},
         f"{RQS}.lsrClass.memoryQOS.wmarkMinAdj", "must be an integer in [-25, 50], got 60"),
        ({"resourceQOSStrategy": {"lsClass": {"resctrlQOS": {"enable": True, "mbaPercent": 101}}}},
         f"{RQS}.lsClass.resctrlQOS.mbaPercent", "must be an integer in [0, 100], got 101"),
        ({"resourceQOSStrategy": {"lsClass": []}}, f"{RQS}.lsClass", "must be an object, got []"),
        ({"resourceQOSStrategy": {"beClass": {"blkioQOS": {"blocks": {"name": "a"}}}}},
         f"{RQS}.beClass.blkioQOS.blocks", 'must be a list, got {"name": "a"}'),
        ({"systemStrategy": {"schedFeatures": {"FOO": "yes"}}},
         "spec.systemStrategy.schedFeatures.FOO", 'must be a boolean, got "yes"'),
        ({"systemStrategy": {"totalNetworkBandwidth": "lots"}},
         "spec.systemStrategy.totalNetworkBandwidth", "invalid quantity 'lots'"),
        ({"resourceQOSStrategy": {"lsClass": {"networkQOS": {"ingressLimit": 150}}}},
         f"{RQS}.lsClass.networkQOS.ingressLimit", "a percentage must be in [0, 100], got 150"),
        ({"hostApplications": [{"name": "a", "cgroupPath": {"base": "Elsewhere"}}]},
         "spec.hostApplications[0].cgroupPath.base",
         'must be one of "CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort", "", '
         'got "Elsewhere"'),
        ({"hostApplications": [{"name": "a"}, {"name": "a"}]}, "spec.hostApplications[1].name",
         'duplicate name "a"'),
        ({"hostApplications": [{"qos": "LS"}]}, "spec.hostApplications[0].name", "is required"),
        ({"hostApplications": {"name": "a"}}, "spec.hostApplications", 'must be a list, got {"name": "a"}'),
        ({"extensions": [1]}, "spec.extensions", "must be an object, got [1]"),
        ({"cpuBurstStrategy": {"cpuBurstPercent": -7}}, "spec.cpuBurstStrategy.cpuBurstPercent",
         "must be an integer in [0, 10000], got -7"),
    ],
)
def test_a_bad_value_is_dropped_and_named_with_the_reason(spec: dict, path: str, reason: str) -> None:
    found = invalid(spec)
    assert list(found) == [path]
    assert found[path].startswith(reason + "; "), found[path]  # then what applies instead


def test_every_problem_is_reported_not_only_the_first() -> None:
    found = invalid({
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 150,
                                        "cpuEvictBESatisfactionUpperPercent": 120},
        "cpuBurstStrategy": {"cpuBurstPercent": -7, "sharePoolThresholdPercent": 500},
        "systemStrategy": {"watermarkScaleFactor": 500, "minFreeKbytesFactor": 0},
        "resourceQOSStrategy": {"lsClass": {"memoryQOS": {"enable": True, "wmarkRatio": 150,
                                                          "priority": 13}}},
    })
    assert set(found) == {
        f"{THR}.cpuSuppressThresholdPercent", f"{THR}.cpuEvictBESatisfactionUpperPercent",
        "spec.cpuBurstStrategy.cpuBurstPercent", "spec.cpuBurstStrategy.sharePoolThresholdPercent",
        "spec.systemStrategy.watermarkScaleFactor", "spec.systemStrategy.minFreeKbytesFactor",
        f"{RQS}.lsClass.memoryQOS.wmarkRatio", f"{RQS}.lsClass.memoryQOS.priority",
    }


# The four NodeSLOs of the issue: valid but for one field, which koordinator's CRD accepts.
ISSUE_EXAMPLES = {
    "watermarkScaleFactor": ({"systemStrategy": {"watermarkScaleFactor": 500}},
                             "spec.systemStrategy.watermarkScaleFactor"),
    "cpuEvictBESatisfactionUpperPercent": (
        {"resourceUsedThresholdWithBE": {"cpuEvictBESatisfactionUpperPercent": 120,
                                         "cpuEvictBESatisfactionLowerPercent": 40}},
        f"{THR}.cpuEvictBESatisfactionUpperPercent"),
    "cpuBurstPercent": ({"cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": -7}},
                        "spec.cpuBurstStrategy.cpuBurstPercent"),
    "cpuSuppressPolicy": ({"resourceUsedThresholdWithBE": {"cpuSuppressPolicy": "cpuSet"}},
                          f"{THR}.cpuSuppressPolicy"),
}
SUPPRESS = {"enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 50}


@pytest.mark.parametrize("name", sorted(ISSUE_EXAMPLES))
def test_the_issue_examples_apply_everything_else(name: str) -> None:
    extra, dropped = ISSUE_EXAMPLES[name]
    spec: dict = json_overlay({"resourceUsedThresholdWithBE": dict(SUPPRESS)}, extra)
    parsed = parse_nodeslo(nodeslo(spec))
    assert [p for p, _ in parsed.invalid_fields] == ([dropped] if dropped else [])
    thr = parsed.resource_used_threshold_with_be
    assert (thr.enable, thr.cpu_suppress_threshold_percent) == (True, 50)
    assert thr.cpu_suppress_policy == ("cpuset" if name == "cpuSuppressPolicy" else "cfsQuota")
    if name == "watermarkScaleFactor":
        assert parsed.system_strategy.watermark_scale_factor is None  # unset: the sysctl is not touched
    if name == "cpuEvictBESatisfactionUpperPercent":
        # unset: BECPUEvict's config check skips the feature, as koordlet's does for 120
        assert thr.cpu_evict_be_satisfaction_upper_percent is None
        assert thr.cpu_evict_be_satisfaction_lower_percent == 40
    if name == "cpuBurstPercent":
        burst = parsed.cpu_burst_strategy
        assert (burst.policy, burst.cpu_burst_percent, burst.cfs_quota_burst_percent) == ("auto", None, 300)
    if name == "cpuSuppressPolicy":
        # koordlet: anything but "cfsQuota" is the cpuset policy, which applies; reported like a drop
        assert parsed.warnings == ()


def test_a_dropped_value_falls_back_to_koordlets_default_or_is_left_unset() -> None:
    parsed = parse_nodeslo(nodeslo({
        "resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 150,
                                        "memoryEvictThresholdPercent": -3},
        "cpuBurstStrategy": {"sharePoolThresholdPercent": 500, "cfsQuotaBurstPercent": 50},
        "resourceQOSStrategy": {"beClass": {
            "memoryQOS": {"enable": True, "wmarkRatio": 150, "minLimitPercent": 101},
            "resctrlQOS": {"enable": True, "catRangeEndPercent": 130},
            "cpuQOS": {"enable": True, "groupIdentity": 9},
        }},
    }))
    thr = parsed.resource_used_threshold_with_be
    assert (thr.cpu_suppress_threshold_percent, thr.memory_evict_threshold_percent) == (65, 70)  # defaults
    burst = parsed.cpu_burst_strategy
    assert burst.share_pool_threshold_percent == 50
    assert burst.cfs_quota_burst_percent is None  # koordlet: a percentage below 100 allows no quota burst
    be = parsed.class_qos("BE")
    assert be is not None and be.memory_qos is not None and be.resctrl_qos is not None and be.cpu_qos
    # memory and resctrl values left unset: the strategy leaves those files as they are...
    assert (be.memory_qos.wmark_ratio, be.memory_qos.min_limit_percent) == (None, None)
    assert be.resctrl_qos.cat_range_end_percent is None
    # ...while the rest of the class's config applies (the BE template, enabled)
    assert (be.memory_qos.enable, be.memory_qos.wmark_min_adj, be.resctrl_qos.mba_percent) == (True, 50, 100)
    assert be.cpu_qos.group_identity == -1  # the BE default
    reasons = dict(parsed.invalid_fields)
    assert reasons[f"{THR}.cpuSuppressThresholdPercent"].endswith("; koordlet's default 65 applies")
    assert "left unset" in reasons[f"{RQS}.beClass.memoryQOS.wmarkRatio"]


def test_a_bad_master_switch_leaves_suppression_and_evictions_as_they_are() -> None:
    # unset (not false): the features it switches do nothing at all, not even their recovery
    parsed = parse_nodeslo(nodeslo({"resourceUsedThresholdWithBE": {"enable": "yes",
                                                                    "cpuSuppressThresholdPercent": 40}}))
    thr = parsed.resource_used_threshold_with_be
    assert (thr.enable, thr.cpu_suppress_threshold_percent) == (None, 40)
    section = parse_nodeslo(nodeslo({"resourceUsedThresholdWithBE": 5})).resource_used_threshold_with_be
    assert section.enable is None and section.cpu_suppress_threshold_percent is None


def test_a_bad_feature_switch_or_block_leaves_that_feature_of_that_class_alone() -> None:
    parsed = parse_nodeslo(nodeslo({"resourceQOSStrategy": {
        "lsClass": {"memoryQOS": {"enable": 1, "minLimitPercent": 30}, "resctrlQOS": {"enable": True}},
        "beClass": {"blkioQOS": {"enable": True, "blocks": [
            {"name": "/dev/sdb", "type": "device", "ioCfg": {"readIOPS": 2048}},
            {"name": "/dev/sdc", "type": "device", "ioCfg": {"readIOPS": -1, "writeIOPS": "x"}}]}},
        "systemClass": "none",
    }}))
    rqs = parsed.resource_qos_strategy
    ls, be = rqs.ls_class, rqs.be_class
    assert ls is not None and ls.memory_qos is None  # not the None variant: nothing is reset
    assert ls.resctrl_qos is not None and ls.resctrl_qos.enable is True
    assert be is not None and be.blkio_qos is None  # the sdb limit is not reset either
    assert rqs.system_class is None
    reasons = dict(parsed.invalid_fields)
    assert set(reasons) == {f"{RQS}.lsClass.memoryQOS.enable",
                            f"{RQS}.beClass.blkioQOS.blocks[1].ioCfg.readIOPS",
                            f"{RQS}.beClass.blkioQOS.blocks[1].ioCfg.writeIOPS",
                            f"{RQS}.systemClass"}
    assert reasons[f"{RQS}.beClass.blkioQOS.blocks[1].ioCfg.readIOPS"].endswith(
        f"; {RQS}.beClass.blkioQOS is ignored")


def test_a_bad_host_application_is_ignored_and_the_others_kept() -> None:
    apps = [{"name": "a", "qos": "LS"}, {"name": "b", "cgroupPath": {"base": "Elsewhere"}}, {"name": "a"},
            7, {"name": "c", "qos": "GOLD"}]
    parsed = parse_nodeslo(nodeslo({"hostApplications": apps}))
    assert [(a.name, a.qos) for a in parsed.host_applications] == [("a", "LS"), ("c", "GOLD")]
    assert [a["name"] for a in parsed.merged["hostApplications"]] == ["a", "c"]  # what the collector reads
    assert set(dict(parsed.invalid_fields)) == {
        "spec.hostApplications[1].cgroupPath.base", "spec.hostApplications[2].name",
        "spec.hostApplications[3]"}
    # koordlet takes any QoS string (neither LS nor BE): kept, with a warning
    assert parsed.warnings == ('spec.hostApplications[4].qos: unknown value "GOLD" kept as written (koordlet '
                               "takes any string here)",)


def test_other_sections_of_the_wrong_type_fall_back_to_the_defaults() -> None:
    parsed = parse_nodeslo(nodeslo({"cpuBurstStrategy": [], "systemStrategy": 3, "extensions": [1],
                                    "hostApplications": {"name": "a"}, "resourceQOSStrategy": "off"}))
    assert parsed.cpu_burst_strategy == parse_nodeslo(None).cpu_burst_strategy
    assert parsed.system_strategy == parse_nodeslo(None).system_strategy
    assert dict(parsed.extensions) == {} and parsed.host_applications == ()
    assert parsed.resource_qos_strategy.ls_class is None  # every class left as it is
    assert len(parsed.invalid_fields) == 5


@pytest.mark.parametrize(
    ("field", "value", "meaning"),
    [
        ("resourceUsedThresholdWithBE.cpuSuppressPolicy", "cpuSet", "cpuset"),
        ("resourceUsedThresholdWithBE.cpuEvictPolicy", "byMagic", "evictByRealLimit"),
        ("cpuBurstStrategy.policy", "always", "none"),
        ("resourceQOSStrategy.policies.cpuPolicy", "newSched", "newSched"),
    ],
)
def test_enum_like_strings_are_read_the_way_koordlet_reads_them(field: str, value: str, meaning: str) -> None:
    section, key = field.rsplit(".", 1)
    spec: dict = {}
    node = spec
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[key] = value
    parsed = parse_nodeslo(nodeslo(spec))
    if value == meaning:  # koordlet takes any string here: a warning
        assert parsed.invalid_fields == () and len(parsed.warnings) == 1
        assert parsed.warnings[0].startswith(f'spec.{field}: unknown value "{value}"')
    else:  # koordlet reads it as another value: reported like a dropped field
        assert parsed.warnings == () and len(parsed.invalid_fields) == 1
        path, why = parsed.invalid_fields[0]
        assert path == f"spec.{field}" and why.startswith(f'unknown value "{value}": koordlet reads it as '
                                                          f'"{meaning}", which applies')
    got = parsed.merged
    for part in field.split("."):
        got = got[part]
    assert got == meaning


def test_only_a_document_that_is_not_a_nodeslo_raises() -> None:
    with pytest.raises(NodeSLOError, match=r'^kind: must be "NodeSLO", got "Node"$'):
        parse_nodeslo({"kind": "Node", "spec": {}})
    with pytest.raises(NodeSLOError, match=r"^apiVersion: must be"):
        parse_nodeslo({"apiVersion": "v1", "spec": {}})
    with pytest.raises(NodeSLOError, match=r"^spec: must be an object, got \[\]$"):
        parse_nodeslo({"spec": []})
    with pytest.raises(NodeSLOError, match=r"^NodeSLO: must be an object"):
        parse_nodeslo([])  # type: ignore[arg-type]
    with pytest.raises(NodeSLOError, match=r"^metadata: must be an object"):
        parse_nodeslo({"metadata": "node-1", "spec": {}})


def _leaves(cls: type, path: tuple) -> Iterator[tuple[tuple, Any]]:
    for f in dataclasses.fields(cls):
        spec = f.metadata["spec"]
        if spec.kind == "obj":
            yield from _leaves(spec.cls, (*path, spec.json))
        elif spec.kind == "list":
            yield from _leaves(spec.cls, (*path, spec.json, 0))
        else:
            yield (*path, spec.json), spec


def _set(path: tuple, value: Any) -> dict:
    """A spec with ``path`` set to ``value``; QoS objects enabled, list entries named."""
    spec: dict = {}
    node: Any = spec
    for key, nxt in itertools.pairwise(path):
        if isinstance(key, int):
            continue
        child: Any = [{"name": "n"}] if isinstance(nxt, int) else {}
        node[key] = child
        node = child[0] if isinstance(nxt, int) else child
        if str(key).endswith("QOS"):
            node["enable"] = True
    node[path[-1]] = value
    return spec


def test_no_wrongly_typed_value_anywhere_stops_the_nodeslo() -> None:
    """Every leaf field of the schema, set to a value of the wrong type: parsed, that value named."""
    tried = 0
    for path, spec in _leaves(_SpecBody, ()):
        bad: Any = {"int": "7", "bool": "yes", "str": 3, "enum": 3, "boolmap": "x", "quantity": True,
                    "intstr": 2.5, "any": "x"}[spec.kind]
        parsed = parse_nodeslo(nodeslo(_set(path, bad)))
        where = "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        assert where in dict(parsed.invalid_fields), (where, parsed.invalid_fields)
        tried += 1
    assert tried > 100


def test_every_feature_fallback_sits_inside_a_feature_object() -> None:
    """The schema's own consistency: a FEATURE fallback needs an enclosing feature object to unset,
    an UNSET one a field that may be None."""

    def visit(cls: type, inside: bool) -> None:
        for f in dataclasses.fields(cls):
            spec = f.metadata["spec"]
            if spec.on_bad == FEATURE:
                assert inside, f"{cls.__name__}.{spec.json}"
            if spec.on_bad == UNSET:
                assert f.default is None, f"{cls.__name__}.{spec.json}"
            if spec.kind in ("obj", "list"):
                visit(spec.cls, inside or spec.cls in _FEATURE_ROOTS)

    visit(_SpecBody, False)


# ---------------------------------------------------------------------------------------------
# Keys like Go's encoding/json


def test_keys_match_case_insensitively_like_go() -> None:
    parsed = parse_nodeslo(nodeslo({
        "ResourceUsedThresholdWithBE": {"ENABLE": True, "cpusuppresspolicy": "cfsQuota"},
        "resourceQOSStrategy": {"beClass": {"blkioQOS": {"enable": True, "blocks": [
            {"name": "/dev/sdb", "type": "device", "iocfg": {"READIOPS": 2048, "writeiops": 100}}]}}},
    }))
    thr = parsed.resource_used_threshold_with_be
    assert (thr.enable, thr.cpu_suppress_policy) == (True, "cfsQuota")
    assert thr.cpu_suppress_threshold_percent == 65  # the defaults of the section still merge in
    be = parsed.class_qos("BE")
    assert be is not None and be.blkio_qos is not None
    (block,) = be.blkio_qos.blocks
    assert (block.io_cfg.read_iops, block.io_cfg.write_iops) == (2048, 100)
    assert parsed.warnings == () and parsed.invalid_fields == ()
    # Go's simple case folding also maps the Kelvin sign onto k and the long s onto s
    odd = parse_nodeslo(nodeslo({"resourceUsedThresholdWithBE": {"cpu\u017fuppressThresholdPercent": 40}}))
    assert odd.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 40


def test_several_keys_for_one_field_apply_in_document_order() -> None:
    first = parse_nodeslo(nodeslo({"resourceUsedThresholdWithBE": {
        "CPUSuppressThresholdPercent": 40, "cpuSuppressThresholdPercent": 30}}))
    last = parse_nodeslo(nodeslo({"resourceUsedThresholdWithBE": {
        "cpuSuppressThresholdPercent": 30, "CPUSuppressThresholdPercent": 40}}))
    assert first.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 30
    assert last.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 40
    # objects merge into the earlier one, as Go decodes into the struct it already filled
    io, _ = from_dict(BlockCfg, {"ioCfg": {"readIOPS": 1, "writeIOPS": 2}, "iocfg": {"readIOPS": 3}})
    assert (io.io_cfg.read_iops, io.io_cfg.write_iops) == (3, 2)


def test_the_merge_matches_keys_like_the_decoder() -> None:
    merged = json_overlay({"cpuSuppressThresholdPercent": 65, "enable": False},
                          {"CPUSUPPRESSTHRESHOLDPERCENT": 40, "Enable": True, "futureKnob": 1},
                          ResourceThresholdStrategy)
    assert merged == {"cpuSuppressThresholdPercent": 40, "enable": True, "futureKnob": 1}
    assert merge_spec({"CPUBurstStrategy": {"Policy": "auto"}})["cpuBurstStrategy"]["policy"] == "auto"
    # map keys stay exact (Go decodes map keys as they are)
    features = parse_nodeslo(nodeslo({"systemStrategy": {"schedFeatures": {"ID_X": True, "id_x": False}}}))
    assert dict(features.system_strategy.sched_features or {}) == {"ID_X": True, "id_x": False}
    # and without a class json_overlay is the plain overlay it always was
    assert json_overlay({"A": 1}, {"a": 2}) == {"A": 1, "a": 2}


def test_unknown_keys_are_ignored_with_a_warning_in_annotations_too() -> None:
    block = {"name": "sdb", "type": "device", "iocfg": {"readIOPS": 5}, "weight": 3}
    cfg, warnings = from_dict(BlkIOQOS, {"blocks": [block]}, "annotation koordinator.sh/blkioQOS")
    assert cfg.blocks[0].io_cfg.read_iops == 5
    assert warnings == ("annotation koordinator.sh/blkioQOS.blocks[0].weight: unknown field ignored",)


def test_pod_annotations_stay_strict() -> None:
    with pytest.raises(NodeSLOError, match=r"^ann.cpuBurstPercent: must be an integer in \[0, 10000\]"):
        from_dict(CPUBurstConfig, {"cpuburstpercent": 20000}, "ann")
    with pytest.raises(NodeSLOError, match=r"^ann.blocks\[0\].ioCfg.readIOPS: must be an integer >= 0"):
        from_dict(BlkIOQOS, {"blocks": [{"iocfg": {"readIOPS": -1}}]}, "ann")
    # an enum-like string is read the way koordlet reads it there too
    cfg, warnings = from_dict(CPUBurstConfig, {"policy": "always"}, "ann")
    assert cfg.policy == "none"
    assert warnings == ('ann.policy: unknown value "always" read as "none", as koordlet reads it',)


def test_ranges_accept_their_bounds() -> None:
    spec = parse_nodeslo(
        nodeslo(
            {
                "resourceUsedThresholdWithBE": {
                    "cpuSuppressThresholdPercent": 100,
                    "cpuSuppressMinPercent": 0,
                    "allocatableEvictPriorityThreshold": 7999,
                    "cpuAllocatableEvictThresholdPercent": 110,  # not capped at 100 (the doc default is 110)
                    "evictEnabledPriorityThreshold": -(2**31),
                },
                "resourceQOSStrategy": {"lsrClass": {"memoryQOS": {"enable": True, "wmarkMinAdj": -25}}},
                "systemStrategy": {"totalNetworkBandwidth": "10G"},
            }
        )
    )
    thr = spec.resource_used_threshold_with_be
    assert (thr.cpu_suppress_threshold_percent, thr.cpu_suppress_min_percent) == (100, 0)
    assert (thr.allocatable_evict_priority_threshold, thr.cpu_allocatable_evict_threshold_percent) == (
        7999,
        110,
    )
    assert spec.system_strategy.total_network_bandwidth == 10 * 10**9


def test_a_bad_field_never_costs_the_good_ones() -> None:
    obj = nodeslo(
        {
            # a valid change...
            "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 30},
            "cpuBurstStrategy": {"sharePoolThresholdPercent": 500},  # ...and an invalid one later
        }
    )
    before = copy.deepcopy(obj)
    parsed = parse_nodeslo(obj)
    assert obj == before  # the input is untouched
    assert parsed.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 30
    assert parsed.cpu_burst_strategy.share_pool_threshold_percent == 50  # the default, for that field only
    assert [p for p, _ in parsed.invalid_fields] == ["spec.cpuBurstStrategy.sharePoolThresholdPercent"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.resource_used_threshold_with_be.enable = False  # type: ignore[misc]


def test_class_qos_lookup() -> None:
    spec = parse_nodeslo(
        nodeslo(
            {
                "resourceQOSStrategy": {
                    "lsrClass": {"memoryQOS": {"enable": True, "priority": 11}},
                    "lsClass": {"memoryQOS": {"enable": True, "priority": 7}},
                    "beClass": {"memoryQOS": {"enable": True, "priority": 1}},
                    "systemClass": {"memoryQOS": {"enable": True, "priority": 12}},
                }
            }
        )
    )

    def prio(klass: ResourceQOS | None) -> int | None:
        assert klass is not None and klass.memory_qos is not None
        return klass.memory_qos.priority

    assert [prio(spec.class_qos(q)) for q in ("LSE", "LSR", "LS", "BE", "SYSTEM")] == [11, 11, 7, 1, 12]
    assert spec.class_qos("") is None and spec.class_qos("GOLD") is None
    assert [prio(spec.kube_class_qos(q)) for q in ("Guaranteed", "Burstable", "BestEffort")] == [11, 7, 1]
    assert spec.kube_class_qos("") is None


# ---------------------------------------------------------------------------------------------
# Pod-level configs and the loader


def test_from_dict_and_overlay_config_for_pod_overrides() -> None:
    node_cfg = parse_nodeslo(nodeslo({"cpuBurstStrategy": {"policy": "auto"}})).cpu_burst_strategy
    pod_cfg, warnings = from_dict(CPUBurstConfig, {"cpuBurstPercent": 200, "policy": "", "extra": 1}, "ann")
    assert warnings == ("ann.extra: unknown field ignored",)
    merged = overlay_config(node_cfg, pod_cfg)
    assert isinstance(merged, CPUBurstStrategy)
    assert (merged.policy, merged.cpu_burst_percent, merged.cfs_quota_burst_percent) == ("auto", 200, 300)
    assert merged.share_pool_threshold_percent == 50

    mem, _ = from_dict(PodMemoryQOSConfig, {"policy": "auto", "minLimitPercent": 40})
    base = MemoryQOSCfg(enable=True, min_limit_percent=0, wmark_ratio=95)
    over = overlay_config(base, mem)
    assert (over.enable, over.min_limit_percent, over.wmark_ratio) == (True, 40, 95)

    with pytest.raises(NodeSLOError, match=r"^BlkIOQOS.blocks: must be a list"):
        from_dict(BlkIOQOS, {"blocks": 3})


def test_default_memory_qos_templates() -> None:
    be = default_memory_qos("BE")
    lse = default_memory_qos("LSE")
    assert be is not None and (be.wmark_ratio, be.wmark_scale_permill, be.wmark_min_adj) == (95, 20, 50)
    assert lse is not None and lse.wmark_min_adj == -25
    assert default_memory_qos("") is None


def test_a_field_koordlet_knows_and_the_agent_does_not_use_is_not_reported_as_unknown() -> None:
    """koordinator's CRD has memoryQOS's page-cache knobs; koordlet knows them: not a typo."""
    spec = parse_nodeslo(nodeslo({"resourceQOSStrategy": {"lsClass": {"memoryQOS": {
        "pageCacheLimitEnable": 1, "PageCacheLimitSync": 0, "pageCacheLimitEnabel": 1}}}}))
    mem = f"{RQS}.lsClass.memoryQOS"
    assert [p for p, _ in spec.invalid_fields] == [f"{mem}.pageCacheLimitEnabel"]
    assert spec.warnings == (f"{mem}.pageCacheLimitEnable: a field of koordlet's that this agent does not use, "
                             "ignored",
                             f"{mem}.PageCacheLimitSync: a field of koordlet's that this agent does not use, "
                             "ignored")
