"""The BE limit never waits on per-pod work (issue 16, "Pod count"): at 100,000 pods the pods file's
decode, the v1 read of every BE child's quota and the cpuset recovery each took tens of seconds
before the first BE quota was written.

* A big pods file is decoded beside the agent's ticks: the BE quota is written from the node and kube
  QoS-dir counters while the decode is still held (the whole agent, ``Agent.run``, on a fake host),
  ``state/pods-loading`` says so, and the pods take over when they arrive.
* cfsQuota's cpuset recovery (a read-compare of every BE cgroup's cpuset) is a batch of its own after
  the BE quota's, in the same run, and only once the pods are known.
* A v1 child found at the BE quota while the pods were not known yet is given its batch-cpu quota back
  once they are (the agent-restart case of ``test_koordinator_node.py``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import qosmanager.agent as agent_mod
import qosmanager.states.store as store_mod
import qosmanager.strategies._cpu_suppress_children as children_mod
from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.agent import Agent, AgentConfig, StartupError, check_startup
from qosmanager.executor.executor import WriteResult
from qosmanager.framework.fastpath import REACT_TICK
from qosmanager.framework.strategy import QoSConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from qosmanager.states.files import LOADING_CONDITION, FileSource
from qosmanager.states.store import StateStore

CPUS = 8
HOLD = 120.0  # seconds the decode is held at most (released as soon as the test has seen what it needs)
WAIT = 60.0  # seconds to wait for the BE quota: long, so a loaded machine's slowness cannot pass for a wait
SLO = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                       "cpuSuppressPolicy": "cfsQuota"}}


def be_quota(host: FakeHost) -> int:
    path = host.layout.file("cpu", host.layout.qos_dir(KubeQoS.BESTEFFORT), "cpu.cfs_quota_us")
    while True:
        with open(path) as f:
            text = f.read().strip()
        if text:
            return int(text)
        time.sleep(0.001)


class Counters:
    """/proc/stat and the kube QoS dirs' usage at 1 LS core and 1 BE core, advanced by :meth:`step`."""

    def __init__(self, host: FakeHost) -> None:
        self.host, self.t0, self.last = host, time.monotonic(), time.monotonic()
        self.ls = self.be = 0.0
        self.step()

    def step(self) -> None:
        now = time.monotonic()
        dt, self.last = now - self.last, now
        self.ls += dt
        self.be += dt
        lay, h = self.host.layout, self.host
        h.set_cpu_usage(lay.kubepods_dir(), int((self.ls + self.be) * 1e9))
        h.set_cpu_usage(lay.qos_dir(KubeQoS.BESTEFFORT), int(self.be * 1e9))
        h.set_cpu_usage(lay.qos_dir(KubeQoS.BURSTABLE), int(self.ls * 1e9))
        busy = int((self.ls + self.be) * 100 / CPUS)
        h.set_proc_stat([busy] * CPUS, [int((now - self.t0 + 100) * 100) - busy] * CPUS)


