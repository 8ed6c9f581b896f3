"""Helpers several strategies share (koordlet-qos §2.5, §2.10).

* :func:`threshold_feature_disabled` -- koordlet's ``IsFeatureDisabled`` for the features switched by
  ``resourceUsedThresholdWithBE.enable`` (BE CPU suppression and the evictions).
* :func:`calculate_filter_pods_used` -- ``CalculateFilterPodsUsed``: how much of the node's CPU (or
  memory) the "high priority" pods and host applications use, and what is left for the system.
* The filters that say what "high priority" means for each caller (``NonBEPodFilter``, ...).
* Readers of the NodeResourceTopology annotations the CPU strategies need (reserved CPUs, the
  system-QoS exclusive cpuset, the kubelet CPU manager policy).  A bad annotation is read the way
  koordlet reads it (ignored, or "unknown policy") and never raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from qosmanager.api.decode import ANNOTATION_LIMITS, decode_json, fold_get
from qosmanager.api.node import (
    ANNOTATION_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_SYSTEM_QOS_RESOURCE,
    parse_reservation,
)
from qosmanager.api.nodeslo import CGROUP_BASE_KUBEPODS_BESTEFFORT, HostApplicationSpec, NodeSLOSpec
from qosmanager.api.pod import (
    KUBE_QOS_BESTEFFORT,
    PRIORITY_BATCH,
    PRIORITY_FREE,
    QOS_BE,
    PodMeta,
)
from qosmanager.host.cpuset import parse_cpu_list

log = logging.getLogger(__name__)

PodFilter = Callable[[PodMeta], bool]
HostAppFilter = Callable[[HostApplicationSpec], bool]


# ---------------------------------------------------------------------------------------------
# feature switches


def go_div(a: int, b: int) -> int:
    """Go's int64 division: truncates toward zero (Python's ``//`` floors); koordlet's integer formulas
    need it wherever an operand can be negative."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def threshold_feature_disabled(nodeslo: NodeSLOSpec | None, present: bool = True) -> bool | None:
    """``IsFeatureDisabled(nodeSLO, feature)`` for BECPUSuppress and the eviction features.

    Returns ``None`` where koordlet returns an error (no NodeSLO, or ``enable`` unset): the caller
    then does nothing at all, not even its recovery.  Else whether the feature is switched off.
    """
    if nodeslo is None or not present:
        return None
    enable = nodeslo.resource_used_threshold_with_be.enable
    if enable is None:
        return None
    return not enable


# ---------------------------------------------------------------------------------------------
# CalculateFilterPodsUsed and its filters


def non_be_pod_filter(pod: PodMeta) -> bool:
    """``NonBEPodFilter``: neither labelled BE nor of Kubernetes QoS BestEffort."""
    return pod.qos_raw != QOS_BE and pod.kube_qos != KUBE_QOS_BESTEFFORT


def not_batch_or_free_pod_filter(pod: PodMeta) -> bool:
    """``NotBatchOrFreePodFilter``: the priority class (with default) is neither batch nor free."""
    return pod.priority_class not in (PRIORITY_BATCH, PRIORITY_FREE)


def none_pod_high_priority(pod: PodMeta) -> bool:
    """``NonePodHighPriority``: no pod is high priority."""
    return False


def non_be_host_app_filter(app: HostApplicationSpec) -> bool:
    """``NonBEHostAppFilter``: everything except a BE application living under the BE QoS dir.

    A BE host application elsewhere is not throttled by the BE suppression, so its usage has to
    be budgeted like a latency-sensitive one.
    """
    return not (
        app.qos == QOS_BE
        and app.cgroup_path is not None
        and app.cgroup_path.base == CGROUP_BASE_KUBEPODS_BESTEFFORT
    )


def none_host_app_high_priority(app: HostApplicationSpec) -> bool:
    """``NoneHostAppHighPriority``: no host application is high priority."""
    return False


@dataclass(frozen=True, slots=True)
class FilteredUsage:
    """What ``CalculateFilterPodsUsed`` returns, in the unit of its inputs (CPU: cores)."""

    pods: float  # used by the high-priority pods (and by pods the agent does not know)
    host_apps: float  # used by the high-priority host applications
    system: float  # node - all pods - all host apps, at least 0 and at least the reservation


