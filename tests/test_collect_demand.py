"""Demand-driven collection decides what the read-everything collector decides.

The same closed-loop node (``simulate``'s load model: the agent's writes feed back into the load) runs
once with ``--collect-mode all`` and once with ``demand``; the BE quota trace, the evictions and the
burst writes must agree within one tick's noise.  Also: what the demand mode reads and does not read.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import kernelcg
from qosmanager.agent import Agent, AgentConfig
from qosmanager.api.pod import pod_meta
from qosmanager.framework.demand import CONTAINER, NODE, POD, CollectPlan, Demand, Need, Planner
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.roots import HostRoots
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.load import LoadShape
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from qosmanager.sim.simulate import SimConfig, SimResult, run_simulation
from qosmanager.states.store import StateStore
from qosmanager.strategies import _helpers as hp

CPUS = 16
PERIOD = 100_000
S_NS = 10**9
ONE_TICK_QUOTA = CPUS * PERIOD // 100  # cpuSuppress's bypass: 1 % of the node, its "no change" band


def _run(mode: str, **kw: Any) -> SimResult:
    base: dict[str, Any] = {"containers": 200, "duration": 40.0, "cpus": CPUS, "memory_gib": 32, "seed": 5,
                            "collect_mode": mode, "shape": LoadShape(be_growth=1.0)}
    base.update(kw)
    return run_simulation(SimConfig(**base))


def _quota(value: str) -> int:
    first = value.split()[0]
    return -1 if first in ("max", "-1") else int(first)


@pytest.mark.parametrize("version,policy", [(1, "cfsQuota"), (2, "cfsQuota"), (1, "cpuset")])
def test_demand_decides_what_read_everything_decides(version: int, policy: str) -> None:
    runs = {m: _run(m, cgroup_version=version, suppress_policy=policy) for m in ("all", "demand")}
    full, demand = runs["all"], runs["demand"]
    assert not full.strategy_errors and not demand.strategy_errors
    # the BE limit trace: the same writes at the same ticks, values within the bypass band
    a = [(w.t, w.file, w.value) for w in full.be_writes]
    b = [(w.t, w.file, w.value) for w in demand.be_writes]
    assert len(a) >= 5
    assert abs(len(a) - len(b)) <= max(1, len(a) // 10), (a, b)
    by_time = {(t, f): v for t, f, v in b}
    matched = 0
    for t, f, v in a:
        other = by_time.get((t, f))
        if other is None:
            continue
        matched += 1
        if "cpuset" in f:
            assert abs(len(v.split(",")) - len(other.split(","))) <= 1 or v == other
        else:
            assert abs(_quota(v) - _quota(other)) <= ONE_TICK_QUOTA, (t, v, other)
    assert matched >= len(a) * 0.8
    # evictions: the same pods, each within one tick
    ea = {e.uid: e.t for e in full.evictions}
    eb = {e.uid: e.t for e in demand.evictions}
    assert ea, "the run must exercise memory eviction"
    assert set(ea) == set(eb)
    assert all(abs(ea[u] - eb[u]) <= 1.0 for u in ea)


# ---------------------------------------------------------------------------------------------
# what is read

NODESLO = {
    "resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cfsQuota",
        "memoryEvictThresholdPercent": 70, "cpuEvictBESatisfactionLowerPercent": 60,
        "cpuEvictBESatisfactionUpperPercent": 80, "cpuEvictThresholdPercent": 90,
        "evictEnabledPriorityThreshold": 5999,
    },
}


@pytest.fixture
def agent(tmp_path: Any) -> Any:
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=8)
    pods = FakeHost.make_pods(40, containers_per_pod=2, seed=3)
    host.add_pods(pods)
    for name, obj in (("pods.json", pod_list(pod_object(p) for p in pods)),
                      ("node.json", node_object(host, batch_cpu_milli=4000, batch_memory=8 << 30)),
                      ("nodeslo.json", nodeslo_object(NODESLO))):
        with open(tmp_path / name, "w") as f:
            json.dump(obj, f)
    now = [10_000.0]
    a = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"),
                          node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "nodeslo.json"),
                          metrics_addr="", feature_gates={"BECPUEvict": True, "BEMemoryEvict": True}),
              clock=lambda: now[0])
    yield a, host, pods, now
    a.close()


def _tick(a: Agent, now: list[float], clock: Any) -> None:
    now[0] = float(next(clock))
    a.collect(now[0])
    for s in a.manager.enabled():
        a.manager.run_strategy(s, now[0])


def test_quiet_node_reads_a_tenth_of_the_pods_and_no_container(agent: Any) -> None:
    a, _host, pods, now = agent
    clock = itertools.count(10_001)
    for _ in range(12):
        _tick(a, now, clock)
    st = a.collector.stats
    assert a.collector.plan is not None and not a.collector.plan.near
    n_pods = len(pods)
    # cpuEvict's slow history: each pod every 10th tick (plus the pods whose class differs from their
    # kube QoS dir, none here); containers: only the BE ones' cpusets, every 30th tick
    assert st.pod_reads <= n_pods // 10 + 1
    assert st.container_reads <= st.containers // 30 + 1
    # the node series come from the kube QoS dirs: no per-pod sum needed
    lo, hi = now[0] - 2, now[0]
    for name in ("node_cpu_usage", "kubepods_cpu_usage", "besteffort_cpu_usage", "be_cpu_usage",
                 "be_cpu_real_limit"):
        assert a.cache.query(name, lo, hi, "last") is not None, name


def test_near_trigger_reads_every_pod_every_tick_with_hysteresis(agent: Any) -> None:
    a, host, pods, now = agent
    clock = itertools.count(10_001)
    for _ in range(3):
        _tick(a, now, clock)
    node = a.store.node
    assert node is not None
    cap_kb = node.memory_capacity // 1024

    def use(pct: float) -> None:  # node memory usage at pct % of capacity
        used = int(cap_kb * pct / 100)
        host.set_meminfo(cap_kb, cap_kb - used, cap_kb - used)

    use(40)
    _tick(a, now, clock)
    _tick(a, now, clock)
    assert "memoryEvict" not in a.collector.plan.near
    use(65)  # 65 / 70 = 0.93: within the 10 % margin
    _tick(a, now, clock)
    _tick(a, now, clock)
    assert "memoryEvict" in a.collector.plan.near
    assert a.collector.stats.pod_reads == len(pods)
    use(59)  # 0.84: still inside the exit margin (80 %) -> stays on
    _tick(a, now, clock)
    _tick(a, now, clock)
    assert "memoryEvict" in a.collector.plan.near
    use(50)  # 0.71: off again
    _tick(a, now, clock)
    _tick(a, now, clock)
    assert "memoryEvict" not in a.collector.plan.near


def test_memory_victims_read_on_trigger(agent: Any) -> None:
    """A jump straight over the threshold: the eviction reads the victims' memory on the spot."""
    a, host, pods, now = agent
    clock = itertools.count(10_001)
    for _ in range(3):
        _tick(a, now, clock)
    node = a.store.node
    assert node is not None
    cap_kb = node.memory_capacity // 1024
    used = int(cap_kb * 0.95)
    host.set_meminfo(cap_kb, cap_kb - used, cap_kb - used)
    be = [p for p in pods if p.qos.value == "BestEffort"]
    for i, p in enumerate(be):
        for c in p.containers:
            host.set_memory(host.container_dir(p.uid, c.name), 0, (i + 1) << 20, 0, 0, 0)
        host.set_memory(host.pod_dir(p.uid), 0, (i + 1) << 20 * len(p.containers), 0, 0, 0)
    now[0] = float(next(clock))
    a.collect(now[0])  # the plan was made before usage jumped: no pod memory read by the tick
    assert not any(a.cache.query("pod_memory_usage", now[0] - 1, now[0], "last", pod=p.uid) for p in be)
    a.manager.run_strategy(a.manager.strategies["memoryEvict"], now[0])
    evicted = [d for d in a.coordinator.history if d.action in ("evicted", "decided", "would-evict")]
    assert evicted, [d.action for d in a.coordinator.history]
    assert evicted[0].pod.uid == be[-1].uid  # the biggest BE pod first: its memory was read