def test_the_be_quota_is_written_while_the_pods_file_is_still_decoded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pods' views are held (as a 100,000-pod file holds them for tens of seconds): the collector's
    passes and cpuSuppress's ticks go on, and the BE quota is written from the node and kube QoS-dir
    counters before a single pod is known.  Before, the decode ran in the collector's pass and held
    every tick until it was done."""
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=CPUS)
    pods = FakeHost.make_pods(12, seed=16)
    host.add_pods(pods)
    (tmp_path / "pods.json").write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object(SLO)))
    monkeypatch.setattr(agent_mod, "BACKGROUND_BYTES", 0, raising=False)  # this small file counts as big
    quota_while_held(monkeypatch, host, len(pods), lambda qos: Agent(AgentConfig(
        roots=host.roots, pods_file=str(tmp_path / "pods.json"), node_file=str(tmp_path / "node.json"),
        node_slo_file=str(tmp_path / "slo.json"), strategies=["cpuSuppress"], collect_interval=0.2, qos=qos,
        react_mode=REACT_TICK)), "pods.json", "while the pods file was decoded (decode started")


def test_kubernetes_mode_writes_the_be_quota_while_the_pods_list_is_on_its_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes mode starts once the Node is known: the pods' views are built on the reflector's thread
    (held here, as a 100,000-pod list holds them for tens of seconds) and the BE quota is written from the
    node and kube QoS-dir counters meanwhile, ``state/pods-loading`` saying so.  Before, the agent waited
    for the pods list and built every pod's view on its own thread before its first tick."""
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=CPUS)
    pods = FakeHost.make_pods(12, seed=17)
    host.add_pods(pods)
    cluster = FakeCluster()
    cluster.put(node_object(host, "fake-node"))
    for p in pods:
        cluster.put(pod_object(p))
    cluster.put(nodeslo_object(SLO, name="fake-node"))
    with FakeAPIServer(cluster, bookmark_interval=0.2) as api:
        quota_while_held(monkeypatch, host, len(pods), lambda qos: Agent(AgentConfig(
            roots=host.roots, node_name="fake-node", kubeconfig=api.kubeconfig(str(tmp_path / "kubeconfig")),
            metrics_addr="", strategies=["cpuSuppress"], collect_interval=0.2, qos=qos, react_mode=REACT_TICK,
            kube_watch_timeout=(5.0, 5.0))), "fake-node", "while the pods list was on its way (views held")


def quota_while_held(monkeypatch: pytest.MonkeyPatch, host: FakeHost, n_pods: int,
                     make_agent: Callable[[QoSConfig], Agent], source: str, what: str) -> None:
    """Run the agent ``make_agent`` builds (cpuSuppress every 0.2 s) while the pods' views are held:
    a BE quota is written from the counters meanwhile, with no pods and ``state/pods-loading`` naming
    ``source``; released, the pods come into force."""
    decoding, release = threading.Event(), threading.Event()
    real = store_mod.pod_meta

    def held(obj: Any) -> Any:
        decoding.set()
        release.wait(HOLD)
        return real(obj)

    monkeypatch.setattr(store_mod, "pod_meta", held)
    counters = Counters(host)
    qos = QoSConfig()
    qos.cpu_suppress_interval = 0.2
    agent = make_agent(qos)
    runner = threading.Thread(target=agent.run, args=(HOLD,), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + WAIT
        while be_quota(host) == -1:
            assert time.monotonic() < deadline and runner.is_alive(), (
                f"no BE quota in {WAIT:g} s {what}: {decoding.is_set()})")
            counters.step()
            time.sleep(0.05)
        quota = be_quota(host)
        assert decoding.is_set() and not release.is_set()
        assert agent.store.pods == {} and agent.store.pods_loading
        cond = agent.store.conditions.get(LOADING_CONDITION)
        assert cond is not None and source in cond.message, cond
        # 8 CPUs x 65 % - 1 LS core: 4200m (the rates of a loaded machine's counters wander around it)
        assert 0 < quota < CPUS * 100_000, quota
        release.set()
        while len(agent.store.pods) < n_pods or agent.store.conditions.get(LOADING_CONDITION) is not None:
            assert time.monotonic() < deadline + WAIT and runner.is_alive(), "the pods never came into force"
            counters.step()
            time.sleep(0.05)
        assert not agent.store.pods_loading
    finally:
        release.set()
        agent.stop()
        runner.join(30)


def koord(pods: list[FakePod], *, policy: str = "cfsQuota", harness: Harness | None = None) -> Harness:
    h = harness or Harness(version=1, strategies=["cpuSuppress"], n_cpus=CPUS, now=1000.0, koordinator=True)
    h.set_node(node_object(h.host))
    h.set_pods([pod_object(p, cpu_milli=1500) for p in pods])
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                                   "cpuSuppressPolicy": policy}})
    return h


LS = FakePod("ls-1", "default", "ls", KubeQoS.BURSTABLE, [FakeContainer("c", "containerd://" + "b" * 64)])
BE = FakePod("be-1", "default", "be", KubeQoS.BESTEFFORT, [FakeContainer("c", "containerd://" + "a" * 64)])
BE_DIR = "kubepods/besteffort"


