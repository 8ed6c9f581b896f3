"""The Kubernetes source: three reflectors (pods of the node, the Node, the NodeSLO) feeding the store.

Against the fake API server: list then watch, changes applied on ``poll`` (the agent's tick) and
batched, NodeSLO absent = defaults without a stall, reconnects after a dropped stream, a relist
after 410 Gone that notices deletions made during the gap, and an outage that leaves the store
as it was while the health says so.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.states.kube.client import KubeClient
from qosmanager.states.kube.config import KubeConfig
from qosmanager.states.kube.source import Backoff, KubeSource
from qosmanager.states.store import StateStore

NODE = "node-a"


def pod(name: str, node: str = NODE, labels: dict[str, str] | None = None, cpu: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", "resources": {
                "requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "qosClass": "Guaranteed"}}


def node(cpu: str = "8", heartbeat: str = "t0") -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid"},
            "status": {"capacity": {"cpu": cpu, "memory": "32Gi"},
                       "allocatable": {"cpu": cpu, "memory": "32Gi"},
                       "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}}


def nodeslo(threshold: int, labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
            "metadata": {"name": NODE, "labels": labels or {}},
            "spec": {"resourceUsedThresholdWithBE": {"enable": True,
                                                     "cpuSuppressThresholdPercent": threshold}}}


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    cluster = FakeCluster()
    cluster.put(node())
    for name in ("a", "b"):
        cluster.put(pod(name))
    cluster.put(pod("elsewhere", node="node-b"))
    with FakeAPIServer(cluster, bookmark_interval=0.2) as server:
        yield server


@pytest.fixture
def source(api: FakeAPIServer) -> Iterator[KubeSource]:
    client = KubeClient(KubeConfig(server=api.url), timeout=3)
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(2.0, 2.0), backoff_base=0.05, backoff_max=0.2,
                     absent_retry=0.2, seed=1)
    try:
        yield src
    finally:
        src.stop()
        client.close()


def until(src: KubeSource, pred: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        src.poll()
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def wait_for(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait without polling: nothing reaches the store meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def caught_up(src: KubeSource, api: FakeAPIServer) -> Callable[[], bool]:
    """Every reflector has seen the cluster's latest resourceVersion (bookmarks carry it)."""
    return lambda: all(r.rv == str(api.cluster.rv) for r in src.reflectors.values())