def calculate_filter_pods_used(
    node_used: float,
    node_reserved: float,
    pods: Mapping[str, PodMeta],
    pod_used: Mapping[str, float],
    host_apps: Iterable[HostApplicationSpec],
    host_app_used: Mapping[str, float],
    pod_filter: PodFilter,
    host_app_filter: HostAppFilter,
) -> FilteredUsage:
    """``CalculateFilterPodsUsed`` (koordlet-qos §2.10).

    ``pod_used`` holds only pods with a metric: a pod whose metric is missing lands in "system".
    A pod with a metric but no metadata counts as high priority (its class is unknown, so it
    must not be squeezed).  Sums run in the order of ``pod_used`` and ``host_apps``.
    """
    pods_all = pods_filter = 0.0
    for uid, used in pod_used.items():
        pods_all += used
        pod = pods.get(uid)
        if pod is None or pod_filter(pod):
            pods_filter += used
    host_all, host_filter = _host_app_sums(host_apps, host_app_used, host_app_filter)
    system = max(node_used - pods_all - host_all, 0.0)
    system = max(system, node_reserved)
    return FilteredUsage(pods_filter, host_filter, system)


def _host_app_sums(host_apps: Iterable[HostApplicationSpec], host_app_used: Mapping[str, float],
                   host_app_filter: HostAppFilter) -> tuple[float, float]:
    """What the host applications with a sample use: all of them, and those ``host_app_filter`` keeps."""
    host_all = host_filter = 0.0
    for app in host_apps:
        app_used = host_app_used.get(app.name)
        if app_used is None:
            continue
        host_all += app_used
        if host_app_filter(app):
            host_filter += app_used
    return host_all, host_filter


# ---------------------------------------------------------------------------------------------
# Pod-class sums from the kube QoS cgroups (demand-driven collection)
#
# The kernel sums the usage of every pod beneath ``kubepods`` and ``kubepods/besteffort``: with
# those two series a "BE vs the rest" split needs no per-pod read, except of the pods whose class
# (as the caller defines it) differs from their kube QoS dir (a pod labelled BE under burstable, an
# LS pod in besteffort): those are read one by one and corrected for.


@dataclass(frozen=True, slots=True)
class ClassSplit:
    """The pods of a class (``members``) against the BestEffort QoS dir's: the pods to add to the
    dir's sum (members outside it) and to take out of it (non-members inside it)."""

    members: frozenset[str]
    plus: frozenset[str]
    minus: frozenset[str]

    @property
    def corrections(self) -> frozenset[str]:
        """The pods read one by one."""
        return self.plus | self.minus


def class_split(pods: Mapping[str, PodMeta], member: PodFilter) -> ClassSplit:
    members = frozenset(uid for uid, p in pods.items() if member(p))
    in_be_dir = frozenset(uid for uid, p in pods.items() if p.kube_qos == KUBE_QOS_BESTEFFORT)
    return ClassSplit(members, members - in_be_dir, in_be_dir - members)


def class_usage(be_dir_used: float, split: ClassSplit, pod_used: Mapping[str, float]) -> float:
    """Usage of the class: the BE dir's sum, plus its members outside, minus its non-members inside
    (pods without a sample count as 0, as they would in the per-pod sum)."""
    used = be_dir_used
    for uid in split.plus:
        used += pod_used.get(uid, 0.0)
    for uid in split.minus:
        used -= pod_used.get(uid, 0.0)
    return max(used, 0.0)


