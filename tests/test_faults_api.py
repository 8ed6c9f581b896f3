"""API-server faults against the fake API server (tests/fakeapi.py), on a simulated clock where the
agent would otherwise wait: the pods reflector runs in the test's thread with a ``stop`` whose
``wait(seconds)`` only moves a simulated clock on and records the delay, so a minute-long outage or a
storm of 429s costs no minute of the test.  Each case: the last good state is kept, the fault is
reported (``connected``, ``last_error``, the store's health), the delays are the backoff's (or the
server's ``Retry-After``), bounded, and the source recovers.

Covered elsewhere: a watch cut mid-stream (tests/test_kube_source.py,
``test_a_dropped_stream_is_watched_again_from_its_resource_version``), 410 Gone after an outage
and the relist (``test_an_outage_keeps_the_state_and_a_relist_after_410_notices_deletions``), the
agent's /healthz and ``qosmanager_source_connected`` through an outage (tests/test_kube_agent.py),
429 on evictions (``test_a_429_is_audited_and_retried_after_its_backoff``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.states.kube.client import KubeClient
from qosmanager.states.kube.config import KubeConfig
from qosmanager.states.kube.source import KubeSource, Reflector
from qosmanager.states.store import StateStore

NODE = "node-a"
PODS = r"^/api/v1/pods$"
BASE, CAP = 0.8, 30.0  # the agent's backoff defaults (--kube backoff: 0.8 s doubling up to 30 s)
JITTER_MAX = 1.5


def pod(name: str, node: str = NODE) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", "resources": {
                "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "qosClass": "Guaranteed"}}


def node() -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid"},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "8", "memory": "32Gi"}}}


class SimClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class SimStop:
    """Stands in for the reflector's stop event: ``wait`` moves the simulated clock, never sleeps."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.until: Callable[[], bool] = lambda: False
        self.waits: list[float] = []
        self.at: list[tuple[float, Callable[[], None]]] = []  # (simulated time, action) once due
        self.deadline = time.monotonic() + 120.0
        self.timed_out = False

    def is_set(self) -> bool:
        if time.monotonic() > self.deadline:  # a case that never gets there fails, it does not hang
            self.timed_out = True
            return True
        return self.until()

    def wait(self, seconds: float | None = None) -> bool:
        assert seconds is not None and seconds >= 0
        self.waits.append(seconds)
        self.clock.t += seconds
        for item in [a for a in self.at if a[0] <= self.clock.t]:
            self.at.remove(item)
            item[1]()
        return self.is_set()


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    cluster = FakeCluster()
    cluster.put(node())
    for name in ("a", "b"):
        cluster.put(pod(name))
    with FakeAPIServer(cluster, bookmark_interval=0.1) as server:
        yield server


@pytest.fixture
def rig(api: FakeAPIServer) -> Iterator[tuple[KubeSource, Reflector, SimStop, SimClock]]:
    clock = SimClock()
    client = KubeClient(KubeConfig(server=api.url), timeout=5)
    src = KubeSource(StateStore(), client, NODE, clock=clock, watch_timeout=(0.3, 0.3), backoff_base=BASE,
                     backoff_max=CAP, seed=3)
    r = src.reflectors["pods"]
    stop = SimStop(clock)
    r.stop = stop  # type: ignore[assignment]
    try:
        yield src, r, stop, clock
    finally:
        stop.until = lambda: True
        client.close()


def run_until(r: Reflector, stop: SimStop, pred: Callable[[], bool]) -> None:
    stop.until = pred
    r.run()
    assert not stop.timed_out, f"not reached: {r.last_error}, waits {stop.waits}"


def test_a_429_storm_honours_retry_after_and_the_delay_stays_bounded(rig, api: FakeAPIServer) -> None:
    src, r, stop, _ = rig
    api.fail_next("GET", PODS, 429, count=12, retry_after=7)
    run_until(r, stop, lambda: r.synced)
    assert len(stop.waits) == 12 and r.errors == 12
    assert min(stop.waits) >= 7.0, stop.waits  # never sooner than the server asked
    assert max(stop.waits) <= CAP * JITTER_MAX, stop.waits  # the backoff still grows, to its cap
    assert "429" in r.last_error or "injected failure 429" in r.last_error
    src.poll()
    assert sorted(src.store.pods) == ["uid-a", "uid-b"] and r.connected


def test_a_retry_after_beyond_the_cap_waits_the_cap(rig, api: FakeAPIServer) -> None:
    src, r, stop, _ = rig
    api.fail_next("GET", PODS, 429, count=3, retry_after=3600)
    run_until(r, stop, lambda: r.synced)
    assert len(stop.waits) == 3 and all(CAP <= w <= CAP * JITTER_MAX for w in stop.waits), stop.waits
    src.poll()
    assert len(src.store.pods) == 2


