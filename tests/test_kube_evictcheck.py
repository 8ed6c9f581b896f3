"""Whether evictions can work, asked at start and periodically (states/kube/evictcheck.py).

The check runs the agent's real client against the loopback fake API server acting as an older
cluster (discovery without ``pods/eviction``, or with it as policy/v1beta1), as one whose RBAC
denies ``create pods/eviction``, and as one that cannot be reached; then the agent end to end:
the condition is there before the first tick, no eviction was tried, and the next periodic
check after the cluster's "upgrade" clears it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.agent import Agent, AgentConfig
from qosmanager.api.pod import PodMeta
from qosmanager.eviction.coordinator import EvictionCoordinator
from qosmanager.eviction.types import TARGET_POD_USED, EvictTask, Victim
from qosmanager.executor.audit import AuditLog
from qosmanager.exporter import Exporter
from qosmanager.framework.conditions import Conditions
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.states.kube.client import KubeClient
from qosmanager.states.kube.config import KubeConfig
from qosmanager.states.kube.evict import COND_API, KubeEvictor
from qosmanager.states.kube.evictcheck import EvictionAPICheck
from qosmanager.states.store import StateStore
from simclock import Clock

NODE = "fake-node"
OLD = ("policy/v1beta1",)  # Kubernetes < 1.22
CURRENT = ("policy/v1", "policy/v1beta1")
DENY_EVICTION = ("create", "", "pods", "eviction", "*")
LOGGER = "qosmanager.states.kube"


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    with FakeAPIServer() as server:
        yield server


@pytest.fixture
def client(api: FakeAPIServer) -> Iterator[KubeClient]:
    c = KubeClient(KubeConfig(server=api.url), timeout=5.0)
    yield c
    c.close()


def make(client: KubeClient, **kw: float) -> tuple[EvictionAPICheck, KubeEvictor, Conditions]:
    conditions = Conditions()
    evictor = KubeEvictor(client, conditions=conditions)
    return EvictionAPICheck(client, evictor, **kw), evictor, conditions


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.02)


# ----------------------------------------------------------------------------------------------
# the fake server's discovery tells the cluster's age
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("versions, expected", [
    (CURRENT, ("policy", "v1")), (OLD, ("policy", "v1beta1")), ((), None)])
def test_discovery_lists_pods_eviction_as_the_cluster_serves_it(
        api: FakeAPIServer, client: KubeClient, versions: tuple[str, ...],
        expected: tuple[str, str] | None) -> None:
    api.cluster.eviction_versions = versions
    doc = client.get("/api/v1")
    entry = next((r for r in doc["resources"] if r["name"] == "pods/eviction"), None)
    assert (None if entry is None else (entry["group"], entry["version"])) == expected
    assert any(r["name"] == "pods" for r in doc["resources"])


# ----------------------------------------------------------------------------------------------
# verdicts
# ----------------------------------------------------------------------------------------------
def test_a_current_cluster_with_the_permission_is_fine(api: FakeAPIServer, client: KubeClient) -> None:
    check, _, conditions = make(client)
    assert check.check() is True
    assert conditions.get(COND_API) is None
    # the review asks for create pods/eviction at the cluster scope (every namespace)
    assert api.cluster.access_reviews == [{"namespace": "", "verb": "create", "group": "",
                                           "resource": "pods", "subresource": "eviction"}]
    assert api.cluster.evictions == []  # asking evicts nothing


@pytest.mark.parametrize("versions, words", [
    (OLD, ("policy/v1beta1 only", "older than 1.22", "upgrade the cluster")),
    ((), ("does not serve pods/eviction", ">= 1.22")),
])
def test_an_older_cluster_is_a_condition_naming_cause_and_fix_said_once(
        api: FakeAPIServer, client: KubeClient, caplog: pytest.LogCaptureFixture,
        versions: tuple[str, ...], words: tuple[str, ...]) -> None:
    api.cluster.eviction_versions = versions
    check, _, conditions = make(client)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert check.check() is False
        assert check.check() is False  # the same again: no second log line
    cond = conditions.get(COND_API)
    assert cond is not None
    for w in (*words, "--evict-mode kill", "deploy/overlays/kill-mode"):
        assert w in cond.message, (w, cond.message)
    said = [r for r in caplog.records if r.getMessage() == cond.message]
    assert len(said) == 1
    assert api.cluster.access_reviews == []  # no point asking for a permission on what is not there
    assert api.cluster.evictions == []


def test_an_rbac_denial_is_a_condition_naming_the_rule(api: FakeAPIServer, client: KubeClient) -> None:
    api.cluster.denied.add(DENY_EVICTION)
    check, _, conditions = make(client)
    assert check.check() is False
    cond = conditions.get(COND_API)
    assert cond is not None
    assert "may not create pods/eviction" in cond.message and "no RBAC policy matched" in cond.message
    assert 'resources: ["pods/eviction"], verbs: ["create"]' in cond.message
    assert "--evict-mode kill" in cond.message
    # the rule is granted: the next check clears it
    api.cluster.denied.clear()
    assert check.check() is True
    assert conditions.get(COND_API) is None


def test_an_account_that_may_not_ask_is_said_once_and_is_no_failure(
        api: FakeAPIServer, client: KubeClient, caplog: pytest.LogCaptureFixture) -> None:
    api.cluster.access_reviews_forbidden = True
    check, _, conditions = make(client)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert check.check() is True
        assert check.check() is True
    said = [r for r in caplog.records if "SelfSubjectAccessReview" in r.getMessage()]
    assert len(said) == 1 and "403" in said[0].getMessage()
    assert "selfsubjectaccessreviews" in said[0].getMessage()
    assert conditions.get(COND_API) is None
    # discovery is still asked: an older cluster is still a condition
    api.cluster.eviction_versions = OLD
    assert check.check() is False
    assert conditions.get(COND_API) is not None


@pytest.mark.parametrize("fault", ["outage", "500 discovery", "503 review", "garbled"])
def test_an_api_server_that_does_not_answer_is_no_verdict(
        api: FakeAPIServer, client: KubeClient, fault: str) -> None:
    check, _, conditions = make(client, timeout=2.0)

    def inject() -> None:
        if fault == "outage":
            api.outage()
        elif fault == "500 discovery":
            api.fail_next("GET", r"^/api/v1$", 500)
        elif fault == "503 review":
            api.fail_next("POST", "selfsubjectaccessreviews", 503)
        else:
            api.fail_next("GET", r"^/api/v1$", 404)  # an answer, but no discovery document

    inject()
    assert check.check() is None
    assert conditions.get(COND_API) is None  # nothing set
    assert check.no_verdict == 1 and check.checks == 0
    api.recover()
    # a standing condition is not cleared by a check without a verdict either
    api.cluster.eviction_versions = OLD
    assert check.check() is False
    inject()
    api.cluster.eviction_versions = CURRENT
    assert check.check() is None
    assert conditions.get(COND_API) is not None
    api.recover()
    assert check.check() is True
    assert conditions.get(COND_API) is None


# ----------------------------------------------------------------------------------------------
# the check and the evictions' own detection (the ground truth)
# ----------------------------------------------------------------------------------------------
def be_pod(api: FakeAPIServer, name: str) -> PodMeta:
    """A BE pod in the cluster, and the agent's view of it."""
    fake = FakePod(uid=f"uid-{name}", namespace="default", name=name, qos=KubeQoS.BESTEFFORT,
                   containers=[FakeContainer("c", "containerd://" + "ab" * 32)])
    store = StateStore()
    store.set_pods([api.cluster.put(pod_object(fake))])
    return store.pods[f"uid-{name}"]


