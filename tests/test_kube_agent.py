"""The agent in Kubernetes mode, end to end: a fake cgroup tree (FakeHost) and the fake API server.

The agent is driven tick by tick on an injected clock (collect, then the strategy), while its
watches run on real threads against the fake server.  Expected values come from koordlet's
formulas worked by hand in the comments.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakeapi import FakeAPIServer, FakeCluster
from qosmanager.agent import Agent, AgentConfig, kubernetes_mode
from qosmanager.exporter import Exporter
from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.objects import node_object, nodeslo_object, pod_object
from qosmanager.states.kube.client import KubeClient
from qosmanager.states.kube.config import KubeConfig
from simclock import Clock

NODE = "fake-node"  # the node name sim.objects puts in spec.nodeName
CPUS = 8
GIB = 1 << 30
S = 10**9


def fake_pod(i: int, qos: KubeQoS, name: str | None = None) -> FakePod:
    return FakePod(uid=f"00000000-0000-4000-8000-{i:012d}", namespace="default", name=name or f"p{i}",
                   qos=qos, containers=[FakeContainer("c0", f"containerd://{i:064x}")])


@dataclass
class Scenario:
    host: FakeHost
    api: FakeAPIServer
    agent: Agent
    clock: Clock
    busy: int = 0

    def tick(self, *strategies: str, busy_per_cpu: int = 25) -> None:
        """One second later: the node's CPUs were busy ``busy_per_cpu`` jiffies each; collect, run."""
        self.clock.t += 1.0
        self.busy += busy_per_cpu
        self.host.set_proc_stat([self.busy] * CPUS, [10_000] * CPUS)
        jobs = {j.name: j for j in self.agent.scheduler.jobs}
        for name in ("collect", *strategies):  # through the scheduler, as the agent runs them
            self.agent.scheduler.run_job(jobs[name])

    def received(self, timeout: float = 60.0) -> None:
        """Wait until every watch has seen the cluster's latest change (nothing is applied meanwhile)."""
        source = self.agent.kube_source
        assert source is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r.rv == str(self.api.cluster.rv) for r in source.reflectors.values()):
                return
            time.sleep(0.02)
        raise AssertionError("the agent's watches did not catch up")

    def quota(self) -> str:
        be_dir = self.host.layout.qos_dir(KubeQoS.BESTEFFORT)
        return self.host.read(f"cgroup/cpu/{be_dir}/cpu.cfs_quota_us").strip()

    def events(self, reason: str) -> list[dict[str, Any]]:
        assert self.agent.events is not None
        assert self.agent.events.drain()
        return [e for e in self.api.cluster.items("Event") if e["reason"] == reason]


@contextmanager
def scenario(tmp_path: Path, pods: Sequence[FakePod], *, slo: dict[str, Any] | None, strategies: list[str],
             gates: dict[str, bool] | None = None, before: Callable[[FakeCluster], None] | None = None,
             kubelet_root_dir: str | None = None) -> Iterator[Scenario]:
    host = FakeHost(str(tmp_path / "host"), n_cpus=CPUS, memory_bytes=64 * GIB)
    host.add_pods(pods)
    cluster = FakeCluster()
    cluster.put(node_object(host, NODE))
    for p in pods:
        cluster.put(pod_object(p))
    if slo is not None:
        cluster.put(nodeslo_object(slo, name=NODE))
    if before is not None:
        before(cluster)
    api = FakeAPIServer(cluster, bookmark_interval=0.2).start()
    clock = Clock()
    kubeconfig = api.kubeconfig(str(tmp_path / "kubeconfig"))
    cfg = AgentConfig(roots=host.roots, node_name=NODE, kubeconfig=kubeconfig, metrics_addr="",
                      feature_gates=gates or {}, strategies=strategies, kube_watch_timeout=(5.0, 5.0),
                      kubelet_root_dir=kubelet_root_dir)
    agent = Agent(cfg, clock=clock, monotonic=clock.mono, monotonic_ns=clock.mono_ns, seed=0)
    assert agent.kube_source is not None
    for r in agent.kube_source.reflectors.values():  # quick reconnects for the outage test
        r.backoff.base, r.backoff.cap = 0.05, 0.3
    try:
        assert agent.wait_for_state(60)  # the Node; the NodeSLO may come a moment later
        # since 22b4744 the agent starts before the pods list is in force (its first tick may find
        # none): the scenarios start from the pods, so wait until the agent's poll puts them in force
        assert agent.kube_source.wait_synced(60)
        sc = Scenario(host, api, agent, clock)
        sc.received()
        yield sc
    finally:
        agent.close()
        api.stop()


