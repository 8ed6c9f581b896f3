"""Nothing blocks the fast path, with real work rather than a held thread: a 10,000-pod pods file decoded by
the agent's file source, and a 10,000-pod relist from the API server (Kubernetes mode).  The whole agent
runs (``Agent.run``) on a fake host whose counters a writer advances every 20 ms; once cpuSuppress has
decided, the big pod list arrives, and LS demand rises as soon as its decode has begun: BE's quota must fall
while the decode is still going on.  (On this machine such a decode takes seconds; the fast path reacts in
about 100 ms.)"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.framework.strategy import QoSConfig
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from test_fastpath_unblocked import CPUS, SLO, Load, be_quota

BIG = 10_000

pytestmark = pytest.mark.slow  # a 10,000-pod list takes tens of seconds to build and decode here


def qos() -> QoSConfig:
    cfg = QoSConfig()
    cfg.cpu_suppress_interval = 0.2
    return cfg


def react_during(agent: Agent, host: FakeHost, load: Load, runner: threading.Thread,
                 started: threading.Event, finished: threading.Event, begin: Callable[[], None]) -> None:
    """Wait for cpuSuppress's decision, ``begin`` the big list, raise LS once its decode has started, and
    check that BE's quota falls before the decode ends."""
    deadline = time.monotonic() + 120
    while be_quota(host) == -1:
        assert time.monotonic() < deadline and runner.is_alive(), "no BE quota from the tick"
        time.sleep(0.05)
    assert agent.fastpath is not None
    time.sleep(0.5)
    before = be_quota(host)
    begin()
    assert started.wait(300), "the big list was not decoded"
    load.ls = 4.0  # LS demand rises by three cores: BE's budget falls to about 2200m
    while be_quota(host) > before - 200_000:
        assert not finished.is_set(), f"BE quota still {be_quota(host)} (was {before}) when the decode ended"
        time.sleep(0.01)
    assert not finished.is_set()


def big_pods() -> list[dict[str, Any]]:
    return [pod_object(p) for p in FakeHost.make_pods(2 * BIG, seed=5)]  # two containers a pod


def test_a_10000_pod_pods_file_decode_does_not_block_the_fast_path(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=CPUS)
    pods = FakeHost.make_pods(4, seed=3)
    host.add_pods(pods)
    pods_file = tmp_path / "pods.json"
    pods_file.write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object(SLO)))
    # the big list keeps the first four pods (they run here) and adds about 10,000 the node does not run
    big = [pod_object(p) for p in pods] + big_pods()[4:]
    staged = tmp_path / "pods.big.json"
    staged.write_text(json.dumps(pod_list(big)))
    load = Load(host)
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", pods_file=str(pods_file),
                              node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "slo.json"),
                              strategies=["cpuSuppress"], collect_interval=0.2, qos=qos()))
    started, finished = threading.Event(), threading.Event()
    poll = agent.source.poll

    def watched_poll(now: float) -> Any:
        big_now = os.stat(pods_file).st_size > BIG * 1000
        if big_now and not finished.is_set():
            started.set()
        try:
            return poll(now)
        finally:
            # the big file is decoded on its own thread: it has ended once a poll finds no decode in flight
            if big_now and started.is_set() and not agent.store.pods_loading:
                finished.set()

    agent.source.poll = watched_poll  # type: ignore[method-assign]
    runner = threading.Thread(target=agent.run, args=(600.0,), daemon=True)
    runner.start()
    try:
        react_during(agent, host, load, runner, started, finished,
                     lambda: os.replace(staged, pods_file))
        finished.wait(300)
        assert len(agent.store.pods) == len(big)
    finally:
        agent.stop()
        runner.join(60)
        load.close()


def test_a_10000_pod_relist_does_not_block_the_fast_path(tmp_path: Path) -> None:
    """Kubernetes mode: the API server is cut off, 10,000 pods are created and its history compacted
    meanwhile, so that when it comes back the agent relists them all."""
    from fakeapi import FakeAPIServer, FakeCluster
    from qosmanager.states.kube.source import PODS

    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=CPUS)
    pods = FakeHost.make_pods(4, seed=3)
    host.add_pods(pods)
    cluster = FakeCluster()
    cluster.put(node_object(host, "n1"))
    for p in pods:
        cluster.put(pod_object(p, node_name="n1"))
    cluster.put(nodeslo_object(SLO, name="n1"))
    api = FakeAPIServer(cluster, bookmark_interval=0.2).start()
    load = Load(host)
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", kubeconfig=api.kubeconfig(str(tmp_path / "kc")),
                              metrics_addr="", strategies=["cpuSuppress"], collect_interval=0.2, qos=qos(),
                              kube_watch_timeout=(5.0, 5.0)))
    source = agent.kube_source
    assert source is not None
    reflector = source.reflectors[PODS]
    reflector.backoff.base, reflector.backoff.cap = 0.05, 0.3
    started, finished, recovered = threading.Event(), threading.Event(), threading.Event()
    list_pods = reflector._list

    def watched_list() -> bool:
        """The relist is the first list after the API server is back (those during the outage fail)."""
        relist = recovered.is_set() and not finished.is_set()
        if relist:
            started.set()
        listed = list_pods()  # a failed attempt raises: the next one is the relist
        if relist:
            finished.set()
        return listed

    reflector._list = watched_list  # type: ignore[method-assign]
    runner = threading.Thread(target=agent.run, args=(600.0,), daemon=True)
    runner.start()

    def relist() -> None:
        api.outage()
        deadline = time.monotonic() + 60
        while source.connected:
            assert time.monotonic() < deadline, "the agent did not notice the outage"
            time.sleep(0.02)
        for p in big_pods()[4:]:
            p["spec"]["nodeName"] = "n1"
            cluster.put(p)
        cluster.compact()
        recovered.set()
        api.recover()

    try:
        react_during(agent, host, load, runner, started, finished, relist)
        assert finished.wait(300), "the relist did not end"
        deadline = time.monotonic() + 120  # the scheduler's thread applies the listed set at its next poll
        while len(agent.store.pods) < BIG // 2:
            assert time.monotonic() < deadline, f"{len(agent.store.pods)} pods in the store after the relist"
            time.sleep(0.1)
    finally:
        agent.stop()
        runner.join(60)
        load.close()
        api.stop()
