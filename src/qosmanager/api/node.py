"""The Node view: capacity, allocatable and what is reserved for the system.

Built once per Node change.  Amounts are integers: ``cpu`` in milli-cores, everything else as
``Quantity.Value()`` (memory in bytes, batch-cpu already milli-cores as a plain integer).

Reservation (``GetNodeResourceReserved``, koordlet-qos §2.10) is the element-wise maximum of

* what the kubelet keeps back: ``max(capacity - allocatable, 0)`` for cpu and memory (a missing
  amount counts as 0), and
* the annotation ``node.koordinator.sh/reservation`` =
  ``{"resources": {"cpu": ..., "memory": ...}, "reservedCPUs": "0-1"}``, where a non-empty
  ``reservedCPUs`` list overrides ``resources.cpu`` with (number of listed CPUs) cores.

An annotation that is not valid JSON, holds a bad quantity or an unparsable CPU list is ignored as
a whole (as koordlet does), and the reason is kept in :attr:`NodeMeta.warnings`.  It is decoded as
Go decodes it (keys match ignoring case) and within the annotation limits of
:mod:`qosmanager.api.decode`.

A Node whose ``status.capacity`` lacks a positive ``cpu`` or a ``memory`` of at least 1 MiB, or
whose capacity or allocatable is more than the kernel can enforce (:data:`MAX_CPU_MILLI`,
:data:`MAX_MEMORY_BYTES`), is refused (``ValueError``): every threshold of the QoS strategies is
a share of the capacity, and with a CPU capacity of 0 cpuSuppress would squeeze BE to nothing,
with a memory capacity of "1" (a unit left out) memoryEvict would evict pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from qosmanager.api.decode import ANNOTATION_LIMITS, decode_json, fold_get
from qosmanager.api.pod import BATCH_CPU, BATCH_MEMORY, _mapping, _string_map
from qosmanager.api.quantity import milli_value, value
from qosmanager.host.cpuset import parse_cpu_list

ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
MIN_MEMORY_CAPACITY = 1 << 20  # less is a unit left out ("1" for "1Gi"), not a node
# The most the kernel can enforce: a CFS quota is at most 2^44 - 1 µs (max_cfs_runtime), so at the
# longest period (1 s) a node of more cores than this has a quota the kernel refuses; a memory
# limit is a signed 64-bit byte count (its page counter, LONG_MAX).  A capacity beyond either is a
# typo ("1e18"): every quota the strategies derived from it was refused ("is not an integer").
MAX_CPU_MILLI = ((1 << 44) - 1) // 1_000_000 * 1000
MAX_MEMORY_BYTES = (1 << 63) - 1
# NodeResourceTopology annotations (the same wire formats are read from the NRT object).
ANNOTATION_SYSTEM_QOS_RESOURCE = "node.koordinator.sh/system-qos-resource"
ANNOTATION_CPU_MANAGER_POLICY = "kubelet.koordinator.sh/cpu-manager-policy"


@dataclass(frozen=True, slots=True)
class NodeMeta:
    """A node with its amounts and reservation precomputed (see the module docstring)."""

    name: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]
    cpu_capacity_milli: int
    cpu_capacity_cores: int  # Quantity.Value() of capacity cpu: fractional cores round up
    cpu_allocatable_milli: int
    memory_capacity: int
    memory_allocatable: int
    batch_cpu_allocatable: int  # milli-cores; -1 when the node offers none
    batch_memory_allocatable: int  # bytes; -1 when the node offers none
    reserved_cpu_milli: int
    reserved_memory: int
    reserved_cpus: str  # the annotation's reservedCPUs list, "" if none or invalid
    reserved_cpu_ids: tuple[int, ...]
    warnings: tuple[str, ...]
    raw: Mapping[str, Any]  # the original object, read-only use


def _resource_list(obj: Any, path: str) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for name, q in _mapping(obj, path).items():
        try:
            out[str(name)] = milli_value(q) if name == "cpu" else value(q)
        except ValueError as exc:
            raise ValueError(f"{path}.{name}: {exc}") from None
    return MappingProxyType(out)


@dataclass(frozen=True, slots=True)
class NodeReservation:
    """The parsed ``node.koordinator.sh/reservation`` annotation."""

    cpu_milli: int
    memory: int
    reserved_cpus: str
    reserved_cpu_ids: tuple[int, ...]


def parse_reservation(text: str | None) -> NodeReservation:
    """Parse the reservation annotation; ``ValueError`` saying why when it is unusable."""
    if not text:
        return NodeReservation(0, 0, "", ())
    obj = decode_json(text, ANNOTATION_LIMITS)
    if not isinstance(obj, Mapping):
        raise ValueError("not a JSON object")
    resources = _resource_list(fold_get(obj, "resources"), "resources")
    cpu_milli = resources.get("cpu", 0)
    reserved_cpus = fold_get(obj, "reservedCPUs") or ""
    if not isinstance(reserved_cpus, str):
        raise ValueError("reservedCPUs: must be a string")
    cpu_ids = tuple(parse_cpu_list(reserved_cpus))  # the kernel's list format, strictly
    if reserved_cpus:
        cpu_milli = len(cpu_ids) * 1000  # a CPU list wins over resources.cpu
    return NodeReservation(cpu_milli, resources.get("memory", 0), reserved_cpus, cpu_ids)


def node_meta(obj: Mapping[str, Any]) -> NodeMeta:
    """Build the view of a Node object; ``ValueError`` with a clear message if it is unusable."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"Node: must be an object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind is not None and kind != "Node":
        raise ValueError(f"Node: kind must be 'Node', got {kind!r}")
    warnings: list[str] = []
    metadata = _mapping(obj.get("metadata"), "metadata")
    name = metadata.get("name") or ""
    if not isinstance(name, str):
        raise ValueError("metadata.name: must be a string")
    labels = _string_map(metadata.get("labels"), "metadata.labels", warnings)
    annotations = _string_map(metadata.get("annotations"), "metadata.annotations", warnings)
    status = _mapping(obj.get("status"), "status")
    capacity = _resource_list(status.get("capacity"), "status.capacity")
    allocatable = _resource_list(status.get("allocatable"), "status.allocatable")
    for resource in ("cpu", "memory"):
        if resource not in capacity:
            raise ValueError(f"status.capacity.{resource}: required (the strategies' thresholds are shares "
                             "of the node's capacity)")
        given = status["capacity"][resource]
        if capacity[resource] <= 0:
            raise ValueError(f"status.capacity.{resource}: must be positive, got {given!r}")
    for amounts, path in ((capacity, "status.capacity"), (allocatable, "status.allocatable")):
        cpu = amounts.get("cpu", 0)
        if cpu > MAX_CPU_MILLI:
            raise ValueError(f"{path}.cpu: {status[path.split('.')[1]]['cpu']!r} is more than the kernel can "
                             f"enforce as a CFS quota ({MAX_CPU_MILLI // 1000} cores at most)")
        memory = amounts.get("memory", 0)
        if memory > MAX_MEMORY_BYTES:
            raise ValueError(f"{path}.memory: {status[path.split('.')[1]]['memory']!r} is more than the kernel "
                             f"can enforce as a memory limit ({MAX_MEMORY_BYTES} bytes at most)")
    if capacity["memory"] < MIN_MEMORY_CAPACITY:
        raise ValueError(f"status.capacity.memory: {capacity['memory']} bytes, less than 1Mi (a unit left "
                         f"out?), got {status['capacity']['memory']!r}")

    try:
        reservation = parse_reservation(annotations.get(ANNOTATION_NODE_RESERVATION))
    except ValueError as exc:
        warnings.append(f"annotation {ANNOTATION_NODE_RESERVATION}: {exc}; ignored")
        reservation = NodeReservation(0, 0, "", ())

    def kept_back(resource: str) -> int:
        return max(capacity.get(resource, 0) - allocatable.get(resource, 0), 0)

    cpu_capacity_milli = capacity.get("cpu", 0)
    return NodeMeta(
        name=name,
        resource_version=str(metadata.get("resourceVersion") or ""),
        labels=labels,
        annotations=annotations,
        capacity=capacity,
        allocatable=allocatable,
        cpu_capacity_milli=cpu_capacity_milli,
        cpu_capacity_cores=-(-cpu_capacity_milli // 1000),  # == ceil(capacity): both steps round up
        cpu_allocatable_milli=allocatable.get("cpu", 0),
        memory_capacity=capacity.get("memory", 0),
        memory_allocatable=allocatable.get("memory", 0),
        batch_cpu_allocatable=allocatable.get(BATCH_CPU, -1),
        batch_memory_allocatable=allocatable.get(BATCH_MEMORY, -1),
        reserved_cpu_milli=max(kept_back("cpu"), reservation.cpu_milli),
        reserved_memory=max(kept_back("memory"), reservation.memory),
        reserved_cpus=reservation.reserved_cpus,
        reserved_cpu_ids=reservation.reserved_cpu_ids,
        warnings=tuple(warnings),
        raw=obj,
    )


__all__ = [
    "ANNOTATION_CPU_MANAGER_POLICY",
    "ANNOTATION_NODE_RESERVATION",
    "ANNOTATION_SYSTEM_QOS_RESOURCE",
    "MAX_CPU_MILLI",
    "MAX_MEMORY_BYTES",
    "MIN_MEMORY_CAPACITY",
    "NodeMeta",
    "NodeReservation",
    "node_meta",
    "parse_reservation",
]