def test_a_passing_check_leaves_a_failed_evictions_word_and_an_upgrade_lifts_it(
        api: FakeAPIServer, client: KubeClient) -> None:
    clock = Clock()
    conditions = Conditions(clock)
    evictor = KubeEvictor(client, clock=clock, conditions=conditions, unserved_recheck=60.0)
    check = EvictionAPICheck(client, evictor)
    pod = be_pod(api, "a")
    assert check.check() is True
    # discovery says policy/v1 (a proxy in between that lacks the subresource, say), yet the eviction
    # gets a 404 naming no pod: that is the ground truth, and a check saying what it said before
    # does not clear it
    api.cluster.eviction_versions = ()
    failed = evictor(pod, "test")
    assert not failed.ok and conditions.get(COND_API) is not None
    api.cluster.eviction_versions = CURRENT
    assert check.check() is True
    standing = conditions.get(COND_API)
    assert standing is not None and standing.message == failed.error
    # the check saw the problem, then sees it gone: the cluster changed, the hold is lifted at once
    api.cluster.eviction_versions = OLD
    assert check.check() is False
    api.cluster.eviction_versions = CURRENT
    assert check.check() is True
    assert conditions.get(COND_API) is None
    assert evictor(pod, "test").ok  # asked at once, not a minute later
    assert [e.code for e in api.cluster.evictions] == [404, 201]


