"""The fast path (``qosmanager.framework.fastpath``): BE's CPU quota lowered at the first samples that show
a rise in LS demand, with cpuSuppress's formula; never raised; the tick kept below its budget.

The node's counters are files of a fake host, advanced here by hand between samples; the fast path's
clock is the test's."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

from qosmanager.framework.fastpath import INTERVAL, FastPath
from qosmanager.sim.harness import Harness
from test_strategy_cpu_suppress import BE_POD, LS, be_dirs, make, read_cpuset, read_quota, slo, with_pods

NOW = 1000.0
CPUS = 8
HZ = 100


class Counters:
    """The node's busy time and the QoS dirs' usage, advanced at given rates (cores)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.t = 0.0
        self.node = self.kubepods = self.be = 0.0  # CPU seconds
        self.write()

    def advance(self, seconds: float, ls: float, be: float, system: float = 0.0) -> None:
        self.t += seconds
        self.kubepods += (ls + be) * seconds
        self.be += be * seconds
        self.node += (ls + be + system) * seconds
        self.write()

    def write(self) -> None:
        h, lay = self.h, self.h.layout
        busy = int(self.node * HZ)
        idle = int(self.t * CPUS * HZ) - busy
        h.write_file("proc/stat", f"cpu  {busy} 0 0 {max(idle, 0)} 0 0 0 0 0 0\n")
        for rel, used in ((lay.kubepods_dir(), self.kubepods), (lay.qos_dir("BestEffort"), self.be)):
            if lay.version == 1:
                h.write_file(h.cgroup_file("cpuacct", rel, "cpuacct.usage"), f"{int(used * 1e9)}\n")
            else:
                h.write_file(h.cgroup_file("cpu", rel, "cpu.stat"),
                             f"usage_usec {int(used * 1e6)}\nuser_usec 0\nsystem_usec 0\n")


def setup(version: int = 1, policy: str = "cfsQuota", **kw: Any) -> tuple[Harness, Counters, FastPath, list[float]]:
    """A cfsQuota decision by the tick (LS 1 core, BE 1 core, 65 % of 8 CPUs: BE quota 420000), then a
    fast path on the same strategy, its clock the counters' time."""
    h = make(version, n_cpus=CPUS, **kw)
    with_pods(h)
    slo(h, policy=policy)
    t = NOW - 1
    h.add_samples("node_cpu_usage", [(t, 2.0)])
    h.add_samples("kubepods_cpu_usage", [(t, 2.0)])
    h.add_samples("besteffort_cpu_usage", [(t, 1.0)])
    for uid, v in ((LS.uid, 1.0), (BE_POD.uid, 1.0)):
        h.add_samples("pod_cpu_usage", [(t, v)], pod=uid)
    h.tick("cpuSuppress", NOW)
    counters = Counters(h)
    observed: list[float] = []
    fp = FastPath(h.layout, h.store, h.executor, h.strategy("cpuSuppress"),  # type: ignore[arg-type]
                  monotonic=lambda: counters.t, observe=observed.append)
    return h, counters, fp, observed


def steps(fp: FastPath, c: Counters, n: int, ls: float, be: float = 1.0, system: float = 0.0) -> list[Any]:
    out = []
    for _ in range(n):
        c.advance(INTERVAL, ls, be, system)
        out.append(fp.step())
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_a_rise_in_ls_demand_lowers_the_be_quota_within_two_samples(version: int) -> None:
    h, c, fp, observed = setup(version)
    assert read_quota(h) == 420000  # 5200m - LS 1000m
    fp.step()
    assert steps(fp, c, 4, ls=1.0) == [None] * 4, "a steady load writes nothing"
    assert read_quota(h) == 420000
    # LS goes from 1 to 4 cores: within two samples (100 ms) the quota is 5200 - 4000 = 1200m
    writes = steps(fp, c, 2, ls=4.0)
    assert any(writes)
    assert read_quota(h) == 120000
    assert h.strategy("cpuSuppress").held_quota == 120000  # type: ignore[attr-defined]
    rec = [r for r in h.recorded.writes if r["file"].endswith(("cpu.cfs_quota_us", "cpu.max"))][-1]
    assert rec["strategy"] == "cpuSuppress"
    assert observed and all(0 < x <= 2 * INTERVAL + 1e-9 for x in observed)
    # the load stays: nothing more to write
    assert steps(fp, c, 4, ls=4.0) == [None] * 4


