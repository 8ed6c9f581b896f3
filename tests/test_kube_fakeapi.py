"""The loopback fake API server speaks the Kubernetes wire protocol.

Checked two ways: raw HTTP (``http.client``, no code of ours on the client side) for the exact
shapes -- lists with resourceVersion, chunked watch streams of JSON events, bookmarks, 410 Gone,
field selectors, Status objects, evictions answering 201/429/404 -- and ``kubectl`` as an
independent client (get, apply, watch, delete over HTTPS with a generated certificate).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fakeapi import FakeAPIServer, FakeCluster, make_self_signed_cert
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import node_object, pod_object

NODE = "node-a"


def pod(name: str, node: str = NODE, uid: str | None = None, labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}",
                         "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "img"}]},
            "status": {"phase": "Running"}}


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    server = FakeAPIServer(FakeCluster(), bookmark_interval=0.2).start()
    try:
        yield server
    finally:
        server.stop()


def call(server: FakeAPIServer, method: str, path: str, body: Any = None, *,
         content_type: str = "application/json", headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        h = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            h["Content-Type"] = content_type
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, dict(resp.headers), json.loads(raw) if raw else None
    finally:
        conn.close()


def watch_lines(server: FakeAPIServer, path: str) -> tuple[dict[str, str], list[dict]]:
    """Read a whole watch stream (until the server ends it); raw lines decoded one by one."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        headers = dict(resp.headers)
        body = resp.read()  # http.client undoes the chunking; the server ends the stream itself
        return headers, [json.loads(line) for line in body.split(b"\n") if line.strip()]
    finally:
        conn.close()


# ----------------------------------------------------------------------------------------------
# lists, selectors, objects
# ----------------------------------------------------------------------------------------------
def test_list_has_a_resource_version_and_filters_by_field_selector(api: FakeAPIServer) -> None:
    for name, node in (("a", NODE), ("b", "node-b"), ("c", NODE)):
        api.cluster.put(pod(name, node))
    status, headers, body = call(api, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
    assert sorted(i["metadata"]["name"] for i in body["items"]) == ["a", "c"]
    # three creations after the initial resourceVersion 1: the list is at 4, as a string
    assert body["metadata"]["resourceVersion"] == "4"
    assert all("kind" not in i for i in body["items"])  # real lists carry no kind on items
    _, _, other = call(api, "GET", "/api/v1/pods?fieldSelector=spec.nodeName!%3Dnode-a")
    assert [i["metadata"]["name"] for i in other["items"]] == ["b"]
    _, _, by_name = call(api, "GET", "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dc")
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["c"]


def test_list_pages_with_limit_and_continue(api: FakeAPIServer) -> None:
    for i in range(5):
        api.cluster.put(pod(f"p{i}"))
    names: list[str] = []
    path = "/api/v1/pods?limit=2"
    rvs = set()
    pages = 0
    while True:
        _, _, page = call(api, "GET", path)
        pages += 1
        names += [i["metadata"]["name"] for i in page["items"]]
        rvs.add(page["metadata"]["resourceVersion"])
        token = page["metadata"].get("continue")
        if not token:
            break
        path = f"/api/v1/pods?limit=2&continue={token}"
    assert pages == 3 and names == [f"p{i}" for i in range(5)]
    assert rvs == {"6"}  # every page reports the snapshot of the first


def test_create_get_update_conflict_and_delete(api: FakeAPIServer) -> None:
    status, _, created = call(api, "POST", "/api/v1/namespaces/default/pods", pod("x"))
    assert status == 201 and created["metadata"]["uid"] == "uid-x"
    assert created["metadata"]["resourceVersion"] == "2"
    status, _, dup = call(api, "POST", "/api/v1/namespaces/default/pods", pod("x"))
    assert status == 409 and dup["kind"] == "Status" and dup["reason"] == "AlreadyExists"
    stale = dict(created, metadata={**created["metadata"], "resourceVersion": "1"})
    status, _, conflict = call(api, "PUT", "/api/v1/namespaces/default/pods/x", stale)
    assert status == 409 and conflict["reason"] == "Conflict"
    changed = dict(created, metadata={**created["metadata"], "labels": {"k": "v"}})
    status, _, updated = call(api, "PUT", "/api/v1/namespaces/default/pods/x", changed)
    assert status == 200 and updated["metadata"]["labels"] == {"k": "v"}
    assert updated["metadata"]["resourceVersion"] == "3"
    status, _, gone = call(api, "DELETE", "/api/v1/namespaces/default/pods/x")
    assert status == 200 and gone["metadata"]["name"] == "x"
    status, _, missing = call(api, "GET", "/api/v1/namespaces/default/pods/x")
    assert status == 404
    assert missing == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": 'pods "x" not found', "reason": "NotFound", "code": 404,
                       "details": {"name": "x", "group": "", "kind": "pods"}}


