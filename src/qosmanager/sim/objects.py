"""Kubernetes objects for fake hosts: the pods file, the Node and a NodeSLO.

:func:`pod_object` turns a :class:`~qosmanager.sim.fakehost.FakePod` into the Pod JSON
the kubelet's ``/pods`` returns, consistent with where the fake host put its cgroups:
Guaranteed pods request what they limit, Burstable pods request less, BestEffort pods
carry koordinator batch resources (invisible to the kubelet's QoS) and the
``koordinator.sh/qosClass: BE`` label.

The objects are complete as an API server sends them: uids, resourceVersions, creation
timestamps, generations and managed fields, a pod's ReplicaSet owner, its containers' images
with the image IDs and start times in their statuses, the node's system info, addresses and
conditions -- so a strict client (the official ``kubernetes`` one the tests decode them with)
reads them as well as the agent's own.  Every value is derived from the inputs, never random.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakepod import FakePod

IMAGE = "registry.local/app:1"
IMAGE_ID = "registry.local/app@sha256:" + hashlib.sha256(IMAGE.encode()).hexdigest()
_NS_UUID = uuid.UUID("6f1c2b0e-4d3a-5e6f-8a9b-0c1d2e3f4a5b")


def _uid(*parts: str) -> str:
    return str(uuid.uuid5(_NS_UUID, "/".join(parts)))


def fields_v1(obj: Any) -> Any:
    """The ``fieldsV1`` set of an object: ``f:<key>`` for map keys, ``k:{"name":...}`` for list items
    keyed by name (containers, conditions by type), ``.`` marking an entry itself; leaves are ``{}``."""
    if isinstance(obj, Mapping):
        return {f"f:{k}": fields_v1(v) for k, v in obj.items()}
    if isinstance(obj, list) and obj and all(isinstance(e, Mapping) for e in obj):
        key = next((k for k in ("name", "type", "containerPort") if all(k in e for e in obj)), None)
        if key is not None:
            out: dict[str, Any] = {}
            for e in obj:
                out["k:" + _json_compact({key: e[key]})] = {".": {}, **fields_v1(
                    {k: v for k, v in e.items() if k != key}), f"f:{key}": {}}
            return out
    return {}


def _json_compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def managed_field(manager: str, api_version: str, time: str, fields: Any, *, operation: str = "Update",
                  subresource: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {"manager": manager, "operation": operation, "apiVersion": api_version,
                             "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields_v1(fields)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def pod_object(pod: FakePod, *, cpu_milli: int = 1000, memory: int = 1 << 30, priority: int | None = None,
               labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
               phase: str = "Running", start_time: str = "2026-01-01T00:00:00Z",
               node_name: str = "fake-node") -> dict[str, Any]:
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
        containers.append({"name": c.name, "image": IMAGE, "resources": res, "imagePullPolicy": "IfNotPresent",
                           "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"})
    if qos == KubeQoS.BESTEFFORT.value:
        lab["koordinator.sh/qosClass"] = "BE"
        lab["koordinator.sh/priority-class"] = "koord-batch"
    elif qos == KubeQoS.BURSTABLE.value:
        lab["koordinator.sh/qosClass"] = "LS"
    if labels:
        lab.update(labels)
    spec: dict[str, Any] = {"containers": containers, "nodeName": node_name, "restartPolicy": "Always",
                            "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                            "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
                            "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
                            "securityContext": {}}
    if priority is not None:
        spec["priority"] = priority
    elif qos == KubeQoS.BESTEFFORT.value:
        spec["priority"] = 5500
    else:
        spec["priority"] = 9500
    running = phase == "Running"
    created = start_time  # the scheduler and the kubelet act within the same second here
    owner = f"{pod.name}-rs"
    meta: dict[str, Any] = {
        "name": pod.name, "namespace": pod.namespace, "uid": pod.uid, "labels": lab,
        "annotations": dict(annotations or {}), "resourceVersion": "1", "generation": 1,
        "creationTimestamp": created,
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                             "uid": _uid(pod.namespace, "replicasets", owner), "controller": True,
                             "blockOwnerDeletion": True}]}
    statuses = []
    for c in pod.containers:
        st: dict[str, Any] = {"name": c.name, "image": IMAGE, "imageID": IMAGE_ID,
                              "containerID": c.container_id, "ready": running, "started": running,
                              "restartCount": 0, "lastState": {},
                              "state": {"running": {"startedAt": start_time}} if running
                              else {"waiting": {"reason": "ContainerCreating"}}}
        statuses.append(st)
    true_false = "True" if running else "False"
    conditions = [{"type": t, "status": "True" if t == "PodScheduled" else true_false,
                   "lastProbeTime": None, "lastTransitionTime": start_time}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                            "PodScheduled")]
    status: dict[str, Any] = {"phase": phase, "qosClass": qos, "startTime": start_time,
                              "conditions": conditions, "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
                              "containerStatuses": statuses}
    if running:
        h = int(hashlib.sha256(pod.uid.encode()).hexdigest()[:4], 16)
        ip = f"10.244.{h >> 8}.{(h & 0xFF) or 1}"
        status["podIP"], status["podIPs"] = ip, [{"ip": ip}]
    meta["managedFields"] = [
        managed_field("kube-controller-manager", "v1", created,
                      {"metadata": {k: meta[k] for k in ("labels", "annotations", "ownerReferences")},
                       "spec": spec}),
        managed_field("kubelet", "v1", start_time, {"status": status}, subresource="status")]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


class NodeSize(Protocol):
    """What :func:`node_object` reads of a host (a :class:`~qosmanager.sim.fakehost.FakeHost`)."""

    @property
    def n_cpus(self) -> int: ...

    @property
    def memory_bytes(self) -> int: ...


def pod_list(pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(pods)}


def node_object(host: NodeSize, name: str = "fake-node", *, reserved_cpu_milli: int = 0,
                reserved_memory: int = 0, batch_cpu_milli: int | None = None,
                batch_memory: int | None = None, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
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
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    meta: dict[str, Any] = {"name": name, "uid": _uid("nodes", name), "resourceVersion": "1",
                            "creationTimestamp": created, "labels": labels, "annotations": {}}
    conditions = [{"type": t, "status": "True" if t == "Ready" else "False", "reason": reason,
                   "message": message, "lastHeartbeatTime": created, "lastTransitionTime": created}
                  for t, reason, message in (
                      ("MemoryPressure", "KubeletHasSufficientMemory",
                       "kubelet has sufficient memory available"),
                      ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                      ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                      ("Ready", "KubeletReady", "kubelet is posting ready status"))]
    node_info = {"machineID": _uid("machine", name).replace("-", ""), "systemUUID": _uid("system", name),
                 "bootID": _uid("boot", name), "kernelVersion": "6.1.0-fake",
                 "osImage": "Debian GNU/Linux 12",
                 "containerRuntimeVersion": "containerd://1.7.24", "kubeletVersion": "v1.33.0",
                 "kubeProxyVersion": "v1.33.0", "operatingSystem": "linux", "architecture": "amd64"}
    status: dict[str, Any] = {"capacity": cap, "allocatable": alloc, "conditions": conditions,
                              "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                            {"type": "Hostname", "address": name}],
                              "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}, "nodeInfo": node_info}
    meta["managedFields"] = [
        managed_field("kubelet", "v1", created, {"metadata": {"labels": labels}}),
        managed_field("kubelet", "v1", created, {"status": status}, subresource="status")]
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "spec": {"podCIDR": "10.244.0.0/16", "podCIDRs": ["10.244.0.0/16"]}, "status": status}


def nodeslo_object(spec: Mapping[str, Any] | None = None, name: str = "fake-node",
                   created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    body = dict(spec or {})
    meta: dict[str, Any] = {"name": name, "uid": _uid("nodeslos", name), "resourceVersion": "1",
                            "generation": 1, "creationTimestamp": created,
                            "managedFields": [managed_field("koord-manager", "slo.koordinator.sh/v1alpha1",
                                                            created, {"spec": body})]}
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": meta, "spec": body}
