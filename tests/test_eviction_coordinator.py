"""The eviction coordinator (koordlet's KillAndEvictPods across tasks, with our fixes and modes).

Tasks are built by hand here, so every expected release is a sum or max written in the test.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Any

import pytest

from qosmanager.api.pod import PodMeta
from qosmanager.eviction.coordinator import ApiOutcome, EvictionCoordinator
from qosmanager.eviction.types import TARGET_POD_REQUEST, TARGET_POD_USED, EvictTask, Victim
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object

GiB = 1 << 30


def uid(i: int) -> str:
    return f"{i:08d}-0000-4000-8000-000000000000"


def be_pod(i: int, *, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    fp = FakePod(uid(i), "default", f"be-{i}", KubeQoS.BESTEFFORT, [FakeContainer("c", f"containerd://{i:064x}")])
    return pod_object(fp, labels=labels)


def ls_pod(i: int, *, kube: KubeQoS = KubeQoS.BURSTABLE, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    fp = FakePod(uid(i), "default", f"ls-{i}", kube, [FakeContainer("c", f"containerd://{i:064x}")])
    return pod_object(fp, labels=labels)


def harness(pods: list[dict[str, Any]], **kw: Any) -> Harness:
    h = Harness(**kw)
    h.set_pods(pods)
    return h


def meta(h: Harness, i: int) -> PodMeta:
    return h.store.pods[uid(i)]


def task(h: Harness, feature: str, target: str, need: Mapping[str, float],
         victims: list[tuple[int, Mapping[str, float]]], **kw: Any) -> EvictTask:
    return EvictTask(feature, f"{feature} test", target, dict(need),
                     [Victim(meta(h, i), dict(rel)) for i, rel in victims], **kw)


def evicted(h: Harness) -> list[str]:
    return [d.pod.name for d in h.decisions() if d.action == "evicted"]


def test_evicts_down_the_list_until_the_task_is_satisfied() -> None:
    h = harness([be_pod(i) for i in range(4)])
    # need 5 GiB; victims release 2, 2, 2, 2 GiB -> after three 6 >= 5
    t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": 5 * GiB}, [(i, {"memory": 2 * GiB}) for i in range(4)])
    res = h.coordinator.execute("memoryEvict", [t], 1000.0)
    assert evicted(h) == ["be-0", "be-1", "be-2"]
    assert res.released == {TARGET_POD_USED: {"memory": 6 * GiB}}
    assert res.newly_evicted


def test_pending_release_is_counted_and_a_pod_is_never_evicted_twice_across_ticks() -> None:
    h = harness([be_pod(i) for i in range(4)])

    def memory_task(need: float) -> EvictTask:
        return task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": need},
                    [(i, {"memory": 2 * GiB}) for i in range(4)])

    h.coordinator.execute("memoryEvict", [memory_task(3 * GiB)], 1000.0)  # be-0, be-1 (4 >= 3)
    assert evicted(h) == ["be-0", "be-1"]
    # next tick the pods are still listed (kill takes time): they count as released, pending
    res = h.coordinator.execute("memoryEvict", [memory_task(5 * GiB)], 1004.0)
    actions = [(d.pod.name, d.action) for d in res.decisions]
    # 2 + 2 pending = 4 < 5 -> one new eviction (be-2) gives 6 >= 5
    assert actions == [("be-0", "pending"), ("be-1", "pending"), ("be-2", "evicted")]
    assert res.released[TARGET_POD_USED]["memory"] == 6 * GiB
    assert res.newly_evicted
    # a tick that only needs what is pending evicts nothing new and reports no new eviction
    res = h.coordinator.execute("memoryEvict", [memory_task(4 * GiB)], 1008.0)
    assert [d.action for d in res.decisions] == ["pending", "pending"] and not res.newly_evicted
    assert evicted(h) == ["be-0", "be-1", "be-2"]


def test_pending_ends_when_the_pod_is_gone_or_its_time_runs_out() -> None:
    h = harness([be_pod(0), be_pod(1)])
    t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
    h.coordinator.execute("memoryEvict", [t], 1000.0)
    assert h.coordinator.is_pending(uid(0), 1000.0)
    assert h.coordinator.is_pending(uid(0), 1119.0) and not h.coordinator.is_pending(uid(0), 1120.0)  # ttl 120 s
    h.set_pods([be_pod(1)])  # be-0 is gone
    h.coordinator.gc(1001.0)
    assert uid(0) not in h.coordinator.pending


def test_never_evicted_twice_across_the_two_strategies() -> None:
    h = harness([be_pod(i) for i in range(3)])
    cpu = task(h, "BECPUEvict", TARGET_POD_REQUEST, {"kubernetes.io/batch-cpu": 1000},
               [(0, {"kubernetes.io/batch-cpu": 1000}), (1, {"kubernetes.io/batch-cpu": 1000})])
    h.coordinator.execute("cpuEvict", [cpu], 1000.0)
    mem = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": 3 * GiB},
               [(0, {"memory": 2 * GiB}), (2, {"memory": 2 * GiB})])
    res = h.coordinator.execute("memoryEvict", [mem], 1000.5)
    # be-0 is pending from cpuEvict: 2 GiB counted, be-2 evicted for the rest (2 + 2 >= 3)
    assert [(d.pod.name, d.action) for d in res.decisions] == [("be-0", "pending"), ("be-2", "evicted")]
    assert [r["pod"] for r in h.recorded.evictions] == ["default/be-0", "default/be-2"]


def test_release_is_the_max_over_tasks_of_one_target_not_the_sum() -> None:
    h = harness([be_pod(i) for i in range(3)])
    # the same pods appear in two podUsed tasks with different amounts; evicting a pod releases
    # max(a, b) per resource: be-0 -> max(1, 3) = 3 GiB, which alone satisfies task two (3 >= 3)
    t1 = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": 1 * GiB},
              [(0, {"memory": 1 * GiB}), (1, {"memory": 1 * GiB})])
    t2 = task(h, "MemoryEvict", TARGET_POD_USED, {"memory": 3 * GiB},
              [(0, {"memory": 3 * GiB}), (1, {"memory": 3 * GiB})])
    res = h.coordinator.execute("memoryEvict", [t1, t2], 1000.0)
    assert evicted(h) == ["be-0"]
    assert res.released == {TARGET_POD_USED: {"memory": 3 * GiB}}  # not 1 + 3


def test_targets_are_counted_separately() -> None:
    h = harness([be_pod(i) for i in range(3)])
    used = task(h, "CPUEvict", TARGET_POD_USED, {"cpu": 500}, [(0, {"cpu": 600}), (1, {"cpu": 600})])
    request = task(h, "CPUAllocatableEvict", TARGET_POD_REQUEST, {"kubernetes.io/batch-cpu": 1500},
                   [(0, {"kubernetes.io/batch-cpu": 1000}), (1, {"kubernetes.io/batch-cpu": 1000})])
    res = h.coordinator.execute("cpuEvict", [used, request], 1000.0)
    # be-0 satisfies the podUsed task (600 >= 500) and releases 1000 batch-cpu for the request
    # task; be-1 brings that to 2000 >= 1500
    assert evicted(h) == ["be-0", "be-1"]
    assert res.released == {TARGET_POD_USED: {"cpu": 1200}, TARGET_POD_REQUEST: {"kubernetes.io/batch-cpu": 2000}}


def test_a_pod_evicted_for_one_task_releases_for_later_tasks_through_release_of() -> None:
    h = harness([be_pod(i) for i in range(3)])
    # BECPUEvict evicts be-0 (not a victim of the CPUEvict task, e.g. it lacks the opt-in label);
    # CPUEvict's release_of says be-0 used 700m -> 700 >= 600, nothing else evicted
    be = task(h, "BECPUEvict", TARGET_POD_REQUEST, {"kubernetes.io/batch-cpu": 500},
              [(0, {"kubernetes.io/batch-cpu": 1000})])
    usage = {uid(0): 700, uid(1): 900}
    cpu = task(h, "CPUEvict", TARGET_POD_USED, {"cpu": 600}, [(1, {"cpu": 900})],
               release_of=lambda pod: {"cpu": usage.get(pod.uid, 0)})
    res = h.coordinator.execute("cpuEvict", [be, cpu], 1000.0)
    assert evicted(h) == ["be-0"]
    assert res.released[TARGET_POD_USED] == {"cpu": 700}
    # without release_of the second task must evict be-1 as well
    h2 = harness([be_pod(i) for i in range(3)])
    be2 = task(h2, "BECPUEvict", TARGET_POD_REQUEST, {"kubernetes.io/batch-cpu": 500},
               [(0, {"kubernetes.io/batch-cpu": 1000})])
    cpu2 = task(h2, "CPUEvict", TARGET_POD_USED, {"cpu": 600}, [(1, {"cpu": 900})])
    h2.coordinator.execute("cpuEvict", [be2, cpu2], 1000.0)
    assert evicted(h2) == ["be-0", "be-1"]


def test_a_resource_no_victim_can_release_is_audited_not_chased() -> None:
    h = harness([be_pod(i) for i in range(4)])
    # koordlet fix (§6b item 6): the standard cpu entry is never released by any victim; koordlet
    # evicted the whole list for it.  Here batch-cpu 1500 is satisfied by be-0 + be-1 (2000).
    t = task(h, "CPUAllocatableEvict", TARGET_POD_REQUEST, {"cpu": 4000, "kubernetes.io/batch-cpu": 1500},
             [(i, {"kubernetes.io/batch-cpu": 1000}) for i in range(4)])
    res = h.coordinator.execute("cpuEvict", [t], 1000.0)
    assert evicted(h) == ["be-0", "be-1"]
    assert res.unsatisfied == {"CPUAllocatableEvict": {"cpu": 4000}}
    audit = [r for r in h.audit.recent if r["action"] == "evict" and not r["target"]]
    assert len(audit) == 1 and "no victim can release" in audit[0]["reason"] and not audit[0]["executed"]
    # only unsatisfiable resources: nothing is evicted at all
    h2 = harness([be_pod(i) for i in range(2)])
    t2 = task(h2, "CPUAllocatableEvict", TARGET_POD_REQUEST, {"cpu": 4000},
              [(i, {"kubernetes.io/batch-cpu": 1000}) for i in range(2)])
    res2 = h2.coordinator.execute("cpuEvict", [t2], 1000.0)
    assert evicted(h2) == [] and res2.unsatisfied == {"CPUAllocatableEvict": {"cpu": 4000}}


def test_tasks_without_a_positive_amount_do_nothing() -> None:
    h = harness([be_pod(0)])
    t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": 0}, [(0, {"memory": GiB})])
    res = h.coordinator.execute("memoryEvict", [t], 1000.0)
    assert res.decisions == [] and not res.newly_evicted


def test_latency_sensitive_pods_are_never_evicted() -> None:
    pods = [ls_pod(0, kube=KubeQoS.GUARANTEED, labels={"koordinator.sh/eviction-enabled": "true"}),  # LSR
            ls_pod(1),  # LS without the opt-in label
            ls_pod(2, labels={"koordinator.sh/eviction-enabled": "true"}),  # LS, opted in
            be_pod(3)]
    h = harness(pods)
    t = task(h, "MemoryEvict", TARGET_POD_USED, {"memory": 3 * GiB}, [(i, {"memory": 2 * GiB}) for i in range(4)])
    t2 = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": 9 * GiB}, [(1, {"memory": GiB})])
    res = h.coordinator.execute("memoryEvict", [t, t2], 1000.0)
    actions = [(d.pod.name, d.action) for d in res.decisions]
    # ls-1 is refused once per round, not once per task that lists it
    assert actions == [("ls-0", "skipped"), ("ls-1", "skipped"), ("ls-2", "evicted"), ("be-3", "evicted")]
    refused = {d.pod.name: d.reason for d in res.decisions if d.action == "skipped"}
    assert "LSR" in refused["ls-0"] and "eviction-enabled" in refused["ls-1"]
    assert uid(0) not in h.coordinator.pending and uid(1) not in h.coordinator.pending


def test_none_mode_and_dry_run_decide_and_audit_but_execute_nothing() -> None:
    for kw in ({"evict_mode": "none"}, {"evict_mode": "kill", "dry_run": True}):
        h = harness([be_pod(0)], **kw)
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        res = h.coordinator.execute("memoryEvict", [t], 1000.0)
        assert res.newly_evicted and h.coordinator.is_pending(uid(0), 1000.0)
        rec = [r for r in h.audit.recent if r["action"] == "evict"]
        assert len(rec) == 1
        assert rec[0]["target"] == "default/be-0" and rec[0]["uid"] == uid(0) and rec[0]["executed"] is False
        assert rec[0]["strategy"] == "memoryEvict" and rec[0]["feature"] == "BEMemoryEvict"
        assert rec[0]["mode"] == ("dry-run" if kw.get("dry_run") else "none")
        # the amount is written exactly (2 GiB), not in float exponent form
        assert f"memory={2 * GiB}" in rec[0]["reason"]


def test_api_mode_failure_is_audited_and_backs_off() -> None:
    calls: list[str] = []

    def api(pod: PodMeta, reason: str) -> ApiOutcome:
        calls.append(pod.name)
        return ApiOutcome(ok=False, retry_after=30.0, error="429 too many requests")

    h = Harness()
    h.set_pods([be_pod(0), be_pod(1)])
    coord = EvictionCoordinator(h.store, h.layout, h.audit, mode="api", api=api, clock=lambda: h.now)
    t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
    res = coord.execute("memoryEvict", [t], 1000.0)
    assert [d.action for d in res.decisions] == ["failed"] and not res.newly_evicted
    assert res.decisions[0].error == "429 too many requests"
    res = coord.execute("memoryEvict", [t], 1010.0)  # within retry_after: not called again
    assert calls == ["be-0"] and [d.action for d in res.decisions] == ["skipped"]
    coord.execute("memoryEvict", [t], 1031.0)
    assert calls == ["be-0", "be-0"]


@pytest.mark.parametrize("version", [1, 2])
def test_kill_mode_kills_the_processes_in_the_pods_cgroups(version: int) -> None:
    h = harness([be_pod(0), be_pod(1)], version=version, evict_mode="kill")
    victim, bystander = meta(h, 0), meta(h, 1)
    sub = "cpu" if version == 1 else ""
    procs = []
    try:
        for pod in (victim, bystander):
            proc = subprocess.Popen(["sleep", "30"])
            procs.append(proc)
            cdir = h.layout.container_dir(h.layout.pod_dir(pod.kube_qos, pod.uid), pod.containers[0].container_id)
            with open(h.layout.file(sub, cdir, "cgroup.procs"), "w") as f:
                f.write(f"{proc.pid}\n")
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        res = h.coordinator.execute("memoryEvict", [t], 1000.0)
        assert [(d.pod.name, d.action, d.executed) for d in res.decisions] == [("be-0", "evicted", True)]
        assert procs[0].wait(timeout=10) == -signal.SIGKILL
        time.sleep(0.05)
        assert procs[1].poll() is None  # the other pod's process lives
        assert h.recorded.evictions[0]["executed"] is True
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_kill_mode_with_no_process_left_counts_as_evicted() -> None:
    h = harness([be_pod(0)], evict_mode="kill")
    t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
    res = h.coordinator.execute("memoryEvict", [t], 1000.0)
    assert [(d.action, d.executed) for d in res.decisions] == [("evicted", True)]


def test_the_real_strategies_share_one_queue() -> None:
    """cpuEvict evicts a pod; memoryEvict, a moment later, counts it as pending and takes the next."""
    gates = {"CPUEvict": True, "MemoryEvict": True}
    h = Harness(gates=gates, strategies=["cpuEvict", "memoryEvict"], n_cpus=8, memory_bytes=100 * GiB, now=1000.0)
    h.set_node(node_object(h.host))
    opt_in = {"koordinator.sh/eviction-enabled": "true"}
    h.set_pods([be_pod(i, labels=opt_in) for i in range(3)])
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, "cpuEvictThresholdPercent": 60,
                                                   "memoryEvictThresholdPercent": 70,
                                                   "evictEnabledPriorityThreshold": 6000}})
    h.tick("cpuEvict", 1000.0)  # cpuEvict's quiet start
    now = 1020.0
    # cpu: 8 cores = 100% -> release 8000 * 42 // 100 = 3360m; be-0 uses 4000m alone
    h.add_samples("node_cpu_usage", [(now, 8.0)])
    # memory: 80 GiB -> release 12 GiB; be-0 uses 10 GiB, be-1 3 GiB, be-2 1 GiB
    h.add_samples("node_memory_usage", [(now, 80 * GiB)])
    for i, (cores, mem) in enumerate([(4.0, 10 * GiB), (0.5, 3 * GiB), (0.1, GiB)]):
        h.add_samples("pod_cpu_usage", [(now, cores)], pod=uid(i))
        h.add_samples("pod_memory_usage", [(now, mem)], pod=uid(i))
    h.tick("cpuEvict", now)
    h.tick("memoryEvict", now + 0.5)
    # memoryEvict: be-0 pending (10 GiB) + be-1 (3 GiB) = 13 >= 12
    assert [(r["strategy"], r["pod"]) for r in h.recorded.evictions] == [
        ("cpuEvict", "default/be-0"), ("memoryEvict", "default/be-1")]