def test_patches_merge_strategic_and_json(api: FakeAPIServer) -> None:
    api.cluster.put(pod("x", labels={"a": "1", "b": "2"}))
    status, _, out = call(api, "PATCH", "/api/v1/namespaces/default/pods/x",
                          {"metadata": {"labels": {"a": None, "c": "3"}}},
                          content_type="application/merge-patch+json")
    assert status == 200 and out["metadata"]["labels"] == {"b": "2", "c": "3"}
    # strategic merge: the container list merges by name, the untouched field stays
    status, _, out = call(api, "PATCH", "/api/v1/namespaces/default/pods/x",
                          {"spec": {"containers": [{"name": "c", "image": "img2"},
                                                   {"name": "d", "image": "x"}]}},
                          content_type="application/strategic-merge-patch+json")
    assert status == 200
    assert out["spec"]["containers"] == [{"name": "c", "image": "img2"}, {"name": "d", "image": "x"}]
    status, _, out = call(api, "PATCH", "/api/v1/namespaces/default/pods/x",
                          [{"op": "replace", "path": "/status/phase", "value": "Failed"}],
                          content_type="application/json-patch+json")
    assert status == 200 and out["status"]["phase"] == "Failed"
    status, _, err = call(api, "PATCH", "/api/v1/namespaces/default/pods/x", {"a": 1},
                          content_type="text/plain")
    assert status == 415 and err["reason"] == "UnsupportedMediaType"


def test_unknown_paths_and_methods_answer_status_objects(api: FakeAPIServer) -> None:
    status, _, body = call(api, "GET", "/api/v1/widgets")
    assert status == 404 and body["kind"] == "Status" and body["code"] == 404
    status, _, body = call(api, "PUT", "/api/v1/pods", {})
    assert status == 405 and body["status"] == "Failure"
    status, _, body = call(api, "GET", "/api/v1/pods?fieldSelector=%3D%3D%3D")
    assert status == 400 and body["reason"] == "BadRequest"


def test_discovery_names_the_resources_kubectl_and_the_agent_use(api: FakeAPIServer) -> None:
    _, _, version = call(api, "GET", "/version")
    assert version["major"] == "1"
    _, _, core = call(api, "GET", "/api")
    assert core["versions"] == ["v1"]
    _, _, v1 = call(api, "GET", "/api/v1")
    by_name = {r["name"]: r for r in v1["resources"]}
    assert by_name["pods"]["namespaced"] is True and "watch" in by_name["pods"]["verbs"]
    assert by_name["nodes"]["namespaced"] is False
    assert by_name["pods/eviction"]["group"] == "policy" and by_name["pods/eviction"]["kind"] == "Eviction"
    _, _, groups = call(api, "GET", "/apis")
    assert {g["name"] for g in groups["groups"]} == {"policy", "slo.koordinator.sh"}
    _, _, slo = call(api, "GET", "/apis/slo.koordinator.sh/v1alpha1")
    [nodeslos] = slo["resources"]
    assert (nodeslos["name"], nodeslos["kind"], nodeslos["namespaced"]) == ("nodeslos", "NodeSLO", False)


# ----------------------------------------------------------------------------------------------
# watch
# ----------------------------------------------------------------------------------------------
def test_watch_streams_chunked_events_from_a_resource_version(api: FakeAPIServer) -> None:
    api.cluster.put(pod("before"))  # rv 2: not in a watch from rv 2
    timer = threading.Timer(0.1, lambda: (api.cluster.put(pod("a")), api.cluster.put(pod("b", "node-b")),
                                          api.cluster.remove("Pod", "a")))
    timer.start()
    headers, events = watch_lines(api, f"/api/v1/pods?watch=true&resourceVersion=2&timeoutSeconds=0.5"
                                       f"&fieldSelector=spec.nodeName%3D{NODE}")
    timer.join()
    assert headers["Transfer-Encoding"] == "chunked" and headers["Content-Type"] == "application/json"
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"), ("DELETED", "a")]
    # the DELETED object carries the resourceVersion of the deletion: 2 + a, b, delete = 5
    assert events[1]["object"]["metadata"]["resourceVersion"] == "5"