def test_planner_union_cadence_and_bad_declarations() -> None:
    p = Planner(version=2)
    ctx: Any = object()
    calls = {"n": 0}

    def near(_ctx: Any) -> float:
        calls["n"] += 1
        raise RuntimeError("broken estimate")

    plan = p.plan(ctx, [("a", [Need("pod_cpu_usage", POD, freshness=10.0)]),
                        ("b", [Need("container_cpu_throttled", CONTAINER, keys=frozenset({"c1"})),
                               Need("node_memory_usage", NODE), Need("pod_memory_usage", POD, near=near)])])
    kinds = {(d.kind, d.keys, d.every): d.files for d in plan.demands}
    assert kinds[(POD, None, 10)] == 2  # v2 cpu.stat
    assert kinds[(CONTAINER, frozenset({"c1"}), 1)] == 2
    assert kinds[(POD, None, 1)] == 4  # a failing estimate reads the detail rather than miss it
    assert plan.node_memory and not plan.node_cpu and calls["n"] == 1
    with pytest.raises(ValueError):
        Need("pod_cpu_usage", "rack")
    with pytest.raises(ValueError):
        Need("no_such_metric", NODE)


def test_collect_mode_all_reads_everything(tmp_path: Any) -> None:
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=8)
    pods = FakeHost.make_pods(20, containers_per_pod=2, seed=4)
    host.add_pods(pods)
    with open(tmp_path / "pods.json", "w") as f:
        json.dump(pod_list(pod_object(p) for p in pods), f)
    a = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"), collect_mode="all",
                          metrics_addr=""), clock=lambda: 100.0)
    try:
        assert a.planner is None
        a.collect(100.0)
        assert a.collector.stats.pod_reads == len(pods) and a.collector.stats.container_reads == 2 * len(pods)
    finally:
        a.close()


