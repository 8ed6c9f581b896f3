"""The eviction coordinator (koordlet's KillAndEvictPods across tasks, with our fixes and modes).

Tasks are built by hand here, so every expected release is a sum or max written in the test.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import pytest

import kernelcg
from qosmanager.api.pod import PodMeta
from qosmanager.eviction import coordinator as coord_mod
from qosmanager.eviction.coordinator import ApiOutcome, EvictionCoordinator
from qosmanager.eviction.types import TARGET_POD_REQUEST, TARGET_POD_USED, EvictTask, Victim
from qosmanager.executor import kill as kill_mod
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.kill import Kill
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.roots import HostRoots
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.states.store import StateStore

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


def test_pending_release_is_credited_before_new_victims_wherever_it_sits_in_the_order() -> None:
    """A pod being evicted sits last in the victim order (killed: its usage is 0): its release still
    counts before the pods above it are considered, so a need it covers evicts no one new."""
    h = harness([be_pod(i) for i in range(3)])
    cpu = "kubernetes.io/batch-cpu"

    def cpu_task(order: list[int]) -> EvictTask:
        return task(h, "BECPUEvict", TARGET_POD_REQUEST, {cpu: 3000}, [(i, {cpu: 4000}) for i in order],
                    release_of=lambda p: {cpu: 4000})

    h.coordinator.execute("cpuEvict", [cpu_task([0, 1, 2])], 1000.0)
    assert evicted(h) == ["be-0"]
    res = h.coordinator.execute("cpuEvict", [cpu_task([1, 2, 0])], 1002.0)
    assert [(d.pod.name, d.action) for d in res.decisions] == [("be-0", "pending")]
    assert not res.newly_evicted and evicted(h) == ["be-0"]
    assert res.released == {TARGET_POD_REQUEST: {cpu: 4000}}
    # a need beyond what is pending: the pending pod first, then the order's first new victim
    big = task(h, "BECPUEvict", TARGET_POD_REQUEST, {cpu: 6000}, [(i, {cpu: 4000}) for i in (1, 2, 0)])
    res = h.coordinator.execute("cpuEvict", [big], 1004.0)
    assert [(d.pod.name, d.action) for d in res.decisions] == [("be-0", "pending"), ("be-1", "evicted")]


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


def pod_rel(h: Harness, i: int) -> str:
    pod = meta(h, i)
    return h.layout.pod_dir(pod.kube_qos, pod.uid)


def container_rel(h: Harness, i: int) -> str:
    return h.layout.container_dir(pod_rel(h, i), meta(h, i).containers[0].container_id)


def list_pid(h: Harness, i: int, line: str) -> None:
    """Append a line to the cgroup.procs the kill mode reads for pod ``i`` (v1: the cpu hierarchy)."""
    sub = "cpu" if h.layout.version == 1 else ""
    with open(h.layout.file(sub, container_rel(h, i), "cgroup.procs"), "a") as f:
        f.write(f"{line}\n")


def proc_cgroup(h: Harness, pid: int, rel: str, *, cpu_rel: str | None = None) -> None:
    """The fake ``<proc>/<pid>/cgroup``: v1 one line per hierarchy (``cpu_rel`` for the cpu line when it
    differs), v2 the unified line."""
    if h.layout.version == 1:
        text = (f"12:memory:/{rel}\n7:blkio:/{rel}\n3:cpu,cpuacct:/{cpu_rel or rel}\n"
                f"1:name=systemd:/{rel}\n0::/\n")
    else:
        text = f"0::/{rel}\n"
    h.write_file(f"proc/{pid}/cgroup", text)


def place(h: Harness, i: int, pid: int) -> None:
    """A process of pod ``i``: listed in its cgroup.procs, and /proc says so."""
    list_pid(h, i, str(pid))
    proc_cgroup(h, pid, container_rel(h, i))


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"])


def reap(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def alive(proc: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.05)
    return proc.poll() is None


@pytest.mark.parametrize("version", [1, 2])
def test_kill_mode_kills_the_processes_in_the_pods_cgroups(version: int) -> None:
    h = harness([be_pod(0), be_pod(1)], version=version, evict_mode="kill")
    procs = [sleeper(), sleeper()]
    try:
        for i, proc in enumerate(procs):
            place(h, i, proc.pid)
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        res = h.coordinator.execute("memoryEvict", [t], 1000.0)
        assert [(d.pod.name, d.action, d.executed) for d in res.decisions] == [("be-0", "evicted", True)]
        assert procs[0].wait(timeout=10) == -signal.SIGKILL
        assert alive(procs[1])  # the other pod's process lives
        assert h.recorded.evictions[0]["executed"] is True
        # the kill record (the pids) comes before the eviction's outcome
        recs = [(r["action"], r["target"], r["value"]) for r in h.audit.recent
                if r["action"] in ("kill", "evict")]
        assert recs == [("kill", "default/be-0", str(procs[0].pid)), ("evict", "default/be-0", None)]
    finally:
        reap(procs)


@pytest.mark.parametrize("version", [1, 2])
def test_kill_mode_spares_a_bystander_listed_in_the_victims_cgroup_procs(version: int) -> None:
    h = harness([be_pod(0), be_pod(1)], version=version, evict_mode="kill")
    victim, bystander = sleeper(), sleeper()
    try:
        place(h, 0, victim.pid)
        # listed in the victim's cgroup.procs (a stale or forged line), but /proc places it in pod 1
        list_pid(h, 0, str(bystander.pid))
        if version == 1:  # v1: every other hierarchy says "pod 0"; the cpu line (where pids are read) decides
            proc_cgroup(h, bystander.pid, container_rel(h, 0), cpu_rel=container_rel(h, 1))
        else:
            proc_cgroup(h, bystander.pid, container_rel(h, 1))
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        res = h.coordinator.execute("memoryEvict", [t], 1000.0)
        assert [(d.action, d.executed) for d in res.decisions] == [("evicted", True)]
        assert victim.wait(timeout=10) == -signal.SIGKILL
        assert alive(bystander)
        assert h.coordinator.refused_pids == 1
        [kill] = [r for r in h.audit.recent if r["action"] == "kill"]
        assert kill["value"] == str(victim.pid)
    finally:
        reap([victim, bystander])


def test_kill_mode_spares_a_process_that_left_or_cannot_be_checked() -> None:
    h = harness([be_pod(0)], evict_mode="kill")
    left, unchecked = sleeper(), sleeper()
    try:
        list_pid(h, 0, str(left.pid))  # no /proc/<pid>/cgroup under the proc root: gone, nothing to do
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        assert [d.action for d in h.coordinator.execute("memoryEvict", [t], 1000.0).decisions] == ["evicted"]
        h2 = harness([be_pod(0)], evict_mode="kill")
        list_pid(h2, 0, str(unchecked.pid))
        h2.write_file(f"proc/{unchecked.pid}/cgroup", "12:memory:/somewhere\n")  # no cpu line to check
        t2 = task(h2, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        res = h2.coordinator.execute("memoryEvict", [t2], 1000.0)
        assert [(d.action, d.executed) for d in res.decisions] == [("failed", False)]
        assert "no line for the cpu hierarchy" in (res.decisions[0].error or "")
        assert not h2.coordinator.is_pending(uid(0), 1000.0)  # tried again next round
        assert alive(left) and alive(unchecked)
    finally:
        reap([left, unchecked])


@pytest.mark.parametrize("version", [1, 2])
def test_pid_1_the_agent_and_its_parent_are_never_signalled(monkeypatch: pytest.MonkeyPatch,
                                                              version: int) -> None:
    """Not one by one, and (v2) not by the pod's cgroup.kill either: the pod is killed pid by pid,
    those three spared, and the eviction fails."""
    h = harness([be_pod(0)], version=version, evict_mode="kill")
    kill_file = h.layout.file("", pod_rel(h, 0), "cgroup.kill") if version == 2 else ""
    if kill_file:
        open(kill_file, "w").close()
    signalled: list[int] = []
    # never the real signal here: a regression must not reach init or the test runner
    monkeypatch.setattr(h.executor, "_signal", lambda pid, fd: signalled.append(pid) or 0)
    proc = sleeper()
    try:
        for pid in (1, os.getpid(), os.getppid(), proc.pid):
            place(h, 0, pid)  # /proc claims every one of them is in the pod
        list_pid(h, 0, "0")
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        res = h.coordinator.execute("memoryEvict", [t], 1000.0)
        assert signalled == [proc.pid]
        [d] = res.decisions
        assert d.action == "failed" and d.error is not None
        assert "pid 1:" in d.error and "agent itself" in d.error and "agent's parent" in d.error
        if kill_file:
            assert read(kill_file) == ""  # cgroup.kill not written
            [ev] = [r for r in h.audit.recent if r["action"] == "evict"]
            assert ev["kill"] == "sigkill" and "cgroup.kill" in ev["fallback"]
    finally:
        reap([proc])


def test_a_50_digit_pid_does_not_stop_the_other_pods_evictions() -> None:
    h = harness([be_pod(0), be_pod(1), be_pod(2)], evict_mode="kill")
    procs = [sleeper(), sleeper()]
    try:
        list_pid(h, 0, "1" * 50)
        list_pid(h, 0, "-1")
        list_pid(h, 0, "4294967297")  # would wrap to pid 1 in 32 bits
        list_pid(h, 0, "x")
        place(h, 0, procs[0].pid)
        place(h, 1, procs[1].pid)
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": 3 * GiB},
                 [(0, {"memory": 2 * GiB}), (1, {"memory": 2 * GiB})])
        res = h.coordinator.execute("memoryEvict", [t], 1000.0)
        assert [(d.pod.name, d.action, d.executed) for d in res.decisions] == [
            ("be-0", "evicted", True), ("be-1", "evicted", True)]
        assert [p.wait(timeout=10) for p in procs] == [-signal.SIGKILL, -signal.SIGKILL]
        assert h.coordinator.garbage_pid_lines == 4
    finally:
        reap(procs)


def test_parse_pids_skips_and_counts_what_is_not_a_pid() -> None:
    data = b"12\n0\n-1\n4294967295\n4294967297\n" + b"9" * 50 + b"\n4194304\n4194305\n\xd9\xa3\n 7 \n"
    assert coord_mod.parse_pids(data) == ([12, 4194304, 7], 7)


@pytest.mark.parametrize(("text", "version", "want"), [
    ("12:memory:/a\n4:cpu,cpuacct:/kubepods/x\n0::/\n", 1, "/kubepods/x"),
    ("4:cpuacct:/a\n3:cpuset:/b\n", 1, None),  # "cpuacct" and "cpuset" are not "cpu"
    ("5:cpu:/c\n0::/u\n", 2, "/u"),
    ("1:name=systemd:/s\n", 2, None),
    ("garbage", 1, None),
])
def test_proc_cgroup_path_takes_the_hierarchy_pids_are_read_from(text: str, version: int,
                                                                 want: str | None) -> None:
    assert coord_mod.proc_cgroup_path(text, version) == want


def test_in_cgroup_matches_whole_components_wherever_the_agents_root_is_mounted() -> None:
    pod = "kubepods/besteffort/pod00000000-0000-4000-8000-000000000000"
    assert coord_mod.in_cgroup(f"/{pod}/abc", pod) and coord_mod.in_cgroup(f"/{pod}", pod)
    assert coord_mod.in_cgroup(f"/user.slice/test-1/{pod}/abc\n", pod)  # root mounted further down
    assert coord_mod.in_cgroup(f"/../../{pod}/abc", pod)  # seen from another cgroup namespace
    assert not coord_mod.in_cgroup(f"/{pod}0/abc", pod)  # a longer name is another pod
    assert not coord_mod.in_cgroup("/kubepods/besteffort/abc", pod) and not coord_mod.in_cgroup("/", pod)
    assert not coord_mod.in_cgroup("/kubepods/burstable/pod00000000-0000-4000-8000-000000000000", pod)


def test_the_kill_record_is_on_disk_before_the_signal(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness([be_pod(0)], evict_mode="kill")
    path = tmp_path / "audit.jsonl"
    coord = EvictionCoordinator(h.store, h.layout, AuditLog(str(path)), mode="kill", clock=lambda: h.now)
    proc = sleeper()
    seen: list[list[dict[str, Any]]] = []
    real = coord.executor._signal

    def observing(pid: int, fd: int) -> int:
        seen.append([json.loads(line) for line in path.read_text().splitlines()])
        return real(pid, fd)

    monkeypatch.setattr(coord.executor, "_signal", observing)
    try:
        place(h, 0, proc.pid)
        t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
        coord.execute("memoryEvict", [t], 1000.0)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        [before] = seen
        assert [(r["action"], r["target"], r["value"], r["uid"]) for r in before] == [
            ("kill", "default/be-0", str(proc.pid), uid(0))]
        after = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(r["action"], r["executed"]) for r in after] == [("kill", False), ("evict", True)]
    finally:
        reap([proc])


@pytest.mark.parametrize("version", [1, 2])
def test_kill_mode_with_no_process_left_counts_as_evicted(version: int) -> None:
    h = harness([be_pod(0)], version=version, evict_mode="kill")
    if version == 2:
        kill_file = h.layout.file("", pod_rel(h, 0), "cgroup.kill")
        open(kill_file, "w").close()
    t = task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB}, [(0, {"memory": 2 * GiB})])
    res = h.coordinator.execute("memoryEvict", [t], 1000.0)
    assert [(d.action, d.executed) for d in res.decisions] == [("evicted", True)]
    assert not [r for r in h.audit.recent if r["action"] == "kill"]  # nothing was sent
    if version == 2:
        with open(kill_file) as f:
            assert f.read() == ""


# ---------------------------------------------------------------- kill mode: the whole subtree, cgroup.kill


def hier(h: Harness) -> str:
    return "cpu" if h.layout.version == 1 else ""


def nested(h: Harness, i: int, *parts: str) -> str:
    """A cgroup below pod ``i``'s container (systemd in the container, docker-in-docker, a runtime's exec
    session), in the hierarchy kill mode reads pids from."""
    rel = "/".join([container_rel(h, i), *parts])
    os.makedirs(h.layout.abs_dir(hier(h), rel), exist_ok=True)
    return rel


def place_in(h: Harness, rel: str, pid: int) -> None:
    """A process in cgroup ``rel``: listed in its cgroup.procs, and /proc says so."""
    with open(h.layout.file(hier(h), rel, "cgroup.procs"), "a") as f:
        f.write(f"{pid}\n")
    proc_cgroup(h, pid, rel)


def kill_files(h: Harness, *rels: str) -> dict[str, str]:
    """v2: a ``cgroup.kill`` (empty) in each of ``rels``, as every non-root cgroup of Linux >= 5.14 has."""
    paths = {rel: h.layout.file("", rel, "cgroup.kill") for rel in rels}
    for p in paths.values():
        open(p, "w").close()
    return paths


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def records(h: Harness, *actions: str) -> list[dict[str, Any]]:
    return [r for r in h.audit.recent if r["action"] in actions]


def memory_task(h: Harness, *victims: int) -> EvictTask:
    return task(h, "BEMemoryEvict", TARGET_POD_USED, {"memory": GiB},
                [(i, {"memory": 2 * GiB}) for i in victims])


@pytest.mark.parametrize("version", [1, 2])
def test_kill_mode_reaches_every_depth_of_the_pods_subtree(version: int) -> None:
    """Processes in cgroups a container nests (two and four levels below the pod dir) die with the pod; a
    process of another pod at the same depth lives."""
    h = harness([be_pod(0), be_pod(1)], version=version, evict_mode="kill")
    procs = [sleeper() for _ in range(4)]
    try:
        place_in(h, pod_rel(h, 0), procs[0].pid)  # the pod dir itself
        place_in(h, nested(h, 0, "init.scope"), procs[1].pid)
        place_in(h, nested(h, 0, "docker", "abc", "init.scope"), procs[2].pid)
        place_in(h, nested(h, 1, "init.scope"), procs[3].pid)  # a bystander, another pod
        res = h.coordinator.execute("memoryEvict", [memory_task(h, 0)], 1000.0)
        assert [(d.action, d.executed, d.error) for d in res.decisions] == [("evicted", True, None)]
        assert [p.wait(timeout=10) for p in procs[:3]] == [-signal.SIGKILL] * 3
        assert alive(procs[3])
        [kill] = records(h, "kill")
        assert sorted(map(int, kill["value"].split())) == sorted(p.pid for p in procs[:3])
        assert kill["how"] == "sigkill" and kill["stage"] == "before-signal"
        [ev] = records(h, "evict")
        assert (ev["kill"], ev["killed"], ev["rounds"]) == ("sigkill", 3, 1)
        assert h.executor.stats.signals == 3 and h.executor.stats.cgroup_kills == 0
    finally:
        reap(procs)


def test_kill_mode_reads_a_bounded_number_of_cgroups_and_says_when_it_stopped(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(coord_mod, "MAX_KILL_DIRS", 3)
    h = harness([be_pod(0)], evict_mode="kill")
    procs = [sleeper(), sleeper()]
    try:
        # walked: the pod dir, its container, the container's first child "a" -- then the bound
        place_in(h, nested(h, 0, "a"), procs[0].pid)
        place_in(h, nested(h, 0, "b"), procs[1].pid)
        res = h.coordinator.execute("memoryEvict", [memory_task(h, 0)], 1000.0)
        [d] = res.decisions
        assert d.action == "failed" and "more than 3 cgroups" in (d.error or "")
        assert not h.coordinator.is_pending(uid(0), 1000.0)  # tried again next round
        assert procs[0].wait(timeout=10) == -signal.SIGKILL
        assert alive(procs[1])
        [kill] = records(h, "kill")
        assert kill["value"] == str(procs[0].pid) and kill["dirs_capped"] == 3
        assert "holds more than 3 cgroups; only the first 3 are read" in caplog.text
    finally:
        reap(procs)


def test_v2_kill_mode_writes_the_pods_own_cgroup_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    """cgroup v2: one write of "1" to the pod dir's cgroup.kill, the pids seen audited before it; no
    signal pid by pid, and no other cgroup.kill touched (kubepods, the QoS dir, the container, a
    nested cgroup, another pod)."""
    h = harness([be_pod(0), be_pod(1)], version=2, evict_mode="kill")
    signalled: list[int] = []
    monkeypatch.setattr(h.executor, "_signal", lambda pid, fd: signalled.append(pid) or 0)
    procs = [sleeper(), sleeper(), sleeper()]
    try:
        place_in(h, container_rel(h, 0), procs[0].pid)
        deep = nested(h, 0, "init.scope")
        place_in(h, deep, procs[1].pid)
        place_in(h, container_rel(h, 1), procs[2].pid)
        files = kill_files(h, h.layout.kubepods_dir(), h.layout.qos_dir(KubeQoS.BESTEFFORT), pod_rel(h, 0),
                           container_rel(h, 0), deep, pod_rel(h, 1), container_rel(h, 1))
        res = h.coordinator.execute("memoryEvict", [memory_task(h, 0)], 1000.0)
        assert [(d.action, d.executed, d.error) for d in res.decisions] == [("evicted", True, None)]
        written = {rel: read(p) for rel, p in files.items()}
        assert written == {rel: ("1" if rel == pod_rel(h, 0) else "") for rel in files}
        assert signalled == [] and h.executor.stats.signals == 0 and h.executor.stats.cgroup_kills == 1
        [kill] = records(h, "kill")
        assert kill["how"] == "cgroup.kill" and kill["stage"] == "before-signal"
        assert kill["file"] == f"{pod_rel(h, 0)}/cgroup.kill"
        assert sorted(map(int, kill["value"].split())) == sorted(p.pid for p in procs[:2])
        [ev] = records(h, "evict")
        assert (ev["kill"], ev["killed"], ev["executed"]) == ("cgroup.kill", 2, True)
    finally:
        reap(procs)


@pytest.mark.parametrize("how", ["missing", "unsupported", "refused"])
def test_v2_kill_mode_signals_pid_by_pid_where_cgroup_kill_is_missing_or_fails(
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """No cgroup.kill (Linux < 5.14), one the kernel refuses as unsupported, or one that fails otherwise:
    the checked pid-by-pid path, every step audited."""
    h = harness([be_pod(0)], version=2, evict_mode="kill")
    proc = sleeper()
    try:
        place_in(h, nested(h, 0, "init.scope"), proc.pid)
        if how != "missing":
            [path] = kill_files(h, pod_rel(h, 0)).values()
            err = errno.EOPNOTSUPP if how == "unsupported" else errno.EACCES

            def refuse(p: str) -> None:
                assert p == path
                raise OSError(err, os.strerror(err))

            monkeypatch.setattr(kill_mod, "write_cgroup_kill", refuse)
        res = h.coordinator.execute("memoryEvict", [memory_task(h, 0)], 1000.0)
        assert [(d.action, d.executed, d.error) for d in res.decisions] == [("evicted", True, None)]
        assert proc.wait(timeout=10) == -signal.SIGKILL
        steps = [(r["how"], r["stage"], r.get("error", "").split(":")[0]) for r in records(h, "kill")]
        [ev] = records(h, "evict")
        assert ev["kill"] == "sigkill" and ev["killed"] == 1
        if how == "missing":
            assert steps == [("sigkill", "before-signal", "")]
            assert "no cgroup.kill" in ev["fallback"]
        else:
            name = errno.errorcode[err]
            stage = "unsupported" if how == "unsupported" else "failed"
            assert steps == [("cgroup.kill", "before-signal", ""), ("cgroup.kill", stage, name),
                             ("sigkill", "before-signal", "")]
            assert name in ev["fallback"]
        assert h.executor.stats.signals == 1 and h.executor.stats.cgroup_kills == 0
    finally:
        reap([proc])


def test_the_executor_writes_cgroup_kill_only_in_a_pods_own_dir() -> None:
    h = harness([be_pod(0), be_pod(1)], version=2)
    rels = [h.layout.kubepods_dir(), h.layout.qos_dir(KubeQoS.BESTEFFORT), pod_rel(h, 0), container_rel(h, 0)]
    files = kill_files(h, *rels)
    for rel, who in [(h.layout.kubepods_dir(), uid(0)), (h.layout.qos_dir(KubeQoS.BESTEFFORT), uid(0)),
                     (container_rel(h, 0), uid(0)), (pod_rel(h, 0), uid(1)),
                     (pod_rel(h, 0) + "/../" + pod_rel(h, 1).rpartition("/")[2], uid(1)),
                     ("/" + pod_rel(h, 0), uid(0))]:
        with pytest.raises(ValueError, match="only in a pod's own dir"):
            h.executor.kill(Kill("memoryEvict", "default/be-0", who, [], cgroup=rel))
    assert all(read(p) == "" for p in files.values())
    assert not records(h, "kill")
    res = h.executor.kill(Kill("memoryEvict", "default/be-0", uid(0), [], cgroup=pod_rel(h, 0)))
    assert (res.how, res.status) == ("cgroup.kill", "done") and read(files[pod_rel(h, 0)]) == "1"
    h1 = harness([be_pod(0)], version=1)  # cgroup v1 has no cgroup.kill
    with pytest.raises(ValueError, match="cgroup v2"):
        h1.executor.kill(Kill("memoryEvict", "default/be-0", uid(0), [], cgroup=pod_rel(h1, 0)))


def test_the_executor_never_signals_init_the_agent_or_its_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness([be_pod(0)])
    signalled: list[int] = []
    monkeypatch.setattr(h.executor, "_signal", lambda pid, fd: signalled.append(pid) or 0)
    pids = [0, 1, os.getpid(), os.getppid(), 4242]
    res = h.executor.kill(Kill("memoryEvict", "default/be-0", uid(0), pids))
    assert signalled == [4242] and res.sent == 1
    assert res.errors == {0: errno.EPERM, 1: errno.EPERM, os.getpid(): errno.EPERM, os.getppid(): errno.EPERM}


@pytest.mark.parametrize("version", [1, 2])
def test_a_dry_run_in_kill_mode_sends_nothing_and_audits_what_it_would_kill(version: int) -> None:
    h = harness([be_pod(0)], version=version, evict_mode="kill", dry_run=True)
    proc = sleeper()
    try:
        place_in(h, nested(h, 0, "init.scope"), proc.pid)
        files = kill_files(h, pod_rel(h, 0)) if version == 2 else {}
        res = h.coordinator.execute("memoryEvict", [memory_task(h, 0)], 1000.0)
        assert [(d.action, d.executed) for d in res.decisions] == [("evicted", False)]
        assert alive(proc)
        assert all(read(p) == "" for p in files.values())
        [kill] = records(h, "kill")
        assert (kill["value"], kill["stage"], kill["executed"]) == (str(proc.pid), "dry-run", False)
        assert kill["how"] == ("cgroup.kill" if version == 2 else "sigkill")
        [ev] = records(h, "evict")
        assert ev["mode"] == "dry-run" and ev["executed"] is False and ev["kill"] == kill["how"]
        assert h.executor.stats.signals == 0 and h.executor.stats.cgroup_kills == 0
    finally:
        reap([proc])


def forking_coordinator(h: Harness, forks: int, procs: list[subprocess.Popen[bytes]]) -> EvictionCoordinator:
    """Kill mode whose pause between rounds starts a process in pod 0's nested cgroup, the first ``forks``
    times: children forked while the kill is going on."""
    rel = nested(h, 0, "init.scope")

    def pause(seconds: float) -> None:
        assert 0 < seconds <= 0.1
        if len(procs) <= forks:
            procs.append(sleeper())
            place_in(h, rel, procs[-1].pid)

    return EvictionCoordinator(h.store, h.layout, h.audit, mode="kill", clock=lambda: h.now,
                               executor=h.executor, pause=pause)


def test_kill_mode_signals_the_processes_forked_during_the_kill() -> None:
    h = harness([be_pod(0)], evict_mode="kill")
    procs = [sleeper()]
    try:
        coord = forking_coordinator(h, 1, procs)
        place_in(h, container_rel(h, 0), procs[0].pid)
        res = coord.execute("memoryEvict", [memory_task(h, 0)], 1000.0)
        assert [(d.action, d.executed, d.error) for d in res.decisions] == [("evicted", True, None)]
        assert len(procs) == 2 and [p.wait(timeout=10) for p in procs] == [-signal.SIGKILL] * 2
        assert [(r["value"], r["round"]) for r in records(h, "kill")] == [(str(procs[0].pid), 1),
                                                                          (str(procs[1].pid), 2)]
        [ev] = records(h, "evict")
        assert (ev["killed"], ev["rounds"]) == (2, 2)
    finally:
        reap(procs)


def test_kill_mode_fails_when_processes_keep_appearing_after_its_rounds() -> None:
    h = harness([be_pod(0)], evict_mode="kill")
    procs = [sleeper()]
    try:
        coord = forking_coordinator(h, 100, procs)
        place_in(h, container_rel(h, 0), procs[0].pid)
        res = coord.execute("memoryEvict", [memory_task(h, 0)], 1000.0)
        [d] = res.decisions
        assert d.action == "failed" and "after 5 rounds of SIGKILL" in (d.error or "")
        assert not coord.is_pending(uid(0), 1000.0)  # tried again next round
        rounds = coord_mod.KILL_ROUNDS
        assert len(records(h, "kill")) == rounds and len(procs) == rounds + 1
        assert [p.wait(timeout=10) for p in procs[:rounds]] == [-signal.SIGKILL] * rounds
        assert alive(procs[rounds])  # appeared after the last round: found, not signalled
    finally:
        reap(procs)


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


@pytest.mark.kernel
@pytest.mark.parametrize("version", [1, 2])
def test_real_kernel_kill_mode_ends_exactly_the_victims_processes(version: int) -> None:
    """Real cgroups (created beneath this test's own) and the real /proc: the victim pod's processes (in
    cgroups its container nests two and three levels below the pod dir; on v1 also in the container and
    the pod dir themselves: v2 holds processes only in leaves) end; processes of ours in another pod's
    cgroups at the same depths live on.  v2 kills with the pod dir's cgroup.kill where the kernel has it."""
    reason = kernelcg.unavailable(version)
    if reason:
        pytest.skip(f"real cgroups v{version} unavailable: {reason}")
    with kernelcg.kernel_tree(version) as tree:
        layout = CgroupLayout(HostRoots(cgroup=tree.root), version, "cgroupfs")
        store = StateStore()
        store.set_pods([be_pod(0), be_pod(1)])
        audit = AuditLog(None)
        coord = EvictionCoordinator(store, layout, audit, mode="kill")
        hier = "cpu" if version == 1 else ""
        dirs = []
        for i in (0, 1):
            pod = store.pods[uid(i)]
            pod_rel = layout.pod_dir(pod.kube_qos, pod.uid)
            ctr = layout.container_dir(pod_rel, pod.containers[0].container_id)
            dirs.append((pod_rel, ctr, f"{ctr}/other", f"{ctr}/sub", f"{ctr}/sub/deeper"))
            tree.mkdir(dirs[-1][2])
            tree.mkdir(dirs[-1][4])
        leaves, inner = (2, 4), (0, 1, 3)
        at = leaves + (inner if version == 1 else ())
        victims = [tree.spawn(dirs[0][k], ["sleep", "600"]) for k in at]
        bystanders = [tree.spawn(dirs[1][k], ["sleep", "600"]) for k in at]
        procs = victims + bystanders
        try:
            t = EvictTask("BEMemoryEvict", "test", TARGET_POD_USED, {"memory": GiB},
                          [Victim(store.pods[uid(0)], {"memory": 2 * GiB})])
            res = coord.execute("memoryEvict", [t], time.time())
            assert [(d.pod.name, d.action, d.executed, d.error) for d in res.decisions] == [
                ("be-0", "evicted", True, None)]
            assert [p.wait(timeout=10) for p in victims] == [-signal.SIGKILL] * len(victims)
            assert all(alive(p) for p in bystanders)
            [kill] = [r for r in audit.recent if r["action"] == "kill"]
            assert sorted(map(int, kill["value"].split())) == sorted(p.pid for p in victims)
            [ev] = [r for r in audit.recent if r["action"] == "evict"]
            has_kill_file = version == 2 and os.path.exists(tree.path(hier, f"{dirs[0][0]}/cgroup.kill"))
            assert ev["kill"] == ("cgroup.kill" if has_kill_file else "sigkill"), ev
            assert not _read_procs(tree, hier, dirs[0][0])
        finally:
            reap(procs)


def _read_procs(tree: kernelcg.KernelTree, hier: str, rel: str) -> list[str]:
    """The pids the kernel lists in ``rel`` and every cgroup below it."""
    out: list[str] = []
    for d, _, _ in os.walk(tree.path(hier, rel)):
        with open(os.path.join(d, "cgroup.procs")) as f:
            out += f.read().split()
    return out


FORK_LOOP = """
import os, time
while True:  # a fork loop: a child every few ms, each living a moment, reaped as they end
    if os.fork() == 0:
        time.sleep(0.1)
        os._exit(0)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    time.sleep(0.003)
"""


@pytest.mark.kernel
def test_real_kernel_cgroup_kill_ends_a_fork_loop() -> None:
    """cgroup v2: a fork loop two levels below the pod dir ends with the pod dir's cgroup.kill (the kernel
    kills the subtree at once, the children forked during the kill included); a process of another pod
    in a cgroup at the same depth lives on."""
    reason = kernelcg.unavailable(2)
    if reason:
        pytest.skip(f"real cgroups v2 unavailable: {reason}")
    with kernelcg.kernel_tree(2) as tree:
        layout = CgroupLayout(HostRoots(cgroup=tree.root), 2, "cgroupfs")
        store = StateStore()
        store.set_pods([be_pod(0), be_pod(1)])
        audit = AuditLog(None)
        coord = EvictionCoordinator(store, layout, audit, mode="kill")
        rels = []
        for i in (0, 1):
            pod = store.pods[uid(i)]
            pod_rel = layout.pod_dir(pod.kube_qos, pod.uid)
            rels.append((pod_rel, f"{layout.container_dir(pod_rel, pod.containers[0].container_id)}/sub"))
            tree.mkdir(rels[-1][1])
        if not os.path.exists(tree.path("", f"{rels[0][0]}/cgroup.kill")):
            pytest.skip("this kernel has no cgroup.kill (Linux < 5.14)")
        loop = tree.spawn(rels[0][1], [sys.executable, "-c", FORK_LOOP])
        bystander = tree.spawn(rels[1][1], ["sleep", "600"])
        try:
            deadline = time.monotonic() + 60
            while len(_read_procs(tree, "", rels[0][0])) < 5:  # the loop runs: children come and go
                assert time.monotonic() < deadline and loop.poll() is None, "the fork loop did not start"
                time.sleep(0.05)
            t = EvictTask("BEMemoryEvict", "test", TARGET_POD_USED, {"memory": GiB},
                          [Victim(store.pods[uid(0)], {"memory": 2 * GiB})])
            res = coord.execute("memoryEvict", [t], time.time())
            assert [(d.action, d.executed, d.error) for d in res.decisions] == [("evicted", True, None)]
            assert loop.wait(timeout=10) == -signal.SIGKILL
            deadline = time.monotonic() + 10
            while "populated 0" not in read(tree.path("", f"{rels[0][0]}/cgroup.events")):
                left = _read_procs(tree, "", rels[0][0])
                assert time.monotonic() < deadline, f"the pod's cgroups still hold {left}"
                time.sleep(0.02)
            assert alive(bystander)
            [kill] = [r for r in audit.recent if r["action"] == "kill"]
            assert kill["how"] == "cgroup.kill" and str(loop.pid) in kill["value"].split()
            [ev] = [r for r in audit.recent if r["action"] == "evict"]
            assert ev["kill"] == "cgroup.kill" and ev["executed"] is True
        finally:
            reap([loop, bystander])


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfds here")
def test_an_exited_process_is_told_by_its_pidfd_whatever_the_descriptors_number() -> None:
    """Kill mode tells a dying process still listed from a new one with a reused pid by the pidfd it kept;
    the agent holds thousands of descriptors, so the pidfd's number is far above select()'s 1024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= 1100:
        pytest.skip(f"descriptor limit {soft}")
    proc = sleeper()
    fd = os.pidfd_open(proc.pid)
    high = os.dup2(fd, min(soft - 1, 4000))
    try:
        assert not coord_mod._exited(high)
        proc.kill()
        proc.wait()
        assert coord_mod._exited(high) and coord_mod._exited(fd)
        assert not coord_mod._exited(-1)  # no pidfd: cannot tell, so "not exited"
    finally:
        os.close(high)
        os.close(fd)
        reap([proc])
