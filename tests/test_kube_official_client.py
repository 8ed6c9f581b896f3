"""The fake API server's answers, decoded by the official ``kubernetes`` Python client.

The official client turns every answer into typed models (``V1Pod``, ``V1Node``, ...) and refuses
objects a real server would never send (a container status without ``image`` or ``imageID``, a
node's ``nodeInfo`` missing a field), so these tests hold the fake -- and the objects
:mod:`qosmanager.sim.objects` builds for it -- to what a real API server sends: server-set
metadata (uid, resourceVersion, creationTimestamp, generation, managedFields with fieldsV1),
typed watch events, custom-resource lists, evictions.  The agent's own client reads the same
objects (the last test), so it is proven against complete objects rather than a lenient fake.
"""

from __future__ import annotations

import datetime
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s  # the official client: a test dependency (pyproject's test extra)
from kubernetes import watch as k8s_watch

from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.api.node import node_meta
from qosmanager.api.pod import pod_list as decode_pod_list
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import node_object, nodeslo_object, pod_object
from qosmanager.states.kube.client import KubeClient
from qosmanager.states.kube.config import KubeConfig
from qosmanager.states.kube.events import EventRecorder, ObjectRef

NODE = "fake-node"
SLO = ("slo.koordinator.sh", "v1alpha1", "nodeslos")


def fake_pod(name: str, qos: KubeQoS = KubeQoS.GUARANTEED) -> FakePod:
    return FakePod(f"uid-{name}", "default", name, qos, [FakeContainer("app", f"containerd://{name}-app"),
                                                         FakeContainer("side", f"containerd://{name}-side")])


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    cluster = FakeCluster()
    with tempfile.TemporaryDirectory() as d:
        host = FakeHost(d, n_cpus=4)
        cluster.put(node_object(host, NODE, batch_cpu_milli=2000, batch_memory=1 << 30))
    cluster.put(pod_object(fake_pod("ls")))
    cluster.put(pod_object(fake_pod("be", KubeQoS.BESTEFFORT)))
    thresholds = {"enable": True, "cpuSuppressThresholdPercent": 65}
    cluster.put(nodeslo_object({"resourceUsedThresholdWithBE": thresholds}, NODE))
    with FakeAPIServer(cluster, bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def official(api: FakeAPIServer) -> Iterator[k8s.ApiClient]:
    cfg = k8s.Configuration()
    cfg.host = api.url
    with k8s.ApiClient(cfg) as c:
        yield c


def _fields(entry: Any) -> dict[str, Any]:
    assert entry.fields_type == "FieldsV1" and isinstance(entry.fields_v1, dict)
    assert isinstance(entry.time, datetime.datetime)
    return entry.fields_v1


# ----------------------------------------------------------------------------------------------
# pods and nodes as typed objects
# ----------------------------------------------------------------------------------------------
def test_pods_list_as_typed_v1pods_with_everything_a_real_server_sends(official: k8s.ApiClient) -> None:
    pods = k8s.CoreV1Api(official).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
    assert int(pods.metadata.resource_version) > 0
    by_name = {p.metadata.name: p for p in pods.items}
    assert sorted(by_name) == ["be", "ls"]
    p = by_name["ls"]
    assert isinstance(p, k8s.V1Pod)
    meta = p.metadata
    assert meta.uid == "uid-ls" and meta.namespace == "default" and meta.generation == 1
    assert int(meta.resource_version) > 1
    assert isinstance(meta.creation_timestamp, datetime.datetime)
    owner = meta.owner_references[0]
    assert owner.kind == "ReplicaSet" and owner.controller and owner.uid and owner.api_version == "apps/v1"
    managers = {(m.manager, m.subresource) for m in meta.managed_fields}
    assert managers == {("kube-controller-manager", None), ("kubelet", "status")}
    spec_fields = next(_fields(m) for m in meta.managed_fields if m.subresource is None)
    assert 'k:{"name":"app"}' in spec_fields["f:spec"]["f:containers"]
    status_fields = next(_fields(m) for m in meta.managed_fields if m.subresource == "status")
    assert "f:containerStatuses" in status_fields["f:status"]
    assert [c.image for c in p.spec.containers] == ["registry.local/app:1"] * 2
    assert p.spec.containers[0].resources.limits == {"cpu": "1000m", "memory": str(1 << 30)}
    assert p.status.phase == "Running" and p.status.qos_class == "Guaranteed"
    assert isinstance(p.status.start_time, datetime.datetime)
    assert p.status.pod_ip and p.status.host_ip
    assert {c.type for c in p.status.conditions} >= {"Ready", "PodScheduled", "ContainersReady"}
    for st in p.status.container_statuses:
        assert st.image == "registry.local/app:1" and st.image_id.startswith("registry.local/app@sha256:")
        assert st.container_id.startswith("containerd://") and st.ready and st.started
        assert isinstance(st.state.running.started_at, datetime.datetime)
    be = by_name["be"]
    assert be.metadata.labels["koordinator.sh/qosClass"] == "BE" and be.status.qos_class == "BestEffort"
    assert be.spec.containers[0].resources.requests["kubernetes.io/batch-cpu"] == "1000"


def test_a_node_reads_as_a_typed_v1node(official: k8s.ApiClient) -> None:
    n = k8s.CoreV1Api(official).read_node(NODE)
    assert isinstance(n, k8s.V1Node)
    assert n.metadata.uid and isinstance(n.metadata.creation_timestamp, datetime.datetime)
    assert n.metadata.labels["kubernetes.io/hostname"] == NODE
    assert n.status.allocatable["kubernetes.io/batch-cpu"] == "2000" and n.status.capacity["cpu"] == "4"
    info = n.status.node_info
    assert info.kubelet_version.startswith("v1.")
    assert info.container_runtime_version.startswith("containerd://")
    assert info.operating_system == "linux" and info.machine_id and info.boot_id
    ready = next(c for c in n.status.conditions if c.type == "Ready")
    assert ready.status == "True" and isinstance(ready.last_heartbeat_time, datetime.datetime)
    assert {a.type for a in n.status.addresses} == {"InternalIP", "Hostname"}
    assert {m.subresource for m in n.metadata.managed_fields} == {None, "status"}


def test_writes_get_server_set_metadata_generation_and_managed_fields(official: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(official)
    body = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="new", labels={"a": "1"}),
                     spec=k8s.V1PodSpec(node_name=NODE,
                                        containers=[k8s.V1Container(name="c", image="img:1")]))
    created = core.create_namespaced_pod("default", body, field_manager="qos-test")
    meta = created.metadata
    assert meta.uid and meta.namespace == "default" and meta.generation == 1
    assert isinstance(meta.creation_timestamp, datetime.datetime)
    [entry] = meta.managed_fields
    assert (entry.manager, entry.operation, entry.api_version) == ("qos-test", "Update", "v1")
    fields = _fields(entry)
    assert fields["f:metadata"] == {"f:labels": {"f:a": {}}}
    assert fields["f:spec"]["f:containers"]['k:{"name":"c"}']["f:image"] == {}
    # a metadata-only change keeps the generation; a spec change bumps it
    relabelled = core.patch_namespaced_pod("new", "default", {"metadata": {"labels": {"b": "2"}}},
                                           field_manager="labeller")
    assert relabelled.metadata.generation == 1
    assert int(relabelled.metadata.resource_version) > int(meta.resource_version)
    assert {m.manager for m in relabelled.metadata.managed_fields} == {"qos-test", "labeller"}
    new_image = {"spec": {"containers": [{"name": "c", "image": "img:2"}]}}
    changed = core.patch_namespaced_pod("new", "default", new_image, field_manager="qos-test")
    assert changed.metadata.generation == 2 and changed.spec.containers[0].image == "img:2"
    assert len([m for m in changed.metadata.managed_fields if m.manager == "qos-test"]) == 1
    status = core.patch_namespaced_pod_status("new", "default", {"status": {"phase": "Running"}},
                                              field_manager="kubelet")
    assert status.status.phase == "Running" and status.metadata.generation == 2
    kubelet = next(m for m in status.metadata.managed_fields if m.manager == "kubelet")
    assert kubelet.subresource == "status" and _fields(kubelet) == {"f:status": {"f:phase": {}}}


