"""A koordinator node: the cgroup values koordlet's hooks and the kubelet leave behind
(``sim.koordnode``), and cpuSuppress's BE budget on top of BE pods' own CFS quotas.

cgroup v1 refuses a parent quota below a child's (EINVAL): every write here is replayed on the
quotas the tree held before, and after each one no parent may hold less than a child
(:func:`v1_violations`), as the kernel demands of every single write.  The real kernel's answer is in
``test_kernel_koordnode.py``.
"""

from __future__ import annotations

import errno
import glob
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultinject import IOFaults
from promtext import parse
from qosmanager.api.pod import pod_meta
from qosmanager.exporter import AgentMetrics
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim import koordnode
from qosmanager.sim.fakehost import V1_MEMORY_UNLIMITED, FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.sim.replay import load_scenario, run_scenario
from qosmanager.sim.simulate import SimConfig, run_simulation

NOW = 1000.0
BE_DIR = "kubepods/besteffort"
BATCH_QUOTA = 150_000  # koordlet's hook for a 1.5-core batch-cpu limit
BE_QUOTA_FILE = f"cpu/{BE_DIR}/cpu.cfs_quota_us"


def cid(ch: str) -> str:
    return "containerd://" + ch * 64


LS = FakePod("ls-1", "default", "ls", KubeQoS.BURSTABLE, [FakeContainer("c", cid("b"))])
BE = FakePod("be-1", "default", "be", KubeQoS.BESTEFFORT, [FakeContainer("c", cid("a"))])


def make(version: int = 1, *, harness: Harness | None = None) -> Harness:
    """A koordinator node with one LS pod and one BE pod whose batch-cpu limit is 1.5 cores."""
    h = harness or Harness(version=version, strategies=["cpuSuppress"], n_cpus=8, now=NOW, koordinator=True)
    h.set_node(node_object(h.host))
    h.set_pods([pod_object(LS, cpu_milli=1000), pod_object(BE, cpu_milli=1500, memory=2 << 30)])
    return h


def slo(h: Harness, policy: str = "cfsQuota", enable: bool = True) -> None:
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": enable, "cpuSuppressThresholdPercent": 65,
                                                   "cpuSuppressPolicy": policy}})


def tick(h: Harness, t: float, ls_used: float) -> None:
    """A tick with LS using ``ls_used`` cores, BE 0.5 and the system 0.5: the budget is
    8000 x 65 // 100 - LS - 500 = 4700m - LS."""
    h.add_samples("node_cpu_usage", [(t - 1, ls_used + 1.0)])
    h.add_samples("pod_cpu_usage", [(t - 1, ls_used)], pod="ls-1")
    h.add_samples("pod_cpu_usage", [(t - 1, 0.5)], pod="be-1")
    h.tick("cpuSuppress", t)


def dirs(h: Harness) -> tuple[str, str]:
    pod = h.host.pod_dir("be-1")
    return pod, f"{pod}/{'a' * 64}"


def quota(h: Harness, rel: str) -> int:
    if h.host.version == 1:
        return int(h.read_file(h.cgroup_file("cpu", rel, "cpu.cfs_quota_us")) or "")
    q = (h.read_file(h.cgroup_file("cpu", rel, "cpu.max")) or "").split()[0]
    return -1 if q == "max" else int(q)


def set_quota(h: Harness, rel: str, value: int) -> None:
    h.write_file(h.cgroup_file("cpu", rel, "cpu.cfs_quota_us"), f"{value}\n")


def quota_writes(h: Harness, since: int = 0) -> list[tuple[str, int]]:
    """(dir, value) of the quota writes recorded from ``since`` on, in the order they were made."""
    out = []
    for w in h.recorded.writes[since:]:
        if w["file"].endswith("/cpu.cfs_quota_us"):
            out.append((w["file"].removeprefix("cpu/").removesuffix("/cpu.cfs_quota_us"),
                        int(w["value"].split()[0])))
    return out