def test_it_never_raises_the_quota_and_ignores_noise_below_the_hysteresis() -> None:
    h, c, fp, _ = setup()
    fp.step()
    assert steps(fp, c, 4, ls=0.0) == [None] * 4, "LS fell: raising is the tick's, in bounded steps"
    assert steps(fp, c, 4, ls=1.15) == [None] * 4, "0.15 cores more is within the hysteresis (0.2 cores)"
    assert read_quota(h) == 420000


def test_the_system_term_counts_from_proc_stat() -> None:
    h, c, fp, _ = setup()
    fp.step()
    steps(fp, c, 3, ls=1.0, system=2.0)  # something outside kubepods takes two cores
    assert read_quota(h) == 220000  # 5200 - 1000 - 2000


def test_the_tick_stays_below_the_fast_paths_budget_then_raises_in_steps() -> None:
    h, c, fp, _ = setup()
    fp.step()
    steps(fp, c, 2, ls=4.0)
    assert read_quota(h) == 120000
    # the tick's one-second window still holds the quiet time: LS 2 cores on average
    t = NOW + 0.5
    h.add_samples("node_cpu_usage", [(t, 3.0)])
    h.add_samples("kubepods_cpu_usage", [(t, 3.0)])
    h.add_samples("besteffort_cpu_usage", [(t, 1.0)])
    h.tick("cpuSuppress", NOW + 1)
    assert read_quota(h) == 120000, "the tick does not raise BE while the fast path sees the load"
    # the fast path stops sampling (its cap expires): the tick raises in koordlet's step (10 % of 8 CPUs)
    c.t += 1.0
    h.add_samples("node_cpu_usage", [(NOW + 1.5, 3.0)])
    h.add_samples("kubepods_cpu_usage", [(NOW + 1.5, 3.0)])
    h.add_samples("besteffort_cpu_usage", [(NOW + 1.5, 1.0)])
    h.tick("cpuSuppress", NOW + 2)
    assert read_quota(h) == 200000


def test_it_stays_out_where_the_tick_alone_decides() -> None:
    """A tick that has not decided yet: the fast path watches, writes nothing."""
    h2 = make(1, n_cpus=CPUS)
    with_pods(h2)
    slo(h2, policy="cfsQuota")
    c2 = Counters(h2)
    fp2 = FastPath(h2.layout, h2.store, h2.executor, h2.strategy("cpuSuppress"),  # type: ignore[arg-type]
                   monotonic=lambda: c2.t)
    fp2.step()
    assert steps(fp2, c2, 3, ls=6.0) == [None] * 3
    assert read_quota(h2) == -1


def test_unreadable_counters_are_skipped_and_read_again() -> None:
    h, c, fp, _ = setup()
    fp.step()
    h.write_file("proc/stat", "garbled\n")  # the same file, read through the descriptor kept open
    c.t += INTERVAL
    assert fp.step() is None and fp.errors == 1
    os.unlink(h.path("proc/stat"))  # replaced: the next read is from the old one, then from the new
    c.write()
    c.t += INTERVAL
    fp.step()
    steps(fp, c, 3, ls=4.0)
    assert read_quota(h) == 120000


def child_quota(h: Harness, rel: str) -> int:
    return int(h.read_file(h.cgroup_file("cpu", rel, "cpu.cfs_quota_us")) or "")