def test_watch_sends_bookmarks_only_when_asked(api: FakeAPIServer) -> None:
    _, plain = watch_lines(api, "/api/v1/pods?watch=true&resourceVersion=1&timeoutSeconds=0.5")
    assert plain == []
    t0 = time.monotonic()
    _, marked = watch_lines(api, "/api/v1/pods?watch=true&resourceVersion=1&timeoutSeconds=0.5"
                                 "&allowWatchBookmarks=true")
    assert time.monotonic() - t0 >= 0.45  # the stream lasts timeoutSeconds
    assert marked and all(e["type"] == "BOOKMARK" for e in marked)
    assert marked[-1]["object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}}


def test_watch_turns_objects_leaving_the_selector_into_deleted(api: FakeAPIServer) -> None:
    api.cluster.put(pod("x", labels={"tier": "be"}))
    timer = threading.Timer(0.1, lambda: api.cluster.put(pod("x", labels={"tier": "ls"})))
    timer.start()
    _, events = watch_lines(api, "/api/v1/pods?watch=true&resourceVersion=2&timeoutSeconds=0.5"
                                 "&labelSelector=tier%3Dbe")
    timer.join()
    assert [(e["type"], e["object"]["metadata"]["labels"]) for e in events] == [("DELETED", {"tier": "ls"})]


def test_watch_from_zero_starts_with_the_current_objects(api: FakeAPIServer) -> None:
    api.cluster.put(pod("a"))
    api.cluster.put(pod("b"))
    _, events = watch_lines(api, "/api/v1/pods?watch=true&timeoutSeconds=0.5")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("ADDED", "b")]


def test_compacted_resource_version_is_410_gone_in_the_stream_or_as_status(api: FakeAPIServer) -> None:
    api.cluster.put(pod("a"))
    api.cluster.compact()
    _, events = watch_lines(api, "/api/v1/pods?watch=true&resourceVersion=1&timeoutSeconds=5")
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    api.gone_as_status = True
    status, _, body = call(api, "GET", "/api/v1/pods?watch=true&resourceVersion=1")
    assert status == 410 and body["kind"] == "Status"


def test_history_limit_compacts_old_versions() -> None:
    cluster = FakeCluster(history_limit=3)
    for i in range(5):
        cluster.put(pod(f"p{i}"))  # resourceVersions 2..6; the last three (4, 5, 6) are kept
    assert cluster.compacted_rv == 3
    with pytest.raises(Exception, match="too old"):
        cluster.changes_after(2, "pods")
    changes, _ = cluster.changes_after(3, "pods")
    assert [c.rv for c in changes] == [4, 5, 6]


# ----------------------------------------------------------------------------------------------
# evictions and events
# ----------------------------------------------------------------------------------------------
def eviction(name: str, uid: str | None = None) -> dict:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": "default"}}
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    return body


def test_eviction_answers_201_429_404_and_409(api: FakeAPIServer) -> None:
    for n in ("ok", "pdb", "other"):
        api.cluster.put(pod(n))
    api.cluster.set_eviction_policy("default", "pdb", 429, 201, retry_after=7)
    status, _, body = call(api, "POST", "/api/v1/namespaces/default/pods/ok/eviction",
                           eviction("ok", "uid-ok"))
    assert status == 201 and body["status"] == "Success"
    assert [p["metadata"]["name"] for p in api.cluster.items("Pod")] == ["other", "pdb"]  # evicted = deleted
    status, headers, body = call(api, "POST", "/api/v1/namespaces/default/pods/pdb/eviction", eviction("pdb"))
    assert status == 429 and headers["Retry-After"] == "7"
    assert body["reason"] == "TooManyRequests" and "disruption budget" in body["message"]
    assert body["details"]["retryAfterSeconds"] == 7
    status, _, _ = call(api, "POST", "/api/v1/namespaces/default/pods/pdb/eviction", eviction("pdb"))
    assert status == 201  # the second answer of the policy
    status, _, body = call(api, "POST", "/api/v1/namespaces/default/pods/ok/eviction", eviction("ok"))
    assert status == 404 and body["reason"] == "NotFound"
    status, _, body = call(api, "POST", "/api/v1/namespaces/default/pods/other/eviction",
                           eviction("other", "not-its-uid"))
    assert status == 409 and "Precondition failed" in body["message"]
    assert [(e.name, e.code) for e in api.cluster.evictions] == [("ok", 201), ("pdb", 429), ("pdb", 201),
                                                                  ("ok", 404), ("other", 409)]
    assert api.cluster.evictions[0].uid_precondition == "uid-ok"


