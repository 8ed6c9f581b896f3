"""The NodeSLO schema (``slo.koordinator.sh/v1alpha1``): every field, its range, its default.

This file stays whole on purpose: it is one table, read top to bottom against koordinator's Go
types, and splitting it would scatter a struct's fields from their ranges.  How a document is
decoded through it is :mod:`qosmanager.api.nodeslo_decode`; the door (import from there) is
:mod:`qosmanager.api.nodeslo`, whose docstring tells the decoding rules.

Map of the file:

* constants: ``apiVersion``/``kind``, the enum-like values, what a bad value falls back to
  (``DEFAULT``, ``UNSET``, ``FEATURE``, ``EMPTY``, ``KEEP``), :class:`NodeSLOError`;
* field specs (``_int``, ``_enum``, ``_obj`` ...): every dataclass field carries its JSON name,
  kind, valid range and fallback as metadata (``deploy/gen_crd.py`` derives the CRD from them);
* the schema (qos §3): one frozen dataclass per Go struct, down to :class:`NodeSLOSpec`, the
  merged and validated spec the strategies read (``class_qos``, ``kube_class_qos``);
* the defaults: koordlet's ``DefaultNodeSLOSpecConfig`` (:func:`default_spec_dict`) and the
  "None" variants a disabled feature takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

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
