"""Whole-process CPU of ``qosmanager run`` at 2,000 containers, fast path included, against the C floor.

The quick pass times the in-process tick; an operator pays for the whole process: every thread (the
scheduler, the fast path's sampler, state-file polling, the audit log).  Here the agent runs as a real
process (``--dry-run`` with an audit log, metrics off) on a 2,000-container cgroup v2 tree on tmpfs: 1,000
LS containers' ``cpu.stat`` advance 5 ms/s each (written every second, with their pods), the kube QoS dirs'
and kubepods' sums and ``/proc/stat`` rise with them every 50 ms; BE is idle; cpuSuppress's cfsQuota at
65 %.  Its CPU time comes from ``/proc/<pid>/stat`` (user + system, every thread) over 14 s from 4 s after
its first decision (the first audit record: start-up at 2,000 containers takes seconds on a loaded
machine), for ``--react-mode fast`` and ``tick`` in the same run; the floor is one read-everything
pass over the same files (``pread_only`` of every tracked descriptor, C, no parsing), per second.

Bound (issue 21): the fast path included, at most 0.3 x the floor.  Manual (about two minutes):
``QOSM_OUTCOME_CPU=1 pytest benchmarks/test_bench_outcome_cpu.py -s``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.simulate import SimConfig, SimNode, build_node

FULL = os.environ.get("QOSM_OUTCOME_CPU", "") not in ("", "0")
N = 2000
CPUS = 64
LS_RATE = 0.005  # cores per LS container
WARM, WINDOW = 4.0, 14.0  # seconds after the agent's first decision, seconds measured
BOUND = 0.3
CLK_TCK = os.sysconf("SC_CLK_TCK")

pytestmark = pytest.mark.skipif(not FULL, reason="manual benchmark (about two minutes): QOSM_OUTCOME_CPU=1")


class Writer:
    """The kernel's side: LS containers and pods every second, the QoS sums and /proc/stat every 50 ms."""

    def __init__(self, node: SimNode) -> None:
        self.host: FakeHost = node.host
        self.ls = [p for p in node.pods if p.qos is not KubeQoS.BESTEFFORT]
        self.containers = [(self.host.pod_dir(p.uid), [self.host.container_dir(p.uid, c.name) for c in p.containers])
                           for p in self.ls]
        self.n = sum(len(c) for _, c in self.containers)
        lay = self.host.layout
        self.sums = [lay.kubepods_dir(), lay.qos_dir(KubeQoS.BURSTABLE), lay.qos_dir(KubeQoS.GUARANTEED)]
        self.be = lay.qos_dir(KubeQoS.BESTEFFORT)
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        last_pods = -1.0
        while not self._stop.wait(0.05):
            t = time.monotonic() - self.t0
            if t - last_pods >= 1.0:
                last_pods = t
                for pod_dir, ctrs in self.containers:
                    for d in ctrs:
                        self.host.set_cpu_usage(d, int(t * LS_RATE * 1e9))
                    self.host.set_cpu_usage(pod_dir, int(t * LS_RATE * len(ctrs) * 1e9))
            ls = int(t * LS_RATE * self.n * 1e9)
            for d in self.sums:
                self.host.set_cpu_usage(d, ls)  # (Guaranteed holds none of them here: equal sums suffice)
            busy = int(t * LS_RATE * self.n * 100 / CPUS)
            self.host.set_proc_stat([busy] * CPUS, [int(t * 100) - busy] * CPUS)


def floor_per_pass(node: SimNode) -> float:
    """Seconds of one read-everything pass (C ``pread`` of every tracked descriptor), the best of 30."""
    agent = Agent(AgentConfig(roots=node.host.roots, cgroup_version="2", cgroup_driver="cgroupfs",
                              node_name="sim-node", pods_file=node.pods_file, node_file=node.node_file,
                              node_slo_file=node.nodeslo_file, evict_mode="none", metrics_addr="",
                              feature_gates=dict(node.gates), react_mode="tick"))
    try:
        for _ in range(3):
            agent.collect(time.time())
        col = agent.collector
        best = float("inf")
        for _ in range(30):
            t0 = time.perf_counter()
            col.pod_reader.pread_only()
            col.ctr_reader.pread_only()
            col.qos_reader.pread_only()
            best = min(best, time.perf_counter() - t0)
        return best
    finally:
        agent.close()


def process_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: every thread


def run_agent(node: SimNode, mode: str, workdir: str) -> dict[str, Any]:
    roots = node.host.roots
    audit = os.path.join(workdir, f"audit-{mode}.jsonl")
    cmd = [sys.executable, "-m", "qosmanager", "run", "--cgroup-root", roots.cgroup, "--proc-root", roots.proc,
           "--sys-root", roots.sys, "--cgroup-version", "2", "--cgroup-driver", "cgroupfs",
           "--node-name", "sim-node", "--pods-file", node.pods_file, "--node-file", node.node_file,
           "--node-slo-file", node.nodeslo_file, "--dry-run", "--audit-log", audit, "--metrics-addr", "",
           "--react-mode", mode]
    if node.gates:
        cmd += ["--feature-gates", ",".join(f"{k}={'true' if v else 'false'}" for k, v in node.gates.items())]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (os.path.exists(audit) and os.path.getsize(audit) > 0):
            assert proc.poll() is None and time.monotonic() < deadline, "the agent made no decision"
            time.sleep(0.1)
        time.sleep(WARM)
        c0, m0 = process_cpu(proc.pid), time.monotonic()
        with open(f"/proc/{proc.pid}/status") as f:
            threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
        time.sleep(WINDOW)
        c1, m1 = process_cpu(proc.pid), time.monotonic()
    finally:
        proc.terminate()
        proc.wait(30)
    return {"cpu_per_second": (c1 - c0) / (m1 - m0), "threads": threads}


def test_whole_process_cpu(tmpfs_dir: str) -> None:
    root = os.path.join(tmpfs_dir, "outcome-cpu")
    os.makedirs(root)
    try:
        node = build_node(SimConfig(containers=N, cgroup_version=2, cpus=CPUS, seed=1, cpu_threshold_percent=65),
                          root)
        floor = floor_per_pass(node)
        writer = Writer(node)
        writer.start()
        try:
            got = {mode: run_agent(node, mode, root) for mode in ("fast", "tick")}
        finally:
            writer.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {"floor_ms_per_second": floor * 1e3, "load": os.getloadavg(),
           **{m: {**r, "cpu_ms_per_second": r["cpu_per_second"] * 1e3, "ratio": r["cpu_per_second"] / floor}
              for m, r in got.items()}}
    print("\nwhole-process CPU at 2,000 containers:\n" + json.dumps(out, indent=1))
    ratio = got["fast"]["cpu_per_second"] / floor
    assert ratio <= BOUND, (f"the agent with the fast path used {ratio:.2f} x the floor ({floor * 1e3:.2f} ms per "
                            f"pass), bound {BOUND}: {out}")
