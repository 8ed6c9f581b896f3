"""The NodeSLO spec (``slo.koordinator.sh/v1alpha1``): schema, defaults, merge and validation.

A NodeSLO reaches the agent as JSON or YAML.  koordlet never uses it raw: it overlays the user's
spec onto its built-in defaults (koordlet-qos §2.4, koordlet-infra §5.3) and the strategies read
the merged result.  This module does the same in three steps:

1. :func:`merge_spec` -- a JSON overlay of the user spec onto :func:`default_spec_dict`, exactly
   what ``json.Unmarshal(json.Marshal(user), &defaults)`` does per section: nested objects merge
   field by field, maps merge key-wise, lists replace, and an explicit ``null`` (or an empty string,
   which Go's ``omitempty`` drops before the overlay) keeps the default.  Then, for the LSR, LS and
   BE classes, a ``cpuQOS``/``resctrlQOS``/``memoryQOS`` with ``enable: false`` has its fields
   replaced by the "None" variant (the ``enable`` flag itself stays).
2. Validation while building typed, frozen dataclasses from the merged dict: types, enums and the
   ranges declared by the CRD and koordinator's validation tags.  The first problem raises
   :class:`NodeSLOError` naming the JSON path; unknown fields are ignored (forward compatibility)
   and reported in :attr:`NodeSLOSpec.warnings`.  Cross-field rules (lower < upper, start < end)
   are left to the strategies' own config checks, which skip just that feature, as koordlet does.
3. :func:`parse_nodeslo` ties both together and is pure: it returns a whole new
   :class:`NodeSLOSpec` or raises, so a bad NodeSLO can never half-apply.

Dataclass attributes are the snake_case forms of the JSON names; inline Go structs are flattened
the same way the JSON is (``memoryQOS.enable`` and ``memoryQOS.wmarkRatio`` are both attributes of
:class:`MemoryQOSCfg`).  ``None`` means "unset" for every pointer field.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import yaml

from qosmanager.api.quantity import parse_quantity, value

API_VERSION = "slo.koordinator.sh/v1alpha1"
KIND = "NodeSLO"

CPU_SUPPRESS_POLICY_CPUSET = "cpuset"
CPU_SUPPRESS_POLICY_CFS_QUOTA = "cfsQuota"
CPU_EVICT_POLICY_REAL_LIMIT = "evictByRealLimit"
CPU_EVICT_POLICY_ALLOCATABLE = "evictByAllocatable"
CPU_BURST_NONE = "none"
CPU_BURST_ONLY = "cpuBurstOnly"
CFS_QUOTA_BURST_ONLY = "cfsQuotaBurstOnly"
CPU_BURST_AUTO = "auto"
BLOCK_DEVICE = "device"
BLOCK_VOLUME_GROUP = "volumegroup"
BLOCK_POD_VOLUME = "podvolume"
CGROUP_BASE_ROOT = "CgroupRoot"
CGROUP_BASE_KUBEPODS = "Kubepods"
CGROUP_BASE_KUBEPODS_BURSTABLE = "KubepodsBurstable"
CGROUP_BASE_KUBEPODS_BESTEFFORT = "KubepodsBesteffort"

_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


class NodeSLOError(ValueError):
    """A NodeSLO (or a NodeSLO-shaped pod annotation) that cannot be used; says which field and why."""


# --------------------------------------------------------------------------------------------
# Field specs: every dataclass field carries its JSON name, kind and valid range as metadata, and
# one generic builder reads JSON through them.  The schema is written once, below.


@dataclass(frozen=True, slots=True)
class _Spec:
    json: str
    kind: str  # int | bool | str | enum | obj | list | boolmap | quantity | intstr | any
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()
    cls: Any = None


def _int(name: str, lo: int | None = None, hi: int | None = None, bits: int = 64) -> Any:
    lo_b, hi_b = _INT64 if bits == 64 else _INT32
    spec = _Spec(name, "int", lo if lo is not None else lo_b, hi if hi is not None else hi_b)
    return field(default=None, metadata={"spec": spec})


def _bool(name: str) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "bool")})


def _str(name: str, default: str | None = "") -> Any:
    return field(default=default, metadata={"spec": _Spec(name, "str")})


def _enum(name: str, *choices: str, default: str | None = None) -> Any:
    return field(default=default, metadata={"spec": _Spec(name, "enum", choices=choices)})


def _obj(name: str, cls: Any, default: Any = None) -> Any:
    return field(default=default, metadata={"spec": _Spec(name, "obj", cls=cls)})


def _list(name: str, cls: Any) -> Any:
    return field(default=(), metadata={"spec": _Spec(name, "list", cls=cls)})


def _boolmap(name: str) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "boolmap")})


def _quantity(name: str) -> Any:
    return field(default=0, metadata={"spec": _Spec(name, "quantity")})


def _intstr(name: str) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "intstr", 0, 100)})


def _any(name: str) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "any")})


# --------------------------------------------------------------------------------------------
# Schema (qos §3).  Ranges: the CRD's kubebuilder markers and koordinator's `validate` tags.


@dataclass(frozen=True, slots=True)
class ResourceThresholdStrategy:
    """``resourceUsedThresholdWithBE``: the master switch and thresholds of suppress and evict."""

    enable: bool | None = _bool("enable")
    cpu_suppress_threshold_percent: int | None = _int("cpuSuppressThresholdPercent", 0, 100)
    cpu_suppress_min_percent: int | None = _int("cpuSuppressMinPercent", 0, 100)
    cpu_suppress_policy: str | None = _enum(
        "cpuSuppressPolicy", CPU_SUPPRESS_POLICY_CPUSET, CPU_SUPPRESS_POLICY_CFS_QUOTA, ""
    )
    memory_evict_threshold_percent: int | None = _int("memoryEvictThresholdPercent", 0, 100)
    memory_evict_lower_percent: int | None = _int("memoryEvictLowerPercent", 0, 100)
    memory_allocatable_evict_threshold_percent: int | None = _int("memoryAllocatableEvictThresholdPercent", 0)
    memory_allocatable_evict_lower_percent: int | None = _int("memoryAllocatableEvictLowerPercent", 0)
    cpu_evict_be_satisfaction_upper_percent: int | None = _int("cpuEvictBESatisfactionUpperPercent", 0, 100)
    cpu_evict_be_satisfaction_lower_percent: int | None = _int("cpuEvictBESatisfactionLowerPercent", 0, 100)
    cpu_evict_be_usage_threshold_percent: int | None = _int("cpuEvictBEUsageThresholdPercent", 0, 100)
    cpu_evict_time_window_seconds: int | None = _int("cpuEvictTimeWindowSeconds", 1)
    cpu_evict_threshold_percent: int | None = _int("cpuEvictThresholdPercent", 0, 100)
    cpu_evict_lower_percent: int | None = _int("cpuEvictLowerPercent", 0, 100)
    cpu_allocatable_evict_threshold_percent: int | None = _int("cpuAllocatableEvictThresholdPercent", 0)
    cpu_allocatable_evict_lower_percent: int | None = _int("cpuAllocatableEvictLowerPercent", 0)
    cpu_evict_policy: str | None = _enum(
        "cpuEvictPolicy", CPU_EVICT_POLICY_REAL_LIMIT, CPU_EVICT_POLICY_ALLOCATABLE, ""
    )
    evict_enabled_priority_threshold: int | None = _int("evictEnabledPriorityThreshold", bits=32)
    allocatable_evict_priority_threshold: int | None = _int("allocatableEvictPriorityThreshold", 0, 7999)


@dataclass(frozen=True, slots=True)
class CPUQOS:
    group_identity: int | None = _int("groupIdentity", -1, 2)
    sched_idle: int | None = _int("schedIdle", 0, 1)
    core_expeller: bool | None = _bool("coreExpeller")


@dataclass(frozen=True, slots=True)
class CPUQOSCfg(CPUQOS):
    enable: bool | None = _bool("enable")


@dataclass(frozen=True, slots=True)
class MemoryQOS:
    min_limit_percent: int | None = _int("minLimitPercent", 0, 100)
    low_limit_percent: int | None = _int("lowLimitPercent", 0, 100)
    throttling_percent: int | None = _int("throttlingPercent", 0, 100)
    wmark_ratio: int | None = _int("wmarkRatio", 0, 100)
    wmark_scale_permill: int | None = _int("wmarkScalePermill", 1, 1000)
    wmark_min_adj: int | None = _int("wmarkMinAdj", -25, 50)
    priority_enable: int | None = _int("priorityEnable", 0, 1)
    priority: int | None = _int("priority", 0, 12)
    oom_kill_group: int | None = _int("oomKillGroup", 0, 1)
    page_cache_enable: bool | None = _bool("pageCacheEnable")
    page_cache_limit_percent: int | None = _int("pageCacheLimitPercent", 0, 100)
    page_cache_limit_size: int | None = _int("pageCacheLimitSize", 0)
    page_cache_reclaim_sync: bool | None = _bool("pageCacheReclaimSync")


@dataclass(frozen=True, slots=True)
class MemoryQOSCfg(MemoryQOS):
    enable: bool | None = _bool("enable")


@dataclass(frozen=True, slots=True)
class PodMemoryQOSConfig(MemoryQOS):
    """The pod annotation ``koordinator.sh/memoryQOS``: a policy plus MemoryQOS overrides."""

    policy: str | None = _enum("policy", "", "default", "none", "auto")


@dataclass(frozen=True, slots=True)
class IOCfg:
    read_iops: int | None = _int("readIOPS", 0)
    write_iops: int | None = _int("writeIOPS", 0)
    read_bps: int | None = _int("readBPS", 0)
    write_bps: int | None = _int("writeBPS", 0)
    io_weight_percent: int | None = _int("ioWeightPercent", 1, 100)
    read_latency: int | None = _int("readLatency", 0)
    write_latency: int | None = _int("writeLatency", 0)
    read_latency_percent: int | None = _int("readLatencyPercent", 0, 100)
    write_latency_percent: int | None = _int("writeLatencyPercent", 0, 100)
    enable_user_model: bool | None = _bool("enableUserModel")
    model_read_bps: int | None = _int("modelReadBPS", 1)
    model_write_bps: int | None = _int("modelWriteBPS", 1)
    model_read_seq_iops: int | None = _int("modelReadSeqIOPS", 1)
    model_write_seq_iops: int | None = _int("modelWriteSeqIOPS", 1)
    model_read_rand_iops: int | None = _int("modelReadRandIOPS", 1)
    model_write_rand_iops: int | None = _int("modelWriteRandIOPS", 1)


@dataclass(frozen=True, slots=True)
class BlockCfg:
    name: str = _str("name")
    type: str = _enum("type", BLOCK_DEVICE, BLOCK_VOLUME_GROUP, BLOCK_POD_VOLUME, "", default="")
    io_cfg: IOCfg = _obj("ioCfg", IOCfg, default=IOCfg())  # noqa: RUF009 (a field spec)


@dataclass(frozen=True, slots=True)
class BlkIOQOS:
    """Also the pod annotation ``koordinator.sh/blkioQOS``."""

    blocks: tuple[BlockCfg, ...] = _list("blocks", BlockCfg)


@dataclass(frozen=True, slots=True)
class BlkIOQOSCfg(BlkIOQOS):
    enable: bool | None = _bool("enable")


@dataclass(frozen=True, slots=True)
class ResctrlQOS:
    cat_range_start_percent: int | None = _int("catRangeStartPercent", 0, 100)
    cat_range_end_percent: int | None = _int("catRangeEndPercent", 0, 100)
    mba_percent: int | None = _int("mbaPercent", 0, 100)


@dataclass(frozen=True, slots=True)
class ResctrlQOSCfg(ResctrlQOS):
    enable: bool | None = _bool("enable")


@dataclass(frozen=True, slots=True)
class NetworkQOS:
    """Bandwidths: an int is a percentage of the node total (0..100), a string a quantity ("50M")."""

    ingress_request: int | str | None = _intstr("ingressRequest")
    ingress_limit: int | str | None = _intstr("ingressLimit")
    egress_request: int | str | None = _intstr("egressRequest")
    egress_limit: int | str | None = _intstr("egressLimit")


@dataclass(frozen=True, slots=True)
class NetworkQOSCfg(NetworkQOS):
    enable: bool | None = _bool("enable")


@dataclass(frozen=True, slots=True)
class ResourceQOS:
    cpu_qos: CPUQOSCfg | None = _obj("cpuQOS", CPUQOSCfg)  # noqa: RUF009 (a field spec)
    memory_qos: MemoryQOSCfg | None = _obj("memoryQOS", MemoryQOSCfg)  # noqa: RUF009 (a field spec)
    blkio_qos: BlkIOQOSCfg | None = _obj("blkioQOS", BlkIOQOSCfg)  # noqa: RUF009 (a field spec)
    resctrl_qos: ResctrlQOSCfg | None = _obj("resctrlQOS", ResctrlQOSCfg)  # noqa: RUF009 (a field spec)
    network_qos: NetworkQOSCfg | None = _obj("networkQOS", NetworkQOSCfg)  # noqa: RUF009 (a field spec)


@dataclass(frozen=True, slots=True)
class ResourceQOSPolicies:
    cpu_policy: str | None = _enum("cpuPolicy", "groupIdentity", "coreSched", "")
    net_qos_policy: str | None = _enum("netQOSPolicy", "tc", "terway-qos", "")


@dataclass(frozen=True, slots=True)
class ResourceQOSStrategy:
    policies: ResourceQOSPolicies | None = _obj("policies", ResourceQOSPolicies)  # noqa: RUF009 (a field spec)
    lsr_class: ResourceQOS | None = _obj("lsrClass", ResourceQOS)  # noqa: RUF009 (a field spec)
    ls_class: ResourceQOS | None = _obj("lsClass", ResourceQOS)  # noqa: RUF009 (a field spec)
    be_class: ResourceQOS | None = _obj("beClass", ResourceQOS)  # noqa: RUF009 (a field spec)
    system_class: ResourceQOS | None = _obj("systemClass", ResourceQOS)  # noqa: RUF009 (a field spec)
    cgroup_root: ResourceQOS | None = _obj("cgroupRoot", ResourceQOS)  # noqa: RUF009 (a field spec)


@dataclass(frozen=True, slots=True)
class CPUBurstConfig:
    """Also the pod annotation ``koordinator.sh/cpuBurst``."""

    policy: str | None = _enum(
        "policy", CPU_BURST_NONE, CPU_BURST_ONLY, CFS_QUOTA_BURST_ONLY, CPU_BURST_AUTO, ""
    )
    cpu_burst_percent: int | None = _int("cpuBurstPercent", 0, 10000)
    cfs_quota_burst_percent: int | None = _int("cfsQuotaBurstPercent", 100)
    cfs_quota_burst_period_seconds: int | None = _int("cfsQuotaBurstPeriodSeconds", -1)


@dataclass(frozen=True, slots=True)
class CPUBurstStrategy(CPUBurstConfig):
    share_pool_threshold_percent: int | None = _int("sharePoolThresholdPercent", 0, 100)


@dataclass(frozen=True, slots=True)
class SystemStrategy:
    min_free_kbytes_factor: int | None = _int("minFreeKbytesFactor", 1)
    watermark_scale_factor: int | None = _int("watermarkScaleFactor", 1, 400)
    memcg_reap_back_ground: int | None = _int("memcgReapBackGround", 0, 1)
    sched_group_identity_enabled: int | None = _int("schedGroupIdentityEnabled", 0, 1)
    sched_idle_saver_wmark: int | None = _int("schedIdleSaverWmark")
    sched_features: Mapping[str, bool] | None = _boolmap("schedFeatures")
    page_cache_limit_enabled: int | None = _int("pageCacheLimitEnabled", 0, 1)
    total_network_bandwidth: int = _quantity("totalNetworkBandwidth")


@dataclass(frozen=True, slots=True)
class CgroupPath:
    base: str = _enum(
        "base",
        CGROUP_BASE_ROOT,
        CGROUP_BASE_KUBEPODS,
        CGROUP_BASE_KUBEPODS_BURSTABLE,
        CGROUP_BASE_KUBEPODS_BESTEFFORT,
        "",
        default="",
    )
    parent_dir: str = _str("parentDir")
    relative_path: str = _str("relativePath")


@dataclass(frozen=True, slots=True)
class HostApplicationSpec:
    """An out-of-band (non-pod) application whose usage and QoS the agent accounts for."""

    name: str = _str("name")
    priority: str = _enum("priority", "koord-prod", "koord-mid", "koord-batch", "koord-free", "", default="")
    qos: str = _enum("qos", "LSE", "LSR", "LS", "BE", "SYSTEM", "", default="")
    cgroup_path: CgroupPath | None = _obj("cgroupPath", CgroupPath)  # noqa: RUF009 (a field spec)
    strategy: Mapping[str, Any] | None = _any("strategy")


_CLASS_ATTR = {
    # QoS class (pod label values) -> the ResourceQOSStrategy attribute that configures it.
    "LSE": "lsr_class",
    "LSR": "lsr_class",
    "LS": "ls_class",
    "BE": "be_class",
    "SYSTEM": "system_class",
}
_KUBE_CLASS_ATTR = {"Guaranteed": "lsr_class", "Burstable": "ls_class", "BestEffort": "be_class"}


@dataclass(frozen=True, slots=True)
class NodeSLOSpec:
    """The merged, validated NodeSLO spec the strategies read every tick."""

    resource_used_threshold_with_be: ResourceThresholdStrategy
    resource_qos_strategy: ResourceQOSStrategy
    cpu_burst_strategy: CPUBurstStrategy
    system_strategy: SystemStrategy
    extensions: Mapping[str, Any]
    host_applications: tuple[HostApplicationSpec, ...]
    resource_version: str = ""
    warnings: tuple[str, ...] = ()
    merged: Mapping[str, Any] = field(default_factory=dict)  # the merged spec as JSON, read-only use

    def class_qos(self, qos: str) -> ResourceQOS | None:
        """``GetPodResourceQoSByQoSClass``: LSE/LSR -> lsrClass, LS, BE, SYSTEM; others -> None."""
        attr = _CLASS_ATTR.get(qos)
        return None if attr is None else getattr(self.resource_qos_strategy, attr)

    def kube_class_qos(self, kube_qos: str) -> ResourceQOS | None:
        """``GetKubeQoSResourceQoSByQoSClass``: Guaranteed -> lsrClass, Burstable -> ls, BestEffort -> be."""
        attr = _KUBE_CLASS_ATTR.get(kube_qos)
        return None if attr is None else getattr(self.resource_qos_strategy, attr)


# --------------------------------------------------------------------------------------------
# Defaults (qos §3; koordinator's sloconfig defaults at the spec's commit).

_DEFAULT_CPU_QOS = {
    "LSR": {"groupIdentity": 2, "schedIdle": 0, "coreExpeller": True},
    "LS": {"groupIdentity": 2, "schedIdle": 0, "coreExpeller": True},
    "BE": {"groupIdentity": -1, "schedIdle": 0, "coreExpeller": False},
    "SYSTEM": {"groupIdentity": 0, "schedIdle": 0, "coreExpeller": False},
}
_NONE_CPU_QOS = {"groupIdentity": 0, "schedIdle": 0, "coreExpeller": False}


def _resctrl(start: int, end: int, mba: int) -> dict[str, int]:
    return {"catRangeStartPercent": start, "catRangeEndPercent": end, "mbaPercent": mba}


_DEFAULT_RESCTRL_QOS = {
    "LSR": _resctrl(0, 100, 100),
    "LS": _resctrl(0, 100, 100),
    "BE": _resctrl(0, 30, 100),
    "SYSTEM": _resctrl(0, 100, 100),
}
_NONE_RESCTRL_QOS = _resctrl(0, 100, 100)


def _memory(wmark_ratio: int, wmark_scale_permill: int, wmark_min_adj: int) -> dict[str, int]:
    return {
        "minLimitPercent": 0,
        "lowLimitPercent": 0,
        "throttlingPercent": 0,
        "wmarkRatio": wmark_ratio,
        "wmarkScalePermill": wmark_scale_permill,
        "wmarkMinAdj": wmark_min_adj,
        "priorityEnable": 0,
        "priority": 0,
        "oomKillGroup": 0,
    }


_DEFAULT_MEMORY_QOS = {
    "LSR": _memory(95, 20, -25),
    "LS": _memory(95, 20, -25),
    "BE": _memory(95, 20, 50),
    "SYSTEM": _memory(0, 50, 0),
}
_NONE_MEMORY_QOS = _memory(0, 50, 0)
_NONE_NETWORK_QOS = {"ingressRequest": 0, "ingressLimit": 0, "egressRequest": 0, "egressLimit": 0}


def _default_class(qos: str) -> dict[str, Any]:
    return {
        "cpuQOS": {"enable": False, **_DEFAULT_CPU_QOS[qos]},
        "resctrlQOS": {"enable": False, **_DEFAULT_RESCTRL_QOS[qos]},
        "memoryQOS": {"enable": False, **_DEFAULT_MEMORY_QOS[qos]},
        "blkioQOS": {"enable": False, "blocks": []},
        "networkQOS": {"enable": False, **_NONE_NETWORK_QOS},
    }


def default_spec_dict() -> dict[str, Any]:
    """koordlet's default NodeSLO spec (``DefaultNodeSLOSpecConfig``) as a fresh JSON dict.

    These are the values *before* the disabled-feature rewrite of :func:`merge_spec`: e.g. the LSR
    ``memoryQOS`` template here has ``wmarkRatio: 95``, while the merged default (memory QoS is
    disabled by default) carries the None variant's ``0``.
    """
    return {
        "resourceUsedThresholdWithBE": {
            "enable": False,
            "cpuSuppressThresholdPercent": 65,
            "cpuSuppressPolicy": CPU_SUPPRESS_POLICY_CPUSET,
            "memoryEvictThresholdPercent": 70,
            "cpuEvictPolicy": CPU_EVICT_POLICY_REAL_LIMIT,
        },
        "resourceQOSStrategy": {
            "policies": {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"},
            "lsrClass": _default_class("LSR"),
            "lsClass": _default_class("LS"),
            "beClass": _default_class("BE"),
            "systemClass": _default_class("SYSTEM"),
            "cgroupRoot": {"blkioQOS": {"enable": False, "blocks": []}},
        },
        "cpuBurstStrategy": {
            "policy": CPU_BURST_NONE,
            "cpuBurstPercent": 1000,
            "cfsQuotaBurstPercent": 300,
            "cfsQuotaBurstPeriodSeconds": -1,
            "sharePoolThresholdPercent": 50,
        },
        "systemStrategy": {"totalNetworkBandwidth": "0"},
        "extensions": {},
        "hostApplications": [],
    }


# --------------------------------------------------------------------------------------------
# Merge


def json_overlay(base: Any, user: Any) -> Any:
    """Overlay ``user`` onto ``base`` like Go's ``json.Unmarshal`` into a pre-filled struct.

    Objects merge key by key (recursively), lists and scalars replace, and ``None`` or ``""`` in
    ``user`` keeps the base value (Go's ``omitempty`` drops them before the overlay).  Neither
    argument is modified; the result shares no mutable parts with them.
    """
    if user is None or (user == "" and isinstance(base, str)):
        return copy.deepcopy(base)
    if isinstance(base, Mapping) and isinstance(user, Mapping):
        out = {k: copy.deepcopy(v) for k, v in base.items()}
        for key, item in user.items():
            out[key] = json_overlay(out[key], item) if key in out else copy.deepcopy(item)
        return out
    return copy.deepcopy(user)


def _json_names(cls: Any) -> list[str]:
    return [f.metadata["spec"].json for f in dataclasses.fields(cls)]


_NONE_VARIANTS = (
    ("cpuQOS", _json_names(CPUQOS), _NONE_CPU_QOS),
    ("resctrlQOS", _json_names(ResctrlQOS), _NONE_RESCTRL_QOS),
    ("memoryQOS", _json_names(MemoryQOS), _NONE_MEMORY_QOS),
)


def _apply_none_variants(strategy: Any) -> None:
    """A disabled cpu/resctrl/memory QoS of the LSR, LS and BE classes carries the None values."""
    if not isinstance(strategy, dict):
        return
    for class_key in ("lsrClass", "lsClass", "beClass"):  # not systemClass: koordlet leaves it as is
        klass = strategy.get(class_key)
        if not isinstance(klass, dict):
            continue
        for qos_key, inline_fields, none_values in _NONE_VARIANTS:
            cfg = klass.get(qos_key)
            if isinstance(cfg, dict) and cfg.get("enable") is False:
                kept = {k: v for k, v in cfg.items() if k not in inline_fields}
                klass[qos_key] = {**kept, **copy.deepcopy(none_values)}


def merge_spec(user_spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's NodeSLO spec overlaid onto the defaults, then disabled classes set to None values.

    ``None`` gives the merged defaults.  Raises :class:`NodeSLOError` if ``user_spec`` is not an
    object.  Types inside are not checked here (that is :func:`parse_nodeslo`'s job).
    """
    if user_spec is not None and not isinstance(user_spec, Mapping):
        raise NodeSLOError(f"spec: must be an object, got {_show(user_spec)}")
    merged: dict[str, Any] = json_overlay(default_spec_dict(), user_spec)
    _apply_none_variants(merged.get("resourceQOSStrategy"))
    return merged


# --------------------------------------------------------------------------------------------
# Validation and typed build


def _show(raw: Any) -> str:
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError):
        text = repr(raw)
    return text if len(text) <= 80 else text[:77] + "..."


