"""No pod can stop the agent, end to end: hostile pods present at start-up and created while it runs,
in Kubernetes mode (the fake API server) and in pods-file mode; every other pod is handled and
/healthz names what was skipped.

The hostile pods: a 2 KB annotation nested 1,000 levels deep (it raised RecursionError out of the pod
view, which stopped the agent at start-up), and uids that are not Kubernetes uids (they made the
collector raise on every pod-set change).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.agent import Agent, AgentConfig
from qosmanager.exporter import Exporter
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from test_kube_agent import CPUS, GIB, NODE, PODS, Clock, Scenario, fake_pod, scenario, suppress_slo

DEEP = "[" * 1000 + "]" * 1000


def hostile(i: int, name: str, *, uid: str | None = None, annotation: str = "koordinator.sh/cpuBurst"
            ) -> dict[str, Any]:
    obj = pod_object(fake_pod(i, KubeQoS.BESTEFFORT, name=name), annotations={annotation: DEEP})
    if uid is not None:
        obj["metadata"]["uid"] = uid
    return obj


def test_kubernetes_mode_starts_and_runs_with_hostile_pods(tmp_path: Path) -> None:
    def hostile_at_start(cluster: FakeCluster) -> None:
        cluster.put(hostile(7, "deep-at-start"))
        cluster.put(hostile(8, "slash-uid-at-start", uid="x/y"))

    with scenario(tmp_path, PODS, slo=suppress_slo(65), strategies=["cpuSuppress"],
                  before=hostile_at_start) as sc:
        store, collector = sc.agent.store, sc.agent.collector
        deep_uid = fake_pod(7, KubeQoS.BESTEFFORT).uid
        assert store.pods[deep_uid].cpu_burst_invalid  # kept: only its cpuBurst feature is lost
        assert "x/y" not in store.pods
        sc.tick()
        sc.tick("cpuSuppress")
        assert sc.quota() == "320000"  # the same decision as without the hostile pods
        assert all(p.uid in collector.tracked_pods() for p in PODS)
        condition = store.conditions.get("state/pods")
        assert condition is not None and "default/slash-uid-at-start" in condition.message
        # created while it runs: more hostile pods, then a good one
        sc.api.cluster.put(hostile(9, "deep-later", annotation="koordinator.sh/memoryQOS"))
        sc.api.cluster.put(hostile(10, "dotdot-uid-later", uid=".."))
        sc.api.cluster.put(hostile(11, "newline-uid-later", uid="a\nb"))
        good = fake_pod(12, KubeQoS.BESTEFFORT, name="good-later")
        sc.host.add_pod(good)
        sc.api.cluster.put(pod_object(good))
        sc.received()
        sc.tick("cpuSuppress")
        assert good.uid in store.pods and good.uid in collector.tracked_pods()
        assert store.pods[fake_pod(9, KubeQoS.BESTEFFORT).uid].memory_qos_invalid
        assert ".." not in store.pods and "a\nb" not in store.pods
        assert sc.quota() == "320000"
        assert sc.agent.manager.stats["cpuSuppress"].errors == 0
        assert sc.agent.kube_source is not None and sc.agent.kube_source.connected
        exporter = Exporter.for_agent(sc.agent, "127.0.0.1:0")  # not started: its checks directly
        healthy, body = exporter.health.check()
        assert healthy and body["status"] == "degraded", body
        assert "3 pod(s) skipped" in body["degraded"]["state/pods"]["detail"]
        assert "default/dotdot-uid-later" in body["degraded"]["state/pods"]["detail"]


def test_kubernetes_mode_refuses_a_node_without_capacity(tmp_path: Path) -> None:
    """No decisions on a Node with a zero (or missing) capacity: at start-up the agent waits and
    /healthz fails saying why; later, the last good Node stays in force (cfsQuota would squeeze BE to
    nothing on a 0-CPU node, memoryEvict would evict on a 1-byte one)."""
    host = FakeHost(str(tmp_path / "host"), n_cpus=CPUS, memory_bytes=64 * GIB)
    host.add_pods(PODS)
    cluster = FakeCluster()
    zero = node_object(host, NODE)
    zero["status"]["capacity"]["cpu"] = "0"
    cluster.put(zero)
    for p in PODS:
        cluster.put(pod_object(p))
    cluster.put(nodeslo_object(suppress_slo(65), name=NODE))
    with FakeAPIServer(cluster, bookmark_interval=0.2) as api:
        clock = Clock()
        cfg = AgentConfig(roots=host.roots, node_name=NODE, kubeconfig=api.kubeconfig(str(tmp_path / "kc")),
                          metrics_addr="", strategies=["cpuSuppress"], kube_watch_timeout=(5.0, 5.0))
        agent = Agent(cfg, clock=clock, monotonic=clock.mono, monotonic_ns=clock.mono_ns, seed=0)
        try:
            exporter = Exporter.for_agent(agent, "127.0.0.1:0")
            assert not agent.wait_for_state(1.5)  # the pods came, but no usable Node
            healthy, body = exporter.health.check()
            detail = body["checks"]["state"]["detail"]
            assert not healthy and "status.capacity.cpu: must be positive" in detail, body
            cluster.put(node_object(host, NODE))
            assert agent.wait_for_state(10)
            sc = Scenario(host, api, agent, clock)
            sc.received()
            sc.tick()
            sc.tick("cpuSuppress")
            assert sc.quota() == "320000"
            tiny = node_object(host, NODE)
            tiny["status"]["capacity"].update(memory="1")  # a unit left out: a refused Node too
            cluster.put(tiny)
            sc.received()
            sc.tick("cpuSuppress")
            assert sc.quota() == "320000"  # decided on the last good Node
            assert agent.store.node is not None and agent.store.node.memory_capacity == 64 * GIB
            healthy, body = exporter.health.check()
            assert healthy and "keeping the last good one" in body["degraded"]["state/node"]["detail"], body
        finally:
            agent.close()


def write_pods(path: Path, items: list[Any]) -> None:
    path.write_text(json.dumps(pod_list(items)))
    later = time.time_ns() + 10**9 * (2 + int(time.time()) % 7)  # a new mtime whatever the clock's grain
    os.utime(path, ns=(later, later))


def test_pods_file_mode_applies_every_other_pod_of_an_update(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    pods = FakeHost.make_pods(6, seed=3)
    host.add_pods(pods)
    pods_file, node_file, slo_file = tmp_path / "pods.json", tmp_path / "node.json", tmp_path / "slo.json"
    write_pods(pods_file, [pod_object(p) for p in pods[:-1]])
    node_file.write_text(json.dumps(node_object(host, NODE)))
    slo_file.write_text(json.dumps(nodeslo_object({})))
    t = [1000.0]
    agent = Agent(AgentConfig(roots=host.roots, pods_file=str(pods_file), node_file=str(node_file),
                              node_slo_file=str(slo_file), metrics_addr=""), clock=lambda: t[0])
    exporter = Exporter.for_agent(agent, "127.0.0.1:0")
    try:
        agent.collect(t[0])
        before = set(agent.store.pods)
        assert len(before) == len(pods) - 1
        # one update: a hostile annotation, a pod with a slash in its uid, and a new good pod
        deep = pod_object(pods[0], annotations={"koordinator.sh/blkioQOS": DEEP})
        slashed = pod_object(pods[1])
        slashed["metadata"].update(uid="../../etc", name="slashed")
        write_pods(pods_file, [deep, slashed, *(pod_object(p) for p in pods[1:])])
        t[0] += 1
        agent.collect(t[0])
        assert set(agent.store.pods) == before | {pods[-1].uid}  # the new pod is in, nobody is lost
        assert agent.store.pods[pods[0].uid].blkio_qos_invalid
        assert pods[-1].uid in agent.collector.tracked_pods()
        healthy, body = exporter.health.check()
        assert healthy and "default/slashed" in body["degraded"]["state/pods"]["detail"], body
        assert "pods: 1 pod(s) skipped" in body["checks"]["state"]["detail"]
        # a file that cannot be parsed keeps the last pods, and /healthz says so
        pods_file.write_text("{" * 5000)
        os.utime(pods_file, ns=(time.time_ns() + 10**10, time.time_ns() + 10**10))
        t[0] += 1
        agent.collect(t[0])
        assert set(agent.store.pods) == before | {pods[-1].uid}
        healthy, body = exporter.health.check()
        assert "nested deeper than 100 levels" in body["degraded"]["state/pods-file"]["detail"], body
        write_pods(pods_file, [pod_object(p) for p in pods])
        t[0] += 1
        agent.collect(t[0])
        healthy, body = exporter.health.check()
        assert healthy and body["status"] == "ok", body
    finally:
        agent.close()


def test_a_deeply_nested_nodeslo_file_keeps_the_last_nodeslo(tmp_path: Path) -> None:
    """500 levels parse in Python's JSON decoder but broke the NodeSLO merge's deepcopy; now the
    file is refused at decode time, the last NodeSLO stays and /healthz says why."""
    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    slo_file = tmp_path / "slo.json"
    slo_file.write_text(json.dumps(nodeslo_object(suppress_slo(65))))
    agent = Agent(AgentConfig(roots=host.roots, node_slo_file=str(slo_file), metrics_addr=""),
                  clock=lambda: 1000.0)
    exporter = Exporter.for_agent(agent, "127.0.0.1:0")
    try:
        agent.collect(1000.0)
        gen = agent.store.nodeslo_generation
        deep = nodeslo_object(suppress_slo(40))
        deep["spec"]["extensions"] = json.loads('{"a": ' * 500 + "1" + "}" * 500)
        slo_file.write_text(json.dumps(deep))
        os.utime(slo_file, ns=(time.time_ns() + 10**10, time.time_ns() + 10**10))
        agent.collect(1001.0)
        assert agent.store.nodeslo_generation == gen
        threshold = agent.store.nodeslo.resource_used_threshold_with_be.cpu_suppress_threshold_percent
        assert threshold == 65
        _, body = exporter.health.check()
        assert "nested deeper than 100 levels" in body["degraded"]["state/nodeslo-file"]["detail"], body
    finally:
        agent.close()