def v1_violations(before: dict[str, int], writes: list[tuple[str, int]]) -> list[str]:
    """Replay ``writes`` on the quotas ``before``: every write after which some dir holds a quota
    above its nearest limited ancestor's (what cgroup v1 refuses with EINVAL)."""
    state = dict(before)
    bad = []

    def limit_above(d: str) -> float:
        parent = d.rpartition("/")[0]
        while parent:
            q = state.get(parent, -1)
            if q >= 0:
                return q
            parent = parent.rpartition("/")[0]
        return float("inf")

    for d, v in writes:
        state[d] = v
        for child, q in state.items():
            if q >= 0 and q > limit_above(child):
                bad.append(f"after {d} = {v}: {child} holds {q} above {limit_above(child)}")
    return bad


def snapshot(h: Harness) -> dict[str, int]:
    return {d: quota(h, d) for d in (BE_DIR, *dirs(h))}


# ---------------------------------------------------------------------------------------------
# the model


def test_the_model_writes_batch_resources_and_kubelet_values() -> None:
    be = pod_meta(pod_object(BE, cpu_milli=1500, memory=2 << 30))
    ls = pod_meta(pod_object(LS, cpu_milli=1000))
    pod, containers = koordnode.pod_values(be)
    # koordlet's batch-resource hook: quota from batch-cpu limit, shares from request, memory limit
    assert pod == koordnode.CgroupValues(BATCH_QUOTA, 1536, 2 << 30)
    assert containers == {"c": koordnode.CgroupValues(BATCH_QUOTA, 1536, 2 << 30)}
    # the kubelet: Burstable 500m request (shares 512), a 1-core limit (quota 100000), 512 MiB requested of 1 GiB
    pod, containers = koordnode.pod_values(ls)
    assert pod == koordnode.CgroupValues(100_000, 512, 1 << 30)
    assert koordnode.burstable_shares([be, ls]) == 512


@pytest.mark.parametrize("version", [1, 2])
def test_a_koordinator_harness_lays_the_values_out(version: int) -> None:
    h = make(version)
    pod, ctr = dirs(h)
    assert quota(h, pod) == quota(h, ctr) == BATCH_QUOTA
    assert quota(h, BE_DIR) == -1
    if version == 1:
        assert h.read_file(h.cgroup_file("cpu", pod, "cpu.shares")) == "1536\n"
        assert h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.shares")) == "2\n"
        assert h.read_file(h.cgroup_file("cpu", "kubepods/burstable", "cpu.shares")) == "512\n"
        assert h.read_file(h.cgroup_file("memory", ctr, "memory.limit_in_bytes")) == f"{2 << 30}\n"
        ls_ctr = h.host.container_dir("ls-1", "c")
        assert h.read_file(h.cgroup_file("memory", ls_ctr, "memory.limit_in_bytes")) == f"{1 << 30}\n"
    else:
        assert h.read_file(h.cgroup_file("cpu", pod, "cpu.weight")) == "59\n"  # shares 1536
        assert h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.weight")) == "1\n"
        assert h.read_file(h.cgroup_file("memory", ctr, "memory.max")) == f"{2 << 30}\n"
    vanilla = Harness(version=version, koordinator=False)  # the vanilla kubelet node it differs from
    vanilla.set_pods([pod_object(BE, cpu_milli=1500)])
    assert quota(vanilla, vanilla.host.pod_dir("be-1")) == -1  # a vanilla kubelet node leaves BE unlimited
    if version == 1:
        mem = vanilla.read_file(vanilla.cgroup_file("memory", vanilla.host.pod_dir("be-1"), "memory.limit_in_bytes"))
        assert mem == f"{V1_MEMORY_UNLIMITED}\n"


# ---------------------------------------------------------------------------------------------
# cpuSuppress, cfsQuota policy, cgroup v1