def test_events_post_and_patch(api: FakeAPIServer) -> None:
    ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x.1", "namespace": "default"},
          "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"}, "reason": "R",
          "message": "m", "count": 1, "type": "Normal"}
    status, _, created = call(api, "POST", "/api/v1/namespaces/default/events", ev)
    assert status == 201 and created["count"] == 1
    status, _, patched = call(api, "PATCH", "/api/v1/namespaces/default/events/x.1",
                              {"count": 2, "lastTimestamp": "2026-01-01T00:00:10Z"},
                              content_type="application/strategic-merge-patch+json")
    assert status == 200 and patched["count"] == 2 and patched["reason"] == "R"
    assert [e["count"] for e in api.cluster.items("Event")] == [2]


# ----------------------------------------------------------------------------------------------
# faults
# ----------------------------------------------------------------------------------------------
def test_bearer_token_is_required_when_configured() -> None:
    with FakeAPIServer(tokens=["secret"]) as server:
        status, _, body = call(server, "GET", "/api/v1/pods")
        assert status == 401 and body["reason"] == "Unauthorized"
        status, _, _ = call(server, "GET", "/api/v1/pods", headers={"Authorization": "Bearer secret"})
        assert status == 200


def test_drop_connections_cuts_a_watch_mid_stream(api: FakeAPIServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    conn.request("GET", "/api/v1/pods?watch=true&resourceVersion=1&timeoutSeconds=30")
    resp = conn.getresponse()
    assert resp.status == 200
    threading.Timer(0.2, api.drop_connections).start()
    t0 = time.monotonic()
    with pytest.raises(http.client.IncompleteRead):
        resp.read()  # no terminating chunk: the stream is broken, not ended
    assert time.monotonic() - t0 < 5
    conn.close()


def test_outage_refuses_connections_until_recover_on_the_same_port(api: FakeAPIServer) -> None:
    port = api.port
    api.outage()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    api.recover()
    assert api.port == port
    status, _, _ = call(api, "GET", "/version")
    assert status == 200


def test_fail_next_and_delay(api: FakeAPIServer) -> None:
    api.fail_next("GET", r"^/api/v1/pods$", 503, count=2)
    codes = [call(api, "GET", "/api/v1/pods")[0] for _ in range(3)]
    assert codes == [503, 503, 200]
    api.delay = 0.3
    t0 = time.monotonic()
    call(api, "GET", "/version")
    assert time.monotonic() - t0 >= 0.3


# ----------------------------------------------------------------------------------------------
# kubectl, an independent client
# ----------------------------------------------------------------------------------------------
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def tls_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeAPIServer, dict[str, str]]]:
    d = tmp_path_factory.mktemp("kubectl")
    try:
        cert = make_self_signed_cert(str(d / "tls"))
    except RuntimeError as e:
        pytest.skip(str(e))
    server = FakeAPIServer(FakeCluster(), tls=cert, tokens=["kubectl-token"]).start()
    # kubectl verifies the server against the generated certificate (no insecure flag)
    kubeconfig = server.kubeconfig(str(d / "kubeconfig"), token="kubectl-token")
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(d)}
    try:
        yield server, env
    finally:
        server.stop()


