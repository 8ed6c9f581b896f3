"""Pod views: everything the strategies need from a Pod object, computed once per pod change.

A :class:`PodMeta` is built from one item of a ``PodList`` (as the kubelet's ``/pods`` returns it,
or a hand-written standalone file) and then read by every strategy every tick on nodes with a
thousand pods, so it precomputes all labels, annotations and resource sums into plain attributes.

Rules implemented here (koordlet-qos §1, §2.8; koordlet-infra §7):

* **Koordinator QoS** -- raw: label ``koordinator.sh/qosClass`` if it is one of LSE, LSR, LS, BE,
  SYSTEM, else ``""``.  With default: raw, else from the Kubernetes QoS (Guaranteed -> LSR,
  Burstable -> LS, BestEffort -> BE).
* **Kubernetes QoS** -- ``status.qosClass`` when it is a valid class, else the upstream algorithm
  over cpu and memory of all containers and init containers: nothing requested or limited ->
  BestEffort; every container limits both cpu and memory and every request equals its limit ->
  Guaranteed; otherwise Burstable.  Only positive amounts count.
* **Priority** -- raw class: label ``koordinator.sh/priority-class`` when present (an unknown
  value means none, it does *not* fall back to ``spec.priority``), else by ``spec.priority``
  range (prod 9000-9999, mid 7000-7999, batch 5000-5999, free 3000-3999).  With default: raw,
  else prod for SYSTEM/LSE/LSR/LS and batch for BE.  Value with default: a non-zero
  ``spec.priority``, else the class default (9500, 7500, 5500, 3500, 0).
* **Pod requests** (``PodRequests``) -- sum of the regular containers and of the restartable
  ("sidecar", ``restartPolicy: Always``) init containers, raised to the largest single init
  container step (an ordinary init container runs alone next to the sidecars started before it),
  plus ``spec.overhead``.  Sums are exact and rounded once, as upstream.
* **Pod limits** (``PodLimits``) -- same shape, but overhead is only added to resources that have
  a limit; a resource no container limits is absent (reported as -1).
* **Batch and mid resources** -- per container integers (batch-cpu in milli-cores), summed over
  regular and sidecar containers only.

Requests default to limits for resources that only have a limit, as the API server's defaulting
does; hand-written pod files then mean what they would mean in a cluster.

**Annotations** are decoded as koordlet's Go code decodes them (``encoding/json``): object keys
match field names exactly or ignoring case (koordinator's own fixtures write ``iocfg`` for
``ioCfg``), unknown keys are ignored, ``null`` leaves a field unset, and every decode is bounded
(:data:`~qosmanager.api.decode.ANNOTATION_LIMITS`: 256 KiB, 64 levels).  An annotation that cannot
be decoded affects that pod's feature only: its ``*_invalid`` flag is set, the reason is in
:attr:`PodMeta.warnings`, and the strategy of that feature leaves the pod's files as they are.

**The uid** names the pod's cgroup directory, so it must look like a Kubernetes uid: 1 to 64 ASCII
letters, digits and ``-``, starting with a letter or digit.  That accepts the RFC 4122 form the API
server assigns and the 32-hex-digit hash the kubelet gives static pods, and refuses anything that
could name another directory (``x/y``, ``..``) or break a log line (NUL, newline, non-ASCII).

**Only what is read is kept** (:mod:`qosmanager.api.pod_prune`): a view keeps a digest of its
pruned pod object, not the object.

Map of the file and its rooms (import every name from here):

* constants: QoS classes, priority classes and ranges, resource names, the uid pattern;
* :class:`ContainerMeta`, :class:`PodMeta`: the views;
* small readers, resource sums, the Kubernetes algorithms (:func:`compute_kube_qos`,
  ``PodRequests``/``PodLimits``, priority classes), the builders :func:`pod_meta`, :func:`pod_list`;
* :mod:`qosmanager.api.pod_annotations`: the label and annotation keys, :func:`parse_int32`,
  the annotations decoded as koordlet decodes them;
* :mod:`qosmanager.api.pod_prune`: :func:`prune_pod`, :class:`PrunedPod`, :func:`pod_digest`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from qosmanager.api.nodeslo import BlkIOQOS, CPUBurstConfig, PodMemoryQOSConfig
from qosmanager.api.pod_annotations import (
    ANNOTATION_BLKIO_QOS,
    ANNOTATION_CPU_BURST,
    ANNOTATION_EVICTION_POLICY,
    ANNOTATION_EVICTION_PRIORITY,
    ANNOTATION_MEMORY_QOS,
    ANNOTATION_RESCTRL,
    ANNOTATION_RESOURCE_STATUS,
    INVALID_ANNOTATION_NOTE,
    LABEL_EVICTION_ENABLED,
    LABEL_PRIORITY,
    LABEL_PRIORITY_CLASS,
    LABEL_QOS,
    _annotation_config,
    _eviction_policy,
    _is_int32,
    _resource_status,
    parse_int32,
)
from qosmanager.api.pod_prune import PrunedPod, pod_digest, prune_pod, prune_pod_hook, pruned_text
from qosmanager.api.quantity import parse_quantity, round_away_from_zero

QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM, QOS_NONE = "LSE", "LSR", "LS", "BE", "SYSTEM", ""
QOS_CLASSES = frozenset({QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM})

KUBE_QOS_GUARANTEED, KUBE_QOS_BURSTABLE, KUBE_QOS_BESTEFFORT = "Guaranteed", "Burstable", "BestEffort"
KUBE_QOS_CLASSES = frozenset({KUBE_QOS_GUARANTEED, KUBE_QOS_BURSTABLE, KUBE_QOS_BESTEFFORT})

PRIORITY_PROD, PRIORITY_MID, PRIORITY_BATCH, PRIORITY_FREE, PRIORITY_NONE = (
    "koord-prod",
    "koord-mid",
    "koord-batch",
    "koord-free",
    "",
)
# class -> (lowest value, highest value, default value)
PRIORITY_RANGES: Mapping[str, tuple[int, int, int]] = MappingProxyType(
    {
        PRIORITY_PROD: (9000, 9999, 9500),
        PRIORITY_MID: (7000, 7999, 7500),
        PRIORITY_BATCH: (5000, 5999, 5500),
        PRIORITY_FREE: (3000, 3999, 3500),
    }
)

RESOURCE_CPU, RESOURCE_MEMORY = "cpu", "memory"
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
MID_CPU, MID_MEMORY = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"

PHASE_PENDING, PHASE_RUNNING = "Pending", "Running"

# a Kubernetes uid, leniently (see the module docstring); fullmatch: no trailing newline either
UID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,63}")

ResourceList = dict[str, Fraction]


@dataclass(frozen=True, slots=True)
class ContainerMeta:
    """One container of a pod: identity, state and integer resources.

    ``requests``/``limits``: ``cpu`` in milli-cores, every other resource as ``Quantity.Value()``
    (memory in bytes; batch-cpu and mid-cpu are already milli-cores as plain integers).
    """

    name: str
    container_id: str  # "containerd://abc..." from the status; "" when not started
    running: bool  # status.state.running present
    requests: Mapping[str, int]
    limits: Mapping[str, int]
    init: bool = False
    sidecar: bool = False  # an init container with restartPolicy Always


@dataclass(frozen=True, slots=True)
class PodMeta:
    """A pod, with every derived value the strategies use precomputed.

    Views compare by value; they are not hashable (key them by ``uid``).
    """

    uid: str
    namespace: str
    name: str
    key: str  # "namespace/name"
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    phase: str
    kube_qos: str
    qos_raw: str
    qos: str
    priority: int | None  # spec.priority
    priority_class_raw: str
    priority_class: str
    priority_value: int
    label_priority: int | None
    eviction_enabled: bool
    eviction_priority: int
    eviction_policy: tuple[str, ...] | None  # None: annotation absent
    eviction_policy_invalid: bool
    containers: tuple[ContainerMeta, ...]
    init_containers: tuple[ContainerMeta, ...]
    cpu_request_milli: int
    memory_request: int
    cpu_limit_milli: int  # -1: some regular or sidecar container has no cpu limit
    memory_limit: int  # -1: no container limits memory
    batch_cpu_request: int
    batch_cpu_limit: int  # -1: some container has no positive batch-cpu limit
    batch_memory_request: int
    batch_memory_limit: int  # -1: some container has no positive batch-memory limit
    mid_cpu_request: int
    mid_memory_request: int
    resource_status_cpuset: str
    resource_status_numa: bool
    cpu_burst: CPUBurstConfig | None  # annotation koordinator.sh/cpuBurst; None when absent/invalid
    cpu_burst_invalid: bool
    memory_qos: PodMemoryQOSConfig | None  # annotation koordinator.sh/memoryQOS
    memory_qos_invalid: bool
    blkio_qos: BlkIOQOS | None  # annotation koordinator.sh/blkioQOS ("" -> no blocks)
    blkio_qos_invalid: bool
    resctrl_managed: bool  # annotation node.koordinator.sh/resctrl present (runtime hooks own it)
    warnings: tuple[str, ...]  # what was odd about the object and how it was read
    digest: int  # pod_digest of the object: equal digests, equal views

    @property
    def active(self) -> bool:
        """Pending or Running: the phases most strategies act on."""
        return self.phase in (PHASE_PENDING, PHASE_RUNNING)

    def is_be(self) -> bool:
        """Labelled BE (koordlet's meaning of "a BE pod": the raw label, not the default)."""
        return self.qos_raw == QOS_BE

    def eviction_allowed(self, feature: str) -> bool:
        """``IsEvictionPolicyAllowed``: no annotation -> True; invalid -> False; else listed."""
        if self.eviction_policy is None:
            return not self.eviction_policy_invalid
        return feature in self.eviction_policy

    def request_for(self, resource: str) -> tuple[str, int]:
        """``GetRequestTypeAndValueFromPod``: the resource name and amount this pod is charged in.

        koord-mid pods are charged in mid-cpu/mid-memory, koord-batch pods in batch-cpu/
        batch-memory, everything else in the standard cpu (milli-cores) / memory (bytes) request.
        """
        if resource == RESOURCE_CPU:
            if self.priority_class == PRIORITY_MID:
                return MID_CPU, self.mid_cpu_request
            if self.priority_class == PRIORITY_BATCH:
                return BATCH_CPU, self.batch_cpu_request
            return RESOURCE_CPU, self.cpu_request_milli
        if resource == RESOURCE_MEMORY:
            if self.priority_class == PRIORITY_MID:
                return MID_MEMORY, self.mid_memory_request
            if self.priority_class == PRIORITY_BATCH:
                return BATCH_MEMORY, self.batch_memory_request
            return RESOURCE_MEMORY, self.memory_request
        raise ValueError(f"request_for: resource must be 'cpu' or 'memory', got {resource!r}")


# --------------------------------------------------------------------------------------------
# Small readers


def _mapping(obj: Any, path: str) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise ValueError(f"{path}: must be an object, got {type(obj).__name__}")
    return obj


def _list(obj: Any, path: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise ValueError(f"{path}: must be a list, got {type(obj).__name__}")
    return obj


# Views share what repeats from pod to pod: each pod's text is decoded on its own, so without this
# every view held its own "Running", "default", label keys and values, container names and resource
# names (about 3 MiB at 10,000 pods), and an empty map of its own for each empty one.
_SHARED_MAX = 64  # strings up to this long are shared (interned); longer ones are mostly unique
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _shared(text: str) -> str:
    """One object for equal short strings (``sys.intern``: released when no view uses it any more)."""
    return sys.intern(text) if type(text) is str and len(text) <= _SHARED_MAX else text


def _string_map(obj: Any, path: str, warnings: list[str]) -> Mapping[str, str]:
    """Labels/annotations.  Non-string values (YAML's unquoted ``true``) are rendered as JSON."""
    out: dict[str, str] = {}
    for key, item in _mapping(obj, path).items():
        if not isinstance(item, str):
            rendered = json.dumps(item) if isinstance(item, (bool, int, float)) or item is None else str(item)
            warnings.append(f"{path}.{key}: not a string, read as {rendered!r}")
            item = rendered
        out[_shared(str(key))] = _shared(item)
    return MappingProxyType(out) if out else _EMPTY


def _short(text: str, limit: int = 80) -> str:
    """``repr`` of a value for a message, cut to ``limit`` characters (NUL and newlines escaped)."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _resources(obj: Any, path: str) -> ResourceList:
    out: ResourceList = {}
    for name, q in _mapping(obj, path).items():
        try:
            out[str(name)] = parse_quantity(q)
        except ValueError as exc:
            raise ValueError(f"{path}.{name}: {exc}") from None
    return out


def _to_int(name: str, amount: Fraction) -> int:
    """cpu -> ``MilliValue()``, anything else -> ``Value()``."""
    return round_away_from_zero(amount * 1000 if name == RESOURCE_CPU else amount)


def _int_list(resources: ResourceList) -> Mapping[str, int]:
    if not resources:
        return _EMPTY
    return MappingProxyType({_shared(name): _to_int(name, amount) for name, amount in resources.items()})


def _add(dst: ResourceList, src: Mapping[str, Fraction]) -> None:
    for name, amount in src.items():
        dst[name] = dst.get(name, Fraction(0)) + amount


def _max_into(dst: ResourceList, src: Mapping[str, Fraction]) -> None:
    for name, amount in src.items():
        if name not in dst or amount > dst[name]:
            dst[name] = amount


@dataclass(slots=True)
class _RawContainer:
    """A container as parsed from the spec, with exact amounts (aggregation works on these)."""

    meta: ContainerMeta
    requests: ResourceList
    limits: ResourceList


def _container(spec: Any, path: str, statuses: Mapping[str, Mapping[str, Any]], init: bool) -> _RawContainer:
    spec = _mapping(spec, path)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}.name: required")
    resources = _mapping(spec.get("resources"), f"{path}.resources")
    limits = _resources(resources.get("limits"), f"{path}.resources.limits")
    requests = _resources(resources.get("requests"), f"{path}.resources.requests")
    for res, amount in limits.items():  # API defaulting: a missing request equals the limit
        requests.setdefault(res, amount)
    status = statuses.get(name, {})
    container_id = status.get("containerID") or ""
    state = status.get("state")
    running = isinstance(state, Mapping) and state.get("running") is not None
    meta = ContainerMeta(
        name=_shared(name),
        container_id=container_id if isinstance(container_id, str) else "",
        running=running,
        requests=_int_list(requests),
        limits=_int_list(limits),
        init=init,
        sidecar=init and spec.get("restartPolicy") == "Always",
    )
    return _RawContainer(meta, requests, limits)


def _statuses(status: Mapping[str, Any], path: str) -> dict[str, Mapping[str, Any]]:
    by_name: dict[str, Mapping[str, Any]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for item in _list(status.get(key), f"{path}.{key}"):
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                by_name[item["name"]] = item
    return by_name


# --------------------------------------------------------------------------------------------
# Kubernetes algorithms


def compute_kube_qos(containers: Iterable[tuple[Mapping[str, Fraction], Mapping[str, Fraction]]]) -> str:
    """The upstream pod QoS class from (requests, limits) of all containers and init containers."""
    requests: ResourceList = {}
    limits: ResourceList = {}
    guaranteed = True
    for container_requests, container_limits in containers:
        for name in (RESOURCE_CPU, RESOURCE_MEMORY):
            request = container_requests.get(name)
            if request is not None and request > 0:
                requests[name] = requests.get(name, Fraction(0)) + request
        limited = set()
        for name in (RESOURCE_CPU, RESOURCE_MEMORY):
            limit = container_limits.get(name)
            if limit is not None and limit > 0:
                limited.add(name)
                limits[name] = limits.get(name, Fraction(0)) + limit
        if limited != {RESOURCE_CPU, RESOURCE_MEMORY}:
            guaranteed = False
    if not requests and not limits:
        return KUBE_QOS_BESTEFFORT
    if (
        guaranteed
        and len(requests) == len(limits)
        and all(limits.get(name) == amount for name, amount in requests.items())
    ):
        return KUBE_QOS_GUARANTEED
    return KUBE_QOS_BURSTABLE


def _pod_aggregate(
    regular: list[ResourceList], init: list[tuple[ResourceList, bool]], overhead: ResourceList, limits: bool
) -> ResourceList:
    """``PodRequests`` (``limits=False``) or ``PodLimits`` (``limits=True``) over exact amounts."""
    total: ResourceList = {}
    for amounts in regular:
        _add(total, amounts)
    sidecars: ResourceList = {}  # cumulative amounts of the sidecars started so far
    init_peak: ResourceList = {}
    for amounts, is_sidecar in init:
        if is_sidecar:
            _add(total, amounts)
            _add(sidecars, amounts)
            step = dict(sidecars)
        else:
            step = dict(amounts)
            _add(step, sidecars)
        _max_into(init_peak, step)
    _max_into(total, init_peak)
    if limits:
        _add(total, {name: amount for name, amount in overhead.items() if name in total})
    else:
        _add(total, overhead)
    return total


def _sum_positive(containers: Iterable[ContainerMeta], resource: str) -> int:
    """Σ requests, a missing or non-positive request counting as 0."""
    return sum(max(c.requests.get(resource, 0), 0) for c in containers)


def _sum_limits_or_unlimited(containers: list[ContainerMeta], resource: str) -> int:
    """Σ limits, or -1 when any container has no positive limit (it is then unlimited)."""
    amounts = [c.limits.get(resource, -1) for c in containers]
    return -1 if any(amount <= 0 for amount in amounts) else sum(amounts)


def priority_class_by_value(priority: int | None) -> str:
    if priority is None:
        return PRIORITY_NONE
    for klass, (low, high, _) in PRIORITY_RANGES.items():
        if low <= priority <= high:
            return klass
    return PRIORITY_NONE


def _default_priority_class(qos: str) -> str:
    if qos in (QOS_SYSTEM, QOS_LSE, QOS_LSR, QOS_LS):
        return PRIORITY_PROD
    if qos == QOS_BE:
        return PRIORITY_BATCH
    return PRIORITY_NONE


# --------------------------------------------------------------------------------------------
# Builders


def pod_meta(obj: Mapping[str, Any] | PrunedPod) -> PodMeta:
    """Build the view of one Pod object; ``ValueError`` with a clear message if it is unusable.

    Required: ``metadata.uid`` and ``metadata.name`` (namespace defaults to ``default``), well-formed
    container resources.  Oddities that koordlet tolerates (bad annotations, a non-integer
    priority label) are read the way koordlet reads them and noted in :attr:`PodMeta.warnings`.
    """
    digest = pod_digest(obj)
    if isinstance(obj, PrunedPod):
        obj = obj.object()
    if not isinstance(obj, Mapping):
        raise ValueError(f"pod: must be an object, got {type(obj).__name__}")
    warnings: list[str] = []
    metadata = _mapping(obj.get("metadata"), "metadata")
    uid, name = metadata.get("uid"), metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("metadata.name: required")
    if not isinstance(uid, str) or not uid:
        raise ValueError(f"pod {name!r}: metadata.uid: required")
    namespace = metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise ValueError(f"pod {name!r}: metadata.namespace: must be a string")
    key = f"{namespace}/{name}"
    if UID_RE.fullmatch(uid) is None:
        raise ValueError(
            f"pod {key}: metadata.uid {_short(uid)} is not a Kubernetes uid "
            "(1 to 64 ASCII letters, digits and '-', starting with a letter or digit)"
        )
    try:
        return _pod_meta(obj, metadata, uid, namespace, name, key, warnings, digest)
    except ValueError as exc:
        raise ValueError(f"pod {key}: {exc}") from None


def _pod_meta(
    obj: Mapping[str, Any],
    metadata: Mapping[str, Any],
    uid: str,
    namespace: str,
    name: str,
    key: str,
    warnings: list[str],
    digest: int,
) -> PodMeta:
    labels = _string_map(metadata.get("labels"), "metadata.labels", warnings)
    annotations = _string_map(metadata.get("annotations"), "metadata.annotations", warnings)
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    statuses = _statuses(status, "status")

    regular = [
        _container(c, f"spec.containers[{i}]", statuses, init=False)
        for i, c in enumerate(_list(spec.get("containers"), "spec.containers"))
    ]
    inits = [
        _container(c, f"spec.initContainers[{i}]", statuses, init=True)
        for i, c in enumerate(_list(spec.get("initContainers"), "spec.initContainers"))
    ]
    overhead = _resources(spec.get("overhead"), "spec.overhead")
    charged = [c.meta for c in regular] + [c.meta for c in inits if c.meta.sidecar]

    requests = _pod_aggregate(
        [c.requests for c in regular], [(c.requests, c.meta.sidecar) for c in inits], overhead, limits=False
    )
    limits = _pod_aggregate(
        [c.limits for c in regular], [(c.limits, c.meta.sidecar) for c in inits], overhead, limits=True
    )
    # The kubelet sets a pod CFS quota only when every long-running container limits cpu.
    cpu_unlimited = any(c.limits.get(RESOURCE_CPU, 0) <= 0 for c in charged) or RESOURCE_CPU not in limits

    phase = status.get("phase") or ""
    if not isinstance(phase, str):
        raise ValueError("status.phase: must be a string")
    kube_qos = status.get("qosClass") or ""
    if not isinstance(kube_qos, str) or kube_qos not in KUBE_QOS_CLASSES:  # a list or object is unhashable
        if kube_qos:
            shown = _short(str(kube_qos))
            warnings.append(f"status.qosClass {shown} is not a Kubernetes QoS class; recomputed")
        kube_qos = compute_kube_qos((c.requests, c.limits) for c in regular + inits)

    qos_raw = labels.get(LABEL_QOS, QOS_NONE)
    if qos_raw not in QOS_CLASSES:
        if qos_raw:
            warnings.append(f"label {LABEL_QOS}={qos_raw!r} is not a QoS class; ignored")
        qos_raw = QOS_NONE
    qos = qos_raw or {KUBE_QOS_GUARANTEED: QOS_LSR, KUBE_QOS_BURSTABLE: QOS_LS}.get(kube_qos, QOS_BE)

    priority = spec.get("priority")
    if priority is not None and not _is_int32(priority):
        warnings.append(f"spec.priority {priority!r} is not an int32; ignored")
        priority = None
    if LABEL_PRIORITY_CLASS in labels:
        priority_class_raw = labels[LABEL_PRIORITY_CLASS]
        if priority_class_raw not in PRIORITY_RANGES:
            warnings.append(f"label {LABEL_PRIORITY_CLASS}={priority_class_raw!r} is unknown; no class")
            priority_class_raw = PRIORITY_NONE
    else:
        priority_class_raw = priority_class_by_value(priority)
    priority_class = priority_class_raw or _default_priority_class(qos)
    priority_value = priority if priority else PRIORITY_RANGES.get(priority_class, (0, 0, 0))[2]

    label_priority = parse_int32(labels.get(LABEL_PRIORITY))
    if label_priority is None and LABEL_PRIORITY in labels:
        warnings.append(f"label {LABEL_PRIORITY}={labels[LABEL_PRIORITY]!r} is not a decimal int32; ignored")
    eviction_priority = parse_int32(annotations.get(ANNOTATION_EVICTION_PRIORITY))
    if eviction_priority is None and ANNOTATION_EVICTION_PRIORITY in annotations:
        warnings.append(f"annotation {ANNOTATION_EVICTION_PRIORITY} is not a decimal int32; read as 0")
    eviction_policy, eviction_policy_invalid = _eviction_policy(annotations, warnings)
    cpuset, numa = _resource_status(annotations, warnings)
    cpu_burst, cpu_burst_invalid = _annotation_config(
        annotations, ANNOTATION_CPU_BURST, CPUBurstConfig, warnings
    )
    memory_qos, memory_qos_invalid = _annotation_config(
        annotations, ANNOTATION_MEMORY_QOS, PodMemoryQOSConfig, warnings
    )
    blkio_qos, blkio_qos_invalid = _annotation_config(
        annotations, ANNOTATION_BLKIO_QOS, BlkIOQOS, warnings, empty=BlkIOQOS()
    )

    resource_version = metadata.get("resourceVersion") or ""
    return PodMeta(
        uid=uid,
        namespace=_shared(namespace),
        name=name,
        key=key,
        resource_version=str(resource_version),
        labels=labels,
        annotations=annotations,
        phase=_shared(phase),
        kube_qos=_shared(kube_qos),
        qos_raw=qos_raw,
        qos=qos,
        priority=priority,
        priority_class_raw=priority_class_raw,
        priority_class=priority_class,
        priority_value=priority_value,
        label_priority=label_priority,
        eviction_enabled=labels.get(LABEL_EVICTION_ENABLED) == "true",
        eviction_priority=eviction_priority or 0,
        eviction_policy=eviction_policy,
        eviction_policy_invalid=eviction_policy_invalid,
        containers=tuple(c.meta for c in regular),
        init_containers=tuple(c.meta for c in inits),
        cpu_request_milli=_to_int(RESOURCE_CPU, requests.get(RESOURCE_CPU, Fraction(0))),
        memory_request=_to_int(RESOURCE_MEMORY, requests.get(RESOURCE_MEMORY, Fraction(0))),
        cpu_limit_milli=-1 if cpu_unlimited else _to_int(RESOURCE_CPU, limits[RESOURCE_CPU]),
        memory_limit=_to_int(RESOURCE_MEMORY, limits[RESOURCE_MEMORY]) if RESOURCE_MEMORY in limits else -1,
        batch_cpu_request=_sum_positive(charged, BATCH_CPU),
        batch_cpu_limit=_sum_limits_or_unlimited(charged, BATCH_CPU),
        batch_memory_request=_sum_positive(charged, BATCH_MEMORY),
        batch_memory_limit=_sum_limits_or_unlimited(charged, BATCH_MEMORY),
        mid_cpu_request=_sum_positive(charged, MID_CPU),
        mid_memory_request=_sum_positive(charged, MID_MEMORY),
        resource_status_cpuset=cpuset,
        resource_status_numa=numa,
        cpu_burst=cpu_burst,
        cpu_burst_invalid=cpu_burst_invalid,
        memory_qos=memory_qos,
        memory_qos_invalid=memory_qos_invalid,
        blkio_qos=blkio_qos,
        blkio_qos_invalid=blkio_qos_invalid,
        resctrl_managed=ANNOTATION_RESCTRL in annotations,
        warnings=tuple(warnings),
        digest=digest,
    )


def pod_list(obj: Mapping[str, Any]) -> tuple[list[PodMeta], list[str]]:
    """A ``PodList`` -> (pods, one error string per unusable item).

    One bad item never loses the others; a repeated uid keeps the first pod.  ``ValueError`` only
    when the list itself is not a PodList-shaped object.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"PodList: must be an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind is not None and kind != "PodList":
        raise ValueError(f"PodList: kind must be 'PodList', got {kind!r}")
    items = obj.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise ValueError(f"PodList: items must be a list, got {type(items).__name__}")
    pods: list[PodMeta] = []
    errors: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        try:
            pod = pod_meta(item)
        except ValueError as exc:
            errors.append(f"items[{i}]: {exc}")
            continue
        if pod.uid in seen:
            errors.append(f"items[{i}]: pod {pod.key}: duplicate uid {pod.uid}; kept the first")
            continue
        seen.add(pod.uid)
        pods.append(pod)
    return pods, errors


__all__ = [
    "ANNOTATION_BLKIO_QOS",
    "ANNOTATION_CPU_BURST",
    "ANNOTATION_EVICTION_POLICY",
    "ANNOTATION_EVICTION_PRIORITY",
    "ANNOTATION_MEMORY_QOS",
    "ANNOTATION_RESCTRL",
    "ANNOTATION_RESOURCE_STATUS",
    "BATCH_CPU",
    "BATCH_MEMORY",
    "KUBE_QOS_BESTEFFORT",
    "KUBE_QOS_BURSTABLE",
    "KUBE_QOS_CLASSES",
    "KUBE_QOS_GUARANTEED",
    "LABEL_EVICTION_ENABLED",
    "LABEL_PRIORITY",
    "LABEL_PRIORITY_CLASS",
    "LABEL_QOS",
    "MID_CPU",
    "MID_MEMORY",
    "PHASE_PENDING",
    "PHASE_RUNNING",
    "PRIORITY_BATCH",
    "PRIORITY_FREE",
    "PRIORITY_MID",
    "PRIORITY_NONE",
    "PRIORITY_PROD",
    "PRIORITY_RANGES",
    "QOS_BE",
    "QOS_CLASSES",
    "QOS_LS",
    "QOS_LSE",
    "QOS_LSR",
    "QOS_NONE",
    "QOS_SYSTEM",
    "RESOURCE_CPU",
    "RESOURCE_MEMORY",
    "UID_RE",
    "INVALID_ANNOTATION_NOTE",
    "ContainerMeta",
    "PodMeta",
    "compute_kube_qos",
    "parse_int32",
    "pod_list",
    "pod_digest",
    "pod_meta",
    "priority_class_by_value",
    "PrunedPod",
    "prune_pod",
    "prune_pod_hook",
    "pruned_text",
]