def test_be_budget_below_a_batch_pod_quota() -> None:
    """The BE budget falls below the BE pod's own quota: the pod and its container are lowered to it
    first, children first, and the BE dir's quota is written; as the budget rises the children follow
    up to their own quota and then keep it."""
    h = make()
    slo(h)
    pod, ctr = dirs(h)
    before = snapshot(h)
    tick(h, NOW, ls_used=4.2)  # budget 500m -> 50000
    writes = quota_writes(h)
    assert writes == [(ctr, 50_000), (pod, 50_000), (BE_DIR, 50_000)], writes
    assert not v1_violations(before, writes)
    assert snapshot(h) == {BE_DIR: 50_000, pod: 50_000, ctr: 50_000}

    # LS calms down: the budget rises by at most 10 % of the node (80000) per tick, parents first
    steps = []
    for k in range(1, 5):
        before, n = snapshot(h), len(h.recorded.writes)
        tick(h, NOW + k, ls_used=1.0)  # budget 3700m
        writes = quota_writes(h, n)
        assert not v1_violations(before, writes), writes
        assert writes[0][0] == BE_DIR, writes
        steps.append(snapshot(h))
    assert steps == [
        {BE_DIR: 130_000, pod: 130_000, ctr: 130_000},
        {BE_DIR: 210_000, pod: BATCH_QUOTA, ctr: BATCH_QUOTA},  # their own: never above it
        {BE_DIR: 290_000, pod: BATCH_QUOTA, ctr: BATCH_QUOTA},
        {BE_DIR: 370_000, pod: BATCH_QUOTA, ctr: BATCH_QUOTA},
    ]
    # the budget falls again: lowered again before the BE dir
    before, n = snapshot(h), len(h.recorded.writes)
    tick(h, NOW + 5, ls_used=4.0)  # 700m
    writes = quota_writes(h, n)
    assert writes == [(ctr, 70_000), (pod, 70_000), (BE_DIR, 70_000)]
    assert not v1_violations(before, writes)


def test_a_child_quota_its_owner_changes_is_the_one_given_back() -> None:
    """koordlet re-writes a lowered child (a smaller batch-cpu limit after a resize): that value is
    its own from then on, and the one it gets back when the budget allows."""
    h = make()
    slo(h)
    pod, ctr = dirs(h)
    tick(h, NOW, ls_used=4.2)
    assert quota(h, ctr) == 50_000
    set_quota(h, ctr, 30_000)  # the owner's new value (v1 takes it: below the parents')
    tick(h, NOW + 1, ls_used=4.2)
    assert quota(h, ctr) == 30_000, "a value under the budget is left alone"
    for k in range(2, 6):
        tick(h, NOW + k, ls_used=1.0)
    assert snapshot(h) == {BE_DIR: 370_000, pod: BATCH_QUOTA, ctr: 30_000}


def test_batch_pod_quota_back_after_an_agent_restart() -> None:
    """An agent stopped with the children lowered: the next one gives them back the quota
    koordlet's batch-resource rule gives their batch-cpu limit, as the budget allows."""
    h = make()
    slo(h)
    pod, ctr = dirs(h)
    tick(h, NOW, ls_used=4.2)
    assert snapshot(h) == {BE_DIR: 50_000, pod: 50_000, ctr: 50_000}
    left = snapshot(h)
    h.close()

    # a new agent (nothing remembered) on the node as the last one left it
    again = make(harness=Harness(version=1, strategies=["cpuSuppress"], n_cpus=8, now=NOW + 10, koordinator=True))
    for d, v in left.items():
        set_quota(again, d, v)
    slo(again)
    for k in range(1, 5):
        before, n = snapshot(again), len(again.recorded.writes)
        tick(again, NOW + 10 + k, ls_used=1.0)
        assert not v1_violations(before, quota_writes(again, n))
    assert snapshot(again) == {BE_DIR: 370_000, pod: BATCH_QUOTA, ctr: BATCH_QUOTA}


def test_recovery_gives_children_their_own_quota_back() -> None:
    """Suppression switched off (or the policy switched to cpuset): the BE dir back to unlimited, then
    the children to their own quota, parents first."""
    for change in ({"enable": False}, {"policy": "cpuset"}):
        h = make()
        slo(h)
        pod, ctr = dirs(h)
        tick(h, NOW, ls_used=4.2)
        before, n = snapshot(h), len(h.recorded.writes)
        slo(h, **change)  # type: ignore[arg-type]
        tick(h, NOW + 1, ls_used=4.2)
        writes = quota_writes(h, n)
        assert writes == [(BE_DIR, -1), (pod, BATCH_QUOTA), (ctr, BATCH_QUOTA)], (change, writes)
        assert not v1_violations(before, writes)