def kubectl(env: dict[str, str], *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run([KUBECTL, "--cache-dir", os.path.join(env["HOME"], "cache"), *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


@needs_kubectl
def test_kubectl_gets_pods_with_a_field_selector(tls_api: tuple[FakeAPIServer, dict[str, str]]) -> None:
    server, env = tls_api
    server.cluster.put(pod("k-mine"))
    server.cluster.put(pod("k-other", node="node-b"))
    out = kubectl(env, "get", "pods", "-o", "json", "--field-selector", f"spec.nodeName={NODE}")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [i["metadata"]["name"] for i in doc["items"]] == ["k-mine"]
    assert doc["items"][0]["spec"]["nodeName"] == NODE
    out = kubectl(env, "get", "pod", "k-other", "-o", "jsonpath={.metadata.uid}")
    assert out.returncode == 0 and out.stdout == "uid-k-other"
    out = kubectl(env, "get", "pod", "nope")
    assert out.returncode != 0 and 'pods "nope" not found' in out.stderr  # the Status message reaches kubectl


@needs_kubectl
def test_kubectl_apply_creates_and_configures_a_nodeslo_and_a_pod(
        tls_api: tuple[FakeAPIServer, dict[str, str]], tmp_path: Any) -> None:
    server, env = tls_api
    slo = tmp_path / "slo.yaml"
    slo.write_text("apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\nmetadata:\n  name: node-k\n"
                   "spec:\n  resourceUsedThresholdWithBE:\n    enable: true\n"
                   "    cpuSuppressThresholdPercent: 60\n")
    out = kubectl(env, "apply", "-f", str(slo))
    assert out.returncode == 0 and "created" in out.stdout, out.stderr
    slo.write_text(slo.read_text().replace("60", "45"))
    out = kubectl(env, "apply", "-f", str(slo))
    assert out.returncode == 0 and "configured" in out.stdout, out.stderr
    [obj] = [o for o in server.cluster.items("NodeSLO") if o["metadata"]["name"] == "node-k"]
    assert obj["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 45
    assert obj["metadata"]["generation"] == 2  # the spec changed once after the creation
    assert {m["manager"] for m in obj["metadata"]["managedFields"]} == {"kubectl-client-side-apply"}
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(json.dumps(pod("k-applied", labels={"v": "1"})))
    assert kubectl(env, "apply", "-f", str(manifest)).returncode == 0
    manifest.write_text(json.dumps(pod("k-applied", labels={"v": "2"})))
    out = kubectl(env, "apply", "-f", str(manifest))
    assert out.returncode == 0, out.stderr
    got = server.cluster.get(server.cluster.resource("Pod"), "k-applied", "default")
    assert got["metadata"]["labels"] == {"v": "2"} and got["spec"]["containers"][0]["image"] == "img"
    out = kubectl(env, "delete", "-f", str(manifest), "--wait=true")
    assert out.returncode == 0, out.stderr
    assert all(p["metadata"]["name"] != "k-applied" for p in server.cluster.items("Pod"))


@needs_kubectl
def test_kubectl_reads_the_complete_objects_of_a_simulated_node(
        tls_api: tuple[FakeAPIServer, dict[str, str]], tmp_path: Any) -> None:
    server, env = tls_api
    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    server.cluster.put(node_object(host, "node-sim"))
    sim_pod = FakePod("uid-k-sim", "default", "k-sim", KubeQoS.BURSTABLE,
                      [FakeContainer("app", "containerd://k")])
    server.cluster.put(pod_object(sim_pod, node_name="node-sim"))
    # the fake serves no server-side Table, so kubectl's columns come from a template
    columns = ("custom-columns=IP:.status.addresses[0].address,"
               "RUNTIME:.status.nodeInfo.containerRuntimeVersion,"
               "READY:.status.conditions[?(@.type=='Ready')].status")
    out = kubectl(env, "get", "nodes", "node-sim", "-o", columns, "--no-headers")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["10.0.0.1", "containerd://1.7.24", "True"]
    out = kubectl(env, "get", "pod", "k-sim", "-o", "json", "--show-managed-fields")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["status"]["containerStatuses"][0]["imageID"].startswith("registry.local/app@sha256:")
    assert {m["manager"] for m in got["metadata"]["managedFields"]} == {"kube-controller-manager", "kubelet"}
    started = "jsonpath={.status.containerStatuses[0].state.running.startedAt}"
    out = kubectl(env, "get", "pod", "k-sim", "-o", started)
    assert out.returncode == 0 and out.stdout == "2026-01-01T00:00:00Z", out.stderr


@needs_kubectl
def test_kubectl_watch_sees_an_object_created_meanwhile(
        tls_api: tuple[FakeAPIServer, dict[str, str]]) -> None:
    server, env = tls_api
    assert KUBECTL is not None
    proc = subprocess.Popen([KUBECTL, "--cache-dir", os.path.join(env["HOME"], "cache"), "get", "nodeslos",
                             "--watch", "-o", "name", "--request-timeout=2s"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 3.0
        # wait until kubectl's watch is open, then create the object
        while time.monotonic() < deadline and not any(
                "watch=" in r.query for r in server.requests_to("GET", r"/nodeslos$")):
            time.sleep(0.05)
        server.cluster.put({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                            "metadata": {"name": "watched"}, "spec": {}})
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "nodeslo.slo.koordinator.sh/watched" in out.split(), (out, err)
