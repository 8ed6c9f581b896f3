"""The Eviction API callable, its place in the coordinator, and the Event recorder (fake API server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.api.pod import pod_meta
from qosmanager.eviction.coordinator import EvictionCoordinator
from qosmanager.eviction.types import TARGET_POD_USED, EvictDecision, EvictTask, Victim
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Write, WriteResult
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import pod_object
from qosmanager.states.kube.client import KubeClient
from qosmanager.states.kube.config import KubeConfig
from qosmanager.states.kube.events import (
    BELimitEvents,
    EventRecorder,
    ObjectRef,
    eviction_event,
    pod_ref,
)
from qosmanager.states.kube.evict import KubeEvictor
from qosmanager.states.store import StateStore


class Clock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def be_pod(name: str) -> dict:
    fake = FakePod(uid=f"uid-{name}", namespace="default", name=name, qos=KubeQoS.BESTEFFORT,
                   containers=[FakeContainer("c", "containerd://" + "ab" * 32)])
    return pod_object(fake)


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    with FakeAPIServer(FakeCluster()) as server:
        yield server


@pytest.fixture
def client(api: FakeAPIServer) -> Iterator[KubeClient]:
    c = KubeClient(KubeConfig(server=api.url), timeout=3)
    try:
        yield c
    finally:
        c.close()


# ----------------------------------------------------------------------------------------------
# the Eviction API callable
# ----------------------------------------------------------------------------------------------
def test_201_evicts_with_a_uid_precondition(api: FakeAPIServer, client: KubeClient) -> None:
    obj = api.cluster.put(be_pod("be-1"))
    out = KubeEvictor(client)(pod_meta(obj), "trigger by koordlet feature BEMemoryEvict")
    assert out.ok and not out.gone and out.retry_after == 0
    [req] = api.cluster.evictions
    assert (req.namespace, req.name, req.code) == ("default", "be-1", 201)
    assert req.body == {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": "be-1", "namespace": "default"},
                        "deleteOptions": {"preconditions": {"uid": "uid-be-1"}}}
    assert api.cluster.items("Pod") == []


def test_404_and_a_replaced_pod_count_as_gone(api: FakeAPIServer, client: KubeClient) -> None:
    evictor = KubeEvictor(client)
    gone = evictor(pod_meta(be_pod("never-there")), "r")
    assert gone.ok and gone.gone
    api.cluster.put(be_pod("reused"))  # uid-reused on the server
    stale = pod_meta({**be_pod("reused"), "metadata": {**be_pod("reused")["metadata"], "uid": "old-uid"}})
    out = evictor(stale, "r")
    assert out.ok and out.gone and [p["metadata"]["name"] for p in api.cluster.items("Pod")] == ["reused"]
    assert evictor.stats["gone"] == 2


def test_429_backs_off_per_pod_and_respects_retry_after(api: FakeAPIServer, client: KubeClient) -> None:
    clock = Clock()
    evictor = KubeEvictor(client, clock=clock, backoff_base=5.0, backoff_max=30.0)
    a, b = (pod_meta(api.cluster.put(be_pod(n))) for n in ("a", "b"))
    api.cluster.set_eviction_policy("default", "a", 429)
    # 5 s, then doubling per refusal: 10, 20, capped at 30
    delays = []
    for _ in range(4):
        out = evictor(a, "r")
        assert not out.ok and "429" in out.error and "disruption budget" in out.error
        delays.append(out.retry_after)
        clock.t += out.retry_after
    assert delays == [5.0, 10.0, 20.0, 30.0]
    api.cluster.set_eviction_policy("default", "b", 429, retry_after=45)
    assert evictor(b, "r").retry_after == 45.0  # the server's Retry-After when it is longer
    clock.t += 61.0  # quiet for more than twice the cap: the backoff starts afresh
    assert evictor(a, "r").retry_after == 5.0
    assert evictor.stats["refused"] == 6


def test_other_failures_carry_the_message(api: FakeAPIServer, client: KubeClient) -> None:
    obj = api.cluster.put(be_pod("x"))
    api.cluster.set_eviction_policy("default", "x", 500)
    out = KubeEvictor(client)(pod_meta(obj), "r")
    assert not out.ok and out.retry_after == 0 and "500" in out.error and "injected" in out.error
    api.outage()
    out = KubeEvictor(client)(pod_meta(obj), "r")
    assert not out.ok and "no answer" in out.error


def test_a_refused_pod_is_not_counted_as_released_and_is_retried_after_its_backoff(
        api: FakeAPIServer, client: KubeClient, tmp_path: Path) -> None:
    """The coordinator with the Eviction API: 429 -> audited failure, the next victim goes instead,
    the refused pod is skipped while it waits and asked again afterwards."""
    host = FakeHost(str(tmp_path / "host"), n_cpus=2)
    clock = Clock()
    objs = [api.cluster.put(be_pod(n)) for n in ("first", "second")]
    store = StateStore()
    store.set_pods(objs)
    api.cluster.set_eviction_policy("default", "first", 429, 429, 201)
    api.cluster.evict_deletes = False  # keep both pods listed: no kubelet acts here
    audit = AuditLog(None, clock=clock)
    coord = EvictionCoordinator(store, host.layout, audit, mode="api", clock=clock,
                                api=KubeEvictor(client, clock=clock, backoff_base=5.0))

    def task() -> EvictTask:
        here = [store.pods[u] for u in ("uid-first", "uid-second") if u in store.pods]
        # more than one pod releases: the pending one does not cover it, the refused one is needed too
        return EvictTask("BEMemoryEvict", "memory high", TARGET_POD_USED, {"memory": 150.0},
                         [Victim(p, {"memory": 100.0}) for p in here])

    r1 = coord.execute("memoryEvict", [task()], clock.t)
    assert [(d.pod.name, d.action) for d in r1.decisions] == [("first", "failed"), ("second", "evicted")]
    assert not coord.is_pending("uid-first", clock.t) and coord.is_pending("uid-second", clock.t)
    failed = [r for r in audit.recent if r["uid"] == "uid-first"]
    assert failed[0]["executed"] is False and "429" in failed[0]["error"]
    clock.t += 2.0  # within the 5 s backoff: skipped, not asked
    r2 = coord.execute("memoryEvict", [task()], clock.t)
    # the pending pod's release counts first, wherever it sits in the order
    assert [(d.pod.name, d.action) for d in r2.decisions] == [("second", "pending"), ("first", "skipped")]
    clock.t += 4.0  # backoff over: asked again (second 429, 10 s), then the third answer (201)
    r3 = coord.execute("memoryEvict", [task()], clock.t)
    assert [(d.pod.name, d.action) for d in r3.decisions] == [("second", "pending"), ("first", "failed")]
    clock.t += 10.5
    store.set_pods(objs[:1])  # the second pod left (as a DELETED event would have it)
    r4 = coord.execute("memoryEvict", [task()], clock.t)
    assert (r4.decisions[0].pod.name, r4.decisions[0].action) == ("first", "evicted")
    assert [(e.name, e.code) for e in api.cluster.evictions] == [
        ("first", 429), ("second", 201), ("first", 429), ("first", 201)]


@pytest.mark.parametrize("versions, answer", [
    (("policy/v1beta1",), "400 BadRequest"),  # Kubernetes < 1.22: policy/v1 is no Eviction kind there
    ((), "404 NotFound"),  # pods/eviction not served: a 404 that names no pod
])
def test_an_eviction_api_that_is_not_there_is_said_once_and_not_taken_for_a_gone_pod(
        api: FakeAPIServer, client: KubeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        versions: tuple[str, ...], answer: str) -> None:
    host = FakeHost(str(tmp_path / "host"), n_cpus=2)
    clock = Clock()
    objs = [api.cluster.put(be_pod(n)) for n in ("a", "b", "c")]
    store = StateStore()
    store.set_pods(objs)
    api.cluster.eviction_versions = versions
    audit = AuditLog(None, clock=clock)
    evictor = KubeEvictor(client, clock=clock, conditions=store.conditions, unserved_recheck=60.0)
    coord = EvictionCoordinator(store, host.layout, audit, mode="api", clock=clock, api=evictor)

    def task() -> EvictTask:
        return EvictTask("BEMemoryEvict", "memory high", TARGET_POD_USED, {"memory": 300.0},
                         [Victim(store.pods[f"uid-{n}"], {"memory": 100.0}) for n in ("a", "b", "c")])

    with caplog.at_level("ERROR", logger="qosmanager.states.kube.evict"):
        for _ in range(3):  # three rounds of three victims within the recheck interval
            r = coord.execute("memoryEvict", [task()], clock.t)
            # no victim counts as released: the pods are all still there
            assert [d.action for d in r.decisions] == ["failed"] * 3
            assert not any(coord.is_pending(f"uid-{n}", clock.t) for n in ("a", "b", "c"))
            clock.t += 10.0
    # one request told it; the other eight evictions failed without asking again
    assert [(e.name, e.code) for e in api.cluster.evictions] == [("a", int(answer[:3]))]
    said = [rec for rec in caplog.records if "policy/v1 Evictions" in rec.getMessage()]
    assert len(said) == 1 and answer in said[0].getMessage() and ">= 1.22" in said[0].getMessage()
    cond = store.conditions.get("kube/eviction-api")
    assert cond is not None and "--evict-mode kill" in cond.message
    assert all(cond.message == rec["error"] for rec in audit.recent if rec["action"] == "failed")
    assert evictor.stats == {"evicted": 0, "gone": 0, "refused": 0, "failed": 9}
    # the cluster is upgraded: asked again after the interval, and the condition clears
    api.cluster.eviction_versions = ("policy/v1", "policy/v1beta1")
    clock.t += 60.0
    r = coord.execute("memoryEvict", [task()], clock.t)
    assert r.decisions[0].action == "evicted"
    assert store.conditions.get("kube/eviction-api") is None
    assert api.cluster.evictions[-1].code == 201 and api.cluster.evictions[-1].body["apiVersion"] == "policy/v1"


# ----------------------------------------------------------------------------------------------
# events
# ----------------------------------------------------------------------------------------------
def ref(name: str = "p") -> ObjectRef:
    return ObjectRef("Pod", name, "default", f"uid-{name}")


def test_an_event_is_posted_with_source_and_involved_object(api: FakeAPIServer, client: KubeClient) -> None:
    clock = Clock(1_767_225_600.0)  # 2026-01-01T00:00:00Z
    rec = EventRecorder(client, "node-a", clock=clock)
    rec.start()
    try:
        assert rec.record(ref(), "Warning", "EvictPodSuccess", "evicted", action="Evict")
        assert rec.drain()
    finally:
        rec.stop()
    [ev] = api.cluster.items("Event")
    assert ev["metadata"]["namespace"] == "default" and ev["metadata"]["name"].startswith("p.")
    assert ev["involvedObject"] == {"kind": "Pod", "name": "p", "namespace": "default", "uid": "uid-p",
                                    "apiVersion": "v1"}
    assert (ev["type"], ev["reason"], ev["message"], ev["count"]) == (
        "Warning", "EvictPodSuccess", "evicted", 1)
    assert ev["source"] == {"component": "qosmanager", "host": "node-a"}
    assert ev["firstTimestamp"] == ev["lastTimestamp"] == "2026-01-01T00:00:00Z"
    assert (ev["reportingComponent"], ev["reportingInstance"], ev["action"]) == (
        "qosmanager", "node-a", "Evict")


def test_repeated_events_are_counted_on_one_event_within_ten_minutes(api: FakeAPIServer,
                                                                     client: KubeClient) -> None:
    clock = Clock(1_767_225_600.0)
    rec = EventRecorder(client, "node-a", clock=clock)
    rec.start()
    try:
        rec.record(ref(), "Warning", "R", "same")
        rec.drain()
        clock.t += 30
        rec.record(ref(), "Warning", "R", "same")
        rec.record(ref(), "Warning", "R", "other message")
        rec.drain()
        clock.t += 601  # past the correlation window: a new Event
        rec.record(ref(), "Warning", "R", "same")
        rec.drain()
    finally:
        rec.stop()
    events = sorted(api.cluster.items("Event"), key=lambda e: (e["message"], e["firstTimestamp"]))
    assert [(e["message"], e["count"]) for e in events] == [("other message", 1), ("same", 2), ("same", 1)]
    assert events[1]["lastTimestamp"] == "2026-01-01T00:00:30Z"
    assert (rec.stats.posted, rec.stats.patched) == (3, 1)
    patches = api.requests_to("PATCH", r"/events/")
    assert len(patches) == 1 and patches[0].content_type == "application/strategic-merge-patch+json"


def test_a_correlated_event_that_expired_is_created_again(api: FakeAPIServer, client: KubeClient) -> None:
    rec = EventRecorder(client, "node-a", clock=Clock())
    rec.start()
    try:
        rec.record(ref(), "Normal", "R", "m")
        rec.drain()
        api.cluster.remove("Event", api.cluster.items("Event")[0]["metadata"]["name"])
        rec.record(ref(), "Normal", "R", "m")
        rec.drain()
    finally:
        rec.stop()
    assert [e["count"] for e in api.cluster.items("Event")] == [1]
    assert rec.stats.posted == 2


def test_events_are_rate_limited_per_object(api: FakeAPIServer, client: KubeClient) -> None:
    clock = Clock()
    rec = EventRecorder(client, "node-a", clock=clock, burst=3, refill_seconds=300)
    rec.start()
    try:
        for i in range(5):
            rec.record(ref("noisy"), "Warning", "R", f"m{i}")
        rec.record(ref("quiet"), "Warning", "R", "m")
        rec.drain()
        clock.t += 300  # one token back
        rec.record(ref("noisy"), "Warning", "R", "later")
        rec.record(ref("noisy"), "Warning", "R", "too soon")
        rec.drain()
    finally:
        rec.stop()
    by_object: dict[str, list[str]] = {}
    for e in api.cluster.items("Event"):
        by_object.setdefault(e["involvedObject"]["name"], []).append(e["message"])
    assert sorted(by_object["noisy"]) == ["later", "m0", "m1", "m2"] and by_object["quiet"] == ["m"]
    assert rec.stats.rate_limited == 3


def test_a_full_queue_drops_and_counts_without_blocking(client: KubeClient) -> None:
    rec = EventRecorder(client, "node-a", queue_size=2)  # not started: nothing drains the queue
    assert [rec.record(ref(), "Normal", "R", f"m{i}") for i in range(3)] == [True, True, False]
    assert rec.stats.dropped == 1 and rec.stats.queued == 2


def test_an_unreachable_api_counts_failures(api: FakeAPIServer, client: KubeClient) -> None:
    api.outage()
    rec = EventRecorder(client, "node-a")
    rec.start()
    try:
        rec.record(ref(), "Normal", "R", "m")
        assert rec.drain()
    finally:
        rec.stop()
    assert rec.stats.failed == 1 and rec.stats.posted == 0


def decision(action: str, executed: bool, reason: str, error: str | None = None) -> EvictDecision:
    pod = pod_meta(be_pod("be-7"))
    return EvictDecision(pod, "BEMemoryEvict", action, executed, reason, error)


def test_eviction_decisions_map_to_pod_events() -> None:
    why = "node memory 85% >= 70%; evict default/be-7 (usage=123) to release memory=456"
    ok = eviction_event(decision("evicted", True, why), "memoryEvict")
    assert ok is not None and ok[:2] == ("Warning", "EvictPodSuccess")
    for part in ("default/be-7", "BEMemoryEvict", "memoryEvict", "memory=456", "usage=123"):
        assert part in ok[2]
    failed = eviction_event(decision("failed", False, why, "refused by the Eviction API (429 ...)"),
                            "memoryEvict")
    assert failed is not None and failed[:2] == ("Warning", "EvictPodFail") and "429" in failed[2]
    refused = eviction_event(decision("skipped", False, "refused: default/be-7 is LSE (...)"), "cpuEvict")
    assert refused is not None and refused[:2] == ("Normal", "EvictPodRefused") and "cpuEvict" in refused[2]
    # nothing happened to the pod under --evict-mode none or --dry-run: no Event
    assert eviction_event(decision("evicted", False, why), "memoryEvict") is None
    assert eviction_event(decision("pending", False, "already being evicted"), "memoryEvict") is None
    assert eviction_event(decision("skipped", False, "skipped: waits for its eviction retry"), "x") is None


def test_on_eviction_records_on_the_pod(client: KubeClient) -> None:
    rec = EventRecorder(client, "node-a")  # not started: look at the queue
    rec.on_eviction(decision("evicted", True, "why"), "memoryEvict")
    rec.on_eviction(decision("pending", False, "why"), "memoryEvict")
    assert rec.stats.queued == 1
    item = rec._queue.get_nowait()
    assert item is not None and item.ref == pod_ref(pod_meta(be_pod("be-7"))) and item.action == "Evict"


def quota_write(value: str, old: str, strategy: str = "cpuSuppress", cgroup: str = "kubepods/besteffort",
                resource: str = "cpu.cfs_quota_us") -> WriteResult:
    w = Write(strategy, resource, value, cgroup, reason=f"AdjustBEByNodeCPUUsage: BE quota {value} (numbers)")
    return WriteResult(w, f"cpu/{cgroup}/{resource}", "written", value, old)


def test_be_limit_changes_become_node_events_at_most_once_a_minute_per_kind(client: KubeClient) -> None:
    clock = Clock()
    rec = EventRecorder(client, "node-a", clock=clock)  # not started: read the queue
    node = ObjectRef("Node", "node-a", uid="n-uid")
    be = BELimitEvents(rec, lambda: node, "kubepods/besteffort", clock=clock)
    be.on_write(quota_write("120000", "-1"))
    clock.t += 10
    be.on_write(quota_write("80000", "120000"))
    clock.t += 10
    be.on_write(quota_write("60000", "80000"))
    be.on_write(quota_write("4", "0-7", resource="cpuset.cpus"))  # another kind: not held back
    be.on_write(quota_write("1", "-1", strategy="cpuBurst"))  # not cpuSuppress
    be.on_write(quota_write("1", "-1", cgroup="kubepods/besteffort/pod1"))  # not the BE QoS dir
    clock.t += 39.0
    be.flush()  # 59 s after the first quota event: still held
    clock.t += 1.0
    be.flush()
    items = []
    while not rec._queue.empty():
        items.append(rec._queue.get_nowait())
    assert all(i is not None and i.ref == node and i.reason == "AdjustBEByNodeCPUUsage" for i in items)
    messages = [i.message for i in items if i is not None]
    assert messages == [
        "BE cpu quota changed from -1 to 120000: BE quota 120000 (numbers)",
        "BE cpu cpuset changed from 0-7 to 4: BE quota 4 (numbers)",
        "BE cpu quota changed from 120000 to 60000 (2 changes since the last event): "
        "BE quota 60000 (numbers)",
    ]
