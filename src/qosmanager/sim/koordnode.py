"""A koordinator node's own cgroup values: what koordlet's runtime hooks and the kubelet write.

A vanilla kubelet node leaves BestEffort pods unlimited.  On a koordinator colocation node BE pods
request and limit ``kubernetes.io/batch-cpu`` / ``kubernetes.io/batch-memory`` (invisible to the
kubelet), and koordlet's ``BatchResource`` runtime hook (koordlet-infra §7.3) writes them into the
pods' and containers' cgroups:

* ``cpu.cfs_quota_us`` (v2 ``cpu.max``) = ``MilliCPUToQuota(batch-cpu limit)``, -1 when a
  container has none (the pod: the sum over its containers, -1 when any is unlimited);
* ``cpu.shares`` (v2 ``cpu.weight``) = ``MilliCPUToShares(batch-cpu request)``;
* the memory limit (v1 ``memory.limit_in_bytes``, v2 ``memory.max``) = the batch-memory limit.

The kubelet writes the rest: every pod's and container's shares from its CPU request (2 for a
BestEffort one), quotas and memory limits from its limits (a pod-level one only when every
container has one), the Burstable QoS dir's shares from the sum of its pods' requests and the
BestEffort QoS dir's shares 2.

:func:`lay_out` writes these values into a :class:`~qosmanager.sim.fakehost.FakeHost`'s files for
the pods given; :func:`pod_values` is the model itself.  ``FakeHost.add_pod`` lays every pod out
this way unless the host is built with ``koordinator=False`` (:func:`lay_out_fake_pod`: from the
pod object :func:`~qosmanager.sim.objects.pod_object` makes of the pod by default, or from the one
given), so ``Harness``, ``replay``, ``simulate`` and every test that builds a ``FakeHost`` itself
run on such a node.
Tests use it to run every strategy on such a node: on cgroup v1 a BE pod quota is what makes the
kernel refuse a smaller BestEffort QoS dir quota.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from qosmanager.api.pod import BATCH_CPU, BATCH_MEMORY, KUBE_QOS_BURSTABLE, PodMeta, pod_meta
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.resources import CFS_PERIOD_US, milli_cpu_to_quota, milli_cpu_to_shares, shares_to_weight
from qosmanager.sim.fakekernel import V1_MEMORY_UNLIMITED
from qosmanager.sim.fakepod import FakeContainer, FakePod
from qosmanager.sim.objects import pod_object

RESOURCE_CPU, RESOURCE_MEMORY = "cpu", "memory"


class FakeHost(Protocol):
    """What the lay-out reads of a host (a :class:`~qosmanager.sim.fakehost.FakeHost`, which builds on
    this module)."""

    @property
    def layout(self) -> CgroupLayout: ...

    @property
    def version(self) -> int: ...


@dataclass(frozen=True, slots=True)
class CgroupValues:
    """One cgroup's CPU and memory values: quota in µs per 100 ms (-1 unlimited), v1 shares, memory
    limit in bytes (-1 unlimited)."""

    quota: int
    shares: int
    memory_limit: int


def _sum_or_unlimited(values: list[int]) -> int:
    """The pod-level limit: the sum, or -1 (unlimited) when a container has none."""
    if not values or any(v <= 0 for v in values):
        return -1
    return sum(values)


def pod_values(pod: PodMeta) -> tuple[CgroupValues, dict[str, CgroupValues]]:
    """The pod dir's values and each container's (by container name), as koordlet's batch-resource
    hook (a pod labelled BE) or else the kubelet writes them."""
    batch = pod.is_be()
    cpu, memory = (BATCH_CPU, BATCH_MEMORY) if batch else (RESOURCE_CPU, RESOURCE_MEMORY)
    containers: dict[str, CgroupValues] = {}
    limits_cpu: list[int] = []
    limits_mem: list[int] = []
    requests_cpu = 0
    for c in pod.containers:
        req = max(c.requests.get(cpu, 0), 0)
        lim_cpu = c.limits.get(cpu, -1)
        lim_mem = c.limits.get(memory, -1)
        requests_cpu += req
        limits_cpu.append(lim_cpu)
        limits_mem.append(lim_mem)
        containers[c.name] = CgroupValues(milli_cpu_to_quota(lim_cpu), milli_cpu_to_shares(req),
                                          lim_mem if lim_mem > 0 else -1)
    pod_level = CgroupValues(milli_cpu_to_quota(_sum_or_unlimited(limits_cpu)), milli_cpu_to_shares(requests_cpu),
                             _sum_or_unlimited(limits_mem))
    return pod_level, containers


def burstable_shares(pods: Iterable[PodMeta]) -> int:
    """The kubelet's Burstable QoS dir shares: the sum of its pods' CPU requests."""
    return milli_cpu_to_shares(sum(p.cpu_request_milli for p in pods if p.kube_qos == KUBE_QOS_BURSTABLE))


def _write(host: FakeHost, subsystem: str, rel: str, name: str, value: str) -> None:
    path = host.layout.file(subsystem, rel, name)
    try:
        with open(path, "w") as f:
            f.write(value + "\n")
    except FileNotFoundError:
        pass  # the cgroup is not laid out (a container without an ID, a removed hierarchy)


def write_values(host: FakeHost, rel: str, v: CgroupValues) -> None:
    """One cgroup dir's values in the host's files, in the kernel's formats."""
    if host.version == 1:
        _write(host, "cpu", rel, "cpu.cfs_quota_us", str(v.quota))
        _write(host, "cpu", rel, "cpu.shares", str(v.shares))
        mem = V1_MEMORY_UNLIMITED if v.memory_limit < 0 else v.memory_limit
        _write(host, "memory", rel, "memory.limit_in_bytes", str(mem))
    else:
        quota = "max" if v.quota < 0 else str(v.quota)
        _write(host, "", rel, "cpu.max", f"{quota} {CFS_PERIOD_US}")
        _write(host, "", rel, "cpu.weight", str(shares_to_weight(v.shares)))
        _write(host, "", rel, "memory.max", "max" if v.memory_limit < 0 else str(v.memory_limit))