def _range_text(spec: _Spec) -> str:
    if spec.hi != _INT64[1]:
        return f" in [{spec.lo}, {spec.hi}]"
    return "" if spec.lo == _INT64[0] else f" >= {spec.lo}"


def _convert(spec: _Spec, raw: Any, path: str, warnings: list[str]) -> Any:
    kind = spec.kind
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise NodeSLOError(f"{path}: must be an integer{_range_text(spec)}, got {_show(raw)}")
        assert spec.lo is not None and spec.hi is not None
        if not spec.lo <= raw <= spec.hi:
            raise NodeSLOError(f"{path}: must be an integer{_range_text(spec)}, got {_show(raw)}")
        return raw
    if kind == "bool":
        if not isinstance(raw, bool):
            raise NodeSLOError(f"{path}: must be a boolean, got {_show(raw)}")
        return raw
    if kind == "str":
        if not isinstance(raw, str):
            raise NodeSLOError(f"{path}: must be a string, got {_show(raw)}")
        return raw
    if kind == "enum":
        if not isinstance(raw, str) or raw not in spec.choices:
            choices = ", ".join(json.dumps(c) for c in spec.choices)
            raise NodeSLOError(f"{path}: must be one of {choices}, got {_show(raw)}")
        return raw
    if kind == "obj":
        return _build(spec.cls, raw, path, warnings)
    if kind == "list":
        if not isinstance(raw, list):
            raise NodeSLOError(f"{path}: must be a list, got {_show(raw)}")
        return tuple(_build(spec.cls, item, f"{path}[{i}]", warnings) for i, item in enumerate(raw))
    if kind == "boolmap":
        if not isinstance(raw, Mapping):
            raise NodeSLOError(f"{path}: must be an object of booleans, got {_show(raw)}")
        for key, item in raw.items():
            if not isinstance(key, str) or not isinstance(item, bool):
                raise NodeSLOError(f"{path}.{key}: must be a boolean, got {_show(item)}")
        return MappingProxyType(dict(raw))
    if kind == "quantity":
        try:
            return value(raw)
        except ValueError as exc:
            raise NodeSLOError(f"{path}: {exc}") from None
    if kind == "intstr":
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise NodeSLOError(
                f"{path}: must be a percentage (integer) or a quantity string, got {_show(raw)}"
            )
        if isinstance(raw, int):
            assert spec.lo is not None and spec.hi is not None
            if not spec.lo <= raw <= spec.hi:
                raise NodeSLOError(f"{path}: a percentage must be in [{spec.lo}, {spec.hi}], got {raw}")
            return raw
        try:
            parse_quantity(raw)
        except ValueError as exc:
            raise NodeSLOError(f"{path}: {exc}") from None
        return raw
    if kind == "any":
        if not isinstance(raw, Mapping):
            raise NodeSLOError(f"{path}: must be an object, got {_show(raw)}")
        return MappingProxyType(copy.deepcopy(dict(raw)))
    raise AssertionError(f"unknown field kind {kind}")  # pragma: no cover - schema bug


