"""The Kubernetes client configuration and the standard-library client, against the fake API server."""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import qosmanager.states.kube.client as client_module
from fakeapi import FakeAPIServer, FakeCluster, make_self_signed_cert
from qosmanager import __version__
from qosmanager.states.kube.client import KubeClient, KubeError
from qosmanager.states.kube.config import (
    KubeConfig,
    KubeConfigError,
    in_cluster_available,
    in_cluster_config,
    load_config,
    load_kubeconfig,
)


def pod(name: str, node: str = "n1") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}


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


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    try:
        return make_self_signed_cert(str(tmp_path_factory.mktemp("tls")))
    except RuntimeError as e:
        pytest.skip(str(e))


# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------
def service_account(tmp_path: Path, token: str = "sa-token") -> Path:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(token + "\n")
    (sa / "ca.crt").write_text("not used here\n")
    (sa / "namespace").write_text("koordinator-system\n")
    return sa


def test_in_cluster_config_from_the_service_account(tmp_path: Path) -> None:
    sa = service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster_available(env, str(sa))
    cfg = in_cluster_config(env, str(sa))
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.ca_file == str(sa / "ca.crt") and cfg.namespace == "koordinator-system"
    assert cfg.authorization() == "Bearer sa-token"
    v6 = in_cluster_config({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, str(sa))
    assert v6.server == "https://[fd00::1]:6443"


def test_in_cluster_config_errors_are_clear(tmp_path: Path) -> None:
    assert not in_cluster_available({}, str(tmp_path))
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster_config({}, str(tmp_path))
    with pytest.raises(KubeConfigError, match="no service-account token"):
        in_cluster_config({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, str(tmp_path))
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        load_config(None, env={}, sa_dir=str(tmp_path))


def test_a_rotated_token_file_is_read_again(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    cfg = KubeConfig(server="https://h", token_file=str(token))
    assert cfg.bearer_token() == "first"
    token.write_text("second")
    os.utime(token, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert cfg.bearer_token() == "second"
    token.unlink()  # mid-rotation: the last token is kept rather than failing the request
    assert cfg.bearer_token() == "second"


def write_kubeconfig(path: Path, cluster: dict, user: dict, context_extra: dict | None = None) -> str:
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": cluster},
                     {"name": "other", "cluster": {"server": "https://x"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", **(context_extra or {})}}]}))
    return str(path)


def test_kubeconfig_resolves_relative_files_and_inline_data(tmp_path: Path) -> None:
    ca_pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    ca_b64 = base64.b64encode(ca_pem.encode()).decode()
    path = write_kubeconfig(tmp_path / "kc", {"server": "https://api.example:6443/",
                                              "certificate-authority-data": ca_b64,
                                              "tls-server-name": "kubernetes"},
                            {"client-certificate": "certs/me.crt",
                             "client-key-data": base64.b64encode(b"KEY").decode(), "tokenFile": "tok"},
                            {"namespace": "ns1"})
    (tmp_path / "tok").write_text("file-token\n")
    cfg = load_kubeconfig(path)
    assert cfg.server == "https://api.example:6443"  # trailing slash dropped
    assert cfg.ca_data == ca_pem and cfg.tls_server_name == "kubernetes"
    assert cfg.cert_file == str(tmp_path / "certs" / "me.crt") and cfg.key_data == b"KEY"
    assert cfg.authorization() == "Bearer file-token" and cfg.namespace == "ns1"
    basic = load_kubeconfig(write_kubeconfig(tmp_path / "kc2", {"server": "http://h:8080"},
                                             {"username": "admin", "password": "pw"}))
    assert basic.authorization() == "Basic " + base64.b64encode(b"admin:pw").decode()


@pytest.mark.parametrize(("user", "message"), [
    ({"exec": {"command": "gke-gcloud-auth-plugin"}}, "exec credential plugin"),
    ({"auth-provider": {"name": "oidc"}}, "auth-provider plugin"),
    ({"tokenFile": "missing"}, "cannot read tokenFile"),
])
def test_kubeconfig_refuses_what_it_cannot_do(tmp_path: Path, user: dict, message: str) -> None:
    with pytest.raises(KubeConfigError, match=message):
        load_kubeconfig(write_kubeconfig(tmp_path / "kc", {"server": "https://h"}, user))


def test_kubeconfig_structure_errors(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="cannot read kubeconfig"):
        load_kubeconfig(str(tmp_path / "nope"))
    bad = tmp_path / "bad"
    bad.write_text("clusters: []\ncurrent-context: x\ncontexts: []\n")
    with pytest.raises(KubeConfigError, match="no context named 'x'"):
        load_kubeconfig(str(bad))
    with pytest.raises(KubeConfigError, match="server must be an http"):
        load_kubeconfig(write_kubeconfig(tmp_path / "kc", {"server": "api:6443"}, {}))
    for name, text, message in [
            ("list", "- a\n- b\n", "expected an object"),
            ("notyaml", "a: [\n", "not valid YAML"),
            # a billion laughs: every alias counts as what it stands for
            ("bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                     + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
                               for i in range(6)), "more than 1000000 values")]:
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(KubeConfigError, match=message):
            load_kubeconfig(str(p))


# ----------------------------------------------------------------------------------------------
# requests
# ----------------------------------------------------------------------------------------------
def test_list_follows_pages_on_one_kept_alive_connection(api: FakeAPIServer) -> None:
    for i in range(5):
        api.cluster.put(pod(f"p{i}"))
    api.cluster.put(pod("elsewhere", node="n2"))
    c = KubeClient(KubeConfig(server=api.url), page_size=2)
    try:
        items, rv = c.list("/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"})
        assert [i["metadata"]["name"] for i in items] == [f"p{i}" for i in range(5)]
        assert rv == "7"  # six creations after resourceVersion 1
        pages = api.requests_to("GET", r"^/api/v1/pods$")
        assert len(pages) == 3 and "limit=2" in pages[0].query and "continue=" in pages[1].query
        assert pages[0].user_agent == f"qosmanager/{__version__}"
        assert api.accepted == 1  # three requests, one connection
        # a list from the watch cache (resourceVersion=0) asks for pages too (a server that cannot page
        # its cache ignores the limit); a continued page names no resourceVersion, as client-go's pager
        n = len(api.requests)
        items, _ = c.list("/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"}, resource_version="0")
        assert len(items) == 5
        first, *rest = list(api.requests)[n:]
        assert "resourceVersion=0" in first.query and "limit=2" in first.query
        assert len(rest) == 2 and all("continue=" in r.query and "resourceVersion" not in r.query for r in rest)
    finally:
        c.close()


def test_errors_carry_the_status_code_reason_and_message(client: KubeClient) -> None:
    with pytest.raises(KubeError) as e:
        client.get("/api/v1/namespaces/default/pods/nope")
    assert (e.value.status, e.value.reason, e.value.message) == (404, "NotFound", 'pods "nope" not found')
    assert e.value.not_found and not e.value.gone


def test_post_patch_and_delete(client: KubeClient, api: FakeAPIServer) -> None:
    created = client.post("/api/v1/namespaces/default/pods", pod("x"))
    assert created["metadata"]["resourceVersion"] == "2"
    patched = client.patch("/api/v1/namespaces/default/pods/x", {"metadata": {"labels": {"a": "b"}}})
    assert patched["metadata"]["labels"] == {"a": "b"}
    assert api.requests[-1].content_type == "application/strategic-merge-patch+json"
    client.patch("/api/v1/namespaces/default/pods/x", {"metadata": {"labels": {"a": None}}}, "merge")
    assert api.requests[-1].content_type == "application/merge-patch+json"
    assert client.get("/api/v1/namespaces/default/pods/x")["metadata"]["labels"] == {}
    client.delete("/api/v1/namespaces/default/pods/x")
    assert api.cluster.items("Pod") == []
    with pytest.raises(ValueError, match="unknown patch type"):
        client.patch("/api/v1/namespaces/default/pods/x", {}, "yaml")


def test_a_connection_closed_by_the_server_is_retried_once(client: KubeClient, api: FakeAPIServer) -> None:
    client.get("/version")
    api.drop_connections()  # the server closes the idle keep-alive connection
    assert client.get("/version")["major"] == "1"
    assert api.accepted == 2


def test_unreachable_server_is_status_zero(api: FakeAPIServer, client: KubeClient) -> None:
    api.outage()
    with pytest.raises(KubeError) as e:
        client.get("/version")
    assert e.value.status == 0 and "cannot reach" in e.value.message
    api.recover()
    assert client.get("/version")["major"] == "1"


def test_a_401_reads_a_rotated_token_again(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    with FakeAPIServer(tokens=["new"]) as server:
        cfg = KubeConfig(server=server.url, token_file=str(token))
        c = KubeClient(cfg)
        try:
            assert cfg.bearer_token() == "old"
            st = os.stat(token)
            token.write_text("new")  # same size, same mtime: only a 401 makes the client look again
            os.utime(token, ns=(st.st_atime_ns, st.st_mtime_ns))
            assert cfg.bearer_token() == "old"
            assert c.get("/api/v1/pods")["kind"] == "PodList"
            assert [r.code for r in server.requests] == [401, 200]
            assert server.requests[-1].authorization == "Bearer new"
        finally:
            c.close()


# ----------------------------------------------------------------------------------------------
# watch
# ----------------------------------------------------------------------------------------------
def test_watch_yields_events_and_bookmarks_until_the_server_ends_it(client: KubeClient,
                                                                    api: FakeAPIServer) -> None:
    opened = []
    threading.Timer(0.15, lambda: (api.cluster.put(pod("a")), api.cluster.remove("Pod", "a"))).start()
    events = list(client.watch("/api/v1/pods", resource_version="1", timeout=1, channel="w",
                               on_open=lambda: opened.append(True)))
    assert opened == [True]
    kinds = [(t, o["metadata"].get("name")) for t, o in events if t != "BOOKMARK"]
    assert kinds == [("ADDED", "a"), ("DELETED", "a")]
    bookmarks = [o["metadata"]["resourceVersion"] for t, o in events if t == "BOOKMARK"]
    assert bookmarks and bookmarks[-1] == "3"  # the last bookmark carries the final resourceVersion
    q = api.requests_to("GET", r"^/api/v1/pods$")[-1].query
    assert "watch=true" in q and "allowWatchBookmarks=true" in q and "timeoutSeconds=1" in q
    # the ended stream left the connection reusable
    list(client.watch("/api/v1/pods", resource_version="3", timeout=1, channel="w"))
    assert api.accepted == 1


@pytest.mark.parametrize("as_status", [False, True])
def test_watch_from_a_compacted_version_raises_gone(client: KubeClient, api: FakeAPIServer,
                                                    as_status: bool) -> None:
    api.gone_as_status = as_status
    api.cluster.put(pod("a"))
    api.cluster.compact()
    with pytest.raises(KubeError) as e:
        list(client.watch("/api/v1/pods", resource_version="1", timeout=5))
    assert e.value.gone and e.value.reason == "Expired"


def test_a_dropped_watch_is_an_error_not_an_end(client: KubeClient, api: FakeAPIServer) -> None:
    threading.Timer(0.3, api.drop_connections).start()
    t0 = time.monotonic()
    with pytest.raises(KubeError) as e:
        list(client.watch("/api/v1/pods", resource_version="1", timeout=20))
    assert e.value.status == 0 and "broken" in e.value.message
    assert time.monotonic() - t0 < 10


def test_close_wakes_a_blocked_watch(api: FakeAPIServer) -> None:
    api.bookmark_interval = 60.0
    c = KubeClient(KubeConfig(server=api.url))
    errors: list[KubeError] = []

    def run() -> None:
        try:
            list(c.watch("/api/v1/pods", resource_version="1", timeout=30, channel="w"))
        except KubeError as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)
    c.close()
    t.join(5)
    assert not t.is_alive() and errors and errors[0].status == 0


# ----------------------------------------------------------------------------------------------
# TLS
# ----------------------------------------------------------------------------------------------
def test_https_verifies_the_server_certificate(cert: tuple[str, str], tmp_path: Path) -> None:
    other = make_self_signed_cert(str(tmp_path / "other"))
    with FakeAPIServer(tls=cert) as server:
        good = KubeClient(KubeConfig(server=server.url, ca_file=cert[0]))
        assert good.get("/version")["major"] == "1"
        good.close()
        wrong = KubeClient(KubeConfig(server=server.url, ca_file=other[0]))
        with pytest.raises(KubeError) as e:
            wrong.get("/version")
        assert e.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in e.value.message
        wrong.close()
        insecure = KubeClient(KubeConfig(server=server.url, ca_file=other[0], insecure_skip_tls_verify=True))
        assert insecure.get("/version")["major"] == "1"
        insecure.close()


def test_client_certificates_from_files_and_inline_data(cert: tuple[str, str], tmp_path: Path) -> None:
    with FakeAPIServer(tls=cert, client_ca=cert[0]) as server:
        path = server.kubeconfig(str(tmp_path / "kc"), client_cert=cert)
        from_files = KubeClient(load_kubeconfig(path))
        assert from_files.get("/version")["major"] == "1"
        from_files.close()
        with open(cert[0], "rb") as f, open(cert[1], "rb") as k:
            inline = KubeClient(KubeConfig(server=server.url, ca_file=cert[0], cert_data=f.read(),
                                           key_data=k.read()))
        assert inline.get("/version")["major"] == "1"
        inline.close()
        anonymous = KubeClient(KubeConfig(server=server.url, ca_file=cert[0]))
        with pytest.raises(KubeError) as e:
            anonymous.get("/version")
        assert e.value.status == 0
        anonymous.close()
    with pytest.raises(KubeConfigError, match="needs its key"):
        KubeConfig(server="https://h", cert_file=cert[0]).ssl_context()


# ---------------------------------------------------------------------------------------------
# answers are bounded: an over-deep or over-long answer is a KubeError saying so, never a
# RecursionError or an unbounded read, and the client goes on working afterwards


def deep_pod(name: str, deep: int = 0) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
                           "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}
    if deep:
        nested: Any = {}
        for _ in range(deep):
            nested = {"f:x": nested}
        obj["metadata"]["managedFields"] = [{"manager": "m", "fieldsV1": nested}]
    return obj


def test_an_over_deep_list_is_a_clear_error(api: FakeAPIServer, client: KubeClient) -> None:
    api.cluster.put(deep_pod("fine", deep=90))
    items, _ = client.list("/api/v1/pods")
    assert [i["metadata"]["name"] for i in items] == ["fine"]
    api.cluster.put(deep_pod("deep", deep=150))
    with pytest.raises(KubeError, match="cannot be decoded: nested deeper than 100 levels"):
        client.list("/api/v1/pods")
    api.cluster.remove("Pod", "deep", namespace="default")
    assert len(client.list("/api/v1/pods")[0]) == 1  # the client goes on


def test_an_over_deep_watch_event_is_a_broken_stream(api: FakeAPIServer, client: KubeClient) -> None:
    _, rv = client.list("/api/v1/pods")
    api.cluster.put(deep_pod("deep", deep=300))
    with pytest.raises(KubeError, match="an event that cannot be decoded: nested deeper") as e:
        for _ in client.watch("/api/v1/pods", resource_version=rv, timeout=5):
            pass
    assert e.value.status == 0


def test_an_over_long_answer_is_refused_before_it_is_read(api: FakeAPIServer, client: KubeClient,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(20):
        api.cluster.put(deep_pod(f"p{i}"))
    monkeypatch.setattr(client_module, "MAX_RESPONSE", 2048)
    with pytest.raises(KubeError, match="more than the limit of 2048"):
        client.list("/api/v1/pods", resource_version="0")
    monkeypatch.undo()
    assert len(client.list("/api/v1/pods")[0]) == 20