def lay_out_pod(host: FakeHost, pod: PodMeta) -> None:
    """The pod's and its containers' values (dirs the host does not have are skipped)."""
    layout = host.layout
    pod_dir = layout.pod_dir(pod.kube_qos, pod.uid)
    pod_level, containers = pod_values(pod)
    write_values(host, pod_dir, pod_level)
    for c in pod.containers:
        if not c.container_id:
            continue
        try:
            d = layout.container_dir(pod_dir, c.container_id)
        except ValueError:
            continue
        write_values(host, d, containers[c.name])


@functools.lru_cache(maxsize=256)
def _default_values(qos: str, names: tuple[str, ...]) -> tuple[CgroupValues, dict[str, CgroupValues], int]:
    """pod_values of the object ``pod_object`` makes (its default resources) of a pod of this QoS class
    and these containers, and the pod's CPU request: the same for every such pod (cached)."""
    fake = FakePod("00000000-0000-4000-8000-000000000000", "default", "values", KubeQoS(qos),
                   [FakeContainer(n, f"containerd://{i:064x}") for i, n in enumerate(names)])
    meta = pod_meta(pod_object(fake))
    pod_level, containers = pod_values(meta)
    return pod_level, containers, meta.cpu_request_milli


def lay_out_fake_pod(host: FakeHost, pod: FakePod, meta: PodMeta | None = None) -> int:
    """A pod just added to ``host``: its values from ``meta`` (its pod object), by default from the
    object :func:`~qosmanager.sim.objects.pod_object` makes of it with its default resources (batch-cpu
    1 core and batch-memory 1 GiB per BE container).  Returns the pod's CPU request (milli-cores), the
    part of the Burstable QoS dir's shares that is its own."""
    if meta is not None:
        lay_out_pod(host, meta)
        return meta.cpu_request_milli
    qos = pod.qos.value if isinstance(pod.qos, KubeQoS) else str(pod.qos)
    pod_level, containers, request = _default_values(qos, tuple(c.name for c in pod.containers))
    layout = host.layout
    pod_dir = layout.pod_dir(KubeQoS(qos), pod.uid)
    write_values(host, pod_dir, pod_level)
    for c in pod.containers:
        write_values(host, layout.container_dir(pod_dir, c.container_id), containers[c.name])
    return request


def write_burstable_shares(host: FakeHost, request_milli: int) -> None:
    """The kubelet's Burstable QoS dir shares for its pods' summed CPU request."""
    rel = host.layout.qos_dir(KubeQoS.BURSTABLE)
    shares = milli_cpu_to_shares(request_milli)
    if host.version == 1:
        _write(host, "cpu", rel, "cpu.shares", str(shares))
    else:
        _write(host, "", rel, "cpu.weight", str(shares_to_weight(shares)))


def lay_out_qos_dirs(host: FakeHost, pods: Iterable[PodMeta]) -> None:
    """The kubelet's QoS dir shares: Burstable from its pods' requests, BestEffort 2."""
    layout = host.layout
    burstable = CgroupValues(-1, burstable_shares(pods), -1)
    besteffort = CgroupValues(-1, milli_cpu_to_shares(0), -1)
    for qos, v in ((KubeQoS.BURSTABLE, burstable), (KubeQoS.BESTEFFORT, besteffort)):
        rel = layout.qos_dir(qos)
        if host.version == 1:
            _write(host, "cpu", rel, "cpu.shares", str(v.shares))
        else:
            _write(host, "", rel, "cpu.weight", str(shares_to_weight(v.shares)))


def lay_out(host: FakeHost, pods: Iterable[PodMeta]) -> None:
    """Every pod's values and the QoS dirs' (see the module docstring)."""
    pods = list(pods)
    for p in pods:
        lay_out_pod(host, p)
    lay_out_qos_dirs(host, pods)


__all__ = ["CgroupValues", "burstable_shares", "lay_out", "lay_out_fake_pod", "lay_out_pod",
           "lay_out_qos_dirs", "pod_values", "write_burstable_shares", "write_values"]