def test_an_unlimited_child_is_left_unlimited() -> None:
    """A BE pod without a batch-cpu limit (unlimited) is no obstacle on v1: it inherits the BE dir's."""
    h = Harness(version=1, strategies=["cpuSuppress"], n_cpus=8, now=NOW, koordinator=True)
    h.set_node(node_object(h.host))
    obj = pod_object(BE, cpu_milli=1500)
    for c in obj["spec"]["containers"]:
        del c["resources"]["limits"]
    h.set_pods([pod_object(LS), obj])
    slo(h)
    pod, ctr = dirs(h)
    assert quota(h, pod) == quota(h, ctr) == -1
    tick(h, NOW, ls_used=4.2)
    assert quota_writes(h) == [(BE_DIR, 50_000)]


# ---------------------------------------------------------------------------------------------
# where no such step is needed


def test_v2_takes_a_be_budget_below_the_children() -> None:
    """cgroup v2 allows a parent cpu.max below its children's (the lower one applies): only the BE
    dir is written, the children keep koordlet's value."""
    h = make(2)
    slo(h)
    pod, ctr = dirs(h)
    tick(h, NOW, ls_used=4.2)
    written = [w["file"] for w in h.recorded.writes if w["file"].endswith("cpu.max")]
    assert written == [f"{BE_DIR}/cpu.max"]
    assert (quota(h, BE_DIR), quota(h, pod), quota(h, ctr)) == (50_000, BATCH_QUOTA, BATCH_QUOTA)


@pytest.mark.parametrize("version", [1, 2])
def test_cpuset_policy_leaves_child_quotas_alone(version: int) -> None:
    """The cpuset policy never lowers a quota: the BE pod keeps koordlet's, the BE cpuset shrinks
    (on v1 children first, which the executor's order does for every cpuset write; v2 takes any)."""
    h = make(version)
    slo(h, policy="cpuset")
    pod, ctr = dirs(h)
    tick(h, NOW, ls_used=4.2)
    assert not [w for w in h.recorded.writes if "cpu.cfs_quota_us" in w["file"] or w["file"].endswith("cpu.max")]
    assert (quota(h, pod), quota(h, ctr)) == (BATCH_QUOTA, BATCH_QUOTA)
    cpusets = [w["file"].rsplit("/", 1)[0] for w in h.recorded.writes if w["file"].endswith("cpuset.cpus")]
    assert len(cpusets) == 3
    if version == 2:
        return
    depth = [d.count("/") for d in cpusets]
    assert depth == sorted(depth, reverse=True), f"narrowed children first: {cpusets}"


# ---------------------------------------------------------------------------------------------
# the BE limit gauge