def test_initial_sync_lists_this_nodes_pods_and_the_node_with_defaults(source: KubeSource,
                                                                         api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    store = source.store
    assert sorted(p.key for p in store.pods.values()) == ["default/a", "default/b"]
    assert store.node is not None and store.node.cpu_capacity_milli == 8000
    assert store.nodeslo_present is False
    assert store.nodeslo.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 65  # the default
    until(source, lambda: source.connected)
    first = api.requests_to("GET", r"^/api/v1/pods$")[0].query
    assert "resourceVersion=0" in first and "fieldSelector=spec.nodeName%3Dnode-a" in first


def test_the_first_list_in_force_is_logged_once(source: KubeSource, api: FakeAPIServer,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """An operator (and the memory benchmark) learns when the pods list is in force: the agent starts once
    the Node is known, and a big node's list arrives later."""
    caplog.set_level(logging.INFO, logger="qosmanager.states.kube.source")
    assert source.wait_synced(5)
    api.cluster.put(pod("c"))
    until(source, lambda: "uid-c" in source.store.pods)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pods in force")]
    assert said == [f"pods in force: 2 pods, the first list of node {NODE} from the API server"]


def test_watch_events_reach_the_store_on_poll(source: KubeSource, api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    store = source.store
    api.cluster.put(pod("c"))
    api.cluster.remove("Pod", "a")
    api.cluster.put(pod("b", labels={"koordinator.sh/qosClass": "LS"}))
    api.cluster.put(pod("far", node="node-b"))
    wait_for(caught_up(source, api))
    assert sorted(store.pods) == ["uid-a", "uid-b"]  # received, but applied only on poll
    source.poll()
    assert sorted(store.pods) == ["uid-b", "uid-c"]
    assert store.pods["uid-b"].qos_raw == "LS"


def test_a_burst_of_pod_events_rebuilds_the_pod_map_once(source: KubeSource, api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    store = source.store
    for i in range(300):
        api.cluster.put(pod(f"burst-{i}"))
    until(source, caught_up(source, api), timeout=10)
    until(source, lambda: len(store.pods) == 302)
    gen = store.pods_generation
    for i in range(300):
        api.cluster.remove("Pod", f"burst-{i}")
    wait_for(caught_up(source, api), timeout=10)
    source.poll()
    assert len(store.pods) == 2 and store.pods_generation == gen + 1  # 300 deletions, one new map


def test_nodeslo_created_changed_unchanged_and_deleted(source: KubeSource, api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    store = source.store
    api.cluster.put(nodeslo(50))
    until(source, lambda: store.nodeslo_present)
    assert store.nodeslo.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 50
    gen = store.nodeslo_generation
    api.cluster.put(nodeslo(50, labels={"x": "y"}))  # metadata only: the spec is the same
    until(source, caught_up(source, api))
    source.poll()
    assert store.nodeslo_generation == gen
    api.cluster.put(nodeslo(40))
    until(source, lambda: store.nodeslo.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 40)
    api.cluster.remove("NodeSLO", NODE)
    until(source, lambda: not store.nodeslo_present)
    assert store.nodeslo.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 65


def test_a_bad_nodeslo_field_costs_that_field_and_a_non_nodeslo_keeps_the_last_good_one(
        source: KubeSource, api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    api.cluster.put(nodeslo(50))
    until(source, lambda: source.store.nodeslo_present)
    bad_field = nodeslo(150)
    bad_field["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressPolicy"] = "cfsQuota"
    api.cluster.put(bad_field)
    until(source, lambda: source.store.nodeslo.invalid_fields != ())
    thr = source.store.nodeslo.resource_used_threshold_with_be
    # that field falls back to the default, the rest applies
    assert (thr.cpu_suppress_threshold_percent, thr.cpu_suppress_policy) == (65, "cfsQuota")
    condition = source.store.conditions.get("nodeslo")
    assert condition is not None and "cpuSuppressThresholdPercent" in condition.message
    not_a_nodeslo = nodeslo(30)
    not_a_nodeslo["spec"] = ["not", "an", "object"]
    api.cluster.put(not_a_nodeslo)
    until(source, lambda: "nodeslo" in source.store.errors)
    assert "spec: must be an object" in source.store.errors["nodeslo"]
    assert source.store.nodeslo.resource_used_threshold_with_be.cpu_suppress_policy == "cfsQuota"


def test_nodeslo_crd_not_installed_means_defaults_not_a_stall(api: FakeAPIServer, source: KubeSource) -> None:
    api.fail_next("GET", r"/nodeslos$", 404, count=1)
    t0 = time.monotonic()
    assert source.wait_synced(5)
    assert time.monotonic() - t0 < 3 and not source.store.nodeslo_present
    api.cluster.put(nodeslo(30))  # "installed" now: the next look finds it
    until(source, lambda: source.store.nodeslo_present)
    assert source.store.nodeslo.resource_used_threshold_with_be.cpu_suppress_threshold_percent == 30


def test_node_heartbeats_change_nothing_but_capacity_does(source: KubeSource, api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    store = source.store
    gen = store.node_generation
    api.cluster.put(node(heartbeat="t1"))
    until(source, caught_up(source, api))
    source.poll()
    assert store.node_generation == gen
    api.cluster.put(node(cpu="16"))
    until(source, lambda: store.node is not None and store.node.cpu_capacity_milli == 16000)
    api.cluster.remove("Node", NODE, namespace="")
    until(source, caught_up(source, api))
    source.poll()
    assert store.node is not None and store.node.cpu_capacity_milli == 16000  # the last known Node stays


def test_a_bad_pod_is_skipped_and_the_others_kept(source: KubeSource, api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    api.cluster.put(pod("bad", cpu="lots"))
    api.cluster.put(pod("good"))
    until(source, lambda: "uid-good" in source.store.pods)
    assert "uid-bad" not in source.store.pods and sorted(source.store.pods) == ["uid-a", "uid-b", "uid-good"]
    assert "bad" in source.store.errors["pods"]


def test_a_dropped_stream_is_watched_again_from_its_resource_version(source: KubeSource,
                                                                      api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    until(source, lambda: source.connected)
    api.drop_connections()
    api.cluster.put(pod("after-drop"))
    until(source, lambda: "uid-after-drop" in source.store.pods)
    assert source.watch_restarts["pods"] >= 1 and source.relists["pods"] == 0
    lists = [r for r in api.requests_to("GET", r"^/api/v1/pods$") if "watch=" not in r.query]
    assert len(lists) == 1  # no relist: the watch resumed


def test_an_outage_keeps_the_state_and_a_relist_after_410_notices_deletions(source: KubeSource,
                                                                             api: FakeAPIServer) -> None:
    assert source.wait_synced(5)
    store = source.store
    until(source, lambda: source.connected)
    api.outage()
    until(source, lambda: not source.connected)
    pods, gen = store.pods, store.pods_generation
    last_fresh = store.health["pods"].last_sync
    # meanwhile in the cluster: a pod goes away and the history is compacted (an etcd compaction)
    api.cluster.remove("Pod", "a")
    api.cluster.put(pod("new"))
    api.cluster.compact()
    wait_for(lambda: "cannot reach" in source.reflectors["pods"].last_error)  # a retry was refused
    source.poll(last_fresh + 100.0)
    assert store.pods is pods and store.pods_generation == gen  # the last known state is kept
    assert store.health["pods"].last_sync == last_fresh  # ... and it is not fresh any more
    assert "cannot reach" in store.health["pods"].last_error
    api.recover()
    until(source, lambda: sorted(store.pods) == ["uid-b", "uid-new"], timeout=8)
    until(source, lambda: source.connected)
    assert source.relists["pods"] >= 1
    health = source.health()["pods"]
    assert health.synced and health.connected and health.errors >= 1


def test_stop_ends_the_threads_promptly(api: FakeAPIServer) -> None:
    client = KubeClient(KubeConfig(server=api.url))
    # watches that would last 10 minutes: stop() ends them rather than waiting them out (the bound is
    # a tenth of that, far above a loaded machine's scheduling delays, far below the watch's end)
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(600.0, 600.0))
    assert src.wait_synced(30)
    t0 = time.monotonic()
    src.stop()
    assert time.monotonic() - t0 < 60
    assert not any(r.thread is not None and r.thread.is_alive() for r in src.reflectors.values())
    client.close()


WATCH_LIFE = 600.0  # the watches of the two tests below: a lost interruption would leave one blocked this long


def _just_before_the_watch(monkeypatch: pytest.MonkeyPatch, client: KubeClient, channel: str,
                           action: Callable[[], None]) -> None:
    """Run ``action`` once when the reflector on ``channel`` asks for its first watch: after its loop
    checked for a stop or a relist, before the watch's connection exists (a stop() or a SIGHUP on
    another thread can come exactly there; its interrupt then finds no socket to shut down)."""
    watch = client.watch
    done = threading.Event()

    def watch_after_action(*args: Any, **kw: Any) -> Any:
        if kw.get("channel") == channel and not done.is_set():
            done.set()
            action()
        return watch(*args, **kw)

    monkeypatch.setattr(client, "watch", watch_after_action)


def test_a_stop_before_the_watch_connects_is_not_lost(api: FakeAPIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    client = KubeClient(KubeConfig(server=api.url))
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(WATCH_LIFE, WATCH_LIFE))
    pods = src.reflectors["pods"]

    def stop_now() -> None:  # stop() as the agent calls it, on another thread (it joins this one)
        stopper = threading.Thread(target=src.stop, kwargs={"timeout": 0.0})
        stopper.start()
        stopper.join()

    _just_before_the_watch(monkeypatch, client, pods.channel, stop_now)
    src.start()
    try:
        assert pods.thread is not None
        pods.thread.join(WATCH_LIFE / 10)
        assert not pods.thread.is_alive(), "the watch started after stop() and blocks until the server ends it"
        assert not [r for r in api.requests_to("GET", r"^/api/v1/pods$") if "watch=" in r.query]
    finally:
        src.stop()
        client.close()


def test_a_stop_during_the_start_joins_only_started_threads(api: FakeAPIServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # stop() on another thread (the agent's, on SIGTERM) while start() has made the Node reflector's
    # thread but not started it: joining it raised "cannot join thread before it is started" in the
    # stopping thread (seen as an unhandled thread exception in a loaded full run)
    import qosmanager.states.kube.source as source

    client = KubeClient(KubeConfig(server=api.url))
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(WATCH_LIFE, WATCH_LIFE))
    errors: list[BaseException] = []

    def stop() -> None:
        try:
            src.stop(timeout=WATCH_LIFE / 10)
        except BaseException as e:  # the failure asserted below
            errors.append(e)

    stopper = threading.Thread(target=stop)

    class StoppedWhileStarting(threading.Thread):
        def start(self) -> None:
            if self.name == "kube-node" and not stopper.is_alive():
                stopper.start()
                src._stop.wait(5.0)
                # the old stop() ran to its end here; one that waits for the start returns after it
                stopper.join(1.0)
            super().start()

    monkeypatch.setattr(source.threading, "Thread", StoppedWhileStarting)
    try:
        src.start()
        stopper.join(WATCH_LIFE / 5)
        assert not stopper.is_alive() and errors == []
        for r in src.reflectors.values():  # each one either never started or was stopped
            assert r.thread is None or not r.thread.is_alive()
    finally:
        monkeypatch.undo()
        src.stop()
        client.close()


def test_a_relist_asked_before_the_watch_connects_is_not_lost(api: FakeAPIServer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    client = KubeClient(KubeConfig(server=api.url))
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(WATCH_LIFE, WATCH_LIFE))
    pods = src.reflectors["pods"]
    _just_before_the_watch(monkeypatch, client, pods.channel, pods.request_relist)
    src.start()
    try:
        def lists() -> list[object]:
            return [r for r in api.requests_to("GET", r"^/api/v1/pods$") if "watch=" not in r.query]
        # the relist comes at once, not after the first watch's 10 minutes
        wait_for(lambda: len(lists()) >= 2, timeout=WATCH_LIFE / 10)
        assert pods.requested_relists == 1 and pods.errors == 0
    finally:
        src.stop()
        client.close()


def test_the_node_name_is_required() -> None:
    with pytest.raises(ValueError, match="node name"):
        KubeSource(StateStore(), KubeClient(KubeConfig(server="http://127.0.0.1:1")), "")


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    b = Backoff(base=0.5, cap=4.0, jitter=0.5, rng=random.Random(7))
    delays = [b.next() for _ in range(6)]
    # attempt n waits base * 2^n (capped at 4 s) times a factor in [1, 1.5)
    for n, d in enumerate(delays):
        nominal = min(4.0, 0.5 * 2**n)
        assert nominal <= d < nominal * 1.5
    assert len({round(d / min(4.0, 0.5 * 2**n), 6) for n, d in enumerate(delays)}) > 1  # jittered
    b.reset()
    assert 0.5 <= b.next() < 0.75


def test_streams_that_end_at_once_do_not_spin(api: FakeAPIServer) -> None:
    """A server (or proxy) that ends every watch at once is asked again with backoff, not in a loop."""
    api.max_watch_seconds = 0.0  # every watch stream ends at once (with just a bookmark)
    client = KubeClient(KubeConfig(server=api.url))
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(60.0, 60.0), backoff_base=0.1,
                     backoff_max=0.2)
    try:
        assert src.wait_synced(5)
        time.sleep(1.0)
        watches = [r for r in api.requests_to("GET", r"^/api/v1/pods$") if "watch=" in r.query]
        # backoff of 0.1 s doubling to 0.2 s, times 1..1.5: at most ~8 watches in that second, not hundreds
        assert 1 <= len(watches) <= 12
    finally:
        src.stop()
        client.close()


def test_a_requested_relist_catches_up_a_change_the_watch_missed_and_is_no_error(source: KubeSource,
                                                                                  api: FakeAPIServer) -> None:
    """SIGHUP in Kubernetes mode: the pods, the Node and the NodeSLO are listed afresh and watched on from
    there.  A change no watch event told of (stored behind the watches' back, as a watch that missed
    it would leave it) is in the store after the relist; the woken watches count as no error, no
    watch restart and no lost connection."""
    assert source.wait_synced(5)
    until(source, lambda: source.connected)
    with api.cluster.cond:  # no event: only a list sees it
        api.cluster.objects["nodes"][("", NODE)] = node(cpu="16")
    time.sleep(0.5)
    source.poll()
    assert source.store.node is not None and source.store.node.cpu_capacity_milli == 8000  # missed
    lists_before = len([r for r in api.requests_to("GET", r"^/api/v1/nodes$") if "watch=" not in r.query])
    source.relist()
    until(source, lambda: source.store.node is not None and source.store.node.cpu_capacity_milli == 16000)
    until(source, lambda: all(r.requested_relists == 1 for r in source.reflectors.values()))
    lists = [r for r in api.requests_to("GET", r"^/api/v1/nodes$") if "watch=" not in r.query]
    assert len(lists) == lists_before + 1 and "resourceVersion=0" not in lists[-1].query  # a fresh read
    assert all(r.errors == 0 and r.watch_restarts == 0 and r.last_error == "" for r in source.reflectors.values())
    until(source, lambda: source.connected)
    api.cluster.put(pod("after"))  # watched on from the relist
    until(source, lambda: "uid-after" in source.store.pods)