def wait_until(cond: Callable[[], bool], what: str, source: Any, timeout: float = 60.0) -> None:
    """Wait for a condition the reflector threads bring about; a generous deadline, checked often."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s; {source.health()}"
        time.sleep(0.02)


def suppress_slo(threshold: int) -> dict[str, Any]:
    return {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota",
                                            "cpuSuppressThresholdPercent": threshold}}


PODS = [fake_pod(1, KubeQoS.GUARANTEED), fake_pod(2, KubeQoS.BURSTABLE), fake_pod(3, KubeQoS.BESTEFFORT),
        fake_pod(4, KubeQoS.BESTEFFORT)]


def test_kubernetes_mode_is_chosen_by_kubeconfig_and_needs_a_node_name(tmp_path: Path) -> None:
    assert kubernetes_mode(AgentConfig(kubeconfig="kc"))
    assert not kubernetes_mode(AgentConfig(pods_file="pods.json"))
    host = FakeHost(str(tmp_path / "host"), n_cpus=2)
    with FakeAPIServer() as api:
        kc = api.kubeconfig(str(tmp_path / "kc"))
        with pytest.raises(ValueError, match="--node-name or \\$NODE_NAME"):
            Agent(AgentConfig(roots=host.roots, kubeconfig=kc, metrics_addr=""))
        with pytest.raises(ValueError, match="exclude each other"):
            Agent(AgentConfig(roots=host.roots, kubeconfig=kc, node_name=NODE, pods_file="p.json",
                              metrics_addr=""))
        agent = Agent(AgentConfig(roots=host.roots, kubeconfig=kc, node_name=NODE, metrics_addr=""))
        try:
            assert agent.coordinator.mode == "api" and agent.coordinator.api is not None  # the default there
            assert agent.events is not None
        finally:
            agent.close()
    standalone = Agent(AgentConfig(roots=host.roots, metrics_addr=""))
    try:
        assert standalone.coordinator.mode == "none" and standalone.kube_source is None
    finally:
        standalone.close()


def test_nodeslo_changed_through_the_api_changes_the_be_quota_on_the_next_tick(tmp_path: Path) -> None:
    with scenario(tmp_path, PODS, slo=suppress_slo(65), strategies=["cpuSuppress"]) as sc:
        sc.tick()  # the first samples: no rates yet
        sc.tick("cpuSuppress")
        # node used = 8 CPUs x 25 jiffies / 100 jiffies per second = 2.0 cores; every pod used 0 (no
        # cpuacct change), so all of it is "system": suppress = 8000 x 65 // 100 - 0 - 0 - 2000 = 3200 m
        # -> quota 3200 x 100000 // 1000 = 320000 (from unlimited: no step limit)
        assert sc.quota() == "320000"
        sc.api.cluster.put(nodeslo_object(suppress_slo(40), name=NODE))
        sc.received()
        sc.tick("cpuSuppress")
        # suppress = 8000 x 40 // 100 - 2000 = 1200 m -> 120000 (scaling down is immediate)
        assert sc.quota() == "120000"
        # the first change is an Event on the Node; the second, within the minute, is held back
        [ev] = sc.events("AdjustBEByNodeCPUUsage")
        assert ev["involvedObject"]["kind"] == "Node" and ev["involvedObject"]["name"] == NODE
        assert "from -1 to 320000" in ev["message"]


def test_sighup_lists_afresh_a_nodeslo_change_the_watch_missed(tmp_path: Path) -> None:
    """SIGHUP in Kubernetes mode (it only logged before): at the next collect the pods, the Node and the
    NodeSLO are listed afresh, so a NodeSLO change no watch event told of (stored behind the watches'
    back) decides the BE quota at the next tick."""
    with scenario(tmp_path, PODS, slo=suppress_slo(65), strategies=["cpuSuppress"]) as sc:
        sc.tick()
        sc.tick("cpuSuppress")
        assert sc.quota() == "320000"  # 8000 x 65 // 100 - 2000 = 3200 m (see the test above)
        with sc.api.cluster.cond:
            sc.api.cluster.objects["nodeslos"][("", NODE)] = nodeslo_object(suppress_slo(40), name=NODE)
        sc.tick("cpuSuppress")
        assert sc.quota() == "320000"  # missed
        source = sc.agent.kube_source
        assert source is not None
        sc.agent.reload()  # what the signal handler calls; the next collect acts on it
        thr = sc.agent.store.nodeslo.resource_used_threshold_with_be
        deadline = time.monotonic() + 60
        while thr.cpu_suppress_threshold_percent != 40:
            assert time.monotonic() < deadline, f"the relist: {source.health()}"
            sc.tick()  # collect: applies what the reflectors received
            thr = sc.agent.store.nodeslo.resource_used_threshold_with_be
            time.sleep(0.02)
        assert all(r.requested_relists == 1 for r in source.reflectors.values())
        sc.tick("cpuSuppress")
        assert sc.quota() == "120000"  # 8000 x 40 // 100 - 2000 = 1200 m
        assert all(r.errors == 0 and r.watch_restarts == 0 for r in source.reflectors.values())


def test_a_nodeslo_with_a_bad_field_still_suppresses_and_is_one_event_per_change(tmp_path: Path) -> None:
    slo = {**suppress_slo(65), "systemStrategy": {"watermarkScaleFactor": 500}}  # koordinator's CRD takes it
    with scenario(tmp_path, PODS, slo=slo, strategies=["cpuSuppress"]) as sc:
        sc.tick()
        sc.tick("cpuSuppress")
        assert sc.quota() == "320000"  # as with a clean NodeSLO (see above), not the defaults' "off"
        [ev] = sc.events("InvalidNodeSLOFields")
        assert ev["type"] == "Warning" and ev["involvedObject"]["kind"] == "Node"
        assert "spec.systemStrategy.watermarkScaleFactor: must be an integer in [1, 400], got 500" \
            in ev["message"]
        # another change that keeps the bad field: one more Event; a relist of the same: none
        sc.api.cluster.put(nodeslo_object({**slo, **suppress_slo(40)}, name=NODE))
        sc.received()
        sc.tick("cpuSuppress")
        assert sc.quota() == "120000"
        assert len(sc.events("InvalidNodeSLOFields")) == 2
        sc.api.cluster.put(nodeslo_object(suppress_slo(40), name=NODE))  # fixed
        sc.received()
        sc.tick("cpuSuppress")
        assert len(sc.events("InvalidNodeSLOFields")) == 2
        assert sc.agent.store.conditions.get("nodeslo") is None


def test_a_pod_created_through_the_api_is_collected(tmp_path: Path) -> None:
    with scenario(tmp_path, PODS, slo=None, strategies=[]) as sc:
        sc.tick()
        assert sc.agent.collector.stats.pods == 4
        new = fake_pod(9, KubeQoS.BESTEFFORT, name="created")
        sc.host.add_pod(new)  # what the kubelet would do
        sc.host.set_memory(sc.host.pod_dir(new.uid), GIB, 2 * GIB, 0, 0, 0)
        client = KubeClient(KubeConfig(server=sc.api.url))
        client.post("/api/v1/namespaces/default/pods", pod_object(new))
        client.close()
        sc.received()
        sc.tick()
        assert sc.agent.collector.stats.pods == 5 and new.uid in sc.agent.store.pods
        ctx = sc.agent.manager.context(sc.clock.t)
        ctx.refresh("pod_memory_usage")  # no strategy runs, so none needs pod memory: read on demand
        mem = ctx.pod_metrics("pod_memory_usage")
        assert mem[new.uid] == 3 * GIB  # inactive_anon + active_anon + unevictable


def memory_pressure(sc: Scenario, be_usage: dict[str, int]) -> None:
    """Node memory at 80 % of 64 GiB, the BE pods using what ``be_usage`` says."""
    total_kb = 64 * GIB // 1024
    sc.host.set_meminfo(total_kb, total_kb // 10, total_kb // 5)
    for uid, used in be_usage.items():
        sc.host.set_memory(sc.host.pod_dir(uid), 0, used, 0, 0, 0)


MEMORY_SLO = {"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}}


def test_memory_pressure_evicts_through_the_api_with_an_event(tmp_path: Path) -> None:
    with scenario(tmp_path, PODS, slo=MEMORY_SLO, strategies=["memoryEvict"],
                  gates={"BEMemoryEvict": True}) as sc:
        big, small = PODS[2], PODS[3]
        memory_pressure(sc, {big.uid: 8 * GIB, small.uid: GIB})
        sc.tick("memoryEvict")
        # used = 64 GiB - 64 GiB // 5 (in kB) -> 80 % >= 70 %: release 64 GiB x (80 - 68) // 100 = 8246337208
        # bytes; the BE pods go by usage, and the 8 GiB one alone is enough
        assert [(e.name, e.code) for e in sc.api.cluster.evictions] == [(big.name, 201)]
        assert sc.api.cluster.evictions[0].uid_precondition == big.uid
        [ev] = sc.events("EvictPodSuccess")
        assert ev["involvedObject"]["uid"] == big.uid and ev["type"] == "Warning"
        assert "BEMemoryEvict" in ev["message"] and "memoryEvict" in ev["message"]
        # the eviction deleted the pod; its DELETED event takes it off the node
        sc.received()
        sc.tick()
        assert big.uid not in sc.agent.store.pods and small.uid in sc.agent.store.pods


def test_a_429_is_audited_and_retried_after_its_backoff(tmp_path: Path) -> None:
    pods = [fake_pod(1, KubeQoS.GUARANTEED), fake_pod(5, KubeQoS.BESTEFFORT, name="guarded")]

    def pdb(cluster: FakeCluster) -> None:
        cluster.set_eviction_policy("default", "guarded", 429, 201)

    with scenario(tmp_path, pods, slo=MEMORY_SLO, strategies=["memoryEvict"], gates={"BEMemoryEvict": True},
                  before=pdb) as sc:
        memory_pressure(sc, {pods[1].uid: 9 * GIB})
        sc.tick("memoryEvict")
        assert [e.code for e in sc.api.cluster.evictions] == [429]
        assert not sc.agent.coordinator.is_pending(pods[1].uid, sc.clock.t)  # refused: not released
        audit = [r for r in sc.agent.audit.recent if r["action"] == "evict"]
        assert audit[-1]["executed"] is False and "429" in audit[-1]["error"]
        [fail] = sc.events("EvictPodFail")
        assert "disruption budget" in fail["message"]
        for _ in range(4):  # 1..4 s later: within the first backoff (5 s), the API is not asked
            sc.tick("memoryEvict")
        assert [e.code for e in sc.api.cluster.evictions] == [429]
        sc.tick("memoryEvict")  # 5 s after the refusal
        assert [e.code for e in sc.api.cluster.evictions] == [429, 201]
        assert len(sc.events("EvictPodSuccess")) == 1


def test_an_api_outage_keeps_enforcing_the_last_state_and_recovers_with_a_relist(tmp_path: Path) -> None:
    with scenario(tmp_path, PODS, slo=suppress_slo(65), strategies=["cpuSuppress"]) as sc:
        source = sc.agent.kube_source
        assert source is not None
        sc.tick()
        sc.tick("cpuSuppress")
        assert sc.quota() == "320000" and source.connected
        sc.api.outage()
        # conditions, each with a deadline far beyond what it needs: a loaded machine only slows them down
        # every watch, not only the first: one still connected would count the NodeSLO fresh on the next poll
        wait_until(lambda: not any(r.connected for r in source.reflectors.values()), "every watch notices the outage",
                   source)
        # meanwhile: the NodeSLO changes, a pod goes, and the history is compacted
        sc.api.cluster.put(nodeslo_object(suppress_slo(40), name=NODE))
        sc.api.cluster.remove("Pod", PODS[0].name)
        sc.api.cluster.compact()
        # someone resets the BE quota: the agent, on its last known NodeSLO, puts it back
        sc.host.write(f"cgroup/cpu/{sc.host.layout.qos_dir(KubeQoS.BESTEFFORT)}/cpu.cfs_quota_us", "-1\n")
        last_sync = sc.agent.store.health["nodeslo"].last_sync
        sc.tick("cpuSuppress")
        assert sc.quota() == "320000" and len(sc.agent.store.pods) == 4
        assert sc.agent.store.health["nodeslo"].last_sync == last_sync
        # a minute later /healthz says the state is stale and why; the metric says disconnected
        exporter = Exporter.for_agent(sc.agent, "127.0.0.1:0")  # not started: read its checks directly
        sc.clock.t += 60.0
        sc.tick("cpuSuppress")
        healthy, body = exporter.health.check()
        state = body["checks"]["state"]
        assert not healthy and not state["ok"] and body["checks"]["collector"]["ok"], body
        assert "over the bound" in state["detail"] and "not connected" in state["detail"]
        assert 'qosmanager_source_connected{source="kubernetes"} 0' in exporter.metrics.registry.render()
        sc.api.recover()
        wait_until(lambda: source.connected and all(n >= 1 for n in source.relists.values()),
                   "reconnected and relisted", source)
        sc.received()  # a relist is counted when the 410 arrives: wait for the list it starts, too
        sc.tick("cpuSuppress")
        assert sc.quota() == "120000"  # the relisted NodeSLO (40 %)
        assert PODS[0].uid not in sc.agent.store.pods and len(sc.agent.store.pods) == 3
        assert sc.agent.store.health["nodeslo"].last_sync == sc.clock.t
        healthy, body = exporter.health.check()
        assert healthy, body
        assert 'qosmanager_source_connected{source="kubernetes"} 1' in exporter.metrics.registry.render()


def test_qosmanager_run_in_kubernetes_mode(tmp_path: Path) -> None:
    """The command line: ``run --kubeconfig`` watches the API server, ``--node-name`` is required."""
    import os
    import subprocess
    import sys

    host = FakeHost(str(tmp_path / "host"), n_cpus=2)
    cluster = FakeCluster()
    cluster.put(node_object(host, NODE))
    with FakeAPIServer(cluster) as api:
        kc = api.kubeconfig(str(tmp_path / "kc"))
        args = [sys.executable, "-m", "qosmanager", "run", "--cgroup-root", host.roots.cgroup, "--proc-root",
                host.roots.proc, "--sys-root", host.roots.sys, "--kubeconfig", kc, "--metrics-addr", ""]
        env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
        missing = subprocess.run([*args, "--duration", "1s"], capture_output=True, text=True, timeout=60,
                                 env=env)
        assert missing.returncode == 2 and "--node-name or $NODE_NAME" in missing.stderr
        ok = subprocess.run([*args, "--duration", "2s", "--collect-interval", "200ms"], capture_output=True,
                            text=True, timeout=60, env={**env, "NODE_NAME": NODE})
        assert ok.returncode == 0, ok.stderr
        watches = [r for r in api.requests_to("GET", r"^/api/v1/(pods|nodes)$") if "watch=true" in r.query]
        assert watches and all(r.user_agent.startswith("qosmanager/") for r in watches)


def test_static_cpu_manager_policy_comes_from_the_kubelet_checkpoint(tmp_path: Path) -> None:
    """Kubernetes mode, no flag and no topology annotation: the kubelet's checkpoint says static and
    gives the Guaranteed pod CPUs 2-3; the BE cpuset keeps off them and only BE containers are narrowed."""
    kubelet = tmp_path / "kubelet"
    kubelet.mkdir()
    (kubelet / "cpu_manager_state").write_text(
        '{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"%s":{"c0":"2-3"}},"checksum":1}'
        .replace("%s", PODS[0].uid))
    slo = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cpuset",
                                           "cpuSuppressThresholdPercent": 65}}
    with scenario(tmp_path, PODS, slo=slo, strategies=["cpuSuppress"], kubelet_root_dir=str(kubelet)) as sc:
        sc.tick("cpuSuppress")
        sc.tick("cpuSuppress")
        layout = sc.host.layout
        be_dir = layout.qos_dir(KubeQoS.BESTEFFORT)

        def cpus(d: str) -> set[int]:
            return set(parse_cpu_list(sc.host.read(f"cgroup/cpuset/{d}/cpuset.cpus")))

        # the QoS and pod dirs get every CPU BE may have: all but the kubelet's exclusive 2-3
        assert cpus(be_dir) == {0, 1, 4, 5, 6, 7}
        pod_dir = sc.host.pod_dir(PODS[2].uid)
        assert cpus(pod_dir) == {0, 1, 4, 5, 6, 7}
        # the containers get the suppressed set: fewer CPUs, never 2 or 3
        ctr = cpus(sc.host.container_dir(PODS[2].uid, "c0"))
        assert ctr < {0, 1, 4, 5, 6, 7}


def test_another_writer_resetting_the_be_quota_is_one_event_on_the_node(tmp_path: Path) -> None:
    """A koordlet-like agent that puts the BE quota back to unlimited after every tick: after five ticks
    in a row the quota is no longer rewritten every second but with a short backoff, and the Node gets
    one WriteConflict Event naming the file."""
    with scenario(tmp_path, PODS, slo=suppress_slo(65), strategies=["cpuSuppress"]) as sc:
        be_dir = sc.host.layout.qos_dir(KubeQoS.BESTEFFORT)
        sc.tick()
        written = 0
        for _ in range(20):
            n = sc.agent.executor.stats.written
            sc.tick("cpuSuppress")
            written += sc.agent.executor.stats.written - n
            sc.host.write(f"cgroup/cpu/{be_dir}/cpu.cfs_quota_us", "-1\n")  # the other writer
        # then held back, retried after 1, 2, 4, 4 s: the BE quota is a protection knob (never left to the
        # other writer for long)
        assert written == 9
        [ev] = sc.events("WriteConflict")
        assert ev["type"] == "Warning" and ev["involvedObject"]["name"] == NODE
        assert f"cpu/{be_dir}/cpu.cfs_quota_us" in ev["message"] and "cpuSuppress" in ev["message"]
        assert "executor/write-conflict/cpu.cfs_quota_us" in sc.agent.store.conditions.snapshot()


def test_a_wrong_node_name_is_named_by_healthz_and_the_collector_is_not_blamed(tmp_path: Path) -> None:
    """With a --node-name the API server has no Node of, /healthz blamed the collector while the log
    said the Node was missing: the state check and a condition now name the Node not found."""
    import json
    import urllib.error
    import urllib.request

    host = FakeHost(str(tmp_path / "host"), n_cpus=CPUS, memory_bytes=64 * GIB)
    host.add_pods(PODS)
    cluster = FakeCluster()
    cluster.put(node_object(host, NODE))
    for p in PODS:
        cluster.put(pod_object(p))
    api = FakeAPIServer(cluster, bookmark_interval=0.2).start()
    cfg = AgentConfig(roots=host.roots, node_name="fake-nod", kubeconfig=api.kubeconfig(str(tmp_path / "kc")),
                      metrics_addr="127.0.0.1:0", kube_watch_timeout=(5.0, 5.0))
    agent = Agent(cfg, seed=0)
    try:
        assert agent.exporter is not None and agent.exporter.start()
        assert agent.kube_source is not None
        deadline = time.monotonic() + 60
        while agent.store.conditions.get("state/node-missing") is None:  # the Node list received, applied
            assert not agent.wait_for_state(0.5)
            assert time.monotonic() < deadline, agent.kube_source.health()
        try:
            with urllib.request.urlopen(agent.exporter.url + "/healthz", timeout=10) as r:
                code, report = r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            code, report = e.code, json.loads(e.read())
        assert code == 503 and report["status"] == "unhealthy"
        assert report["checks"]["collector"]["ok"], report
        state = report["checks"]["state"]
        assert not state["ok"]
        assert "no Node named 'fake-nod' in the API server (is --node-name or $NODE_NAME this node's name?)" \
            in state["detail"]
        assert "fake-nod" in report["degraded"]["state/node-missing"]["detail"]
    finally:
        agent.close()
        api.stop()