# ----------------------------------------------------------------------------------------------
# watch, custom objects, evictions
# ----------------------------------------------------------------------------------------------
def test_a_watch_yields_typed_events_and_tracks_the_resource_version(
        api: FakeAPIServer, official: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(official)
    start = core.list_namespaced_pod("default").metadata.resource_version
    api.cluster.put(pod_object(fake_pod("late")))
    core.patch_namespaced_pod("late", "default", {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_pod("ls", "default")
    w = k8s_watch.Watch()
    events = [(e["type"], e["object"]) for e in w.stream(core.list_namespaced_pod, "default",
                                                          resource_version=start, timeout_seconds=1)]
    assert [(t, o.metadata.name) for t, o in events] == [("ADDED", "late"), ("MODIFIED", "late"),
                                                         ("DELETED", "ls")]
    assert all(isinstance(o, k8s.V1Pod) for _, o in events)
    assert events[1][1].metadata.labels["x"] == "y"
    assert events[0][1].status.container_statuses[0].image_id.startswith("registry.local/app@")
    assert w.resource_version == events[-1][1].metadata.resource_version


def test_nodeslos_through_the_custom_objects_api(official: k8s.ApiClient) -> None:
    custom = k8s.CustomObjectsApi(official)
    listed = custom.list_cluster_custom_object(*SLO)
    assert listed["kind"] == "NodeSLOList" and int(listed["metadata"]["resourceVersion"]) > 0
    [item] = listed["items"]
    # custom resources' list items carry their kind, unlike built-in ones
    assert item["kind"] == "NodeSLO" and item["apiVersion"] == "slo.koordinator.sh/v1alpha1"
    slo = custom.get_cluster_custom_object(*SLO, NODE)
    meta = slo["metadata"]
    assert meta["uid"] and meta["generation"] == 1 and meta["creationTimestamp"].endswith("Z")
    assert meta["managedFields"][0]["fieldsV1"] == {
        "f:spec": {"f:resourceUsedThresholdWithBE": {"f:enable": {}, "f:cpuSuppressThresholdPercent": {}}}}
    patched = custom.patch_cluster_custom_object(
        *SLO, NODE, {"spec": {"resourceUsedThresholdWithBE": {"cpuSuppressThresholdPercent": 50}}})
    assert patched["spec"]["resourceUsedThresholdWithBE"] == {"enable": True,
                                                              "cpuSuppressThresholdPercent": 50}
    assert patched["metadata"]["generation"] == 2
    assert int(patched["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert len(patched["metadata"]["managedFields"]) == 2


def test_evictions_through_the_official_client(api: FakeAPIServer, official: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(official)
    precondition = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid="uid-be"))
    eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="be", namespace="default"),
                              delete_options=precondition)
    answer = core.create_namespaced_pod_eviction("be", "default", eviction)
    assert answer.kind == "Status"  # the real server answers a Status, which the client reads as V1Eviction
    assert api.cluster.evictions[-1].uid_precondition == "uid-be" and api.cluster.evictions[-1].code == 201
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["ls"]
    api.cluster.set_eviction_policy("default", "ls", 429, retry_after=7)
    with pytest.raises(k8s.ApiException) as e:
        core.create_namespaced_pod_eviction("ls", "default", k8s.V1Eviction(
            metadata=k8s.V1ObjectMeta(name="ls", namespace="default")))
    assert e.value.status == 429 and e.value.headers["Retry-After"] == "7"
    with pytest.raises(k8s.ApiException) as e:
        core.create_namespaced_pod_eviction("gone", "default", k8s.V1Eviction(
            metadata=k8s.V1ObjectMeta(name="gone", namespace="default")))
    assert e.value.status == 404


def test_the_agent_client_reads_what_the_official_client_reads(
        api: FakeAPIServer, official: k8s.ApiClient) -> None:
    typed = k8s.CoreV1Api(official).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
    own = KubeClient(KubeConfig(server=api.url, origin="test"), timeout=5)
    try:
        items, rv = own.list("/api/v1/pods", {"fieldSelector": f"spec.nodeName={NODE}"})
        node = own.get(f"/api/v1/nodes/{NODE}")
    finally:
        own.close()
    assert rv == typed.metadata.resource_version
    pods, warnings = decode_pod_list({"kind": "PodList", "apiVersion": "v1", "items": items})
    assert warnings == []
    assert {(p.uid, p.name, p.resource_version) for p in pods} == {
        (p.metadata.uid, p.metadata.name, p.metadata.resource_version) for p in typed.items}
    assert {p.name: p.kube_qos for p in pods} == {"ls": "Guaranteed", "be": "BestEffort"}
    assert node_meta(node).name == NODE


def test_the_events_the_agent_writes_decode_as_typed_core_v1_events(
        api: FakeAPIServer, official: k8s.ApiClient) -> None:
    own = KubeClient(KubeConfig(server=api.url, origin="test"), timeout=5)
    rec = EventRecorder(own, NODE, clock=lambda: 1_767_225_600.0)  # 2026-01-01T00:00:00Z
    rec.start()
    try:
        ref = ObjectRef("Pod", "be", "default", "uid-be")
        assert rec.record(ref, "Warning", "EvictPodSuccess", "evicted", action="Evict")
        assert rec.drain()
        assert rec.record(ref, "Warning", "EvictPodSuccess", "evicted", action="Evict")
        assert rec.drain()  # the repeat is a strategic-merge patch of the same Event
    finally:
        rec.stop()
        own.close()
    [ev] = k8s.CoreV1Api(official).list_namespaced_event("default").items
    assert isinstance(ev, k8s.CoreV1Event)
    assert (ev.type, ev.reason, ev.count, ev.action) == ("Warning", "EvictPodSuccess", 2, "Evict")
    assert (ev.involved_object.kind, ev.involved_object.uid) == ("Pod", "uid-be")
    assert ev.first_timestamp == datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    assert ev.source.component == "qosmanager" and ev.source.host == NODE
    # the agent is the Event's field manager (its User-Agent), for both the create and the patch
    [entry] = ev.metadata.managed_fields
    assert entry.manager == "qosmanager" and entry.operation == "Update" and "f:count" in _fields(entry)
