"""``qosmanager run`` in standalone mode on a fake host: collects, stops on --duration and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object


def fake_node(tmp_path, version: int = 1):
    host = FakeHost(str(tmp_path / "host"), version=version, n_cpus=4)
    pods = FakeHost.make_pods(6, seed=3)
    host.add_pods(pods)
    files = {
        "pods": tmp_path / "pods.json",
        "node": tmp_path / "node.yaml",
        "slo": tmp_path / "nodeslo.json",
    }
    files["pods"].write_text(json.dumps(pod_list(pod_object(p) for p in pods)))
    files["node"].write_text(json.dumps(node_object(host)))
    files["slo"].write_text(json.dumps(nodeslo_object({})))
    return host, pods, files


def run_args(host: FakeHost, files: dict, *extra: str) -> list[str]:
    return [sys.executable, "-m", "qosmanager", "run", "--cgroup-root", host.roots.cgroup,
            "--proc-root", host.roots.proc, "--sys-root", host.roots.sys, "--pods-file", str(files["pods"]),
            "--node-file", str(files["node"]), "--node-slo-file", str(files["slo"]), "--metrics-addr", "",
            *extra]


def test_run_stops_after_duration(tmp_path) -> None:
    host, _, files = fake_node(tmp_path)
    t0 = time.monotonic()
    proc = subprocess.run(run_args(host, files, "--duration", "1.5s", "--collect-interval", "200ms"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 30


def test_run_stops_on_sigterm_within_an_interval(tmp_path) -> None:
    host, _, files = fake_node(tmp_path, version=2)
    proc = subprocess.Popen(run_args(host, files, "--collect-interval", "1s"), stderr=subprocess.PIPE,
                            text=True)
    try:
        time.sleep(2.0)  # past start-up and a few ticks
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        assert rc == 0
        assert time.monotonic() - t0 < 1.5  # "within one interval" (plus process exit)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_agent_collects_and_follows_pod_file_changes(tmp_path) -> None:
    host, pods, files = fake_node(tmp_path)
    t = [1000.0]
    agent = Agent(AgentConfig(roots=host.roots, pods_file=str(files["pods"]), node_file=str(files["node"]),
                              node_slo_file=str(files["slo"])), clock=lambda: t[0])
    try:
        agent.collect(t[0])
        assert agent.collector.stats.pods == 3 and agent.store.node is not None
        # the pods file changes: one pod less
        files["pods"].write_text(json.dumps(pod_list(pod_object(p) for p in pods[1:])))
        os.utime(files["pods"], ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        t[0] += 1
        agent.collect(t[0])
        assert agent.collector.stats.pods == 2
        # a bad NodeSLO field costs that field only, and says why
        files["slo"].write_text(json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                                            "spec": {"resourceUsedThresholdWithBE": {
                                                "enable": True, "cpuSuppressThresholdPercent": 150}}}))
        t[0] += 1
        agent.collect(t[0])
        thr = agent.store.nodeslo.resource_used_threshold_with_be
        assert (thr.enable, thr.cpu_suppress_threshold_percent) == (True, 65)
        condition = agent.store.conditions.get("nodeslo")
        assert condition is not None and "cpuSuppressThresholdPercent" in condition.message
        # a file that is not a NodeSLO at all keeps the last good one and says why
        files["slo"].write_text(json.dumps({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "Node"}))
        os.utime(files["slo"], ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        gen = agent.store.nodeslo_generation
        t[0] += 1
        agent.collect(t[0])
        assert agent.store.nodeslo_generation == gen
        assert agent.store.nodeslo.resource_used_threshold_with_be.enable is True
        assert 'kind: must be "NodeSLO"' in agent.store.errors["nodeslo"]
    finally:
        agent.close()


@pytest.mark.parametrize("bad", ["{not json", '{"items": 3}'])
def test_bad_pods_file_keeps_last_pods(tmp_path, bad: str) -> None:
    host, _, files = fake_node(tmp_path)
    agent = Agent(AgentConfig(roots=host.roots, pods_file=str(files["pods"])))
    try:
        agent.collect(1000.0)
        files["pods"].write_text(bad)
        os.utime(files["pods"], ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        agent.collect(1001.0)
        assert agent.collector.stats.pods == 3
    finally:
        agent.close()