def filter_used_from_qos_dirs(node_used: float, node_reserved: float, kubepods_used: float,
                              be_class_used: float, host_apps: Iterable[HostApplicationSpec],
                              host_app_used: Mapping[str, float],
                              host_app_filter: HostAppFilter) -> FilteredUsage:
    """:func:`calculate_filter_pods_used` with the non-BE filter, from the kube QoS dirs' sums: the
    non-BE pods use what kubepods uses less the BE class; "system" is the node less kubepods and the
    host applications (a pod the agent does not know, or without a sample, is in kubepods' sum
    either way: counted high priority here, as system there; their sum is the same)."""
    host_all, host_filter = _host_app_sums(host_apps, host_app_used, host_app_filter)
    system = max(node_used - kubepods_used - host_all, 0.0)
    system = max(system, node_reserved)
    return FilteredUsage(max(kubepods_used - be_class_used, 0.0), host_filter, system)


# ---------------------------------------------------------------------------------------------
# NodeResourceTopology annotations


def reserved_cpus(annotations: Mapping[str, str]) -> frozenset[int]:
    """``reservedCPUs`` of ``node.koordinator.sh/reservation``; a bad annotation reserves nothing."""
    try:
        return frozenset(parse_reservation(annotations.get(ANNOTATION_NODE_RESERVATION)).reserved_cpu_ids)
    except ValueError as e:
        log.debug("annotation %s ignored: %s", ANNOTATION_NODE_RESERVATION, e)
        return frozenset()


def system_qos_exclusive_cpus(annotations: Mapping[str, str]) -> frozenset[int]:
    """The cpuset of ``node.koordinator.sh/system-qos-resource`` when it is exclusive (the default).

    ``{"cpuset": "0-1", "cpusetExclusive": true}``; an unreadable annotation or CPU list excludes
    nothing, as koordlet does.
    """
    text = annotations.get(ANNOTATION_SYSTEM_QOS_RESOURCE)
    if not text:
        return frozenset()
    try:
        obj = decode_json(text, ANNOTATION_LIMITS)
        if not isinstance(obj, Mapping):
            raise ValueError("not a JSON object")
        cpuset = fold_get(obj, "cpuset") or ""
        exclusive = fold_get(obj, "cpusetExclusive", True)
        if not isinstance(cpuset, str) or not isinstance(exclusive, (bool, type(None))):
            raise ValueError("cpuset must be a string and cpusetExclusive a bool")
        if exclusive is False or not cpuset:
            return frozenset()
        return frozenset(parse_cpu_list(cpuset))
    except ValueError as e:
        log.debug("annotation %s ignored: %s", ANNOTATION_SYSTEM_QOS_RESOURCE, e)
        return frozenset()


class AnnotationError(ValueError):
    """A NodeResourceTopology annotation a strategy needs could not be read."""


def cpu_manager_policy(annotations: Mapping[str, str], default: str) -> str:
    """The kubelet CPU manager policy: ``kubelet.koordinator.sh/cpu-manager-policy`` when present
    (``{"policy": "static", ...}``), else ``default`` (the agent's configuration).

    Raises :class:`AnnotationError` when the annotation is present but unreadable: koordlet then
    refuses to apply the BE cpuset rather than guess.
    """
    text = annotations.get(ANNOTATION_CPU_MANAGER_POLICY)
    if text is None:
        return default
    try:
        obj = decode_json(text, ANNOTATION_LIMITS)
    except ValueError as e:
        raise AnnotationError(f"annotation {ANNOTATION_CPU_MANAGER_POLICY}: {e}") from None
    if not isinstance(obj, Mapping):
        raise AnnotationError(f"annotation {ANNOTATION_CPU_MANAGER_POLICY}: not a JSON object")
    policy = fold_get(obj, "policy") or ""
    if not isinstance(policy, str):
        raise AnnotationError(f"annotation {ANNOTATION_CPU_MANAGER_POLICY}: policy must be a string")
    return policy


__all__ = [
    "AnnotationError",
    "ClassSplit",
    "class_split",
    "class_usage",
    "filter_used_from_qos_dirs",
    "FilteredUsage",
    "HostAppFilter",
    "PodFilter",
    "calculate_filter_pods_used",
    "cpu_manager_policy",
    "non_be_host_app_filter",
    "non_be_pod_filter",
    "none_host_app_high_priority",
    "none_pod_high_priority",
    "not_batch_or_free_pod_filter",
    "reserved_cpus",
    "system_qos_exclusive_cpus",
    "threshold_feature_disabled",
]
