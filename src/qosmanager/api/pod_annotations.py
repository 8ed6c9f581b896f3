"""A pod's labels and annotations: their keys, and decoding them the way koordlet's Go code does.

The view (:mod:`qosmanager.api.pod`) reads them through this module; import the names from there.

Map of the file:

* the label and annotation keys koordlet reads;
* :func:`parse_int32`: a strict decimal int32, as Go's ``strconv.ParseInt(s, 10, 32)``;
* the annotations, each bounded (:data:`~qosmanager.api.decode.ANNOTATION_LIMITS`) and decoded
  like ``encoding/json``: the eviction policy (``[]string``), the resource status (cpuset and
  NUMA resources), and the NodeSLO-shaped feature configs (``_annotation_config``: CPU burst,
  memory QoS, blkio QoS), whose failure marks only that feature of the pod invalid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qosmanager.api.decode import ANNOTATION_LIMITS, decode_json, fold_get
from qosmanager.api.nodeslo import from_dict
from qosmanager.api.quantity import parse_quantity

LABEL_QOS = "koordinator.sh/qosClass"
LABEL_PRIORITY_CLASS = "koordinator.sh/priority-class"
LABEL_PRIORITY = "koordinator.sh/priority"
LABEL_EVICTION_ENABLED = "koordinator.sh/eviction-enabled"
ANNOTATION_EVICTION_POLICY = "koordinator.sh/eviction-policy"
ANNOTATION_EVICTION_PRIORITY = "koordinator.sh/eviction-priority"
ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
ANNOTATION_CPU_BURST = "koordinator.sh/cpuBurst"
ANNOTATION_MEMORY_QOS = "koordinator.sh/memoryQOS"
ANNOTATION_BLKIO_QOS = "koordinator.sh/blkioQOS"
ANNOTATION_RESCTRL = "node.koordinator.sh/resctrl"

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# Go's strconv.ParseInt(s, 10, ...): optional sign, ASCII digits, nothing else (Python's int()
# would also take spaces, underscores and non-ASCII digits).
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+")
# what a pod's warning adds when a feature annotation cannot be decoded
INVALID_ANNOTATION_NOTE = "; that feature leaves the pod's files as they are"


def _is_int32(number: Any) -> bool:
    return isinstance(number, int) and not isinstance(number, bool) and _INT32_MIN <= number <= _INT32_MAX


def parse_int32(text: str | None) -> int | None:
    """A strict decimal int32 (optional sign, ASCII digits only), or None.

    Deliberate fix (koordlet-qos §6b item 7): priority labels and annotations are read exactly as
    Go's ``strconv.ParseInt(s, 10, 32)`` reads them, not with Python's lenient ``int()``.
    """
    if text is None or _DECIMAL_RE.fullmatch(text) is None:
        return None
    number = int(text)
    return number if _INT32_MIN <= number <= _INT32_MAX else None


# --------------------------------------------------------------------------------------------
# Annotations


def _decode(annotations: Mapping[str, str], key: str) -> Any:
    """An annotation's JSON, bounded; ``ValueError`` saying why it cannot be decoded."""
    return decode_json(annotations[key], ANNOTATION_LIMITS)


def _eviction_policy(
    annotations: Mapping[str, str], warnings: list[str]
) -> tuple[tuple[str, ...] | None, bool]:
    """``[]string``: ``null`` is an empty list and a ``null`` element an empty string, as in Go."""
    if ANNOTATION_EVICTION_POLICY not in annotations:
        return None, False
    try:
        policy = _decode(annotations, ANNOTATION_EVICTION_POLICY)
        if policy is None:
            return (), False
        if not isinstance(policy, list) or not all(item is None or isinstance(item, str) for item in policy):
            raise ValueError("not a JSON list of strings")
    except ValueError as exc:
        warnings.append(f"annotation {ANNOTATION_EVICTION_POLICY}: {exc}; no feature may evict the pod")
        return (), True
    return tuple(item or "" for item in policy), False


def _int32_value(raw: Any) -> bool:
    return raw is None or _is_int32(raw)


def _numa_resources(raw: Any) -> bool:
    """``[]NUMANodeResource``: whether the list decodes (``node`` int32, ``resources`` quantities)."""
    if raw is None:
        return True
    if not isinstance(raw, list):
        return False
    for item in raw:
        if item is None:
            continue
        if not isinstance(item, Mapping) or not _int32_value(fold_get(item, "node")):
            return False
        resources = fold_get(item, "resources")
        if resources is None:
            continue
        if not isinstance(resources, Mapping):
            return False
        for amount in resources.values():
            if amount is not None:
                parse_quantity(amount)  # ValueError: the annotation does not decode
    return True


def _resource_status(annotations: Mapping[str, str], warnings: list[str]) -> tuple[str, bool]:
    """``ResourceStatus``: cpuset and NUMA resources; a value of the wrong type fails the whole
    annotation (Go's ``Unmarshal`` returns an error, and koordlet then ignores it)."""
    if not annotations.get(ANNOTATION_RESOURCE_STATUS):
        return "", False
    try:
        status = _decode(annotations, ANNOTATION_RESOURCE_STATUS)
        if status is None:
            return "", False
        if not isinstance(status, Mapping):
            raise ValueError("not a JSON object")
        cpuset = fold_get(status, "cpuset")
        if cpuset is not None and not isinstance(cpuset, str):
            raise ValueError("cpuset is not a string")
        numa = fold_get(status, "numaNodeResources")
        if not _numa_resources(numa):
            raise ValueError("numaNodeResources is not a list of {node, resources}")
    except ValueError as exc:
        warnings.append(f"annotation {ANNOTATION_RESOURCE_STATUS}: {exc}; ignored")
        return "", False
    return cpuset or "", isinstance(numa, list) and len(numa) > 0


def _annotation_config(
    annotations: Mapping[str, str], key: str, cls: Any, warnings: list[str], empty: Any = None
) -> tuple[Any, bool]:
    """A NodeSLO-shaped JSON annotation -> (config or None, invalid)."""
    text = annotations.get(key)
    if text is None:
        return None, False
    if text == "" and empty is not None:
        return empty, False
    try:
        config, unknown = from_dict(cls, _decode(annotations, key), f"annotation {key}")
    except ValueError as exc:  # DecodeError and NodeSLOError are both ValueErrors
        warnings.append(f"annotation {key}: cannot be decoded ({exc}){INVALID_ANNOTATION_NOTE}")
        return None, True
    warnings.extend(unknown)
    return config, False