# ---------------------------------------------------------------------------------------------
# the kernel's sums


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


@contextlib.contextmanager
def _still(procs: list[Any]) -> Iterator[None]:
    """The busy processes stopped (SIGSTOP, waited for): their cgroups' CPU counters stand still while
    the collector reads them, however long a loaded machine keeps the reader from running between its
    reads.  Continued afterwards."""
    for p in procs:
        os.kill(p.pid, signal.SIGSTOP)
    try:
        _wait(lambda: all(_stopped(p.pid) for p in procs), "the busy processes stop")
        yield
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGCONT)


def _wait(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.01)


@pytest.mark.kernel
@pytest.mark.parametrize("version", [1, 2])
def test_real_kernel_qos_dir_sums_agree_with_the_pods(version: int) -> None:
    """On real cgroups the kubepods and BestEffort dirs' usage (what cpuSuppress and cpuBurst use in
    demand mode) equals the sum of their pods' usage (what the read-everything mode adds up).

    The busy processes are stopped while the collector reads: the kernel's hierarchy sums are then
    exact at the moment of the read, and the comparison judges the collector's reading and rates,
    not how long the scheduler kept it from reading the next file on a loaded machine."""
    reason = kernelcg.unavailable(version)
    if reason:
        pytest.skip(f"real cgroups v{version} unavailable: {reason}")
    with kernelcg.kernel_tree(version) as tree:
        layout = CgroupLayout(HostRoots(cgroup=tree.root), version, "cgroupfs")
        pods = []
        busy = []
        classes = (KubeQoS.BURSTABLE, KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT, KubeQoS.BESTEFFORT)
        for i, qos in enumerate(classes):
            pod = FakePod(f"2222aaaa-0000-4000-8000-00000000000{i}", "default", f"p{i}", qos,
                          [FakeContainer("c0", "containerd://" + f"{i}a" * 32)])
            pod_rel = layout.pod_dir(qos, pod.uid)
            ctr_rel = layout.container_dir(pod_rel, pod.containers[0].container_id)
            tree.mkdir(ctr_rel)
            if i % 2 == 0:  # one busy pod in each QoS dir, one idle (killed with the tree)
                busy.append(tree.spawn_busy(ctr_rel, seconds=600))
            pods.append(pod)
        tree.mkdir(layout.qos_dir(KubeQoS.GUARANTEED))

        kubepods = layout.kubepods_dir()

        def kube_cpu_ns() -> int:  # the kernel's counter of kubepods, read here directly
            if version == 1:
                with open(tree.path("cpuacct", kubepods) + "/cpuacct.usage") as f:
                    return int(f.read())
            with open(tree.path("", kubepods) + "/cpu.stat") as f:
                return 1000 * int(f.read().split("usage_usec", 1)[1].split()[0])

        store = StateStore()
        store.set_pods([pod_object(p) for p in pods])
        cache = MetricCache()
        # one timestamp for each read pass (an injected clock stamps every read of a pass alike): the
        # counters stand still during the pass, so each cgroup's rate is over the same seconds.  The
        # default stamps each read as it is made, right for counters that move, and then a reader kept
        # waiting between two files gives the two rates intervals a few milliseconds apart
        col = Collector(layout, cache, store, mode="demand", mono=lambda: time.monotonic_ns())
        cpu = 1 if version == 1 else 2
        col.plan = CollectPlan(node_cpu=True, qos=True, demands=(Demand(POD, None, cpu),))
        with _still(busy):
            col.collect(time.time())
            seen = kube_cpu_ns()
        assert col.stats.pending == 0, "the real cgroups must be found"
        for _ in range(4):
            # the busy pods run a tenth of a CPU second, however long a loaded machine takes to give it
            _wait(lambda last=seen: kube_cpu_ns() - last >= 100_000_000, "the busy pods run")
            with _still(busy):
                now = time.time()
                col.collect(now)
                seen = kube_cpu_ns()
            used = {p.uid: cache.query("pod_cpu_usage", now - 0.1, now, "last", pod=p.uid) for p in pods}
            assert all(v is not None for v in used.values()), used
            kube = cache.query("kubepods_cpu_usage", now - 0.1, now, "last")
            be = cache.query("besteffort_cpu_usage", now - 0.1, now, "last")
            assert kube is not None and be is not None
            total = sum(v for v in used.values() if v is not None)
            be_sum = sum(v for p in pods if p.qos is KubeQoS.BESTEFFORT and (v := used[p.uid]) is not None)
            assert be_sum > 0 and total > be_sum, used  # both busy pods ran in the window
            # counters that stood still during the read pass: equal but for the rates' rounding
            assert abs(kube - total) <= 0.001 + 0.001 * total, (kube, total)
            assert abs(be - be_sum) <= 0.001 + 0.001 * be_sum, (be, be_sum)


