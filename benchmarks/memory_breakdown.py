"""Where the agent's memory goes, phase by phase: ``python benchmarks/memory_breakdown.py [PODS]
[CONTAINERS_PER_POD]`` builds a fake node (default 1,000 pods of 2 containers, cgroup v1, on
``/dev/shm``, or ``$QOSM_MEM_DIR``), then does in one fresh process what ``qosmanager run`` does --
imports, the start-up check, the agent, the first collection, the first run of every strategy, 20
more ticks -- and prints
the resident memory after each step (``/proc/self/statm``) with the high-water mark, as a Markdown
table.  A second pass with ``tracemalloc`` attributes what Python holds at the end to the agent's
packages.  Run it as a script (it starts its own child processes: the numbers are of a process that
did nothing else).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")

CHILD = r'''
import gc, json, os, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def hwm():  # VmHWM: ru_maxrss would carry the parent's peak across vfork and exec
    with open("/proc/self/status") as f:
        return int(next(x for x in f if x.startswith("VmHWM:")).split()[1]) / 1024
rows = []
TICKS = int(os.environ.get("QOSM_MEM_TICKS", "20"))
def mark(name):
    rows.append((name, rss(), hwm()))
mark("interpreter")
import argparse, logging, threading, signal
mark("standard library (argparse, logging, threading, json)")
import qosmanager.cli as cli  # sets the numeric libraries to one thread, before numpy
import numpy
mark("numpy (one BLAS thread)")
import qosmanager.agent as agentmod
from qosmanager.framework.manager import load_strategies
load_strategies()
mark("the agent's modules (all strategies)")
root = sys.argv[1]
R = root + "/host"
argv = ["run", "--cgroup-root", R + "/cgroup", "--proc-root", R + "/proc", "--sys-root", R + "/sys",
        "--node-name", "fake-node", "--kubelet-root-dir", "", "--metrics-addr", "127.0.0.1:0",
        "--pods-file", root + "/pods.json", "--node-file", root + "/node.json",
        "--node-slo-file", root + "/slo.json"]
cfg = agentmod.config_from_args(cli.build_parser().parse_args(argv))
agentmod.check_startup(cfg)
gc.collect(); mark("start-up check (a pods file this big: its size and start only)")
a = agentmod.Agent(cfg)
a.exporter.start()
mark("Agent() and the metrics server")
t = 1_767_225_600.0
a.source.poll(t)
deadline = time.monotonic() + 600
while a.store.pods_loading:  # a pods file of 1 MiB or more is decoded on a thread of its own, as in run
    if time.monotonic() > deadline:
        raise SystemExit("the pods file did not come into force in 600 s")
    time.sleep(0.02)
    a.source.poll(t)
gc.collect(); mark("first poll: pod views (the pods file decoded and in force)")
a.collector.collect(t)
mark("first collection: slots, paths, metric cache")
for s in a.manager.enabled():
    a.manager.run_strategy(s, t)
mark("first run of every strategy: executor write cache")
for i in range(1, TICKS + 1):
    a.collect(t + i)
    for s in a.manager.enabled():
        a.manager.run_strategy(s, t + i)
gc.collect(); mark(f"{TICKS} more ticks")
extra = {"cache_bytes": a.cache.nbytes(), "pods": len(a.store.pods),
         "containers": a.collector.stats.containers}
if len(sys.argv) > 2:
    import tracemalloc
    snap = tracemalloc.take_snapshot()
    by = {}
    for st in snap.statistics("filename"):
        f = st.traceback[0].filename
        key = f.split("qosmanager/")[-1].split("/")[0] if "qosmanager/" in f else (
            "numpy" if "numpy" in f else "json (pruned pod texts)" if "json" in f else
            "the rest (imported code, interpreter)")
        by[key] = by.get(key, 0) + st.size
    extra["python_by_part"] = sorted(by.items(), key=lambda kv: -kv[1])[:12]
a.exporter.stop()
a.close()
print(json.dumps({"rows": rows, **extra}))
'''


def installed() -> bool:
    """Whether ``qosmanager`` is importable as installed (``pip install .`` builds the native extensions
    into the installed copy only: the source tree then has none, and importing it from there fails)."""
    import importlib.util

    return importlib.util.find_spec("qosmanager") is not None


def build(root: str, pods: int, per_pod: int) -> None:
    if not installed():
        sys.path.insert(0, SRC)  # a source tree with its extensions built in place
    from qosmanager.sim.fakehost import FakeHost
    from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object

    host = FakeHost(os.path.join(root, "host"), version=1, n_cpus=64, kernel=False)
    ps = FakeHost.make_pods(pods * per_pod, containers_per_pod=per_pod, seed=43)
    host.add_pods(ps)
    slo = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                                           "cpuSuppressThresholdPercent": 65}}
    for name, obj in (("pods", pod_list(pod_object(p) for p in ps)), ("node", node_object(host, "fake-node")),
                      ("slo", nodeslo_object(slo, name="fake-node"))):
        with open(os.path.join(root, f"{name}.json"), "w") as f:
            json.dump(obj, f)


def run(root: str, traced: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    if not installed():
        env["PYTHONPATH"] = os.path.abspath(SRC)
    cmd = [sys.executable, *(["-X", "tracemalloc=1"] if traced else []), "-c", CHILD, root,
           *(["traced"] if traced else [])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> int:
    pods = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    per_pod = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    base = os.environ.get("QOSM_MEM_DIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    root = tempfile.mkdtemp(prefix="qosm-mem-", dir=base)
    try:
        build(root, pods, per_pod)
        res = run(root, traced=False)
        print(f"{res['pods']} pods, {res['containers']} containers, metric cache {res['cache_bytes'] / 1e6:.2f} MB\n")
        print("| step | RSS (MiB) | added | peak so far |\n|---|---:|---:|---:|")
        last = 0.0
        for name, rss, hwm in res["rows"]:
            print(f"| {name} | {rss:.1f} | {rss - last:+.1f} | {hwm:.1f} |")
            last = rss
        traced = run(root, traced=True)
        print("\nPython objects held at the end (tracemalloc), by part of the agent:\n")
        print("| part | MiB |\n|---|---:|")
        for part, size in traced["python_by_part"]:
            print(f"| {part} | {size / 2**20:.2f} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
