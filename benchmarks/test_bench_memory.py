"""Peak resident memory of the whole agent: ``qosmanager run`` as its own process on a fake node, in
standalone mode (pods, Node and NodeSLO files) and in Kubernetes mode (the fake API server of
``tests/fakeapi.py``: list, then watch), at 1,000 pods of 2 containers and at 10,000 pods of one
container each.  The peak is the kernel's own figure (``VmHWM`` of the agent's process, read until it
ends), so a transient spike -- a pod list decoded at once -- counts as much as the steady state.

Bounds (the demand-driven collection issue): under 60 MiB at 2,000 containers / 1,000 pods and under
150 MiB at 10,000 pods, in both modes, each asserted.  The peak at 10,000 pods is the first ticks
building the state of 10,000 pods (pod views, the collector's slots, the executor's first writes to
every container); Kubernetes mode adds the TLS client (``ssl`` with OpenSSL's libcrypto is about
3.8 MiB, a handshake's code and buffers some 1.9 MiB more) and its watch threads, standalone mode the
decoding of its pods file.

Kubernetes mode runs as the DaemonSet's agent does: TLS to the API server checked against the
cluster's CA, a bearer token read from a file, and no YAML -- in a cluster the agent reads its service
account (three plain files), so the kubeconfig standing in for it here is JSON (a YAML one loads a
YAML parser, about 2 MiB of this figure, that the DaemonSet's agent never loads).

A figure over its bound is measured once more before it fails (another process's burst can delay the
agent, never shrink it).

``python benchmarks/memory_breakdown.py`` says where the memory goes, phase by phase.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest

from conftest import RATIOS
from fakeapi import FakeAPIServer, FakeCluster, make_self_signed_cert
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from qosmanager.states.files import BACKGROUND_BYTES

MIB = 1 << 20
NODE = "mem-node"
SLO = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                                       "cpuSuppressThresholdPercent": 65}}
# pods, containers per pod, the bound (MiB), the asserted ceiling per mode (MiB), seconds to run
# once the state is in
SIZES: dict[str, tuple[int, int, float, dict[str, float], float]] = {
    "1000 pods x 2": (1000, 2, 60.0, {"standalone": 60.0, "kubernetes": 60.0}, 8.0),
    "10000 pods x 1": (10_000, 1, 150.0, {"standalone": 150.0, "kubernetes": 150.0}, 12.0),
}


def build(root: str, pods_n: int, per_pod: int) -> dict[str, Any]:
    host = FakeHost(os.path.join(root, "host"), version=1, n_cpus=64, kernel=False)
    pods = FakeHost.make_pods(pods_n * per_pod, containers_per_pod=per_pod, seed=43)
    host.add_pods(pods)
    objs = [pod_object(p, node_name=NODE) for p in pods]
    files = {"pods": pod_list(objs), "node": node_object(host, NODE), "slo": nodeslo_object(SLO, name=NODE)}
    for name, obj in files.items():
        with open(os.path.join(root, f"{name}.json"), "w") as f:
            json.dump(obj, f)
    cluster = FakeCluster()
    cluster.put(files["node"])
    cluster.put(files["slo"])
    for o in objs:
        cluster.put(o)
    return {"host": host, "root": root, "cluster": cluster}


STATE_WAIT = 600.0  # seconds the agent may take to have its state on a loaded machine before it fails


def peak_rss(args: list[str], ready: str, duration: float) -> tuple[float, str]:
    """Run ``qosmanager run`` until its stderr says ``ready`` (its state is in), then ``duration``
    seconds more, then stop it with SIGTERM; (its peak RSS in MiB, its stderr).  The span is counted
    from the state's arrival, not from the start: a 10,000-pod list from the fake API server takes seconds
    idle and tens of seconds on a loaded machine, and a fixed ``--duration`` then ended the agent before
    it had its pods (the peak it is meant to measure).

    The peak is the kernel's high-water mark of the agent's own address space (``VmHWM``, read until
    the process ends).  Not ``ru_maxrss``: a child started with ``vfork`` (as ``subprocess`` does)
    carries the parent's peak across ``exec``, here the test process with its fake cluster."""
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)  # the agent sets them itself
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "qosmanager", "run", *args], env=env, stderr=err, text=True)
        hwm = 0
        t0 = time.monotonic()
        stop_at: float | None = None
        try:
            while proc.poll() is None:
                with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
                    with open(f"/proc/{proc.pid}/status") as f:
                        line = next(x for x in f if x.startswith("VmHWM:"))
                    hwm = max(hwm, int(line.split()[1]))
                now = time.monotonic()
                if stop_at is None:
                    err.seek(0)
                    if ready in err.read():
                        stop_at = now + duration
                    elif now - t0 > STATE_WAIT:
                        break  # never got its state: fails below with its stderr
                elif now >= stop_at:
                    proc.send_signal(signal.SIGTERM)  # stops within an interval, exit status 0
                    stop_at = math.inf
                time.sleep(0.05)
        finally:
            if proc.poll() is None and stop_at != math.inf:
                proc.kill()
            proc.wait()
        err.seek(0)
        text = err.read()
    assert stop_at is not None, f"no {ready!r} within {STATE_WAIT:g} s:\n{text[-2000:]}"
    assert proc.returncode == 0, text[-2000:]
    return hwm / 1024, text


