"""Descriptor exhaustion beyond the agent's budget: something else in the process (a library, a
leak) takes every descriptor left while the agent runs.  In a child process with RLIMIT_NOFILE at
128, on a fake cgroup v1 host: rounds of the whole agent (collector, cpuSuppress, and a batch of
executor writes) go on with no descriptor to open, pods appear meanwhile; then the descriptors are
given back.  Nothing raises, what failed is reported, and the next rounds catch up.

Covered elsewhere (tests/test_descriptors.py): the budget itself, one-shot writes beyond it, an
EMFILE on a one-shot that sheds cached descriptors, an agent at ulimit 256 with 200 containers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, os, resource, sys
root = sys.argv[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
from qosmanager.agent import Agent, AgentConfig
from qosmanager.executor.executor import Write
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

S = 10**9
host = FakeHost(os.path.join(root, "host"), version=1, n_cpus=8)
pods = FakeHost.make_pods(40, seed=7)
first, later = pods[:12], pods[12:]
host.add_pods(first)
files = {k: os.path.join(root, k + ".json") for k in ("pods", "node", "slo")}

def write(name, obj):
    with open(files[name], "w") as f:
        json.dump(obj, f)

write("pods", pod_list(pod_object(p) for p in first))
write("node", node_object(host))
write("slo", nodeslo_object({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 30}}))
clk = {"wall": 1000.0, "mono": 50.0}
agent = Agent(AgentConfig(roots=host.roots, pods_file=files["pods"], node_file=files["node"],
                          node_slo_file=files["slo"], metrics_addr="", strategies=["cpuSuppress"],
                          audit_log=os.path.join(root, "audit.log")),
              clock=lambda: clk["wall"], monotonic=lambda: clk["mono"], monotonic_ns=lambda: int(clk["mono"] * S),
              seed=1)
k = 0

held = []

def grab():
    while True:
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            return

def round_():
    global k
    k += 1
    clk["wall"] += 1.0
    clk["mono"] += 1.0
    starved = bool(held)
    if starved:  # the test's own writes of the fake counters need one descriptor: lend it, take it back
        os.close(held.pop())
    for p in host.pods.values():
        for c in p.containers:
            host.set_cpu_usage(host.container_dir(p.uid, c.name), k * S // 10)
    host.set_proc_stat([k * 30] * 8, [k * 70] * 8)
    if starved:
        grab()
    for job in agent.scheduler.jobs:
        agent.scheduler.run_job(job)
    lay = agent.layout
    rels = [lay.container_dir(lay.pod_dir(p.qos, p.uid), c.container_id)
            for p in host.pods.values() for c in p.containers]
    res = agent.executor.apply([Write("t", "cpu.cfs_quota_us", str(20000 + k), r) for r in rels])
    return {"statuses": sorted({r.status for r in res}), "containers": agent.collector.stats.containers,
            "pending": agent.collector.stats.pending, "pods": len(agent.store.pods),
            "strategy_errors": sum(s.errors for s in agent.manager.stats.values()),
            "failed": agent.executor.stats.failed,
            "state_error": agent.store.conditions.get("state/pods-file").message
            if agent.store.conditions.get("state/pods-file") else "",
            "emfile_audited": sum(1 for r in agent.audit.recent if str(r.get("error") or "").startswith("EMFILE")),
            "values_ok": all(host.read(f"cgroup/{r.target}").strip() == str(20000 + k)
                             for r in res if r.status == "written")}

out = {"before": [round_() for _ in range(3)]}
host.add_pods(later)  # 28 new pods: new cgroups to open, a pods file to read again
write("pods", pod_list(pod_object(p) for p in pods))
grab()
out["held"] = len(held)
out["starved"] = [round_() for _ in range(3)]
for fd in held:
    os.close(fd)
held.clear()
out["after"] = [round_() for _ in range(4)]
agent.close()
print(json.dumps(out))
"""


def test_no_descriptor_left_in_the_process_then_given_back(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    before, starved, after = out["before"], out["starved"], out["after"]
    assert out["held"] > 0
    assert before[-1]["statuses"] == ["written"] and before[-1]["pods"] == 12
    # starved: the rounds run on and nothing raises in a strategy; the collector keeps its open files;
    # the writes that get no descriptor fail, are counted and audited (once per file), none is wrong
    assert all(r["strategy_errors"] == 0 and r["values_ok"] for r in starved), starved
    assert all(r["containers"] == 24 for r in starved)
    assert starved[-1]["failed"] > before[-1]["failed"] and starved[-1]["emfile_audited"] > 0, starved
    assert "Too many open files" in starved[0]["state_error"]  # the new pods file could not be read
    assert starved[-1]["pods"] == 12  # ... so the last good pod set stays in force
    # given back: the pods file is read (it did not change since), every container collected,
    # every write done
    last = after[-1]
    assert last["pods"] == 20 and last["pending"] == 0 and last["containers"] == 40, last
    assert last["statuses"] == ["written"] and last["values_ok"] and last["strategy_errors"] == 0
    assert last["state_error"] == ""