def test_v1_be_children_with_their_own_quota_above_the_budget_are_lowered_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A koordinator node: koordlet's batch-cpu hook gave the BE pod and its container 100000 (1 core).
    cgroup v1 (and the fake kernel) refuse a BE dir quota below them: the fast path lowers them first,
    a BE pod the tick has not seen yet too, then the BE dir; the tick gives them their own back."""
    from qosmanager.sim.fakehost import FakeContainer, FakePod
    from qosmanager.sim.objects import pod_object

    monkeypatch.setattr(Harness, "koordinator_default", True)
    h, c, fp, _ = setup()
    _, pod, ctr, _sandbox = be_dirs(h)
    assert read_quota(h) == 420000 and child_quota(h, pod) == child_quota(h, ctr) == 100000
    # a second BE pod arrives (2 cores of batch-cpu: 200000) and no tick runs before LS's burst
    late = FakePod("be-2", "default", "be2", BE_POD.qos, [FakeContainer("c", "containerd://" + "f" * 64)])
    h.set_pods([pod_object(LS), pod_object(BE_POD), pod_object(late, cpu_milli=2000)])
    late_pod = h.host.pod_dir("be-2")
    late_ctr = f"{late_pod}/{'f' * 64}"
    assert child_quota(h, late_pod) == child_quota(h, late_ctr) == 200000
    fp.step()
    n = len(h.recorded.writes)
    assert any(steps(fp, c, 2, ls=4.5))  # 5200m - 4500m = 700m: 70000, below both pods
    assert read_quota(h) == 70000, "the BE dir's quota is in force (the fake kernel refuses it above a child)"
    assert {d: child_quota(h, d) for d in (pod, ctr, late_pod, late_ctr)} == dict.fromkeys(
        (pod, ctr, late_pod, late_ctr), 70000)
    order = [w["file"] for w in h.recorded.writes[n:]]
    assert order[-1].endswith("besteffort/cpu.cfs_quota_us"), "the BE dir last"
    assert order.index(f"cpu/{ctr}/cpu.cfs_quota_us") < order.index(f"cpu/{pod}/cpu.cfs_quota_us")
    # LS calms down, the fast path's budget expires: the tick raises BE by 80000 a tick, parents first,
    # and the pods get their own quotas back as the BE quota passes them
    c.t += 1.0
    seen = []
    for k in range(1, 4):
        for name, v in (("node_cpu_usage", 2.0), ("kubepods_cpu_usage", 2.0), ("besteffort_cpu_usage", 1.0)):
            h.add_samples(name, [(NOW + k - 0.5, v)])
        for uid in (LS.uid, BE_POD.uid):
            h.add_samples("pod_cpu_usage", [(NOW + k - 0.5, 1.0)], pod=uid)
        h.tick("cpuSuppress", NOW + k)
        seen.append((read_quota(h), child_quota(h, ctr), child_quota(h, late_ctr)))
    assert seen == [(150000, 100000, 150000), (230000, 100000, 200000), (310000, 100000, 200000)]


def test_v1_a_fall_reads_only_the_children_that_can_be_above_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the tick has read every BE child, the fast path's fall reads only those last seen above the new
    quota and those never read (a new pod), not every child (100,000 reads at 100,000 pods, every fall)."""
    from qosmanager.sim.fakehost import FakeContainer, FakePod
    from qosmanager.sim.objects import pod_object

    monkeypatch.setattr(Harness, "koordinator_default", True)
    h, c, fp, _ = setup()  # the tick read every child: the BE pod and its container hold 100000 (1 core)
    _, pod, ctr, _sandbox = be_dirs(h)
    read: list[str] = []
    real = h.executor.read_many

    def spy(resource: str, cgroups: Any) -> Any:
        if resource == "cpu.cfs_quota_us":
            read.extend(cgroups)
        return real(resource, cgroups)

    monkeypatch.setattr(h.executor, "read_many", spy)
    fp.step()
    assert any(steps(fp, c, 2, ls=3.0))  # 5200m - 3000m = 2200m: 220000, above both
    assert read_quota(h) == 220000 and read == [], read
    late = FakePod("be-2", "default", "be2", BE_POD.qos, [FakeContainer("c", "containerd://" + "f" * 64)])
    h.set_pods([pod_object(LS), pod_object(BE_POD), pod_object(late, cpu_milli=2000)])
    late_pod = h.host.pod_dir("be-2")
    steps(fp, c, 12, ls=3.0)  # half a second on: the hysteresis is back to 0.2 cores
    assert any(steps(fp, c, 2, ls=4.5))  # 700m: 70000, below every child
    assert set(read) == {pod, ctr, late_pod, f"{late_pod}/{'f' * 64}"}, read  # never the sandbox
    q = read_quota(h)  # 70000 give or take the counters' rounding: in force below every child
    assert q < 100000 and child_quota(h, pod) == child_quota(h, late_pod) == q


