"""Kubernetes-shaped data: resource quantities, pod and node views, the NodeSLO spec.

Everything that knows a Kubernetes or Koordinator wire format (quantity strings, label and
annotation keys, the PodList/Node/NodeSLO JSON) lives here.  The views are built once per object
change and are immutable; the strategies read their precomputed attributes every tick and never
re-parse JSON, labels or quantities.

* :mod:`.decode` -- bounded JSON/YAML decoding (size and depth limits) and Go's key matching.
* :mod:`.quantity` -- ``resource.Quantity`` parsing (exact, ``Value()``/``MilliValue()`` rounding).
* :mod:`.pod` -- :class:`PodMeta`: QoS, priority, eviction annotations, pod requests/limits and
  batch/mid resources by the upstream Kubernetes and koordlet rules.
* :mod:`.node` -- :class:`NodeMeta`: capacity, allocatable, system reservation.
* :mod:`.nodeslo` -- the NodeSLO schema, koordlet's defaults, the merge and validation.
"""

from __future__ import annotations

from qosmanager.api.decode import DecodeError, load_object
from qosmanager.api.node import NodeMeta, node_meta
from qosmanager.api.nodeslo import (
    NodeSLOError,
    NodeSLOSpec,
    ResourceQOS,
    default_spec_dict,
    json_overlay,
    merge_spec,
    parse_nodeslo,
)
from qosmanager.api.pod import (
    BATCH_CPU,
    BATCH_MEMORY,
    KUBE_QOS_BESTEFFORT,
    KUBE_QOS_BURSTABLE,
    KUBE_QOS_GUARANTEED,
    MID_CPU,
    MID_MEMORY,
    PRIORITY_BATCH,
    PRIORITY_FREE,
    PRIORITY_MID,
    PRIORITY_NONE,
    PRIORITY_PROD,
    QOS_BE,
    QOS_LS,
    QOS_LSE,
    QOS_LSR,
    QOS_NONE,
    QOS_SYSTEM,
    ContainerMeta,
    PodMeta,
    pod_list,
    pod_meta,
)
from qosmanager.api.quantity import milli_value, parse_quantity, value

__all__ = [
    "BATCH_CPU",
    "BATCH_MEMORY",
    "KUBE_QOS_BESTEFFORT",
    "KUBE_QOS_BURSTABLE",
    "KUBE_QOS_GUARANTEED",
    "MID_CPU",
    "MID_MEMORY",
    "PRIORITY_BATCH",
    "PRIORITY_FREE",
    "PRIORITY_MID",
    "PRIORITY_NONE",
    "PRIORITY_PROD",
    "QOS_BE",
    "QOS_LS",
    "QOS_LSE",
    "QOS_LSR",
    "QOS_NONE",
    "QOS_SYSTEM",
    "ContainerMeta",
    "DecodeError",
    "NodeMeta",
    "NodeSLOError",
    "NodeSLOSpec",
    "PodMeta",
    "ResourceQOS",
    "default_spec_dict",
    "json_overlay",
    "load_object",
    "merge_spec",
    "milli_value",
    "node_meta",
    "parse_nodeslo",
    "parse_quantity",
    "pod_list",
    "pod_meta",
    "value",
]