# ---------------------------------------------------------------------------------------------
# the class sums, by hand


def _meta(uid: str, qos_label: str | None, kube_qos: str) -> Any:
    labels = {"koordinator.sh/qosClass": qos_label} if qos_label else {}
    return pod_meta({"metadata": {"uid": uid, "name": uid, "labels": labels},
                     "spec": {"containers": [{"name": "c"}]}, "status": {"qosClass": kube_qos}})


def test_class_sums_from_the_qos_dirs_equal_the_per_pod_sums() -> None:
    """cpuSuppress's non-BE / system terms and cpuBurst's share-pool exclusion, from kubepods and
    besteffort plus the pods whose class differs from their dir, equal the per-pod sums; leaving the
    correction out would be wrong by exactly the odd pods' usage."""
    pods = {p.uid: p for p in (_meta("ls", "LS", "Burstable"), _meta("g", None, "Guaranteed"),
                               _meta("be", "BE", "BestEffort"), _meta("be-in-burstable", "BE", "Burstable"),
                               _meta("ls-in-besteffort", "LS", "BestEffort"),
                               _meta("lsr", "LSR", "Guaranteed"))}
    # dyadic usages so every float sum is exact
    used = {"ls": 2.25, "g": 0.5, "be": 1.5, "be-in-burstable": 0.75, "ls-in-besteffort": 0.25, "lsr": 1.0}
    kubepods = sum(used.values())
    be_dir = used["be"] + used["ls-in-besteffort"]
    node_used, reserved = 7.0, 0.0
    per_pod = hp.calculate_filter_pods_used(node_used, reserved, pods, used, (), {}, hp.non_be_pod_filter,
                                            hp.non_be_host_app_filter)
    # cpuSuppress: BE by NonBEPodFilter (labelled BE, or kube BestEffort)
    split = hp.class_split(pods, lambda p: not hp.non_be_pod_filter(p))
    assert split.corrections == {"be-in-burstable"}
    only = {u: used[u] for u in split.corrections}
    by_dirs = hp.filter_used_from_qos_dirs(node_used, reserved, kubepods, hp.class_usage(be_dir, split, only),
                                           (), {}, hp.non_be_host_app_filter)
    assert (by_dirs.pods, by_dirs.host_apps, by_dirs.system) == (per_pod.pods, per_pod.host_apps,
                                                                 per_pod.system)
    assert hp.class_usage(be_dir, split, {}) == hp.class_usage(be_dir, split, only) - 0.75
    # cpuBurst's share pool: LSE/LSR/BE by label, against the BestEffort dir, both ways
    share = hp.class_split(pods, lambda p: p.qos_raw in ("LSE", "LSR", "BE"))
    assert share.plus == {"be-in-burstable", "lsr"} and share.minus == {"ls-in-besteffort"}
    want = used["be"] + used["be-in-burstable"] + used["lsr"]
    assert hp.class_usage(be_dir, share, {u: used[u] for u in share.corrections}) == want


