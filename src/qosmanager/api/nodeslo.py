"""The NodeSLO spec (``slo.koordinator.sh/v1alpha1``): schema, defaults, merge and validation.

A NodeSLO reaches the agent as JSON or YAML.  koordlet never uses it raw: it overlays the user's
spec onto its built-in defaults (koordlet-qos §2.4, koordlet-infra §5.3) and the strategies read
the merged result.  This module does the same:

1. **Decoding like Go's ``encoding/json``.**  A key of a JSON object fills the field of that name,
   or, when no field has exactly that name, the field whose name matches it case-insensitively
   (koordinator's own fixtures write ``iocfg`` for ``ioCfg``).  Several keys of one object that
   match the same field apply in document order: the later one wins, an object merges into the
   earlier one.  Unknown keys are ignored, as Go ignores them, and reported in
   :attr:`NodeSLOSpec.invalid_fields` (a misspelt key silently kept koordlet's default: the reader
   learns that the typo changed what applies; a key differing only in case is not unknown).  Keys of
   maps (``schedFeatures``, ``extensions``, ``hostApplications[].strategy``) match exactly.
2. :func:`merge_spec` -- a JSON overlay of the user spec onto :func:`default_spec_dict`, exactly
   what ``json.Unmarshal(json.Marshal(user), &defaults)`` does per section: nested objects merge
   field by field (keys matched as above), maps merge key-wise, lists replace, and an explicit
   ``null`` (or an empty string, which Go's ``omitempty`` drops before the overlay) keeps the
   default.  Then, for the LSR, LS and BE classes, a ``cpuQOS``/``resctrlQOS``/``memoryQOS`` with
   ``enable: false`` has its fields replaced by the "None" variant (the ``enable`` flag stays).
3. :func:`parse_nodeslo` builds typed, frozen dataclasses from the merged dict, checking types and
   the ranges of koordinator's validation tags **field by field**, as koordlet (which skips only
   the feature or the file a bad value belongs to) effectively does.  A value out of range or of
   the wrong type is dropped and reported in :attr:`NodeSLOSpec.invalid_fields` (its JSON path and
   why); every problem is reported, not only the first, and everything else applies.  The field
   falls back to what koordlet would do without a usable value:

   * most fields: koordlet's merged default, as if the field had not been written (for fields
     without a default, such as ``systemStrategy``'s knobs or the eviction thresholds: unset, so
     that knob is not touched and that eviction feature is skipped, as koordlet skips them);
   * a ``memoryQOS`` or ``resctrlQOS`` value, ``cpuBurstPercent``: left unset, so the strategy
     leaves those files as they are (koordlet's write validators skip the value it would derive);
     ``cfsQuotaBurstPercent``: unset, which allows no quota burst (koordlet's reading of a
     percentage below 100);
   * ``resourceUsedThresholdWithBE.enable`` (or the whole section): unset, so BE suppression and
     the evictions do nothing at all, not even their recovery, instead of switching off;
   * a class's ``cpuQOS``/``memoryQOS``/``blkioQOS``/``resctrlQOS``/``networkQOS`` with a bad
     ``enable``, or a bad value anywhere in one of its blkio ``blocks``: that feature of that class
     is left as it is (koordlet aborts a blkio target it cannot resolve); a whole class or
     ``resourceQOSStrategy`` of the wrong type: left as it is;
   * a bad value in a host application, a missing or duplicate name: that application is ignored.

   Enum-like strings follow koordlet: an unknown ``cpuSuppressPolicy`` means ``cpuset``, an
   unknown ``cpuEvictPolicy`` ``evictByRealLimit``, an unknown burst ``policy`` ``none``; koordlet's
   reading applies and the value is reported in :attr:`NodeSLOSpec.invalid_fields` like a dropped
   one (``cfsquota`` switched the node to cpuset suppression without a word).  Where koordlet takes
   any string (the runtime-hook policies, a host application's QoS) an unknown one is a warning.
   Cross-field rules (lower < upper, start < end) are left to the strategies' own
   config checks, which skip just that feature, as koordlet does.  Only a document that is not a
   NodeSLO at all (not an object, another ``apiVersion``/``kind``, a ``spec`` or ``metadata`` that
   is not an object) raises :class:`NodeSLOError`; the state store then keeps the last good spec.
4. :func:`from_dict` decodes the NodeSLO-shaped pod annotations with the same key matching, but
   strictly: the first bad value raises :class:`NodeSLOError` (the pod's feature is then skipped).

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

from qosmanager.api.quantity import parse_quantity, value
from qosmanager.logfmt import shown

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

# What a bad value in a NodeSLO falls back to (see the module docstring).
DEFAULT = "default"  # koordlet's merged default at that path, as if the field had not been written
UNSET = "unset"  # the field is left unset (None): the strategy leaves that file or feature as it is
FEATURE = "feature"  # the enclosing feature object (a class's cpuQOS/.../networkQOS, a host application)
EMPTY = "empty"  # a section: an object with every field unset
KEEP = "keep"  # an enum-like string koordlet takes whatever it says: an unknown value is kept as written


class NodeSLOError(ValueError):
    """A NodeSLO (or a NodeSLO-shaped pod annotation) that cannot be used; says which field and why."""


# --------------------------------------------------------------------------------------------
# Field specs: every dataclass field carries its JSON name, kind, valid range and the fallback of
# a bad value as metadata, and one generic builder reads JSON through them.  The schema is written
# once, below; deploy/gen_crd.py derives the CRD's field list and types from it.


@dataclass(frozen=True, slots=True)
class _Spec:
    json: str
    kind: str  # int | bool | str | enum | obj | list | boolmap | quantity | intstr | any
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()
    cls: Any = None
    on_bad: str = DEFAULT
    unknown: str | None = None  # enum: what an unknown string means (KEEP: itself); None: it is bad


def _int(name: str, lo: int | None = None, hi: int | None = None, bits: int = 64, *,
         on_bad: str = DEFAULT) -> Any:
    lo_b, hi_b = _INT64 if bits == 64 else _INT32
    spec = _Spec(name, "int", lo if lo is not None else lo_b, hi if hi is not None else hi_b, on_bad=on_bad)
    return field(default=None, metadata={"spec": spec})


def _bool(name: str, *, on_bad: str = DEFAULT) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "bool", on_bad=on_bad)})


def _str(name: str, default: str | None = "", *, on_bad: str = DEFAULT) -> Any:
    return field(default=default, metadata={"spec": _Spec(name, "str", on_bad=on_bad)})


def _enum(name: str, *choices: str, default: str | None = None, unknown: str | None = None,
          on_bad: str = DEFAULT) -> Any:
    spec = _Spec(name, "enum", choices=choices, unknown=unknown, on_bad=on_bad)
    return field(default=default, metadata={"spec": spec})


def _obj(name: str, cls: Any, default: Any = None, *, on_bad: str = DEFAULT) -> Any:
    return field(default=default, metadata={"spec": _Spec(name, "obj", cls=cls, on_bad=on_bad)})


def _list(name: str, cls: Any, *, on_bad: str = DEFAULT) -> Any:
    return field(default=(), metadata={"spec": _Spec(name, "list", cls=cls, on_bad=on_bad)})


def _boolmap(name: str) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "boolmap")})


def _quantity(name: str) -> Any:
    return field(default=0, metadata={"spec": _Spec(name, "quantity")})


def _intstr(name: str) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "intstr", 0, 100)})


def _any(name: str, *, on_bad: str = DEFAULT) -> Any:
    return field(default=None, metadata={"spec": _Spec(name, "any", on_bad=on_bad)})


# --------------------------------------------------------------------------------------------
# Schema (qos §3).  Ranges: the CRD's kubebuilder markers and koordinator's `validate` tags.


@dataclass(frozen=True, slots=True)
class ResourceThresholdStrategy:
    """``resourceUsedThresholdWithBE``: the master switch and thresholds of suppress and evict."""

    enable: bool | None = _bool("enable", on_bad=UNSET)
    cpu_suppress_threshold_percent: int | None = _int("cpuSuppressThresholdPercent", 0, 100)
    cpu_suppress_min_percent: int | None = _int("cpuSuppressMinPercent", 0, 100)
    cpu_suppress_policy: str | None = _enum(
        "cpuSuppressPolicy", CPU_SUPPRESS_POLICY_CPUSET, CPU_SUPPRESS_POLICY_CFS_QUOTA, "",
        unknown=CPU_SUPPRESS_POLICY_CPUSET,
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
        "cpuEvictPolicy", CPU_EVICT_POLICY_REAL_LIMIT, CPU_EVICT_POLICY_ALLOCATABLE, "",
        unknown=CPU_EVICT_POLICY_REAL_LIMIT,
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
    enable: bool | None = _bool("enable", on_bad=FEATURE)


@dataclass(frozen=True, slots=True)
class MemoryQOS:
    min_limit_percent: int | None = _int("minLimitPercent", 0, 100, on_bad=UNSET)
    low_limit_percent: int | None = _int("lowLimitPercent", 0, 100, on_bad=UNSET)
    throttling_percent: int | None = _int("throttlingPercent", 0, 100, on_bad=UNSET)
    wmark_ratio: int | None = _int("wmarkRatio", 0, 100, on_bad=UNSET)
    wmark_scale_permill: int | None = _int("wmarkScalePermill", 1, 1000, on_bad=UNSET)
    wmark_min_adj: int | None = _int("wmarkMinAdj", -25, 50, on_bad=UNSET)
    priority_enable: int | None = _int("priorityEnable", 0, 1, on_bad=UNSET)
    priority: int | None = _int("priority", 0, 12, on_bad=UNSET)
    oom_kill_group: int | None = _int("oomKillGroup", 0, 1, on_bad=UNSET)
    page_cache_enable: bool | None = _bool("pageCacheEnable", on_bad=UNSET)
    page_cache_limit_percent: int | None = _int("pageCacheLimitPercent", 0, 100, on_bad=UNSET)
    page_cache_limit_size: int | None = _int("pageCacheLimitSize", 0, on_bad=UNSET)
    page_cache_reclaim_sync: bool | None = _bool("pageCacheReclaimSync", on_bad=UNSET)


@dataclass(frozen=True, slots=True)
class MemoryQOSCfg(MemoryQOS):
    enable: bool | None = _bool("enable", on_bad=FEATURE)


# Fields koordlet's NodeSLO types have that this agent does not use (memoryQOS's earlier page-cache
# knobs; deploy/gen_crd.py keeps them in the CRD): not unknown to koordlet, so ignored with a warning.
KOORDLET_ONLY_FIELDS: Mapping[type, frozenset[str]] = MappingProxyType({
    MemoryQOSCfg: frozenset({"pageCacheLimitEnable", "pageCacheLimitSync"}),
})


@dataclass(frozen=True, slots=True)
class PodMemoryQOSConfig(MemoryQOS):
    """The pod annotation ``koordinator.sh/memoryQOS``: a policy plus MemoryQOS overrides."""

    # koordlet: "none" and "auto" are special, anything else is the default policy
    policy: str | None = _enum("policy", "", "default", "none", "auto", unknown="default")


@dataclass(frozen=True, slots=True)
class IOCfg:
    read_iops: int | None = _int("readIOPS", 0, on_bad=FEATURE)
    write_iops: int | None = _int("writeIOPS", 0, on_bad=FEATURE)
    read_bps: int | None = _int("readBPS", 0, on_bad=FEATURE)
    write_bps: int | None = _int("writeBPS", 0, on_bad=FEATURE)
    io_weight_percent: int | None = _int("ioWeightPercent", 1, 100, on_bad=FEATURE)
    read_latency: int | None = _int("readLatency", 0, on_bad=FEATURE)
    write_latency: int | None = _int("writeLatency", 0, on_bad=FEATURE)
    read_latency_percent: int | None = _int("readLatencyPercent", 0, 100, on_bad=FEATURE)
    write_latency_percent: int | None = _int("writeLatencyPercent", 0, 100, on_bad=FEATURE)
    enable_user_model: bool | None = _bool("enableUserModel", on_bad=FEATURE)
    model_read_bps: int | None = _int("modelReadBPS", 1, on_bad=FEATURE)
    model_write_bps: int | None = _int("modelWriteBPS", 1, on_bad=FEATURE)
    model_read_seq_iops: int | None = _int("modelReadSeqIOPS", 1, on_bad=FEATURE)
    model_write_seq_iops: int | None = _int("modelWriteSeqIOPS", 1, on_bad=FEATURE)
    model_read_rand_iops: int | None = _int("modelReadRandIOPS", 1, on_bad=FEATURE)
    model_write_rand_iops: int | None = _int("modelWriteRandIOPS", 1, on_bad=FEATURE)


@dataclass(frozen=True, slots=True)
class BlockCfg:
    name: str = _str("name", on_bad=FEATURE)
    # koordlet cannot resolve a block of another type and leaves the whole target as it is
    type: str = _enum("type", BLOCK_DEVICE, BLOCK_VOLUME_GROUP, BLOCK_POD_VOLUME, "", default="",
                      on_bad=FEATURE)
    io_cfg: IOCfg = _obj("ioCfg", IOCfg, default=IOCfg(), on_bad=FEATURE)  # noqa: RUF009 (a field spec)


@dataclass(frozen=True, slots=True)
class BlkIOQOS:
    """Also the pod annotation ``koordinator.sh/blkioQOS``."""

    blocks: tuple[BlockCfg, ...] = _list("blocks", BlockCfg, on_bad=FEATURE)


@dataclass(frozen=True, slots=True)
class BlkIOQOSCfg(BlkIOQOS):
    enable: bool | None = _bool("enable", on_bad=FEATURE)


@dataclass(frozen=True, slots=True)
class ResctrlQOS:
    cat_range_start_percent: int | None = _int("catRangeStartPercent", 0, 100, on_bad=UNSET)
    cat_range_end_percent: int | None = _int("catRangeEndPercent", 0, 100, on_bad=UNSET)
    mba_percent: int | None = _int("mbaPercent", 0, 100, on_bad=UNSET)


@dataclass(frozen=True, slots=True)
class ResctrlQOSCfg(ResctrlQOS):
    enable: bool | None = _bool("enable", on_bad=FEATURE)


@dataclass(frozen=True, slots=True)
class NetworkQOS:
    """Bandwidths: an int is a percentage of the node total (0..100), a string a quantity ("50M")."""

    ingress_request: int | str | None = _intstr("ingressRequest")
    ingress_limit: int | str | None = _intstr("ingressLimit")
    egress_request: int | str | None = _intstr("egressRequest")
    egress_limit: int | str | None = _intstr("egressLimit")


@dataclass(frozen=True, slots=True)
class NetworkQOSCfg(NetworkQOS):
    enable: bool | None = _bool("enable", on_bad=FEATURE)


@dataclass(frozen=True, slots=True)
class ResourceQOS:
    cpu_qos: CPUQOSCfg | None = _obj("cpuQOS", CPUQOSCfg, on_bad=UNSET)  # noqa: RUF009 (a field spec)
    memory_qos: MemoryQOSCfg | None = _obj("memoryQOS", MemoryQOSCfg, on_bad=UNSET)  # noqa: RUF009
    blkio_qos: BlkIOQOSCfg | None = _obj("blkioQOS", BlkIOQOSCfg, on_bad=UNSET)  # noqa: RUF009
    resctrl_qos: ResctrlQOSCfg | None = _obj("resctrlQOS", ResctrlQOSCfg, on_bad=UNSET)  # noqa: RUF009
    network_qos: NetworkQOSCfg | None = _obj("networkQOS", NetworkQOSCfg, on_bad=UNSET)  # noqa: RUF009


@dataclass(frozen=True, slots=True)
class ResourceQOSPolicies:
    # runtime-hook policies this agent does not apply: any string is kept, an unknown one with a warning
    cpu_policy: str | None = _enum("cpuPolicy", "groupIdentity", "coreSched", "", unknown=KEEP)
    net_qos_policy: str | None = _enum("netQOSPolicy", "tc", "terway-qos", "", unknown=KEEP)


@dataclass(frozen=True, slots=True)
class ResourceQOSStrategy:
    policies: ResourceQOSPolicies | None = _obj("policies", ResourceQOSPolicies)  # noqa: RUF009
    lsr_class: ResourceQOS | None = _obj("lsrClass", ResourceQOS, on_bad=UNSET)  # noqa: RUF009 (a field spec)
    ls_class: ResourceQOS | None = _obj("lsClass", ResourceQOS, on_bad=UNSET)  # noqa: RUF009 (a field spec)
    be_class: ResourceQOS | None = _obj("beClass", ResourceQOS, on_bad=UNSET)  # noqa: RUF009 (a field spec)
    system_class: ResourceQOS | None = _obj("systemClass", ResourceQOS, on_bad=UNSET)  # noqa: RUF009
    cgroup_root: ResourceQOS | None = _obj("cgroupRoot", ResourceQOS, on_bad=UNSET)  # noqa: RUF009


@dataclass(frozen=True, slots=True)
class CPUBurstConfig:
    """Also the pod annotation ``koordinator.sh/cpuBurst``."""

    # koordlet bursts only for the policies it names: anything else behaves as "none"
    policy: str | None = _enum(
        "policy", CPU_BURST_NONE, CPU_BURST_ONLY, CFS_QUOTA_BURST_ONLY, CPU_BURST_AUTO, "",
        unknown=CPU_BURST_NONE,
    )
    # unset: cpuBurst leaves the cfs_burst_us files as they are (koordlet's validator refuses the
    # value a bad percentage gives); a bad ceiling percentage means no quota burst, as in koordlet
    cpu_burst_percent: int | None = _int("cpuBurstPercent", 0, 10000, on_bad=UNSET)
    cfs_quota_burst_percent: int | None = _int("cfsQuotaBurstPercent", 100, on_bad=UNSET)
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
    # a base this agent cannot resolve would aim at another cgroup: the application is ignored
    base: str = _enum(
        "base",
        CGROUP_BASE_ROOT,
        CGROUP_BASE_KUBEPODS,
        CGROUP_BASE_KUBEPODS_BURSTABLE,
        CGROUP_BASE_KUBEPODS_BESTEFFORT,
        "",
        default="",
        on_bad=FEATURE,
    )
    parent_dir: str = _str("parentDir", on_bad=FEATURE)
    relative_path: str = _str("relativePath", on_bad=FEATURE)


@dataclass(frozen=True, slots=True)
class HostApplicationSpec:
    """An out-of-band (non-pod) application whose usage and QoS the agent accounts for."""

    name: str = _str("name", on_bad=FEATURE)
    # koordlet takes any string here (an unknown QoS is neither LS nor BE): kept, with a warning
    priority: str = _enum("priority", "koord-prod", "koord-mid", "koord-batch", "koord-free", "", default="",
                          unknown=KEEP, on_bad=FEATURE)
    qos: str = _enum("qos", "LSE", "LSR", "LS", "BE", "SYSTEM", "", default="", unknown=KEEP, on_bad=FEATURE)
    cgroup_path: CgroupPath | None = _obj("cgroupPath", CgroupPath, on_bad=FEATURE)  # noqa: RUF009
    strategy: Mapping[str, Any] | None = _any("strategy", on_bad=FEATURE)


# A bad value under one of these (with the FEATURE fallback) leaves that whole object unset: the
# feature of that class is left as it is, the host application is ignored.
_FEATURE_ROOTS: frozenset[type] = frozenset(
    {CPUQOSCfg, MemoryQOSCfg, BlkIOQOSCfg, ResctrlQOSCfg, NetworkQOSCfg, HostApplicationSpec}
)


@dataclass(frozen=True, slots=True)
class _SpecBody:
    """The sections of ``spec``, for the decoder (:class:`NodeSLOSpec` adds what parsing found)."""

    resource_used_threshold_with_be: ResourceThresholdStrategy = _obj(  # noqa: RUF009 (a field spec)
        "resourceUsedThresholdWithBE", ResourceThresholdStrategy, on_bad=EMPTY)
    resource_qos_strategy: ResourceQOSStrategy = _obj(  # noqa: RUF009 (a field spec)
        "resourceQOSStrategy", ResourceQOSStrategy, on_bad=EMPTY)
    cpu_burst_strategy: CPUBurstStrategy = _obj("cpuBurstStrategy", CPUBurstStrategy)  # noqa: RUF009
    system_strategy: SystemStrategy = _obj("systemStrategy", SystemStrategy)  # noqa: RUF009 (a field spec)
    extensions: Mapping[str, Any] = _any("extensions")
    host_applications: tuple[HostApplicationSpec, ...] = _list("hostApplications", HostApplicationSpec)


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
    warnings: tuple[str, ...] = ()  # enum-like values koordlet takes as written although it knows them not
    # the values that were dropped or that koordlet reads otherwise than written (an unknown key, an
    # unknown enum value): (JSON path, why and what applies instead), in the order found
    invalid_fields: tuple[tuple[str, str], ...] = ()
    # the spec in force as JSON (merged, dropped values and ignored applications left out), read-only
    merged: Mapping[str, Any] = field(default_factory=dict)

    def invalid_summary(self) -> str:
        """One sentence naming every dropped field and why ("" when nothing was dropped)."""
        n = len(self.invalid_fields)
        if n == 0:
            return ""
        fields = "; ".join(f"{path}: {why}" for path, why in self.invalid_fields)
        return f"{n} NodeSLO field{'s' if n > 1 else ''} dropped, everything else applies: {fields}"

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



_DEFAULT_SPEC = default_spec_dict()  # read-only: where a dropped value finds koordlet's default


# --------------------------------------------------------------------------------------------
# Key matching: Go's encoding/json

# Go compares a key with a field name under Unicode simple case folding.  The field names here are
# ASCII, so that is ASCII case plus the two non-ASCII letters that fold onto ASCII ones.
_FOLD = str.maketrans({**{chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)},
                       "\u212a": "k", "\u017f": "s"})  # KELVIN SIGN, LATIN SMALL LETTER LONG S


def _fold(key: str) -> str:
    return key.translate(_FOLD)


@dataclass(frozen=True, slots=True)
class _Schema:
    fields: tuple[tuple[str, _Spec, Any], ...]  # (attribute, spec, default) in declaration order
    exact: Mapping[str, _Spec]
    folded: Mapping[str, _Spec]


_SCHEMAS: dict[type, _Schema] = {}


def _schema(cls: type) -> _Schema:
    schema = _SCHEMAS.get(cls)
    if schema is None:
        fields = tuple((f.name, f.metadata["spec"], f.default) for f in dataclasses.fields(cls))
        schema = _Schema(fields, {s.json: s for _, s, _ in fields}, {_fold(s.json): s for _, s, _ in fields})
        _SCHEMAS[cls] = schema
    return schema


def _field_for(schema: _Schema, key: Any) -> _Spec | None:
    """The field a JSON key fills: the one named exactly so, else the one named so up to case."""
    if not isinstance(key, str):
        return None
    spec = schema.exact.get(key)
    return spec if spec is not None else schema.folded.get(_fold(key))


_MISSING = object()


def key_text(key: Any) -> str:
    """A key as a path or a log line shows it: printable (escapes spelled out, as ``repr`` does), at
    most 64 characters; a NodeSLO key is written by whoever may edit the NodeSLO, and ANSI escapes
    or a newline in it must not forge a line of the agent's log."""
    return shown(key, 64)