def test_the_be_limit_gauge_keeps_a_decided_quota_the_kernel_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``koordlet_be_suppress_cpu_cores`` is the decided BE limit: a BE dir quota write the kernel
    refuses (EINVAL, as v1 answers a parent quota below a child's) leaves it at the decided value,
    not at the last one written, nor gone."""
    faults = IOFaults(monkeypatch)
    h = make()
    slo(h)
    m = AgentMetrics(node_name="n1", clock=lambda: h.now, layout=h.layout, store=h.store, cache=h.cache,
                     executor=h.executor, coordinator=h.coordinator, manager=h.manager, process=False)
    tick(h, NOW, ls_used=1.0)  # 3700m
    gauge = parse(m.registry.render())["koordlet_be_suppress_cpu_cores"]
    assert gauge.series() == {(("node", "n1"), ("type", "cfsQuota")): 3.7}
    faults.fail(f"{BE_DIR}/cpu.cfs_quota_us", errno.EINVAL)
    tick(h, NOW + 1, ls_used=4.2)  # 500m decided, refused
    assert quota(h, BE_DIR) == 370_000
    gauge = parse(m.registry.render())["koordlet_be_suppress_cpu_cores"]
    assert gauge.series() == {(("node", "n1"), ("type", "cfsQuota")): 0.5}


# ---------------------------------------------------------------------------------------------
# simulate


def test_simulate_runs_on_a_koordinator_node(tmp_path: Path) -> None:
    """``simulate`` lays out the hooks' values: on v1 the BE budget is written below BE pods' own
    quotas, with no write the v1 kernel would refuse, and the pods' quotas are lowered on the way."""
    audit = tmp_path / "audit.jsonl"
    cfg = SimConfig(containers=40, duration=8.0, cpus=16, memory_gib=32, seed=0, cgroup_version=1,
                    suppress_policy="cfsQuota", workdir=str(tmp_path), keep=True, audit_log=str(audit))
    run_simulation(cfg)
    [root] = glob.glob(str(tmp_path / "qosm-sim-*"))
    cpu = f"{root}/host/cgroup/cpu"
    recs = [json.loads(line) for line in audit.read_text().splitlines()]
    writes = [(r["target"].removeprefix("cpu/").removesuffix("/cpu.cfs_quota_us"), int(r["value"]))
              for r in recs if r.get("action") == "write" and r["executed"]
              and r["target"].endswith("/cpu.cfs_quota_us") and "besteffort" in r["target"]]
    before = {}
    for path in glob.glob(f"{cpu}/kubepods/besteffort/**/cpu.cfs_quota_us", recursive=True):
        d = path.removeprefix(cpu + "/").removesuffix("/cpu.cfs_quota_us")
        if d != BE_DIR:
            # what the hook wrote: every BE pod and container carries a batch quota
            first = next((r["old"] for r in recs if r.get("target") == f"cpu/{d}/cpu.cfs_quota_us"), None)
            before[d] = int(first) if first is not None else int(Path(path).read_text())
    before[BE_DIR] = -1
    assert before and all(q > 0 for d, q in before.items() if d != BE_DIR)
    assert any(d != BE_DIR for d, _ in writes), "no BE pod quota was lowered under the budget"
    assert [v for d, v in writes if d == BE_DIR], "no BE budget was written"
    assert not v1_violations(before, writes)


def test_replay_and_a_plain_harness_are_koordinator_nodes(tmp_path: Path) -> None:
    """Without being told, the fake nodes carry the hooks' values: a ``Harness()`` and ``replay`` (whose
    scenario's own ``cgroups`` files are written over them); ``koordinator=False`` is a vanilla node."""
    plain = Harness(version=1)
    plain.set_pods([pod_object(BE, cpu_milli=1500)])
    assert quota(plain, plain.host.pod_dir("be-1")) == BATCH_QUOTA
    # cfs-quota-v1 at a 40 % threshold: BE budgets 70000, 150000, 220000 against a BE pod whose batch-cpu
    # limit (2 cores) koordlet's hook wrote as 200000 into its pod's and container's quota
    scenario = yaml.safe_load((Path(__file__).parent / "scenarios" / "cfs-quota-v1.yaml").read_text())
    scenario["nodeSLO"]["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] = 40
    pod_dir = f"cpu/kubepods/besteffort/pod{scenario['pods'][1]['metadata']['uid']}"
    scenario["cgroups"][f"{pod_dir}/cpu.shares"] = "4096"
    scenario["cgroups"]["cpu/kubepods/besteffort/cpu.cfs_quota_us"] = "-1"
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario))
    out = run_scenario(load_scenario(str(scenario_file)))
    ctr_quota = f"{pod_dir}/{'2' * 64}/cpu.cfs_quota_us"
    got = [(w["file"], w["value"]) for w in out["writes"]]
    assert got == [(ctr_quota, "70000"), (f"{pod_dir}/cpu.cfs_quota_us", "70000"), (BE_QUOTA_FILE, "70000"),
                   (BE_QUOTA_FILE, "150000"), (f"{pod_dir}/cpu.cfs_quota_us", "150000"), (ctr_quota, "150000"),
                   (BE_QUOTA_FILE, "220000"), (f"{pod_dir}/cpu.cfs_quota_us", "200000"), (ctr_quota, "200000")], got
    assert out["files"][f"{pod_dir}/cpu.shares"] == "4096", "the scenario's own file is written over the layout"
    assert not out["refused"]