def test_an_accepted_eviction_clears_what_the_check_said(api: FakeAPIServer, client: KubeClient) -> None:
    pod = be_pod(api, "a")
    api.cluster.denied.add(DENY_EVICTION)  # the review says no, but the eviction is still tried
    check, evictor, conditions = make(client)
    assert check.check() is False
    assert evictor(pod, "test").ok
    assert conditions.get(COND_API) is None
    assert [e.code for e in api.cluster.evictions] == [201]


# ----------------------------------------------------------------------------------------------
# the agent
# ----------------------------------------------------------------------------------------------
def agent_on(tmp_path: Path, cluster: FakeCluster, api: FakeAPIServer, **cfg: object) -> Agent:
    host = FakeHost(str(tmp_path / "host"), n_cpus=4, memory_bytes=16 << 30)
    pods = [FakePod(uid=f"00000000-0000-4000-8000-{i:012d}", namespace="default", name=f"p{i}", qos=q,
                    containers=[FakeContainer("c0", f"containerd://{i:064x}")])
            for i, q in ((1, KubeQoS.GUARANTEED), (2, KubeQoS.BESTEFFORT))]
    host.add_pods(pods)
    cluster.put(node_object(host, NODE))
    for p in pods:
        cluster.put(pod_object(p))
    clock = Clock()
    kubeconfig = api.kubeconfig(str(tmp_path / "kubeconfig"))
    return Agent(AgentConfig(roots=host.roots, node_name=NODE, kubeconfig=kubeconfig, metrics_addr="",
                             kube_watch_timeout=(5.0, 5.0), **cfg),  # type: ignore[arg-type]
                 clock=clock, monotonic=clock.mono, monotonic_ns=clock.mono_ns, seed=0)