_FIELDS_CACHE: dict[type, tuple[tuple[str, _Spec, Any], ...]] = {}


def _schema(cls: type) -> tuple[tuple[str, _Spec, Any], ...]:
    fields = _FIELDS_CACHE.get(cls)
    if fields is None:
        fields = tuple((f.name, f.metadata["spec"], f.default) for f in dataclasses.fields(cls))
        _FIELDS_CACHE[cls] = fields
    return fields


T = TypeVar("T")


def _build(cls: type[T], raw: Any, path: str, warnings: list[str]) -> T:
    if not isinstance(raw, Mapping):
        raise NodeSLOError(f"{path}: must be an object, got {_show(raw)}")
    schema = _schema(cls)
    known = {spec.json for _, spec, _ in schema}
    for key in raw:
        if key not in known:
            warnings.append(f"{path}.{key}: unknown field ignored")
    kwargs: dict[str, Any] = {}
    for name, spec, default in schema:
        item = raw.get(spec.json)
        kwargs[name] = default if item is None else _convert(spec, item, f"{path}.{spec.json}", warnings)
    return cls(**kwargs)


def from_dict(cls: type[T], raw: Any, path: str = "") -> tuple[T, tuple[str, ...]]:
    """Validate a JSON object against one of this module's dataclasses (no defaults merged).

    Used for NodeSLO-shaped pod annotations (``koordinator.sh/cpuBurst`` -> :class:`CPUBurstConfig`,
    ``koordinator.sh/memoryQOS`` -> :class:`PodMemoryQOSConfig`, ``koordinator.sh/blkioQOS`` ->
    :class:`BlkIOQOS`).  Returns the object and the unknown-field warnings; raises
    :class:`NodeSLOError` naming ``path`` on a bad type or range.
    """
    warnings: list[str] = []
    return _build(cls, raw, path or cls.__name__, warnings), tuple(warnings)