def test_v1_a_child_raised_unseen_refuses_the_fast_paths_fall_and_the_tick_reads_every_child(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path reads only the children that can be above its quota by what it knows; a child's owner
    that raised it since (koordlet's hook after a resize), unseen, makes v1 refuse the BE dir's write; the
    next fall, the fast path's or the tick's, reads every child and lowers it first."""
    monkeypatch.setattr(Harness, "koordinator_default", True)
    h, c, fp, _ = setup()
    _, pod, ctr, _sandbox = be_dirs(h)
    fp.step()
    assert any(steps(fp, c, 2, ls=3.0))  # 220000, above the children's 100000: none read
    for d in (pod, ctr):  # the owner raises them to 2 cores, under the BE dir's 220000
        h.write_file(h.cgroup_file("cpu", d, "cpu.cfs_quota_us"), "200000\n")
    children = h.strategy("cpuSuppress").children  # type: ignore[attr-defined]
    n = len(h.recorded.writes)
    c.advance(INTERVAL, 4.0, 1.0)  # the first window sees half the rise: 170000, below the raised children
    assert fp.step() is not None
    assert child_quota(h, pod) == 200000 and read_quota(h) == 220000, "v1 refused the BE dir below a child"
    assert children.refused and len(h.recorded.writes) == n, "nothing written: the children were not read"
    c.advance(INTERVAL, 4.0, 1.0)  # 120000: after the refusal every child is read and lowered first
    assert fp.step() is not None
    q = read_quota(h)
    assert q < 200000 and child_quota(h, pod) == child_quota(h, ctr) == q, (q, child_quota(h, pod))
    t = NOW + 1
    for name, v in (("node_cpu_usage", 5.0), ("kubepods_cpu_usage", 5.0), ("besteffort_cpu_usage", 1.0)):
        h.add_samples(name, [(t - 0.5, v)])
    for uid, v in ((LS.uid, 4.0), (BE_POD.uid, 1.0)):
        h.add_samples("pod_cpu_usage", [(t - 0.5, v)], pod=uid)
    h.tick("cpuSuppress", t)  # the tick reads every child again, and knows them afterwards
    assert not children.refused and children.own[pod] == 200000, children.own
    assert child_quota(h, pod) == child_quota(h, ctr) == read_quota(h)


def test_a_rise_seen_in_part_is_followed_to_its_level() -> None:
    """The first window holds half the rise: the quota falls at once, then follows to the load's level
    in steps smaller than the hysteresis while the rise unfolds (half a second after a write)."""
    h, c, fp, _ = setup()
    fp.step()
    steps(fp, c, 2, ls=1.0)
    c.advance(INTERVAL, 1.0, 1.0)
    fp.step()
    c.advance(INTERVAL, 3.0, 1.0)  # the burst starts: the 100 ms window sees 2 cores on average
    assert fp.step() is not None
    first = read_quota(h)
    assert 220000 <= first < 420000 - 20000
    # 3.2 cores: the steps after the first write are 0.1 core (the 1 % bypass of 8 CPUs is 0.08), under
    # the 0.2-core hysteresis, and still taken
    steps(fp, c, 3, ls=3.2)
    followed = read_quota(h)
    assert abs(followed - 200000) <= 1000  # (the counters' rounding)
    steps(fp, c, 12, ls=3.2)  # settled: nothing more
    steps(fp, c, 3, ls=3.35)  # 0.15 more, over half a second after the last write: within the hysteresis
    assert read_quota(h) == followed


# ---------------------------------------------------------------------------------------------
# the cpuset policy: the fast path narrows BE's cpuset with the tick's picks, children first
# The fake host's 8 CPUs are 4 cores x 2 threads (CPU c and c + 4 siblings), one NUMA node: the picks
# for n CPUs are the pairs (0,4), (1,5), ... first, then single CPUs in core order.


def cpusets(h: Harness) -> dict[str, str]:
    return {d: read_cpuset(h, d) for d in be_dirs(h)}


@pytest.mark.parametrize("version", [1, 2])
def test_cpuset_policy_a_rise_in_ls_demand_narrows_be_within_two_samples(version: int) -> None:
    h, c, fp, observed = setup(version, policy="cpuset")
    # the tick: 5200m - LS 1000m = 4200m -> 5 CPUs: pairs (0,4), (1,5), then 2
    assert set(cpusets(h).values()) == {"0-2,4-5"}
    fp.step()
    assert steps(fp, c, 4, ls=1.0) == [None] * 4, "a steady load writes nothing"
    # 3900m is 4 CPUs' worth, within the hysteresis (0.2 cores) of the 5 BE holds: left to the tick
    assert steps(fp, c, 4, ls=1.3) == [None] * 4
    # LS goes to 4 cores: 1200m -> at least 2 CPUs, the pair (0,4), in every BE dir (v1: children first,
    # the fake kernel refuses a parent narrowed below a child)
    writes = steps(fp, c, 2, ls=4.0)
    assert any(writes)
    assert cpusets(h) == {d: "0,4" for d in be_dirs(h)}
    assert h.strategy("cpuSuppress").held_cpuset == ("0,4", False)  # type: ignore[attr-defined]
    recs = [r for r in h.recorded.writes if r["file"].endswith("cpuset.cpus")]
    assert recs and all(r["strategy"] == "cpuSuppress" for r in recs)
    assert observed and all(0 < x <= 2 * INTERVAL + 1e-9 for x in observed)
    assert steps(fp, c, 4, ls=4.0) == [None] * 4, "the load stays: nothing more to write"
    assert steps(fp, c, 4, ls=0.0) == [None] * 4, "LS fell: widening is the tick's, in bounded steps"
    assert set(cpusets(h).values()) == {"0,4"}


def test_cpuset_policy_the_tick_stays_below_the_fast_paths_budget_then_widens_in_steps() -> None:
    h, c, fp, _ = setup(policy="cpuset")
    fp.step()
    steps(fp, c, 2, ls=4.0)
    assert set(cpusets(h).values()) == {"0,4"}
    # the tick's window still holds the quiet time: LS 2 cores on average (3200m -> 4 CPUs)
    t = NOW + 0.5
    h.add_samples("node_cpu_usage", [(t, 3.0)])
    h.add_samples("kubepods_cpu_usage", [(t, 3.0)])
    h.add_samples("besteffort_cpu_usage", [(t, 1.0)])
    h.tick("cpuSuppress", NOW + 1)
    assert set(cpusets(h).values()) == {"0,4"}, "the tick does not widen BE while the fast path sees the load"
    c.t += 1.0  # the fast path's budget expires: the tick widens by ceil(8 x 10 %) = 1 CPU
    for name, v in (("node_cpu_usage", 3.0), ("kubepods_cpu_usage", 3.0), ("besteffort_cpu_usage", 1.0)):
        h.add_samples(name, [(NOW + 1.5, v)])
    h.tick("cpuSuppress", NOW + 2)
    assert set(cpusets(h).values()) == {"0-1,4"}


def test_cpuset_policy_with_a_static_cpu_manager_narrows_only_containers() -> None:
    """The kubelet's static CPU manager: the QoS and pod dirs keep every BE CPU, containers are narrowed."""
    from test_strategy_cpu_suppress import nrt

    h, c, fp, _ = setup(policy="cpuset", node_annotations=nrt(policy="static"))
    qos_and_pod, containers = be_dirs(h)[:2], be_dirs(h)[2:]
    assert {read_cpuset(h, d) for d in qos_and_pod} == {"0-7"}
    assert {read_cpuset(h, d) for d in containers} == {"0-2,4-5"}
    fp.step()
    steps(fp, c, 2, ls=4.0)
    assert {read_cpuset(h, d) for d in qos_and_pod} == {"0-7"}
    assert {read_cpuset(h, d) for d in containers} == {"0,4"}


@pytest.mark.parametrize(("version", "policy"), [(1, "cfsQuota"), (2, "cfsQuota"), (2, "cpuset")])
def test_the_sampler_wakes_python_at_every_load_that_writes(version: int, policy: str) -> None:
    """The sampler's thread returns to Python only at the trigger level: every load at which the decision
    writes is at or above it, and it is tight (a load 0.01 cores below it never writes)."""
    wrote_at, quiet_at = [], []
    for ls in [x / 20 for x in range(20, 120, 2)]:
        _h, c, fp, _ = setup(version, policy=policy)
        fp.step()
        steps(fp, c, 3, ls=1.0)
        fp.retrigger()
        level, follow, _floor, _fixed = fp.trigger_levels()
        assert follow <= level < math.inf
        c.advance(INTERVAL, ls, 1.0)
        assert fp.sample() is not None
        load = fp._sampler.load()
        if fp.decide() is not None:
            wrote_at.append(ls)
            assert load >= level, f"LS {ls}: a write at load {load}, below the trigger level {level}"
        elif load < level - 0.01:
            quiet_at.append(ls)
        fp.stop()
    assert wrote_at and quiet_at and max(quiet_at) < min(wrote_at)
    # tight: the LS rates that stay quiet below it reach to within 0.25 cores of the first that writes
    # (one interval of the two-interval window at the new rate: the load moves half as much)
    assert max(quiet_at) >= min(wrote_at) - 0.25


def test_without_a_decision_of_the_tick_nothing_wakes_python() -> None:
    h = make(2, n_cpus=CPUS)
    with_pods(h)
    slo(h, policy="cfsQuota")
    fp = FastPath(h.layout, h.store, h.executor, h.strategy("cpuSuppress"))  # type: ignore[arg-type]
    assert fp.trigger_levels()[:2] == (math.inf, math.inf)
    fp.stop()
