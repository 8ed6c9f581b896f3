"""What the Kubernetes layer costs: the same `qosmanager run` on the same 2,000-container fake node,
once standalone (pods file) and once against the loopback fake API server (list-then-watch, events,
Eviction API client), as two real processes running side by side so the machine's noise hits both
alike (they see the same state, so they want the same files written the same way).

Bounds (the Kubernetes issue): at most 15 MiB more resident memory, and no per-tick cost beyond
applying watch events -- with an idle watch, the agent's CPU per second stays within 25 % (plus a
1 ms allowance for the machine's noise) of the standalone agent's.

The CPU is judged on the median of several short windows, not on one long one: on a loaded machine
a neighbour's burst lands in one window of one agent (one window of 10 s read 55.4 against a bound of
54.1 ms/s, at load 8, while paired reruns of one build ranged 0.84-1.23), and the median of the
windows' differences leaves it out, where a real per-tick cost is in every window.  Each window's CPU is
the process's CPU clock (every thread, nanoseconds): counted in clock ticks, as ``psutil`` does, a 2.5 s
window resolved 4 ms/s against the standalone agent's 12-16 ms/s, so the two read 12.0 and 16.0 ms/s
beside two busy loops and the ratio could only move in thirds (1.33: 1 ms over the bound's 1.25 x, at the
allowance's edge).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest

from conftest import RATIOS, RESULTS, process_cpu
from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

N = 2000
NODE = "fake-node"
WARMUP, WINDOW, WINDOWS = 6.0, 2.5, 7
SCENARIO = "kubernetes layer, 2000c node"
SLO = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                                       "cpuSuppressThresholdPercent": 65}}


@pytest.fixture(scope="module")
def node(tmpfs_dir: str) -> Any:
    root = os.path.join(tmpfs_dir, "kube")
    host = FakeHost(os.path.join(root, "host"), version=1, n_cpus=32, kernel=False)
    pods = FakeHost.make_pods(N, containers_per_pod=2, seed=41)
    host.add_pods(pods)
    objs = [pod_object(p) for p in pods]
    files = {"pods": pod_list(objs), "node": node_object(host, NODE), "slo": nodeslo_object(SLO, name=NODE)}
    for name, obj in files.items():
        with open(os.path.join(root, f"{name}.json"), "w") as f:
            json.dump(obj, f)
    cluster = FakeCluster()
    cluster.put(files["node"])
    cluster.put(files["slo"])
    for o in objs:
        cluster.put(o)
    api = FakeAPIServer(cluster).start()
    kubeconfig = api.kubeconfig(os.path.join(root, "kubeconfig"))
    yield host, root, kubeconfig
    api.stop()


def measure(*runs: list[str]) -> list[dict[str, Any]]:
    """Run the agents side by side (so machine noise hits both alike), skip the warm-up, then sample
    each one's RSS and its CPU time per window: ``cpu`` lists each window's CPU seconds per second."""
    procs = [subprocess.Popen([sys.executable, "-m", "qosmanager", "run", *args], stderr=subprocess.PIPE,
                              text=True) for args in runs]
    try:
        ps = [psutil.Process(p.pid) for p in procs]
        time.sleep(WARMUP)
        for proc in procs:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        rss: list[list[int]] = [[] for _ in ps]
        cpu: list[list[float]] = [[] for _ in ps]
        for _ in range(WINDOWS):
            c0, t0 = [process_cpu(p.pid) for p in ps], time.monotonic()
            while time.monotonic() - t0 < WINDOW:
                for i, p in enumerate(ps):
                    rss[i].append(p.memory_info().rss)
                time.sleep(0.25)
            c1, t1 = [process_cpu(p.pid) for p in ps], time.monotonic()
            for i, (a, b) in enumerate(zip(c0, c1)):
                cpu[i].append((b - a) / (t1 - t0))
        for proc in procs:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        return [{"rss": statistics.median(r), "cpu": c, "cpu_per_s": statistics.median(c)}
                for r, c in zip(rss, cpu)]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)


def cpu_excess(standalone: list[float], kube: list[float]) -> float:
    """The median over the windows of the Kubernetes agent's CPU per second beyond 1.25 x the
    standalone agent's in the same window (the bound holds when it is at most the 1 ms allowance)."""
    return statistics.median(k - 1.25 * s for s, k in zip(standalone, kube))


def test_a_cost_in_every_window_fails_and_one_burst_does_not() -> None:
    base = [0.050, 0.052, 0.049, 0.051, 0.050, 0.053, 0.050]
    burst = list(base)
    burst[3] += 0.040  # a neighbour's burst in one window
    assert cpu_excess(base, burst) <= 0.001
    assert cpu_excess(base, [2 * c for c in base]) > 0.001  # the layer doubling the agent's CPU


def test_kubernetes_layer_cost(node: Any) -> None:
    host, root, kubeconfig = node
    # both read everything: with demand-driven collection a steady agent spends ~3 ms of CPU per second,
    # the resolution of a process's CPU time over the 10 s window (10 ms), so the ratio would measure
    # clock ticks and one-off start-up work rather than the layer's per-tick cost
    common = ["--cgroup-root", host.roots.cgroup, "--proc-root", host.roots.proc, "--sys-root", host.roots.sys,
              "--metrics-addr", "", "--node-name", NODE, "--collect-mode", "all"]
    standalone, kube = measure([*common, "--pods-file", f"{root}/pods.json", "--node-file", f"{root}/node.json",
                                "--node-slo-file", f"{root}/slo.json"], [*common, "--kubeconfig", kubeconfig])
    delta_mib = (kube["rss"] - standalone["rss"]) / 2**20
    excess = cpu_excess(standalone["cpu"], kube["cpu"])
    RESULTS[SCENARIO] = {
        "standalone": {"min": standalone["cpu_per_s"], "median": standalone["cpu_per_s"], "per": 1,
                       "unit": "s CPU/s", "rounds": WINDOWS, "rss_mib": standalone["rss"] / 2**20},
        "kubernetes": {"min": kube["cpu_per_s"], "median": kube["cpu_per_s"], "per": 1, "unit": "s CPU/s",
                       "rounds": WINDOWS, "rss_mib": kube["rss"] / 2**20},
    }
    RATIOS.append({"scenario": SCENARIO, "ratio": "RSS kubernetes - standalone (MiB)", "value": delta_mib,
                   "bound": "<= 15", "ok": delta_mib <= 15})
    RATIOS.append({"scenario": SCENARIO, "ratio": "CPU/s kubernetes / standalone",
                   "value": kube["cpu_per_s"] / max(standalone["cpu_per_s"], 1e-9),
                   "bound": "<= 1.25 (+1 ms)", "ok": excess <= 0.001})
    print(f"\nstandalone: RSS {standalone['rss'] / 2**20:.1f} MiB, {standalone['cpu_per_s'] * 1e3:.1f} ms CPU/s; "
          f"kubernetes: RSS {kube['rss'] / 2**20:.1f} MiB, {kube['cpu_per_s'] * 1e3:.1f} ms CPU/s")
    assert delta_mib <= 15, f"the Kubernetes layer costs {delta_mib:.1f} MiB (bound 15)"
    assert excess <= 0.001, (excess, kube, standalone)
