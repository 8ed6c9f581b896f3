"""The Kubernetes client's answers are bounded: an over-deep or over-long answer is a KubeError saying
so, never a RecursionError or an unbounded read, and the client goes on working afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import qosmanager.states.kube.client as client_module
from qosmanager.sim.fakeapi import FakeAPIServer, FakeCluster
from qosmanager.states.kube.client import KubeClient, KubeError
from qosmanager.states.kube.config import KubeConfig


def pod(name: str, deep: int = 0) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
                           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}
    if deep:
        nested: Any = {}
        for _ in range(deep):
            nested = {"f:x": nested}
        obj["metadata"]["managedFields"] = [{"manager": "m", "fieldsV1": nested}]
    return obj


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    with FakeAPIServer(FakeCluster(), bookmark_interval=0.1) as server:
        yield server


@pytest.fixture
def client(api: FakeAPIServer) -> Iterator[KubeClient]:
    c = KubeClient(KubeConfig(server=api.url, origin="test"), timeout=5)
    try:
        yield c
    finally:
        c.close()


def test_an_over_deep_list_is_a_clear_error(api: FakeAPIServer, client: KubeClient) -> None:
    api.cluster.put(pod("fine", deep=90))
    items, _ = client.list("/api/v1/pods")
    assert [i["metadata"]["name"] for i in items] == ["fine"]
    api.cluster.put(pod("deep", deep=150))
    with pytest.raises(KubeError, match="cannot be decoded: nested deeper than 100 levels"):
        client.list("/api/v1/pods")
    api.cluster.remove("Pod", "deep", namespace="default")
    assert len(client.list("/api/v1/pods")[0]) == 1  # the client goes on


def test_an_over_deep_watch_event_is_a_broken_stream(api: FakeAPIServer, client: KubeClient) -> None:
    _, rv = client.list("/api/v1/pods")
    api.cluster.put(pod("deep", deep=300))
    with pytest.raises(KubeError, match="an event that cannot be decoded: nested deeper") as e:
        for _ in client.watch("/api/v1/pods", resource_version=rv, timeout=5):
            pass
    assert e.value.status == 0


def test_an_over_long_answer_is_refused_before_it_is_read(api: FakeAPIServer, client: KubeClient,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(20):
        api.cluster.put(pod(f"p{i}"))
    monkeypatch.setattr(client_module, "MAX_RESPONSE", 2048)
    with pytest.raises(KubeError, match="more than the limit of 2048"):
        client.list("/api/v1/pods", resource_version="0")
    monkeypatch.undo()
    assert len(client.list("/api/v1/pods")[0]) == 20