def test_500s_on_the_list_then_the_watch_back_off_and_resume_without_a_relist(rig, api: FakeAPIServer) -> None:
    src, r, stop, _ = rig
    api.fail_next("GET", PODS, 500, count=5, query="^(?!.*watch=)")  # the lists
    api.fail_next("GET", PODS, 503, count=3, query="watch=")  # then the watches
    listed: list[str] = []

    def watching() -> bool:
        if r.synced and not listed:
            listed.append(r.rv)
        return r.synced and r.watch_restarts >= 3 and r.connected  # a fourth watch stands

    run_until(r, stop, watching)
    # exponential while listing: attempt n waits BASE * 2^n times [1, 1.5)
    for n, w in enumerate(stop.waits[:5]):
        assert BASE * 2**n <= w < BASE * 2**n * JITTER_MAX, stop.waits
    # the failed watches were watched again from the list's resourceVersion, never relisted
    assert r.watch_restarts == 3 and r.relists == 0 and len(stop.waits) == 8, (r.watch_restarts, stop.waits)
    lists = [q for q in api.requests_to("GET", PODS) if "watch=" not in q.query and q.code == 200]
    watches = [q for q in api.requests_to("GET", PODS) if "watch=" in q.query]
    assert len(lists) == 1 and all(f"resourceVersion={listed[0]}" in w.query for w in watches[:4])
    src.poll()
    assert sorted(src.store.pods) == ["uid-a", "uid-b"] and r.connected


def test_an_outage_of_a_minute_keeps_the_state_then_relists(rig, api: FakeAPIServer) -> None:
    src, r, stop, clock = rig
    began: list[float] = []
    kept: list[tuple[object, float]] = []
    seen: list[tuple[int, bool]] = []  # (the reflector's errors, connected) at each check in the outage
    errors_before: list[int] = []

    def script() -> bool:
        """The stop predicate: checked before every watch and, since a stop is never lost (6139739), once
        a request has connected too. The outage starts once the first list is in."""
        if r.synced and not began:
            src.poll()
            kept.append((src.store.pods, src.store.health["pods"].last_sync))
            began.append(clock.t)
            errors_before.append(r.errors)
            api.outage()
            # meanwhile: a pod goes, one comes, the history is compacted; the server is back in a minute
            api.cluster.remove("Pod", "a")
            api.cluster.put(pod("new"))
            api.cluster.compact()
            stop.at.append((clock.t + 60.0, api.recover))
            return False
        if began and clock.t < began[0] + 60.0:
            seen.append((r.errors, r.connected))
            src.poll()  # the agent's ticks go on: nothing reaches the store, which keeps the last state
            assert src.store.pods is kept[0][0] and src.store.health["pods"].last_sync == kept[0][1]
        return r.relists >= 1 and r.synced and r.connected and r._lists >= 2

    run_until(r, stop, script)
    tries = list(stop.waits)
    assert began and clock.t >= began[0] + 60.0
    # reported: not connected through the outage, from its first failed request on
    failed = [connected for errors, connected in seen if errors > errors_before[0]]
    assert failed and not any(failed), seen
    assert "cannot reach" in r.last_error, r.last_error  # what the health and /healthz report
    # a minute of refused connections: a handful of attempts, each delay within the cap
    assert 3 <= len(tries) <= 12 and r.errors == len(tries), (tries, r.errors)
    assert all(w <= CAP * JITTER_MAX for w in tries)
    src.poll()
    assert sorted(src.store.pods) == ["uid-b", "uid-new"]  # the relist noticed what changed meanwhile
    assert src.store.health["pods"].last_sync >= began[0] + 60.0


def test_slow_answers_never_hold_up_the_agents_tick(api: FakeAPIServer) -> None:
    """The reflectors wait for a slow server on their own threads; the agent's poll does not."""
    client = KubeClient(KubeConfig(server=api.url), timeout=30)
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(5.0, 5.0), backoff_base=0.05, backoff_max=0.2)
    src.start()
    try:
        assert src.wait_synced(60)
        src.poll()
        api.delay = 3.0  # every answer from now on takes 3 s
        api.drop_connections()  # and the watches have to be opened again
        api.cluster.put(pod("slow"))
        t0 = time.monotonic()
        for _ in range(50):
            src.poll()
        assert time.monotonic() - t0 < api.delay  # fifty ticks' polls, none waited for the server
        deadline = time.monotonic() + 60
        while "uid-slow" not in src.store.pods:
            assert time.monotonic() < deadline
            src.poll()
            time.sleep(0.05)
    finally:
        api.delay = 0.0
        src.stop()
        client.close()


def test_a_10000_pod_list_arrives_whole(api: FakeAPIServer) -> None:
    for i in range(10_000):
        api.cluster.put(pod(f"p{i:05d}"))
    api.cluster.put(pod("elsewhere", node="node-b"))
    client = KubeClient(KubeConfig(server=api.url), timeout=60)
    src = KubeSource(StateStore(), client, NODE, watch_timeout=(5.0, 5.0))
    src.start()
    try:
        assert src.wait_synced(120)
        src.poll()
        assert len(src.store.pods) == 10_002 and "uid-elsewhere" not in src.store.pods
        assert src.store.errors.get("pods") in (None, "")
    finally:
        src.stop()
        client.close()