def overlay_config(base: T, top: object) -> T:
    """Fields set in ``top`` (not ``None``, not ``""``) replace those of ``base``.

    The dataclass form of :func:`json_overlay`, for pod-level overrides of a node-level config
    (e.g. a pod's ``koordinator.sh/cpuBurst`` over ``cpuBurstStrategy``).  ``top`` may be an
    instance of a sibling class sharing the fields (a :class:`PodMemoryQOSConfig` over a
    :class:`MemoryQOSCfg`): only the fields ``base`` has are considered.
    """
    base_names = {f.name for f in dataclasses.fields(base)}  # type: ignore[arg-type]
    changes = {
        f.name: getattr(top, f.name)
        for f in dataclasses.fields(top)  # type: ignore[arg-type]
        if f.name in base_names and getattr(top, f.name) not in (None, "")
    }
    return dataclasses.replace(base, **changes)  # type: ignore[type-var]


def default_memory_qos(qos: str) -> MemoryQOS | None:
    """The memory QoS template of a QoS class (the pod annotation's ``policy: auto``), or None."""
    template = _DEFAULT_MEMORY_QOS.get("LSR" if qos == "LSE" else qos)
    return None if template is None else _build(MemoryQOS, template, "default", [])


def _build_spec(merged: Mapping[str, Any], resource_version: str) -> NodeSLOSpec:
    warnings: list[str] = []
    top_known = {
        "resourceUsedThresholdWithBE",
        "resourceQOSStrategy",
        "cpuBurstStrategy",
        "systemStrategy",
        "extensions",
        "hostApplications",
    }
    for key in merged:
        if key not in top_known:
            warnings.append(f"spec.{key}: unknown field ignored")
    extensions = merged.get("extensions")
    if not isinstance(extensions, Mapping):
        raise NodeSLOError(f"spec.extensions: must be an object, got {_show(extensions)}")
    host_apps = merged.get("hostApplications")
    if not isinstance(host_apps, list):
        raise NodeSLOError(f"spec.hostApplications: must be a list, got {_show(host_apps)}")
    apps = tuple(
        _build(HostApplicationSpec, app, f"spec.hostApplications[{i}]", warnings)
        for i, app in enumerate(host_apps)
    )
    names = [app.name for app in apps]
    for i, name in enumerate(names):
        if name == "" or name in names[:i]:
            why = "name is required" if name == "" else f"duplicate name {json.dumps(name)}"
            raise NodeSLOError(f"spec.hostApplications[{i}].name: {why}")
    spec = NodeSLOSpec(
        resource_used_threshold_with_be=_build(
            ResourceThresholdStrategy,
            merged["resourceUsedThresholdWithBE"],
            "spec.resourceUsedThresholdWithBE",
            warnings,
        ),
        resource_qos_strategy=_build(
            ResourceQOSStrategy, merged["resourceQOSStrategy"], "spec.resourceQOSStrategy", warnings
        ),
        cpu_burst_strategy=_build(
            CPUBurstStrategy, merged["cpuBurstStrategy"], "spec.cpuBurstStrategy", warnings
        ),
        system_strategy=_build(SystemStrategy, merged["systemStrategy"], "spec.systemStrategy", warnings),
        extensions=MappingProxyType(copy.deepcopy(dict(extensions))),
        host_applications=apps,
        resource_version=resource_version,
        warnings=tuple(warnings),
        merged=MappingProxyType(dict(merged)),
    )
    return spec