@pytest.mark.parametrize("exported", [False, True])
def test_nothing_is_read_that_nobody_asks_for(tmp_path: Any, exported: bool) -> None:
    """No metric-reading strategy: no pod, container, node or QoS-dir file is read -- except the BE
    QoS dir's usage when /metrics exports it."""
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=4)
    pods = FakeHost.make_pods(10, seed=6)
    host.add_pods(pods)
    with open(tmp_path / "pods.json", "w") as f:
        json.dump(pod_list(pod_object(p) for p in pods), f)
    a = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"), strategies=["cgroupReconcile"],
                          metrics_addr="127.0.0.1:0" if exported else ""), clock=lambda: 100.0)
    try:
        for t in (100.0, 101.0, 102.0):
            a.collect(t)
        plan = a.collector.plan
        assert plan is not None and plan.demands == ()
        assert a.collector.stats.pod_reads == 0 and a.collector.stats.container_reads == 0
        assert not plan.node_cpu and not plan.node_memory
        assert plan.qos is exported
        assert (a.cache.query("be_cpu_usage", 90, 110, "last") is not None) is exported
        assert a.cache.query("node_cpu_usage", 90, 110, "last") is None
    finally:
        a.close()


def test_collect_mode_flags() -> None:
    from qosmanager.agent import config_from_args
    from qosmanager.cli import build_parser
    from qosmanager.sim.simulate import config_from_args as sim_config

    parser = build_parser()
    assert config_from_args(parser.parse_args(["run"])).collect_mode == "demand"
    assert config_from_args(parser.parse_args(["run", "--collect-mode", "all"])).collect_mode == "all"
    assert sim_config(parser.parse_args(["simulate"])).collect_mode == "demand"
    assert sim_config(parser.parse_args(["simulate", "--collect-mode", "all"])).collect_mode == "all"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--collect-mode", "some"])
    with pytest.raises(ValueError):
        Collector.__init__(object.__new__(Collector), None, None, None, mode="some")  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [1, 2])