def tick(h: Harness, t: float, ls_used: float) -> list[WriteResult]:
    """LS at ``ls_used`` cores, BE 0.5, the system 0.5: the budget is 4700m - LS."""
    h.add_samples("node_cpu_usage", [(t - 1, ls_used + 1.0)])
    h.add_samples("pod_cpu_usage", [(t - 1, ls_used)], pod="ls-1")
    h.add_samples("pod_cpu_usage", [(t - 1, 0.5)], pod="be-1")
    h.add_samples("kubepods_cpu_usage", [(t - 1, ls_used + 0.5)])  # the kube QoS dirs' sums (the collector's)
    h.add_samples("besteffort_cpu_usage", [(t - 1, 0.5)])
    return h.tick("cpuSuppress", t)


def test_the_cpuset_recovery_is_a_batch_after_the_be_quota() -> None:
    """The executor reads every file of a batch before it writes any: the recovery's read-compare of every
    BE cgroup's cpuset in the quota's batch held the quota back (12 s of a 20,000-pod node's first tick).
    It is the run's second batch now; the run's results still hold both (koordlet recovers in the same
    tick)."""
    h = koord([LS, BE])
    batches: list[list[str]] = []
    h.executor.on_batch.append(lambda results, dt: batches.append([r.write.resource for r in results]))
    results = tick(h, 1000.0, ls_used=1.0)
    assert len(batches) == 2, batches
    assert "cpu.cfs_quota_us" in batches[0] and "cpuset.cpus" not in batches[0], batches
    assert set(batches[1]) == {"cpuset.cpus"}, batches
    assert {r.write.resource for r in results} == {"cpu.cfs_quota_us", "cpuset.cpus"}
    assert h.strategy("cpuSuppress").policy_status == {"cfsQuota": "using", "cpuset": "recovered"}


def unknown_pods(h: Harness) -> None:
    """The agent's state while a big pods file is on its way: no pod known yet."""
    h.store.pods = {}
    h.store.pods_generation += 1
    h.store.pods_loading = True