def _go_fields(schema: _Schema, raw: Mapping[Any, Any], path: str, dec: _Decode,
               unused: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The value of each field named in ``raw``, keyed by its JSON name, as Go decodes an object:
    keys in document order, a later key for the same field overwriting (an object merging into)
    the earlier one, unknown keys ignored and reported (:meth:`_Decode.misread`); a key of
    ``unused`` (a field koordlet knows and this agent does not use) is ignored with a warning."""
    out: dict[str, Any] = {}
    for key, item in raw.items():
        spec = _field_for(schema, key)
        if spec is None and isinstance(key, str) and _fold(key) in {_fold(u) for u in unused}:
            dec.warnings.append(f"{path}.{key_text(key)}: a field of koordlet's that this agent does not use, "
                                "ignored")
            continue
        if spec is None:
            dec.misread(f"{path}.{key_text(key)}", "unknown field ignored",
                        "unknown field: koordlet ignores it (a misspelt name?), so what it would set keeps "
                        "koordlet's default")
            continue
        prev = out.get(spec.json, _MISSING)
        if (spec.kind in ("obj", "boolmap", "any") and isinstance(prev, Mapping)
                and isinstance(item, Mapping)):
            item = json_overlay(prev, item, spec.cls if spec.kind == "obj" else None)
        out[spec.json] = item
    return out


# --------------------------------------------------------------------------------------------
# Merge


def json_overlay(base: Any, user: Any, cls: type | None = None) -> Any:
    """Overlay ``user`` onto ``base`` like Go's ``json.Unmarshal`` into a pre-filled struct.

    Objects merge key by key (recursively), lists and scalars replace, and ``None`` or ``""`` in
    ``user`` keeps the base value (Go's ``omitempty`` drops them before the overlay).  With ``cls``
    (the dataclass of this module that ``base`` is the JSON of), a key of ``user`` fills the field
    it names exactly or, failing that, case-insensitively, and the result carries it under the
    field's own name, so a default cannot shadow a differently-cased user key; keys that name no
    field stay as written (the builder reports them).  Keys of maps match exactly.  Neither argument
    is modified; the result shares no mutable parts with them.
    """
    if user is None or (user == "" and isinstance(base, str)):
        return copy.deepcopy(base)
    if not (isinstance(base, Mapping) and isinstance(user, Mapping)):
        return copy.deepcopy(user)
    out = {k: copy.deepcopy(v) for k, v in base.items()}
    schema = _schema(cls) if cls is not None else None
    for key, item in user.items():
        spec = _field_for(schema, key) if schema is not None else None
        if spec is None:
            out[key] = json_overlay(out[key], item) if key in out else copy.deepcopy(item)
            continue
        sub = spec.cls if spec.kind == "obj" else None
        name = spec.json
        if name in out:
            out[name] = json_overlay(out[name], item, sub)
        elif item is not None:
            out[name] = json_overlay({}, item, sub) if isinstance(item, Mapping) else copy.deepcopy(item)
    return out


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

    ``None`` gives the merged defaults.  Keys match field names like Go's (see :func:`json_overlay`);
    the result carries every known field under its own name.  Raises :class:`NodeSLOError` if
    ``user_spec`` is not an object.  Types inside are not checked here (that is
    :func:`parse_nodeslo`'s job).
    """
    if user_spec is not None and not isinstance(user_spec, Mapping):
        raise NodeSLOError(f"spec: must be an object, got {_show(user_spec)}")
    merged: dict[str, Any] = json_overlay(default_spec_dict(), user_spec, _SpecBody)
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


class _BadValue(NodeSLOError):
    """One value that cannot be used: where, and why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class _FeatureDrop(Exception):
    """Bad values whose fallback is to leave the enclosing feature object unset (see FEATURE)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(problems)
        self.problems = problems


@dataclass
class _Decode:
    """One decoding pass: ``strict`` (pod annotations: the first bad value raises) or lenient per
    field (a NodeSLO: bad values are dropped and collected in ``invalid``)."""

    strict: bool
    warnings: list[str] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)

    def misread(self, path: str, warning: str, invalid: str) -> None:
        """Something koordlet reads otherwise than it is written (an unknown key, an enum value it
        replaces): a pod annotation's warning; in a NodeSLO, reported like a dropped value (the
        ``nodeslo`` condition, the metric, the Event), koordlet's reading still applying."""
        if self.strict:
            self.warnings.append(f"{path}: {warning}")
        else:
            self.invalid.append((path, invalid))


def _convert(spec: _Spec, raw: Any, path: str, dec: _Decode, dpath: tuple[str, ...] | None) -> Any:
    """``raw`` as the field's Python value; :class:`_BadValue` when it cannot be used at all."""
    kind = spec.kind
    if kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise _BadValue(path, f"must be an integer{_range_text(spec)}, got {_show(raw)}")
        assert spec.lo is not None and spec.hi is not None
        if not spec.lo <= raw <= spec.hi:
            raise _BadValue(path, f"must be an integer{_range_text(spec)}, got {_show(raw)}")
        return raw
    if kind == "bool":
        if not isinstance(raw, bool):
            raise _BadValue(path, f"must be a boolean, got {_show(raw)}")
        return raw
    if kind == "str":
        if not isinstance(raw, str):
            raise _BadValue(path, f"must be a string, got {_show(raw)}")
        return raw
    if kind == "enum":
        if isinstance(raw, str) and raw in spec.choices:
            return raw
        if not isinstance(raw, str) or spec.unknown is None:
            choices = ", ".join(json.dumps(c) for c in spec.choices)
            raise _BadValue(path, f"must be one of {choices}, got {_show(raw)}")
        if spec.unknown == KEEP:
            dec.warnings.append(f"{path}: unknown value {_show(raw)} kept as written (koordlet takes any "
                                "string here)")
            return raw
        meaning = json.dumps(spec.unknown)
        dec.misread(path, f"unknown value {_show(raw)} read as {meaning}, as koordlet reads it",
                    f"unknown value {_show(raw)}: koordlet reads it as {meaning}, which applies "
                    f"(one of {', '.join(json.dumps(c) for c in spec.choices if c)} was meant?)")
        return spec.unknown
    if kind == "obj":
        return _build(spec.cls, raw, path, dec, dpath)
    if kind == "list":
        if not isinstance(raw, list):
            raise _BadValue(path, f"must be a list, got {_show(raw)}")
        return _build_list(spec, raw, path, dec)
    if kind == "boolmap":
        if not isinstance(raw, Mapping):
            raise _BadValue(path, f"must be an object of booleans, got {_show(raw)}")
        out: dict[str, bool] = {}
        for key, item in raw.items():
            if isinstance(key, str) and isinstance(item, bool):
                out[key] = item
                continue
            bad = _BadValue(f"{path}.{key}", f"must be a boolean, got {_show(item)}")
            if dec.strict:
                raise bad
            dec.invalid.append((bad.path, f"{bad.reason}; the entry is ignored"))
        return MappingProxyType(out)
    if kind == "quantity":
        try:
            return value(raw)
        except ValueError as exc:
            raise _BadValue(path, str(exc)) from None
    if kind == "intstr":
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise _BadValue(path, f"must be a percentage (integer) or a quantity string, got {_show(raw)}")
        if isinstance(raw, int):
            assert spec.lo is not None and spec.hi is not None
            if not spec.lo <= raw <= spec.hi:
                raise _BadValue(path, f"a percentage must be in [{spec.lo}, {spec.hi}], got {raw}")
            return raw
        try:
            parse_quantity(raw)
        except ValueError as exc:
            raise _BadValue(path, str(exc)) from None
        return raw
    if kind == "any":
        if not isinstance(raw, Mapping):
            raise _BadValue(path, f"must be an object, got {_show(raw)}")
        return MappingProxyType(copy.deepcopy(dict(raw)))
    raise AssertionError(f"unknown field kind {kind}")  # pragma: no cover - schema bug


T = TypeVar("T")


def _build(cls: type[T], raw: Any, path: str, dec: _Decode, dpath: tuple[str, ...] | None) -> T:
    """One object of this module's dataclasses from JSON (``dpath``: its path in the defaults,
    where a dropped value finds koordlet's default; None inside lists and pod annotations)."""
    if not isinstance(raw, Mapping):
        raise _BadValue(path, f"must be an object, got {_show(raw)}")
    schema = _schema(cls)
    values = _go_fields(schema, raw, path, dec, KOORDLET_ONLY_FIELDS.get(cls, frozenset()))
    kwargs: dict[str, Any] = {}
    feature_problems: list[tuple[str, str]] = []
    for name, spec, default in schema.fields:
        item = values.get(spec.json)
        if item is None:
            kwargs[name] = default
            continue
        fpath = f"{path}.{spec.json}"
        fdpath = None if dpath is None else (*dpath, spec.json)
        try:
            kwargs[name] = _convert(spec, item, fpath, dec, fdpath)
        except _FeatureDrop as drop:
            if spec.kind == "obj" and spec.cls in _FEATURE_ROOTS:
                dec.invalid.extend((p, f"{r}; {fpath} is ignored") for p, r in drop.problems)
                kwargs[name] = None
            else:
                feature_problems.extend(drop.problems)
                kwargs[name] = default
        except _BadValue as bad:
            if dec.strict:
                raise
            if spec.on_bad == FEATURE:
                feature_problems.append((bad.path, bad.reason))
                kwargs[name] = default
            else:
                kwargs[name] = _fallback(spec, default, fdpath, bad, dec)
    if feature_problems:
        raise _FeatureDrop(feature_problems)
    return cls(**kwargs)


def _fallback(spec: _Spec, default: Any, dpath: tuple[str, ...] | None, bad: _BadValue, dec: _Decode) -> Any:
    """What a dropped value of a NodeSLO field is replaced with (its ``on_bad``), recorded."""
    if spec.on_bad == EMPTY:
        dec.invalid.append((bad.path, f"{bad.reason}; every field of it is left unset"))
        return spec.cls()
    if spec.on_bad == UNSET:
        dec.invalid.append((bad.path, f"{bad.reason}; left unset (what it sets is left as it is)"))
        return None
    node: Any = _DEFAULT_SPEC if dpath is not None else None
    for key in dpath or ():
        node = node.get(key) if isinstance(node, Mapping) else None
    if node is None:
        dec.invalid.append((bad.path, f"{bad.reason}; left unset, as if not written"))
        return default
    shown = _show(node) if not isinstance(node, (Mapping, list)) else "value"
    dec.invalid.append((bad.path, f"{bad.reason}; koordlet's default {shown} applies"))
    return _convert(spec, node, bad.path, _Decode(strict=True), dpath)


def _build_list(spec: _Spec, raw: list[Any], path: str, dec: _Decode) -> tuple[Any, ...]:
    """The objects of a list.  A bad entry of a feature root (a host application) is left out;
    a bad entry of anything else leaves the enclosing feature unset (a blkio block)."""
    items: list[tuple[int, Any]] = []
    feature_problems: list[tuple[str, str]] = []
    for i, entry in enumerate(raw):
        try:
            items.append((i, _build(spec.cls, entry, f"{path}[{i}]", dec, None)))
            continue
        except _BadValue as bad:  # the entry itself is not an object
            if dec.strict:
                raise
            problems = [(bad.path, bad.reason)]
        except _FeatureDrop as drop:
            problems = drop.problems
        if spec.cls in _FEATURE_ROOTS:
            dec.invalid.extend((p, f"{r}; {path}[{i}] is ignored") for p, r in problems)
        else:
            feature_problems.extend(problems)
    if feature_problems:
        raise _FeatureDrop(feature_problems)
    check = _LIST_CHECKS.get(spec.cls)
    if check is not None and not dec.strict:
        items = check(items, path, dec)
    return tuple(item for _, item in items)


def _unique_host_apps(items: list[tuple[int, Any]], path: str, dec: _Decode) -> list[tuple[int, Any]]:
    """Host applications need a name, unique in the list (usage is keyed by it): others are left out."""
    kept: list[tuple[int, Any]] = []
    names: set[str] = set()
    for i, app in items:
        if app.name == "" or app.name in names:
            why = "is required" if app.name == "" else f"duplicate name {_show(app.name)}"
            dec.invalid.append((f"{path}[{i}].name", f"{why}; {path}[{i}] is ignored"))
            continue
        names.add(app.name)
        kept.append((i, app))
    return kept


_LIST_CHECKS: dict[type, Any] = {HostApplicationSpec: _unique_host_apps}


def _to_json(obj: Any) -> Any:
    """A built object back as JSON: fields that are unset or hold their zero value left out (Go's
    ``omitempty``: an empty ``cgroupPath`` stays empty, so the default path applies)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {spec.json: _to_json(getattr(obj, name))
                for name, spec, default in _schema(type(obj)).fields
                if getattr(obj, name) is not None and getattr(obj, name) != default}
    if isinstance(obj, Mapping):
        return copy.deepcopy(dict(obj))
    if isinstance(obj, tuple):
        return [_to_json(item) for item in obj]
    return obj


def from_dict(cls: type[T], raw: Any, path: str = "") -> tuple[T, tuple[str, ...]]:
    """Validate a JSON object against one of this module's dataclasses (no defaults merged).

    Used for NodeSLO-shaped pod annotations (``koordinator.sh/cpuBurst`` -> :class:`CPUBurstConfig`,
    ``koordinator.sh/memoryQOS`` -> :class:`PodMemoryQOSConfig`, ``koordinator.sh/blkioQOS`` ->
    :class:`BlkIOQOS`).  Keys match like Go's (exactly, else case-insensitively; unknown ones are
    ignored), enum-like strings are read the way koordlet reads them.  Returns the object and the
    warnings (unknown fields, such enum values); strict otherwise: raises :class:`NodeSLOError`
    naming ``path`` on the first bad type or range.
    """
    dec = _Decode(strict=True)
    return _build(cls, raw, path or cls.__name__, dec, None), tuple(dec.warnings)


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
    return None if template is None else _build(MemoryQOS, template, "default", _Decode(strict=True), None)


def _build_spec(merged: Mapping[str, Any], resource_version: str) -> NodeSLOSpec:
    dec = _Decode(strict=False)
    body = _build(_SpecBody, merged, "spec", dec, ())
    return NodeSLOSpec(
        resource_used_threshold_with_be=body.resource_used_threshold_with_be,
        resource_qos_strategy=body.resource_qos_strategy,
        cpu_burst_strategy=body.cpu_burst_strategy,
        system_strategy=body.system_strategy,
        extensions=body.extensions,
        host_applications=body.host_applications,
        resource_version=resource_version,
        warnings=tuple(dec.warnings),
        invalid_fields=tuple(dec.invalid),
        merged=MappingProxyType(_to_json(body)),
    )


def parse_nodeslo(obj: Mapping[str, Any] | None) -> NodeSLOSpec:
    """Merge and validate a whole NodeSLO object; ``None`` (no NodeSLO) gives the merged defaults.

    The object may omit ``apiVersion``/``kind`` (hand-written files); when present they must be
    ``slo.koordinator.sh/v1alpha1`` / ``NodeSLO``.  A missing or ``null`` ``spec`` means defaults.
    Lenient per field: a bad value is dropped, reported in :attr:`NodeSLOSpec.invalid_fields` and
    replaced as the module docstring says; everything else applies.  Raises :class:`NodeSLOError`
    only for a document that is not a NodeSLO at all (not an object, another ``apiVersion`` or
    ``kind``, a ``spec`` or ``metadata`` that is not an object).
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
    "KOORDLET_ONLY_FIELDS",
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
    "merge_spec",
    "overlay_config",
    "parse_nodeslo",
]
