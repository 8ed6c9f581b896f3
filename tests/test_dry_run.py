"""``--dry-run`` changes nothing on the host: every change is decided and audited, none is made.

The executor's directory operation is checked on its own first; then the real agent runs a dry run
with every strategy and gate on over a fake node under pressure, and the cgroup, proc and sys trees
must come out byte-identical (contents, directory listings, modes) while the audit shows the decisions.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from typing import Any

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, MakeDir, Write
from qosmanager.framework.gates import KNOWN
from qosmanager.framework.manager import ORDER
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from simclock import Clock


def executor(tmp_path, *, dry_run: bool) -> tuple[FakeHost, Executor, AuditLog]:
    host = FakeHost(str(tmp_path / "host"), resctrl=True)
    audit = AuditLog(None, clock=lambda: 1000.0)
    return host, Executor(host.layout, audit, dry_run=dry_run, clock=lambda: 1000.0), audit


def records(audit: AuditLog, action: str) -> list[dict]:
    return [r for r in audit.recent if r["action"] == action]


def test_mkdir_creates_once_and_audits_it(tmp_path) -> None:
    host, ex, audit = executor(tmp_path, dry_run=False)
    d = MakeDir("resctrlReconcile", "sys", "fs/resctrl/LS", reason="the LS group")
    assert ex.mkdir(d) == "created"
    assert os.path.isdir(host.roots.sys_path("fs/resctrl/LS"))
    assert ex.mkdir(d) == "exists"
    [rec] = records(audit, "mkdir")
    assert {k: rec[k] for k in ("strategy", "target", "value", "old", "uid", "reason", "executed")} == {
        "strategy": "resctrlReconcile", "target": "sys/fs/resctrl/LS", "value": "0755", "old": None,
        "uid": None, "reason": "the LS group", "executed": True}


def test_mkdir_refuses_paths_that_climb_or_are_absolute(tmp_path) -> None:
    _host, ex, audit = executor(tmp_path, dry_run=False)
    for rel in ("", "/etc/x", "fs/../../x", "fs/resctrl/./LS", "fs//LS"):
        with pytest.raises(ValueError, match="bad directory"):
            ex.mkdir(MakeDir("s", "sys", rel))
    with pytest.raises(ValueError, match="unknown root"):
        ex.mkdir(MakeDir("s", "etc", "x"))
    assert records(audit, "mkdir") == []


def test_mkdir_failure_is_audited_once_per_error_not_every_tick(tmp_path) -> None:
    host, ex, audit = executor(tmp_path, dry_run=False)
    d = MakeDir("s", "sys", "fs/resctrl/nothere/LS")  # the parent is missing: only the last part is made
    assert [ex.mkdir(d) for _ in range(3)] == ["failed"] * 3
    [rec] = records(audit, "mkdir")
    assert rec["executed"] is False and rec["error"].startswith("ENOENT")
    assert not os.path.exists(host.roots.sys_path("fs/resctrl/nothere"))


def test_dry_run_mkdir_is_decided_once_and_files_in_it_are_decided_not_skipped(tmp_path) -> None:
    host, ex, audit = executor(tmp_path, dry_run=True)
    d = MakeDir("resctrlReconcile", "sys", "fs/resctrl/BE")
    assert [ex.mkdir(d) for _ in range(3)] == ["dry-run"] * 3
    assert not os.path.exists(host.roots.sys_path("fs/resctrl/BE"))
    [rec] = records(audit, "mkdir")
    assert rec["executed"] is False and "error" not in rec and rec["target"] == "sys/fs/resctrl/BE"
    res = ex.apply([Write("resctrlReconcile", "resctrl.schemata", "L3:0=f;\n", "BE"),
                    Write("resctrlReconcile", "resctrl.tasks", "42", "BE", entry="42", compare=False,
                          cacheable=False),
                    Write("resctrlReconcile", "resctrl.schemata", "L3:0=f;\n", "elsewhere")])
    assert [r.status for r in res] == ["dry-run", "dry-run", "missing"]  # a file of no would-be dir: missing
    writes = records(audit, "write")
    assert [(r["target"], r["value"], r["old"], r["executed"]) for r in writes] == [
        ("sys/fs/resctrl/BE/schemata", "L3:0=f;", None, False),
        ("sys/fs/resctrl/BE/tasks", "42", None, False)]
    assert not os.path.exists(host.roots.sys_path("fs/resctrl/BE"))


def test_dry_run_decides_an_uncacheable_write_once_per_force_interval(tmp_path) -> None:
    host, ex, audit = executor(tmp_path, dry_run=True)
    host.write("sys/fs/resctrl/BE/tasks", "")

    def task(tid: str) -> Write:
        return Write("resctrlReconcile", "resctrl.tasks", tid, "BE", entry=tid, compare=False,
                     cacheable=False)

    for now in (1000.0, 1001.0, 1059.0):
        first = "dry-run" if now == 1000.0 else "cached"
        assert [r.status for r in ex.apply([task("7"), task(f"{int(now)}")], now)] == [first, "dry-run"]
    ex.apply([task("7")], 1061.0)  # the force interval (60 s) is over: decided and audited again
    assert [r["value"] for r in records(audit, "write")] == ["7", "1000", "1001", "1059", "7"]
    assert host.read("sys/fs/resctrl/BE/tasks") == ""


# ---------------------------------------------------------------------------------------------------
# the whole agent
# ---------------------------------------------------------------------------------------------------
CPUS = 8
GIB = 1 << 30
S = 10**9


def tree_state(*roots: str) -> dict[str, tuple[int, str]]:
    """Every entry under the roots: (mode, content hash | link target | sorted listing)."""
    out: dict[str, tuple[int, str]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            st = os.lstat(dirpath)
            out[dirpath] = (st.st_mode, "\0".join(sorted(dirnames + filenames)))
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    out[path] = (st.st_mode, "-> " + os.readlink(path))
                else:
                    with open(path, "rb") as f:
                        out[path] = (st.st_mode, hashlib.sha256(f.read()).hexdigest())
    return out


def diff(before: dict[str, tuple[int, str]], after: dict[str, tuple[int, str]]) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def cid(n: int) -> str:
    return f"containerd://{n:064x}"


BLKIO = json.dumps({"blocks": [{"name": "/dev/vdb", "type": "device",
                                "ioCfg": {"readIOPS": 2048, "writeBPS": 1 << 20}}]})
SLO: dict[str, Any] = {
    "resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressThresholdPercent": 40, "cpuSuppressPolicy": "cfsQuota",
        "memoryEvictThresholdPercent": 60, "memoryEvictLowerPercent": 55,
        "cpuEvictThresholdPercent": 50, "cpuEvictLowerPercent": 45,
        "cpuEvictBESatisfactionLowerPercent": 60, "cpuEvictBESatisfactionUpperPercent": 80,
        "cpuEvictBEUsageThresholdPercent": 90, "cpuEvictTimeWindowSeconds": 3,
        "cpuAllocatableEvictThresholdPercent": 50, "cpuAllocatableEvictLowerPercent": 40,
        "memoryAllocatableEvictThresholdPercent": 50, "memoryAllocatableEvictLowerPercent": 40,
        "evictEnabledPriorityThreshold": 9999, "allocatableEvictPriorityThreshold": 7000,
    },
    "resourceQOSStrategy": {
        cls: {"memoryQOS": {"enable": True, "minLimitPercent": 40, "lowLimitPercent": 50,
                            "throttlingPercent": 80, "wmarkRatio": 95, "priorityEnable": 1, "priority": 6,
                            "oomKillGroup": 1},
              "resctrlQOS": {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 60,
                             "mbaPercent": 50},
              "cpuQOS": {"enable": True, "groupIdentity": 1}}
        for cls in ("lsrClass", "lsClass", "beClass")
    },
    "cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                         "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 90},
    "systemStrategy": {"minFreeKbytesFactor": 200, "watermarkScaleFactor": 150, "memcgReapBackGround": 1,
                       "schedGroupIdentityEnabled": 1, "schedIdleSaverWmark": 25000,
                       "pageCacheLimitEnabled": 1,
                       "schedFeatures": {"HRTICK": True}},
}


SLO["resourceQOSStrategy"]["beClass"]["blkioQOS"] = {"enable": True, "blocks": [
    {"name": "/dev/vdb", "type": "device", "ioCfg": {"readIOPS": 1000, "ioWeightPercent": 50}}]}
# Anolis' memory-QoS files on cgroup v1 (native on v2)
V1_MEMORY_QOS = ("memory.min", "memory.low", "memory.high", "memory.wmark_ratio", "memory.wmark_scale_factor",
                 "memory.wmark_min_adj", "memory.priority", "memory.use_priority_oom", "memory.oom.group")


def fake_pods() -> list[tuple[FakePod, dict[str, str], dict[str, str]]]:
    """(pod, labels, annotations): every class, the annotations koordlet reads, opted-in LS."""
    def pod(i: int, qos: KubeQoS, name: str, n: int = 1) -> FakePod:
        return FakePod(f"0000000{i}-0000-4000-8000-000000000000", "default", name, qos,
                       [FakeContainer(f"c{k}", cid(i * 10 + k)) for k in range(n)],
                       sandbox_id=cid(i * 10 + 9))

    burst = json.dumps({"policy": "auto", "cpuBurstPercent": 500})
    mem = json.dumps({"policy": "auto"})
    return [
        (pod(1, KubeQoS.GUARANTEED, "lse"), {"koordinator.sh/qosClass": "LSE"}, {}),
        (pod(2, KubeQoS.GUARANTEED, "lsr"), {"koordinator.sh/qosClass": "LSR"},
         {"koordinator.sh/memoryQOS": mem}),
        (pod(3, KubeQoS.BURSTABLE, "ls", 2), {"koordinator.sh/eviction-enabled": "true"},
         {"koordinator.sh/cpuBurst": burst, "koordinator.sh/memoryQOS": mem,
          "koordinator.sh/blkioQOS": BLKIO}),
        (pod(4, KubeQoS.BESTEFFORT, "be-a"), {}, {"koordinator.sh/blkioQOS": BLKIO}),
        (pod(5, KubeQoS.BESTEFFORT, "be-b"), {}, {"koordinator.sh/eviction-policy": '["BEMemoryEvict"]'}),
        (pod(6, KubeQoS.BESTEFFORT, "be-c"), {}, {}),
    ]


class Load:
    """CPU and memory pressure on the fake node, advanced by the test (never by the agent)."""

    def __init__(self, host: FakeHost, pods: list[FakePod]) -> None:
        self.host, self.pods = host, pods
        self.busy = self.steps = 0
        self.usage: dict[str, int] = {}

    def step(self) -> None:
        """One second: 95 % of every CPU busy from the start; 90 % of memory used after 25 s (so cpuEvict,
        which waits 20 s after its first tick, decides before memoryEvict's victims count as pending)."""
        self.steps += 1
        self.busy += 95
        self.host.set_proc_stat([self.busy] * CPUS, [10_000] * CPUS)
        total_kb = self.host.memory_bytes // 1024
        free = total_kb // 20 if self.steps > 25 else total_kb // 2
        self.host.set_meminfo(total_kb, free, free * 2)
        for p in self.pods:
            per_core = 2 if p.qos is KubeQoS.BESTEFFORT else 1
            for c in p.containers:
                rel = self.host.container_dir(p.uid, c.name)
                self.usage[rel] = self.usage.get(rel, 0) + per_core * S // 2
                self.host.set_cpu_usage(rel, self.usage[rel])
                self.host.set_memory(rel, 0, 6 * GIB, 0, GIB, 0)
            prel = self.host.pod_dir(p.uid)
            self.usage[prel] = sum(v for k, v in self.usage.items() if k.startswith(prel + "/"))
            self.host.set_cpu_usage(prel, self.usage[prel])
            self.host.set_memory(prel, 0, 6 * GIB * len(p.containers), 0, GIB * len(p.containers), 0)


@pytest.mark.parametrize("version", [1, 2])
def test_a_dry_run_with_everything_on_changes_nothing_and_audits_every_decision(tmp_path,
                                                                                version: int) -> None:
    host = FakeHost(str(tmp_path / "host"), version=version, n_cpus=CPUS, memory_bytes=64 * GIB, resctrl=True)
    specs = fake_pods()
    for fp, _, _ in specs:
        host.add_pod(fp)
    # the kernel files of the optional features the strategies look for (Anolis knobs, a disk)
    for rel, text in {"sys/block/vdb/dev": "253:16\n", "sys/kernel/mm/memcg_reaper/reap_background": "0\n",
                      "proc/sys/kernel/sched_group_identity_enabled": "0\n",
                      "proc/sys/kernel/sched_idle_saver_wmark": "0\n",
                      "sys/kernel/mm/pagecache_limit/enabled": "0\n",
                      "sys/kernel/debug/sched_features": "GENTLE_FAIR_SLEEPERS NO_HRTICK\n"}.items():
        host.write(rel, text)
    if version == 1:
        kubepods = host.layout.abs_dir("memory", host.layout.kubepods_dir())
        for dirpath, _, _ in os.walk(kubepods):
            for name in V1_MEMORY_QOS:
                host.write(os.path.relpath(os.path.join(dirpath, name), host.root), "0\n")
    procs = [subprocess.Popen(["sleep", "60"]) for _ in specs]
    try:
        for proc, (fp, _, _) in zip(procs, specs):
            # each pod's process, where kill mode (were it not a dry run) would find and verify it
            rel = host.container_dir(fp.uid, fp.containers[0].name)
            host.set_tasks(rel, [proc.pid])
            line = (f"4:cpu,cpuacct:/{rel}\n" if version == 1 else "") + f"0::/{rel}\n"
            host.write(f"proc/{proc.pid}/cgroup", line)
            if version == 2:  # the pod dir's cgroup.kill (Linux >= 5.14), which kill mode would write
                kill_file = host.layout.file("", host.layout.pod_dir(fp.qos, fp.uid), "cgroup.kill")
                host.write(os.path.relpath(kill_file, host.root), "")
        files = {"pods": tmp_path / "pods.json", "node": tmp_path / "node.json", "slo": tmp_path / "slo.json"}
        objs = [pod_object(fp, labels=lab, annotations=ann) for fp, lab, ann in specs]
        files["pods"].write_text(json.dumps(pod_list(objs)))
        files["node"].write_text(json.dumps(node_object(host, batch_cpu_milli=4000, batch_memory=16 * GIB)))
        files["slo"].write_text(json.dumps(nodeslo_object(SLO)))
        load = Load(host, [fp for fp, _, _ in specs])
        roots = (host.roots.cgroup, host.roots.proc, host.roots.sys)
        load.step()
        before = tree_state(*roots)
        clock = Clock()
        audit_path = tmp_path / "audit.jsonl"
        cfg = AgentConfig(roots=host.roots, pods_file=str(files["pods"]), node_file=str(files["node"]),
                          node_slo_file=str(files["slo"]), evict_mode="kill", dry_run=True,
                          audit_log=str(audit_path), metrics_addr="",
                          # every gate but BECPUManager, which hands the BE cpuset to runtime hooks and
                          # leaves cpuSuppress only its recovery
                          feature_gates={g: g != "BECPUManager" for g in KNOWN})
        agent = Agent(cfg, clock=clock, monotonic=clock.mono, monotonic_ns=clock.mono_ns, seed=0)
        try:
            assert sorted(agent.strategy_names) == sorted(ORDER)  # every strategy runs
            assert diff(before, tree_state(*roots)) == []
            end = clock.t + 45.0
            while clock.t < end:
                job = min(agent.scheduler.jobs, key=lambda j: j.next_at)
                clock.t = max(clock.t, job.next_at)
                if job.name == "collect":  # the test's own load changes, then nothing else may change
                    assert diff(before, tree_state(*roots)) == []
                    load.step()
                    before = tree_state(*roots)
                agent.scheduler.run_job(job)
            assert diff(before, tree_state(*roots)) == []
            assert all(j.errors == 0 for j in agent.scheduler.jobs)
            assert all(st.errors == 0 for st in agent.manager.stats.values()), agent.manager.stats
        finally:
            agent.close()
        assert diff(before, tree_state(*roots)) == []
        assert all(p.poll() is None for p in procs)  # kill mode, but a dry run: every process lives
        recs = [json.loads(line) for line in audit_path.read_text().splitlines()]
        assert recs and not [r for r in recs if r["executed"]]
        assert not [r for r in recs if r["action"] == "error"]
        # what kill mode would have done, audited: each victim's process (by cgroup.kill on v2), nothing sent
        pid_of = {f"default/{fp.name}": str(proc.pid) for proc, (fp, _, _) in zip(procs, specs)}
        kills = [r for r in recs if r["action"] == "kill"]
        assert kills and all(r["stage"] == "dry-run" for r in kills)
        assert all(r["how"] == ("sigkill" if version == 1 else "cgroup.kill") for r in kills)
        assert all(r["value"] == pid_of[r["target"]] for r in kills)
        by_action: dict[str, set[str]] = {}
        for r in recs:
            by_action.setdefault(r["action"], set()).add(r["strategy"])
        assert by_action["mkdir"] == {"resctrlReconcile"}
        assert by_action["write"] >= {"cpuSuppress", "cpuBurst", "cgroupReconcile", "resctrlReconcile",
                                      "systemConfigReconcile", "blkioReconcile"}
        assert by_action["evict"] >= {"cpuEvict", "memoryEvict"}
        evicted = {(r["target"], r["feature"]) for r in recs if r["action"] == "evict" and r["target"]}
        assert {f for _, f in evicted} >= {"CPUEvict", "BEMemoryEvict"}
        assert {t for t, _ in evicted} <= {"default/be-a", "default/be-b", "default/be-c", "default/ls"}
        # the would-be groups' files: decided, each thread once (the same decision is not re-audited
        # every tick within the force interval)
        tasks = [(r["target"], r["value"]) for r in recs if r["target"].endswith("/tasks")]
        assert tasks and len(tasks) == len(set(tasks))
        assert any(r["target"] == "sys/fs/resctrl/LS/schemata" and r["old"] is None for r in recs)
        assert all(r.get("mode") == "dry-run" for r in recs if r["action"] == "evict" and r["target"])
    finally:
        for p in procs:
            p.kill()
            p.wait()