# ---------------------------------------------------------------------------------------------
# every hierarchical v1 limit the agent writes


def _examples(name: str) -> Any:
    text = (Path(__file__).resolve().parent.parent / "examples" / "standalone" / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


@pytest.mark.parametrize("policy", ["cfsQuota", "cpuset"])
def test_no_strategy_leaves_a_v1_parent_below_a_child(policy: str) -> None:
    """Every strategy on a koordinator v1 node (the examples' pods: a BE pod whose batch-cpu limit is 4
    cores; LS busy enough to push BE's budget below it; blkio for BE): replayed write by write, no
    parent quota is ever below a child's (EINVAL) and no child cpuset leaves its parent's (the kernel
    refuses that too).  The other hierarchical v1 limits need no step: no strategy writes
    ``memory.limit_in_bytes``, and v1 blk-throttle files are flat (the kernel compares no level with
    another)."""
    gates = {g: True for g in ("BlkIOReconcile", "CgroupReconcile", "CPUBurst", "BECPUEvict", "BECPUSuppress",
                               "BEMemoryEvict", "SystemConfig")}
    h = Harness(version=1, koordinator=True, gates=gates, n_cpus=8, memory_bytes=32 << 30, now=NOW)
    h.write_file("sys/block/sdb/dev", "8:16\n")
    h.set_node(_examples("node.yaml"))
    h.set_pods(_examples("pods.json")["items"])
    spec = _examples("nodeslo.yaml")["spec"]
    spec["resourceUsedThresholdWithBE"]["cpuSuppressPolicy"] = policy
    spec["resourceQOSStrategy"]["beClass"]["blkioQOS"] = {
        "enable": True, "blocks": [{"name": "sdb", "type": "device", "ioCfg": {"readIOPS": 1000}}]}
    h.set_nodeslo(spec)
    web, spark = "0b6c2a9e-3f7d-4c1a-9a57-2d8e6f1b4c01", "7e3d9c1b-5a2f-4e8d-b6c4-1f0a9e8d7c02"
    be_pod = h.layout.pod_dir("BestEffort", spark)
    quotas = {d: quota(h, d) for d in h.layout.dirs_up_to_depth("cpu", "kubepods", 3)}
    assert quotas[be_pod] == 400_000, "koordlet's hook: 4 cores of batch-cpu"
    cpusets = {d: set(range(8)) for d in h.layout.dirs_up_to_depth("cpuset", "kubepods", 3)}
    for k in range(6):
        t = NOW + k
        h.add_samples("node_cpu_usage", [(t, 7.0)])
        h.add_samples("pod_cpu_usage", [(t, 4.0)], pod=web)  # budget 5200 - 4000 - 0.5 system = 700m
        h.add_samples("pod_cpu_usage", [(t, 2.5)], pod=spark)
    n = len(h.recorded.writes)
    h.run(ticks=5)
    written = h.recorded.writes[n:]
    kinds = {w["file"].rsplit("/", 1)[1] for w in written}
    assert "memory.limit_in_bytes" not in kinds
    assert "blkio.throttle.read_iops_device" in kinds  # on the BE QoS dir only: flat on v1
    assert ("cpu.cfs_quota_us" if policy == "cfsQuota" else "cpuset.cpus") in kinds
    bad = []
    for w in written:
        d, name = w["file"].split("/", 1)[1].rsplit("/", 1)
        if name == "cpu.cfs_quota_us":
            bad += v1_violations(quotas, [(d, int(w["value"]))])
            quotas[d] = int(w["value"])
        elif name == "cpuset.cpus":
            cpusets[d] = {int(c) for part in w["value"].split(",") for c in _expand(part)}
            for child, cpus in cpusets.items():
                parent = child.rpartition("/")[0]
                if parent in cpusets and not cpus <= cpusets[parent]:
                    bad.append(f"after {d} = {w['value']}: {child} outside {parent}")
    assert not bad, bad
    if policy == "cfsQuota":
        assert 0 < quota(h, BE_DIR) < 400_000 and quota(h, be_pod) <= quota(h, BE_DIR)


def _expand(part: str) -> range:
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def test_a_steady_budget_reads_only_the_children_it_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    """v1 keeps every child at or below a limited parent, so only the first tick (or a refused BE quota)
    reads every BE pod's quota; a fall reads the children last seen above the new quota, a rise only the
    children lowered earlier (a dense node pays no per-pod read every tick: at 100,000 pods a read of every
    child made a falling tick 7 to 11 s)."""
    faults = IOFaults(monkeypatch)
    h = make()
    small = FakePod("be-2", "default", "be-small", KubeQoS.BESTEFFORT, [FakeContainer("c", cid("c"))])
    h.set_pods([pod_object(LS, cpu_milli=1000), pod_object(BE, cpu_milli=1500),
                pod_object(small, cpu_milli=200)])  # 20000: under every budget here
    slo(h)
    small_file = f"{h.host.pod_dir('be-2')}/cpu.cfs_quota_us"
    pod, ctr = dirs(h)

    def read_in(t: float, ls_used: float) -> set[str]:
        faults.reads.clear()
        tick(h, t, ls_used)
        return {p for p in faults.reads if p.endswith("cpu.cfs_quota_us")}

    first = read_in(NOW, ls_used=4.2)  # 500m: falling from unlimited, every child read
    assert any(p.endswith(small_file) for p in first)
    steady = read_in(NOW + 1, ls_used=1.0)  # rising: the lowered pod and container only
    assert not any(p.endswith(small_file) for p in steady), steady
    assert any(p.endswith(f"{pod}/cpu.cfs_quota_us") for p in steady)
    falling = read_in(NOW + 2, ls_used=4.3)  # 400m: the children last seen above it, not the small one
    assert not any(p.endswith(small_file) for p in falling), falling
    assert any(p.endswith(f"{pod}/cpu.cfs_quota_us") for p in falling)
    assert snapshot(h) == {BE_DIR: 40_000, pod: 40_000, ctr: 40_000}
    # the small pod's owner re-writes it above the next budget, unseen: v1 refuses the BE quota, and the
    # next tick reads every child and lowers it first
    set_quota(h, h.host.pod_dir("be-2"), 40_000)
    read_in(NOW + 3, ls_used=4.4)  # 300m
    assert quota(h, BE_DIR) == 40_000 and quota(h, h.host.pod_dir("be-2")) == 40_000
    again = read_in(NOW + 4, ls_used=4.4)
    assert any(p.endswith(small_file) for p in again)
    assert quota(h, BE_DIR) == 30_000 and quota(h, h.host.pod_dir("be-2")) == 30_000


def test_a_stop_leaves_the_children_under_the_be_quota_and_uninstall_gives_them_back(tmp_path: Path) -> None:
    """A stop writes nothing (BE stays suppressed between two agents), so on v1 the lowered children stay
    at the BE quota (v1 refuses them their own quota above it: ``test_kernel_koordnode.py``).  ``qosmanager
    restore`` from the originals the agent kept writes the BE dir's -1, then the pod's and the
    container's own quota, parents first, with no moment of a child above its parent."""
    from qosmanager.executor.executor import Executor
    from qosmanager.restore import OriginalsJournal, read_originals, restore

    h = make()
    journal = OriginalsJournal(str(tmp_path / "originals.jsonl"), h.executor)
    h.executor.on_write.append(journal.on_write)
    slo(h)
    pod, ctr = dirs(h)
    tick(h, NOW, ls_used=4.2)
    journal.close()  # the agent stops: nothing else is written
    left = snapshot(h)
    assert left == {BE_DIR: 50_000, pod: 50_000, ctr: 50_000}
    n = len(h.recorded.writes)
    uninstall = Executor(h.layout, h.audit)  # the restore command's own, after the agent is gone
    done = restore(uninstall, read_originals(str(tmp_path / "originals.jsonl")))
    assert sorted(done) == ["written"], done
    writes = quota_writes(h, n)
    assert writes == [(BE_DIR, -1), (pod, BATCH_QUOTA), (ctr, BATCH_QUOTA)], writes
    assert not v1_violations(left, writes)