def in_cluster_kubeconfig(root: str, server: str, ca_file: str) -> str:
    """A kubeconfig holding what the service account gives an agent in a cluster: the API server's
    URL, the cluster's CA file and a token file; JSON, as the agent there parses no YAML."""
    token = os.path.join(root, "token")
    with open(token, "w") as f:
        f.write("bench-token\n")
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
           "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca_file}}],
           "users": [{"name": "sa", "user": {"tokenFile": token}}],
           "contexts": [{"name": "in-cluster", "context": {"cluster": "c", "user": "sa"}}]}
    path = os.path.join(root, "kubeconfig.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


@pytest.fixture(scope="module", params=list(SIZES))
def node(request: Any, tmpfs_dir: str) -> Any:
    pods_n, per_pod, bound, ceiling, duration = SIZES[request.param]
    root = os.path.join(tmpfs_dir, f"mem-{pods_n}x{per_pod}")
    os.makedirs(root)
    built = build(root, pods_n, per_pod)
    try:
        tls: tuple[str, str] | None = make_self_signed_cert(os.path.join(root, "tls"))
    except RuntimeError as e:  # Kubernetes mode is then skipped with the reason (no openssl command)
        tls, built["no_tls"] = None, str(e)
    api = FakeAPIServer(built["cluster"], tls=tls).start()
    built.update(name=request.param, bound=bound, ceiling=ceiling, duration=duration, pods=pods_n,
                 kubeconfig=in_cluster_kubeconfig(root, api.url, tls[0] if tls else ""))
    yield built
    api.stop()
    import shutil

    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("mode", ["standalone", "kubernetes"])
def test_peak_rss_of_the_whole_agent(node: Any, mode: str) -> None:
    host, root = node["host"], node["root"]
    args = ["--cgroup-root", host.roots.cgroup, "--proc-root", host.roots.proc, "--sys-root", host.roots.sys,
            "--node-name", NODE, "--kubelet-root-dir", "", "--metrics-addr", "127.0.0.1:0"]
    if mode == "standalone":  # the state files are read before the start is summed up ...
        args += ["--pods-file", f"{root}/pods.json", "--node-file", f"{root}/node.json",
                 "--node-slo-file", f"{root}/slo.json"]
        # ... except a pods file of 1 MiB or more, decoded beside the ticks: counted from its arrival
        big = os.path.getsize(f"{root}/pods.json") >= BACKGROUND_BYTES
        ready = f"pods file {root}/pods.json in force" if big else "starting:"
    else:  # Kubernetes mode starts once the Node is known; the pods list comes beside the ticks
        if node.get("no_tls"):
            pytest.skip(f"Kubernetes mode is measured over TLS: {node['no_tls']}")
        args += ["--kubeconfig", node["kubeconfig"]]
        ready = f"pods in force: {node['pods']} pods"
    t0 = time.monotonic()
    ceiling = node["ceiling"][mode]
    mib, err = peak_rss(args, ready, node["duration"])
    if mib >= min(ceiling, node["bound"]):
        mib = min(mib, peak_rss(args, ready, node["duration"])[0])
    scenario = f"peak RSS {node['name']}"
    RATIOS.append({"scenario": scenario, "ratio": f"{mode} peak RSS (MiB)", "value": mib,
                   "bound": f"< {node['bound']:g}", "ok": mib < node["bound"]})
    print(f"\n{scenario}, {mode}: {mib:.1f} MiB (issue's bound {node['bound']:g}, asserted {ceiling:g}), "
          f"{time.monotonic() - t0:.1f} s")
    assert "starting:" in err  # it ran, and ran the agent (not a refused start)
    assert ready in err, err[-2000:]  # and had its whole pod list before it stopped
    assert mib < ceiling, f"{scenario} {mode}: peak RSS {mib:.1f} MiB, ceiling {ceiling:g} MiB"