def parse_nodeslo(obj: Mapping[str, Any] | None) -> NodeSLOSpec:
    """Merge and validate a whole NodeSLO object; ``None`` (no NodeSLO) gives the merged defaults.

    The object may omit ``apiVersion``/``kind`` (hand-written files); when present they must be
    ``slo.koordinator.sh/v1alpha1`` / ``NodeSLO``.  A missing or ``null`` ``spec`` means defaults.
    Raises :class:`NodeSLOError` naming the offending field path; never returns a partial result.
    """
    if obj is None:
        return _build_spec(merge_spec(None), "")
    if not isinstance(obj, Mapping):
        raise NodeSLOError(f"NodeSLO: must be an object, got {_show(obj)}")
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        raise NodeSLOError(f"apiVersion: must be {json.dumps(API_VERSION)}, got {_show(api_version)}")
    kind = obj.get("kind")
    if kind is not None and kind != KIND:
        raise NodeSLOError(f"kind: must be {json.dumps(KIND)}, got {_show(kind)}")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise NodeSLOError(f"metadata: must be an object, got {_show(metadata)}")
    resource_version = metadata.get("resourceVersion") or ""
    return _build_spec(merge_spec(obj.get("spec")), str(resource_version))


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_object(text: str, path: str = "") -> dict[str, Any]:
    """Parse a YAML or JSON document (JSON is YAML) into a dict; ``ValueError`` names ``path``."""
    where = path or "<text>"
    obj: Any
    try:
        # JSON first: the kubelet's /pods of a 1,000-pod node is megabytes, and the pure-Python
        # YAML parser takes seconds on it; the C JSON parser milliseconds.
        obj = json.loads(text)
    except ValueError:
        try:
            obj = yaml.load(text, Loader=_YAML_LOADER)
        except yaml.YAMLError as exc:
            raise ValueError(f"{where}: not valid YAML/JSON: {exc}") from None
    if obj is None:
        raise ValueError(f"{where}: empty document")
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object at the top level, got {type(obj).__name__}")
    return obj


__all__ = [
    "API_VERSION",
    "KIND",
    "BlkIOQOS",
    "BlkIOQOSCfg",
    "BlockCfg",
    "CPUBurstConfig",
    "CPUBurstStrategy",
    "CPUQOS",
    "CPUQOSCfg",
    "CgroupPath",
    "HostApplicationSpec",
    "IOCfg",
    "MemoryQOS",
    "MemoryQOSCfg",
    "NetworkQOS",
    "NetworkQOSCfg",
    "NodeSLOError",
    "NodeSLOSpec",
    "PodMemoryQOSConfig",
    "ResctrlQOS",
    "ResctrlQOSCfg",
    "ResourceQOS",
    "ResourceQOSPolicies",
    "ResourceQOSStrategy",
    "ResourceThresholdStrategy",
    "SystemStrategy",
    "default_memory_qos",
    "default_spec_dict",
    "from_dict",
    "json_overlay",
    "load_object",
    "merge_spec",
    "overlay_config",
    "parse_nodeslo",
]
