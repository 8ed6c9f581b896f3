"""Kubernetes objects for fake hosts: the pods file, the Node and a NodeSLO.

:func:`pod_object` turns a :class:`~qosmanager.sim.fakehost.FakePod` into the Pod JSON
the kubelet's ``/pods`` returns, consistent with where the fake host put its cgroups:
Guaranteed pods request what they limit, Burstable pods request less, BestEffort pods
carry koordinator batch resources (invisible to the kubelet's QoS) and the
``koordinator.sh/qosClass: BE`` label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost, FakePod


def pod_object(pod: FakePod, *, cpu_milli: int = 1000, memory: int = 1 << 30, priority: int | None = None,
               labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
               phase: str = "Running", start_time: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    qos = pod.qos.value if isinstance(pod.qos, KubeQoS) else str(pod.qos)
    lab = {"app": pod.name}
    containers = []
    for c in pod.containers:
        if qos == KubeQoS.GUARANTEED.value:
            res = {"requests": {"cpu": f"{cpu_milli}m", "memory": str(memory)},
                   "limits": {"cpu": f"{cpu_milli}m", "memory": str(memory)}}
        elif qos == KubeQoS.BURSTABLE.value:
            res = {"requests": {"cpu": f"{cpu_milli // 2}m", "memory": str(memory // 2)},
                   "limits": {"cpu": f"{cpu_milli}m", "memory": str(memory)}}
        else:
            res = {"requests": {"kubernetes.io/batch-cpu": str(cpu_milli),
                                "kubernetes.io/batch-memory": str(memory)},
                   "limits": {"kubernetes.io/batch-cpu": str(cpu_milli),
                              "kubernetes.io/batch-memory": str(memory)}}
        containers.append({"name": c.name, "image": "registry.local/app:1", "resources": res})
    if qos == KubeQoS.BESTEFFORT.value:
        lab["koordinator.sh/qosClass"] = "BE"
        lab["koordinator.sh/priority-class"] = "koord-batch"
    elif qos == KubeQoS.BURSTABLE.value:
        lab["koordinator.sh/qosClass"] = "LS"
    if labels:
        lab.update(labels)
    spec: dict[str, Any] = {"containers": containers, "nodeName": "fake-node"}
    if priority is not None:
        spec["priority"] = priority
    elif qos == KubeQoS.BESTEFFORT.value:
        spec["priority"] = 5500
    else:
        spec["priority"] = 9500
    running = phase == "Running"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "labels": lab,
                     "annotations": dict(annotations or {}), "resourceVersion": "1"},
        "spec": spec,
        "status": {
            "phase": phase,
            "qosClass": qos,
            "startTime": start_time,
            "containerStatuses": [
                {"name": c.name, "containerID": c.container_id, "ready": running, "restartCount": 0,
                 "state": {"running": {"startedAt": start_time}} if running else {"waiting": {}}}
                for c in pod.containers
            ],
        },
    }


def pod_list(pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(pods)}


def node_object(host: FakeHost, name: str = "fake-node", *, reserved_cpu_milli: int = 0,
                reserved_memory: int = 0, batch_cpu_milli: int | None = None,
                batch_memory: int | None = None) -> dict[str, Any]:
    cpus = host.n_cpus
    mem = host.memory_bytes
    alloc: dict[str, str] = {"cpu": f"{cpus * 1000 - reserved_cpu_milli}m", "memory": str(mem - reserved_memory),
                             "pods": "1100"}
    cap: dict[str, str] = {"cpu": str(cpus), "memory": str(mem), "pods": "1100"}
    if batch_cpu_milli is not None:
        alloc["kubernetes.io/batch-cpu"] = str(batch_cpu_milli)
        cap["kubernetes.io/batch-cpu"] = str(batch_cpu_milli)
    if batch_memory is not None:
        alloc["kubernetes.io/batch-memory"] = str(batch_memory)
        cap["kubernetes.io/batch-memory"] = str(batch_memory)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": {}},
        "status": {"capacity": cap, "allocatable": alloc},
    }


def nodeslo_object(spec: Mapping[str, Any] | None = None, name: str = "fake-node") -> dict[str, Any]:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": name},
            "spec": dict(spec or {})}