def test_the_agent_says_so_at_start_and_the_next_periodic_check_clears_it(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.eviction_versions = OLD
    with FakeAPIServer(cluster, bookmark_interval=0.2) as api:
        agent = agent_on(tmp_path, cluster, api)
        try:
            check = agent.eviction_check
            assert check is not None
            check.interval = 0.2  # the periodic check, quickly
            assert agent.wait_for_state(60)
            # at start, before any tick (so before any pressure) and with no eviction tried
            cond = agent.store.conditions.get(COND_API)
            assert cond is not None and "older than 1.22" in cond.message
            assert cluster.evictions == []
            exporter = Exporter.for_agent(agent, "127.0.0.1:0")  # not started: read directly
            healthy, body = exporter.health.check()
            assert healthy and body["status"] == "degraded"
            assert body["degraded"][COND_API]["detail"] == cond.message
            assert f'qosmanager_degraded{{condition="{COND_API}"}} 1' in exporter.metrics.registry.render()
            # the cluster is upgraded: the next periodic check clears the condition
            cluster.eviction_versions = CURRENT
            wait_until(lambda: agent.store.conditions.get(COND_API) is None, "cleared by the periodic check")
            healthy, body = exporter.health.check()
            assert healthy and body["status"] == "ok", body
            assert cluster.evictions == []
        finally:
            agent.close()


def test_an_rbac_denial_shows_at_start(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.denied.add(DENY_EVICTION)
    with FakeAPIServer(cluster, bookmark_interval=0.2) as api:
        agent = agent_on(tmp_path, cluster, api)
        try:
            assert agent.wait_for_state(60)
            cond = agent.store.conditions.get(COND_API)
            assert cond is not None and "may not create pods/eviction" in cond.message
        finally:
            agent.close()


def test_a_relist_asks_again(tmp_path: Path) -> None:
    cluster = FakeCluster()
    with FakeAPIServer(cluster, bookmark_interval=0.2) as api:
        agent = agent_on(tmp_path, cluster, api)
        try:
            assert agent.kube_source is not None and agent.eviction_check is not None
            for r in agent.kube_source.reflectors.values():
                r.backoff.base, r.backoff.cap = 0.05, 0.3
            assert agent.wait_for_state(60)
            assert agent.eviction_check.checks == 1 and agent.store.conditions.get(COND_API) is None
            # the API server is replaced by an older one meanwhile; its history is gone: a relist
            api.outage()
            cluster.eviction_versions = OLD
            cluster.remove("Pod", "p2")  # a change the watches missed, then no history of it
            cluster.compact()
            api.recover()
            wait_until(lambda: agent.store.conditions.get(COND_API) is not None, "asked again after a relist")
            assert agent.eviction_check.checks >= 2 and cluster.evictions == []
        finally:
            agent.close()


@pytest.mark.parametrize("mode", ["kill", "none"])
def test_no_check_without_the_eviction_api(tmp_path: Path, mode: str) -> None:
    cluster = FakeCluster()
    cluster.eviction_versions = OLD
    with FakeAPIServer(cluster, bookmark_interval=0.2) as api:
        agent = agent_on(tmp_path, cluster, api, evict_mode=mode)
        try:
            assert agent.eviction_check is None
            assert agent.wait_for_state(60)
            assert agent.store.conditions.get(COND_API) is None
            assert not api.requests_to("GET", r"^/api/v1$") and not cluster.access_reviews
        finally:
            agent.close()


def test_standalone_mode_does_nothing(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), n_cpus=2)
    agent = Agent(AgentConfig(roots=host.roots, metrics_addr=""))
    try:
        assert agent.kube_client is None and agent.eviction_check is None
        assert agent.wait_for_state(1)
        assert agent.store.conditions.get(COND_API) is None
    finally:
        agent.close()


def test_a_problem_found_changes_no_eviction(api: FakeAPIServer, client: KubeClient, tmp_path: Path) -> None:
    """Eviction behaviour is unchanged: the coordinator still goes through the API (no kill instead)."""
    host = FakeHost(str(tmp_path / "host"), n_cpus=2)
    pod = be_pod(api, "a")
    api.cluster.eviction_versions = OLD
    check, evictor, _ = make(client)
    assert check.check() is False
    store = StateStore()
    store.set_pods([api.cluster.get(api.cluster.resource("pods"), "a", "default")])
    coord = EvictionCoordinator(store, host.layout, AuditLog(None), mode="api", api=evictor)
    task = EvictTask("BEMemoryEvict", "memory high", TARGET_POD_USED, {"memory": 100.0},
                     [Victim(store.pods[pod.uid], {"memory": 100.0})])
    result = coord.execute("memoryEvict", [task], 0.0)
    assert [d.action for d in result.decisions] == ["failed"]
    assert [e.code for e in api.cluster.evictions] == [400]  # asked, and the server's answer is the verdict
    assert "a" in {p["metadata"]["name"] for p in api.cluster.items("Pod")}
