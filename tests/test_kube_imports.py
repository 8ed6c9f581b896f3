"""What the Kubernetes-mode agent loads: ``qosmanager run`` as its own process, configured as the
DaemonSet's agent is (TLS to the API server with the cluster's CA, a token file, no YAML: the
in-cluster service account is three plain files), runs its ticks against the fake API server, and
says at its exit which modules it had imported.

Modules that cost resident memory for nothing the agent does are kept out, each named with its cost
(the 1,000-pod peak of ``benchmarks/test_bench_memory.py`` is bounded at 60 MiB):

* ``numpy.ma`` (about 1 MiB): ``np.unique`` without ``return_inverse`` imports it (``np.union1d``);
* ``yaml``: a kubeconfig is parsed with it only when it is YAML, and in a cluster there is none;
* ``http.client`` with the ``email`` package (about 1 MiB): the client speaks HTTP/1.1 itself
  (:mod:`qosmanager.states.kube.http1`);
* ``encodings.idna`` with ``unicodedata``: host names go to the resolver and to TLS as ASCII bytes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fakeapi import FakeAPIServer, FakeCluster, make_self_signed_cert
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_object

NODE = "imports-node"
# module -> why the agent must not import it
KEPT_OUT = {
    "numpy.ma": "np.unique/np.union1d without return_inverse imports numpy.ma (about 1 MiB)",
    "yaml": "the agent's kubeconfig is JSON here and in a cluster there is none: no YAML parser",
    "http.client": "the Kubernetes client speaks HTTP/1.1 itself (states/kube/http1.py)",
    "email": "http.client's header parser (about 1 MiB with http.client)",
    "encodings.idna": "an ASCII host name is given to getaddrinfo and TLS as bytes",
}


# ``qosmanager run`` as ``python -m qosmanager`` runs it, writing ``sys.modules`` to argv[1] at its exit
RUN_AND_LIST = """
import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "qosmanager"
runpy.run_module("qosmanager", run_name="__main__", alter_sys=True)
"""


def run_until(cmd: list[str], env: dict[str, str], ready: str, ticking: float) -> tuple[int, str]:
    """Run ``cmd`` until its stderr says ``ready`` (its state is in, however loaded the machine),
    ``ticking`` seconds more, then stop it with SIGTERM; (exit status, stderr)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline:
                err.seek(0)
                if ready in err.read():
                    time.sleep(ticking)
                    break
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)  # stops after its tick, exit status 0, atexit runs
            proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        text = err.read()
    assert ready in text, f"no {ready!r} within 300 s:\n{text[-3000:]}"
    return proc.returncode, text


def test_the_in_cluster_agent_imports_no_module_it_does_not_use(tmp_path: Path) -> None:
    try:
        cert, key = make_self_signed_cert(str(tmp_path / "tls"))
    except RuntimeError as e:
        pytest.skip(str(e))
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=8, kernel=False)
    pods = FakeHost.make_pods(40, containers_per_pod=2, seed=7)  # 20 pods of 2 containers
    host.add_pods(pods)
    cluster = FakeCluster()
    cluster.put(node_object(host, NODE))
    cluster.put(nodeslo_object({"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": "cfsQuota", "cpuSuppressThresholdPercent": 65}}, name=NODE))
    for p in pods:
        cluster.put(pod_object(p, node_name=NODE))
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    with FakeAPIServer(cluster, tls=(cert, key)) as api:
        kubeconfig = tmp_path / "kubeconfig.json"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": api.url, "certificate-authority": cert}}],
            "users": [{"name": "u", "user": {"tokenFile": str(token)}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        listed = tmp_path / "modules.json"
        env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
        cmd = [sys.executable, "-c", RUN_AND_LIST, str(listed), "run", "--cgroup-root", host.roots.cgroup,
               "--proc-root", host.roots.proc, "--sys-root", host.roots.sys, "--node-name", NODE,
               "--kubelet-root-dir", "", "--metrics-addr", "", "--kubeconfig", str(kubeconfig),
               "--collect-interval", "200ms"]
        code, err = run_until(cmd, env, "pods in force: 20 pods", ticking=2.0)
    assert code == 0, err[-3000:]
    modules = set(json.loads(listed.read_text()))
    assert "ssl" in modules and "qosmanager.strategies.cpu_burst" in modules  # what it does use is listed
    loaded = {m: why for m, why in KEPT_OUT.items() if m in modules}
    assert not loaded, f"the Kubernetes-mode agent imported modules it does not need: {loaded}"