def test_no_cpuset_recovery_and_only_the_quota_while_the_pods_are_on_their_way() -> None:
    """Without the pods their LSE CPUs are unknown: the BE cpuset is not recovered (it could give BE an
    LSE pod's CPUs) and the cpuset policy waits; the cfsQuota policy decides the quota."""
    h = koord([LS, BE])
    unknown_pods(h)
    results = tick(h, 1000.0, ls_used=1.0)
    assert {r.write.resource for r in results} == {"cpu.cfs_quota_us"}, results
    assert int(h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us")) or "") > 0
    c = koord([LS, BE], policy="cpuset")
    unknown_pods(c)
    assert tick(c, 1000.0, ls_used=1.0) == []


def quota_results(results: list[WriteResult]) -> list[tuple[str, str, str]]:
    return [(r.write.cgroup, r.write.value, r.status) for r in results if r.write.resource == "cpu.cfs_quota_us"]


def test_while_the_pods_are_on_their_way_the_be_quota_goes_first() -> None:
    """No BE child is read before the BE quota's write while the pods are on their way (a 100,000-pod file's
    decode turned that read into 50 s); v1 refuses the quota when a child is above it, and the next tick
    reads the children and lowers them first."""
    h = koord([LS, BE])
    unknown_pods(h)
    pod = h.host.pod_dir("be-1")
    ctr = f"{pod}/{'a' * 64}"
    first = tick(h, 1000.0, ls_used=4.2)  # 500m; the BE pod's own 150000 is above it
    assert quota_results(first) == [(BE_DIR, "50000", "failed")], first
    second = tick(h, 1001.0, ls_used=4.2)
    assert sorted(quota_results(second)) == [(BE_DIR, "50000", "written"), (pod, "50000", "written"),
                                             (ctr, "50000", "written")], second
    fine = koord([LS, BE])
    unknown_pods(fine)
    assert quota_results(tick(fine, 1000.0, ls_used=1.0)) == [(BE_DIR, "370000", "written")]


def test_a_child_at_the_be_quota_before_the_pods_are_known_gets_its_own_back() -> None:
    """An agent restarted on children an earlier run lowered to the BE quota, with its pods file still on its
    way: the children's own quota is unknown at the first decision (the batch-cpu rule needs the pods), and
    taken from the rule once the pods are known; the budget then gives it back."""
    h = koord([LS, BE])
    tick(h, 1000.0, ls_used=4.2)  # 500m: the pod and its container lowered to 50000
    pod = h.host.pod_dir("be-1")
    ctr = f"{pod}/{'a' * 64}"
    left = {d: int(h.read_file(h.cgroup_file("cpu", d, "cpu.cfs_quota_us")) or "") for d in (BE_DIR, pod, ctr)}
    assert left == {BE_DIR: 50_000, pod: 50_000, ctr: 50_000}
    h.close()

    again = koord([LS, BE], harness=Harness(version=1, strategies=["cpuSuppress"], n_cpus=CPUS, now=1010.0,
                                            koordinator=True))
    for d, v in left.items():
        again.write_file(again.cgroup_file("cpu", d, "cpu.cfs_quota_us"), f"{v}\n")
    pods = again.store.pods
    unknown_pods(again)
    # decided without the pods: 400m, refused (the children at 50000 above it), then the children are read
    # and lowered first, their own quota unknown (the batch-cpu rule needs the pods)
    tick(again, 1011.0, ls_used=4.3)
    tick(again, 1011.5, ls_used=4.3)
    assert {d: int(again.read_file(again.cgroup_file("cpu", d, "cpu.cfs_quota_us")) or "")
            for d in (BE_DIR, pod, ctr)} == {BE_DIR: 40_000, pod: 40_000, ctr: 40_000}
    again.store.pods = pods
    again.store.pods_generation += 1
    again.store.pods_loading = False
    for k in range(2, 7):
        tick(again, 1010.0 + k, ls_used=1.0)
    got = {d: int(again.read_file(again.cgroup_file("cpu", d, "cpu.cfs_quota_us")) or "") for d in (pod, ctr)}
    assert got == {pod: 150_000, ctr: 150_000}, got


def quota_reads(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every read of BE children's quotas (the BE dir's own left out), one list per read."""
    seen: list[list[str]] = []
    real = h.executor.read_many

    def spy(resource: str, cgroups: Any) -> Any:
        if resource == "cpu.cfs_quota_us":
            seen.append([d for d in cgroups if d != BE_DIR])
        return real(resource, cgroups)

    monkeypatch.setattr(h.executor, "read_many", spy)
    return seen


def many_be(n: int) -> list[FakePod]:
    return [FakePod(f"bx-{i}", "default", f"bx{i}", KubeQoS.BESTEFFORT,
                    [FakeContainer("c", f"containerd://{i:064x}")]) for i in range(1, n + 1)]


def test_under_a_limited_be_dir_the_children_are_read_a_share_a_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent (re)started on a BE dir already limited (an earlier run's quota, or the one it wrote while the
    pods were on their way): v1 keeps every child at or below it, so the children's own quotas are learnt a
    share a tick, not all in the first tick after the pods come (at 100,000 pods that read held the agent for
    tens of seconds).  Before, that tick read every one."""
    monkeypatch.setattr(children_mod, "SCAN_PER_TICK", 10, raising=False)
    h = koord([LS, *many_be(20)])
    h.write_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us"), "370000\n")  # LS 1 core: this budget
    walk = h.layout.dirs_up_to_depth("cpu", BE_DIR, 2)[1:]
    assert len(walk) >= 40
    seen = quota_reads(h, monkeypatch)
    per_tick = []
    for k in range(len(walk) // 10 + 2):
        n = len(seen)
        tick(h, 1000.0 + k, ls_used=1.0)
        per_tick.append(sum(len(r) for r in seen[n:]))
    assert max(per_tick) <= 10 + 2, per_tick  # a share, and the rest of a pod's dirs with it
    assert per_tick[-1] == 0, per_tick  # each read once: a steady budget reads none
    suppress = h.strategy("cpuSuppress")
    assert set(suppress.child_own) == set(walk)  # type: ignore[attr-defined]
    assert int(h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us")) or "") == 370000


def test_a_fall_below_a_child_not_read_yet_is_refused_then_every_child_is_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fall while the children are still learnt: the share read and the children known above it are
    lowered; v1 refuses the BE quota above a child not read yet (EINVAL), and the next tick reads every child
    and lowers them first, as after a child's owner's unseen re-write."""
    monkeypatch.setattr(children_mod, "SCAN_PER_TICK", 10, raising=False)
    h = koord([LS, *many_be(20)])
    h.write_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us"), "370000\n")
    walk = h.layout.dirs_up_to_depth("cpu", BE_DIR, 2)[1:]
    seen = quota_reads(h, monkeypatch)
    tick(h, 1000.0, ls_used=1.0)
    first = quota_results(tick(h, 1001.0, ls_used=4.2))  # 500m: below every BE pod's own 150000
    assert (BE_DIR, "50000", "failed") in first, first
    n = len(seen)
    tick(h, 1002.0, ls_used=4.2)
    assert set(walk) <= {d for r in seen[n:] for d in r}, "every child read after the refusal"
    quotas = {d: int(h.read_file(h.cgroup_file("cpu", d, "cpu.cfs_quota_us")) or "") for d in walk}
    assert int(h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us")) or "") == 50000
    assert all(q <= 50000 for q in quotas.values()), quotas


def test_a_big_pods_file_is_decoded_beside_the_polls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The poll returns at once; the pods come into force at a later poll; a big file that is not a pod list
    keeps the last state and says so, like a small one."""
    pods = FakeHost.make_pods(6, seed=2)
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    release = threading.Event()
    real = store_mod.pod_meta

    def held(obj: Any) -> Any:
        release.wait(HOLD)
        return real(obj)

    monkeypatch.setattr(store_mod, "pod_meta", held)
    store = StateStore()
    src = FileSource(store, pods_file=str(path), background_bytes=1)
    try:
        assert src.poll() is False
        assert store.pods_loading and store.conditions.get(LOADING_CONDITION) is not None
        assert src.poll() is False and store.pods == {}
    finally:
        release.set()
    deadline = time.monotonic() + WAIT
    while not src.poll():
        assert time.monotonic() < deadline, "the decode never ended"
        time.sleep(0.01)
    assert len(store.pods) == len(pods) and not store.pods_loading
    src.poll()
    assert store.conditions.get(LOADING_CONDITION) is None and store.conditions.get("state/pods-file") is None

    path.write_text('{"kind": "PodList"}' + " " * 64)
    while store.conditions.get("state/pods-file") is None:
        src.poll()
        assert time.monotonic() < deadline, "the bad file was never judged"
        time.sleep(0.01)
    assert len(store.pods) == len(pods), "the last good pods stay"


def test_startup_checks_a_big_pods_file_without_decoding_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_mod, "BACKGROUND_BYTES", 16)
    (tmp_path / "node.json").write_text(json.dumps(node_object(FakeHost(str(tmp_path / "host"), n_cpus=2))))
    bad = tmp_path / "bad.json"
    bad.write_text("- a: 1\n" * 8)
    with pytest.raises(StartupError, match="must be a JSON object"):
        check_startup(AgentConfig(pods_file=str(bad), node_file=str(tmp_path / "node.json")))
    good = tmp_path / "pods.json"
    good.write_text(json.dumps(pod_list([])) + " " * 32)
    monkeypatch.setattr(agent_mod, "read_document_file", lambda *a, **k: pytest.fail("decoded at start"))
    check_startup(AgentConfig(pods_file=str(good)))


class OwnedStore(StateStore):
    """A store that notes the thread of every change to its attributes and to its conditions."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: set[str] = set()
        for name in ("set", "clear"):
            setattr(self.conditions, name, self._noted(getattr(self.conditions, name)))

    def _noted(self, real: Any) -> Any:
        def noted(*a: Any, **k: Any) -> Any:
            self.writers.add(threading.current_thread().name)
            return real(*a, **k)
        return noted

    def __setattr__(self, name: str, value: Any) -> None:
        if "writers" in self.__dict__:
            self.writers.add(threading.current_thread().name)
        super().__setattr__(name, value)


def test_the_decode_thread_never_writes_the_store(tmp_path: Path) -> None:
    """The pods' views are built on the decode's thread, and put in force by the next poll on the polling
    (agent's) thread, the pod map, its generation, the health and the conditions together: a tick builds its
    context by reading the pod map and then its generation, and a swap on another thread between the two
    gave the old pods under the new generation, which cpuSuppress's class split (and every cache keyed on
    the generation) kept until the next pod change, i.e. for good on a static pods file.  Before, the
    decode's thread called ``set_pods`` itself."""
    pods = FakeHost.make_pods(6, seed=3)
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    store = OwnedStore()
    store.writers.clear()
    src = FileSource(store, pods_file=str(path), background_bytes=1)
    assert src.poll() is False and store.pods_loading
    worker = src.files[0]._worker
    assert worker is not None
    worker.join(WAIT)
    assert not worker.is_alive(), "the decode never ended"
    assert store.pods == {} and store.pods_generation == 0, "the decode's thread put the pods in force"
    assert store.pods_loading and store.conditions.get(LOADING_CONDITION) is not None
    me = threading.current_thread().name
    assert src.poll() is True
    assert len(store.pods) == len(pods) and store.pods_generation == 1
    assert not store.pods_loading and store.conditions.get(LOADING_CONDITION) is None
    assert store.writers == {me}, f"the store was written by {sorted(store.writers)}"


def test_a_job_that_holds_the_others_is_named_in_healthz_and_the_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every job runs on the agent's one thread: a run of LONG_RUN_SECONDS or more (the first cpuSuppress
    tick over 100,000 pods took tens of seconds) held the collector and every strategy that long.
    ``agent/long-run`` names the job, its run and its interval in /healthz (degraded) until its next shorter
    run; the log says it once when it starts and when it ends.  Before, nothing said why the collector's
    check went stale."""
    from qosmanager.framework.scheduler import COND_LONG_RUN, LONG_RUN_SECONDS

    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=CPUS)
    mono = [100.0]
    agent = Agent(AgentConfig(roots=host.roots, strategies=["cpuSuppress"], metrics_addr="127.0.0.1:0",
                              react_mode=REACT_TICK), monotonic=lambda: mono[0], clock=lambda: 1e9 + mono[0])
    try:
        job = next(j for j in agent.scheduler.jobs if j.name == "collect")
        collect, slow = job.fn, [LONG_RUN_SECONDS + 1.0]

        def timed(now: float) -> None:
            collect(now)
            mono[0] += slow[0]  # the pass's time on the agent's clock

        job.fn = timed
        assert agent.exporter is not None
        caplog.set_level("INFO")
        agent.scheduler.run_job(job)
        agent.scheduler.run_job(job)
        cond = agent.store.conditions.get(COND_LONG_RUN)
        assert cond is not None and "job collect ran 6.0 s (its interval 1 s)" in cond.message, cond
        _, body = agent.exporter.health.check()
        assert body["status"] != "ok" and COND_LONG_RUN in body["degraded"], body
        said = [r for r in caplog.records if "ran 6.0 s" in r.getMessage()]
        assert len(said) == 1 and said[0].levelname == "WARNING", said
        slow[0] = 0.1
        agent.scheduler.run_job(job)
        assert agent.store.conditions.get(COND_LONG_RUN) is None
        assert any("runs within" in r.getMessage() for r in caplog.records)
    finally:
        agent.close()