def test_both_modes_count_a_be_cgroup_missing_from_the_pods_list_as_be(tmp_path: Any, version: int) -> None:
    """A BE pod's cgroup the pods list does not hold (a pod during churn) is under the BE limit: its usage
    is BE usage.  Read-everything counted it as "system" (137,700 us against demand's 297,200): both
    modes now decide from the kube QoS dirs' sums, and agree."""
    from simclock import Clock

    def fake(i: int, qos: KubeQoS) -> FakePod:
        return FakePod(uid=f"00000000-0000-4000-8000-{i:012d}", namespace="default", name=f"p{i}", qos=qos,
                       containers=[FakeContainer("c0", f"containerd://{i:064x}")])

    ls, be, churn = fake(1, KubeQoS.BURSTABLE), fake(2, KubeQoS.BESTEFFORT), fake(3, KubeQoS.BESTEFFORT)
    quotas = {}
    for mode in ("all", "demand"):
        host = FakeHost(str(tmp_path / mode), version=version, n_cpus=8)
        host.add_pods([ls, be, churn])
        for name, obj in (("pods.json", pod_list(pod_object(p) for p in (ls, be))),  # churn: not listed
                          ("node.json", node_object(host)),
                          ("nodeslo.json", nodeslo_object({"resourceUsedThresholdWithBE": {
                              "enable": True, "cpuSuppressThresholdPercent": 65,
                              "cpuSuppressPolicy": "cfsQuota"}}))):
            (tmp_path / f"{mode}-{name}").write_text(json.dumps(obj))
        clock = Clock()
        a = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / f"{mode}-pods.json"),
                              node_file=str(tmp_path / f"{mode}-node.json"),
                              node_slo_file=str(tmp_path / f"{mode}-nodeslo.json"), metrics_addr="",
                              collect_mode=mode, strategies=["cpuSuppress"]),
                  clock=clock, monotonic=clock.mono, monotonic_ns=clock.mono_ns, seed=0)
        try:
            jobs = {j.name: j for j in a.scheduler.jobs}
            tck = 100
            for k in range(4):  # each second: 4 of the 8 CPUs busy, each pod 1 core
                host.set_proc_stat([k * tck // 2] * 8, [k * tck // 2] * 8)
                for p in (ls, be, churn):
                    host.set_cpu_usage(host.pod_dir(p.uid), k * S_NS)
                host.set_cpu_usage(host.layout.kubepods_dir(), 3 * k * S_NS)
                host.set_cpu_usage(host.layout.qos_dir(KubeQoS.BURSTABLE), k * S_NS)
                host.set_cpu_usage(host.layout.qos_dir(KubeQoS.BESTEFFORT), 2 * k * S_NS)
                for name in ("collect", "cpuSuppress"):
                    a.scheduler.run_job(jobs[name])
                clock.t += 1.0
            be_dir = host.layout.qos_dir(KubeQoS.BESTEFFORT)
            if version == 1:
                quotas[mode] = host.read(f"cgroup/cpu/{be_dir}/cpu.cfs_quota_us").strip()
            else:
                quotas[mode] = host.read(f"cgroup/{be_dir}/cpu.max").split()[0]
        finally:
            a.close()
    # 8 CPUs x 65 % = 5.2 cores - LS 1 - system (4 used - 3 under kubepods) 1 = 3.2 cores
    assert quotas == {"all": "320000", "demand": "320000"}
