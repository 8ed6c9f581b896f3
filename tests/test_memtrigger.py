"""The memory trigger (``qosmanager.framework.memtrigger``): the node's memory crossing memoryHigh's engage
line (L - 5 %) between two of its ticks has BE capped at the next sample (one fast-path interval), not at
the next tick; memoryEvict's threshold wakes the collector, memoryHigh and memoryEvict; one file read per
sample, whatever the number of pods.

The whole agent on a fake host, its scheduler driven by a fake clock (``Scheduler.run_ripe``), the
trigger's samples taken by hand (``MemoryTrigger.check``, what its thread does every interval).  The fake
host's files cannot be polled, so the PSI side (a threshold ``poll`` on ``memory.pressure``) is not here."""

from __future__ import annotations

import builtins
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from agentloop import agent_running
from memnode import CAP, SLO, GiB, be_pod, make, node_at
from qosmanager.agent import Agent, AgentConfig
from qosmanager.framework.fastpath import INTERVAL
from qosmanager.framework.memtrigger import MemoryTrigger, parse_used
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object


def cap(host: FakeHost) -> str:
    name = "memory.high" if host.layout.version == 2 else "memory.soft_limit_in_bytes"
    path = host.layout.file("memory", host.layout.qos_dir(KubeQoS.BESTEFFORT), name)
    while True:  # a read between the agent's write and its length cut sees nothing: read again
        with open(path) as f:
            text = f.read().strip()
        if text:
            return text
        time.sleep(0.001)


def uncapped(host: FakeHost) -> bool:
    v = cap(host)
    return v == "max" or int(v) >= 1 << 62


@pytest.mark.parametrize("version", [1, 2])
def test_a_node_crossing_the_engage_line_between_ticks_caps_be_at_the_next_sample(tmp_path: Path,
                                                                                  version: int) -> None:
    host, agent, clock = make(tmp_path, version, strategies=["memoryHigh"], gates={"BEMemoryHigh": True})
    try:
        trigger = agent.memtrigger
        assert trigger is not None and trigger in agent.scheduler.watchers
        node_at(host, 50)
        clock.t += 1.0  # past the strategies' first delay: the collector, then memoryHigh
        assert agent.scheduler.run_ripe() >= 2
        assert uncapped(host), "50 % of the node: nothing to cap"
        assert trigger.check() == ()
        tick = next(j for j in agent.scheduler.jobs if j.name == "memoryHigh")
        # LS grows past L - 5 % = 63 % between two of memoryHigh's ticks (its next one a second away)
        node_at(host, 65)
        clock.t += INTERVAL
        assert clock.t < tick.earliest
        assert agent.scheduler.run_ripe() == 0 and uncapped(host), "no tick is due: nothing would cap BE yet"
        assert trigger.check() == ("memoryHigh",)
        assert agent.scheduler.run_ripe() == 1 and tick.runs == 2
        assert not uncapped(host), "BE capped one sample after the node crossed the line"
        assert agent.shared.memory_protection.level >= 1
        assert trigger.check() == (), "the node stays there: no second wake"
    finally:
        agent.close()


def test_the_lines_wake_in_steps_and_rearm_below(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 2, strategies=["memoryHigh", "memoryEvict"],
                              gates={"BEMemoryHigh": True, "BEMemoryEvict": True})
    try:
        trigger = agent.memtrigger
        assert trigger is not None and trigger.evict
        node_at(host, 50)
        clock.t += 1.0
        agent.scheduler.run_ripe()
        seen = []
        for pct in (50, 62.9, 63.1, 63.3, 64.0, 70.5, 70.6, 69.8, 71.5, 66.0, 60.0, 63.5):
            node_at(host, pct)
            seen.append(trigger.check())
        high, evict = ("memoryHigh",), ("collect", "memoryHigh", "memoryEvict")
        # 63.1: crossed; 63.3: within a step (0.5 %); 64: a step more; 70.5: the threshold; 70.6 and 69.8 (over
        # T - a step): nothing; 71.5: the memoryHigh step only; 66: nothing; 60: both re-armed; 63.5: crossed again
        assert seen == [(), (), high, (), high, evict, (), (), high, (), (), high]
    finally:
        agent.close()


@pytest.mark.parametrize("strategies,gates,mode", [
    (["memoryHigh"], {}, "fast"),  # the gate off: memoryHigh does not run
    (["memoryHigh"], {"BEMemoryHigh": True}, "tick"),  # koordlet's pace
    (["memoryEvict"], {"BEMemoryEvict": True}, "fast"),
])
def test_no_trigger_without_memory_high_or_in_tick_mode(tmp_path: Path, strategies: list[str],
                                                        gates: dict[str, bool], mode: str) -> None:
    _, agent, _ = make(tmp_path, 2, strategies=strategies, gates=gates, react_mode=mode)
    try:
        assert agent.memtrigger is None
        assert not any(isinstance(w, MemoryTrigger) for w in agent.scheduler.watchers)
    finally:
        agent.close()


def test_one_file_read_per_sample_whatever_the_pods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host, agent, clock = make(tmp_path, 2, strategies=["memoryHigh"], gates={"BEMemoryHigh": True}, pods=20)
    try:
        trigger = agent.memtrigger
        assert trigger is not None
        node_at(host, 50)
        clock.t += 1.0
        agent.scheduler.run_ripe()
        calls: dict[str, int] = {"open": 0, "pread": 0, "read": 0, "builtins.open": 0}

        def counted(name: str, fn: Any) -> Any:
            def wrapper(*a: Any, **kw: Any) -> Any:
                calls[name] += 1
                return fn(*a, **kw)
            return wrapper

        monkeypatch.setattr(os, "open", counted("open", os.open))
        monkeypatch.setattr(os, "pread", counted("pread", os.pread))
        monkeypatch.setattr(os, "read", counted("read", os.read))
        monkeypatch.setattr(builtins, "open", counted("builtins.open", builtins.open))
        for pct in (50, 55, 64, 64, 50):
            node_at(host, pct)
            before = dict(calls)
            trigger.check()
            assert calls["pread"] - before["pread"] == 1
            assert calls["read"] == before["read"] and calls["builtins.open"] == before["builtins.open"]
            assert calls["open"] - before["open"] <= (1 if pct == 50 and trigger.samples == 1 else 0)
        assert trigger.samples == 5
    finally:
        agent.close()


def test_parse_used_reads_the_head_of_meminfo() -> None:
    head = b"MemTotal:       16384 kB\nMemFree:         1000 kB\nMemAvailable:    4096 kB\nBuffers: 1 kB\n"
    assert parse_used(head) == (16384 - 4096) * 1024
    assert parse_used(b"MemTotal:       16384 kB\nMemFree: 1 kB\n") is None
    assert parse_used(b"MemTotal: x kB\nMemAvailable: 1 kB\n") is None


def test_the_thread_runs_with_the_scheduler_loop(tmp_path: Path) -> None:
    """Started by the scheduler's loop and stopped with it (the agent's run)."""
    _, agent, _ = make(tmp_path, 2, strategies=["memoryHigh"], gates={"BEMemoryHigh": True})
    try:
        trigger = agent.memtrigger
        assert isinstance(trigger, MemoryTrigger)
        trigger.interval = 0.001
        trigger.check = lambda: (agent.stop(), ())[1]  # type: ignore[method-assign]
        agent.scheduler.run(agent.stop_event, 600.0)  # the first sample stops the loop
        assert trigger._thread is not None and not trigger._thread.is_alive()
    finally:
        agent.close()


def test_the_running_agent_caps_be_long_before_memory_highs_next_tick(tmp_path: Path) -> None:
    """``Agent.run`` on the fake host, memoryHigh's interval an hour: once its first tick has run, the node
    crossing the line has BE capped by the trigger's thread waking the loop (the next tick is an hour away)."""
    from qosmanager.framework.strategy import QoSConfig

    host = FakeHost(str(tmp_path / "host"), version=2, memory_bytes=CAP)
    pod = be_pod(1)
    host.add_pods([pod])
    (tmp_path / "pods.json").write_text(json.dumps(pod_list([pod_object(pod, memory=GiB, priority=5500)])))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object(SLO)))
    qos = QoSConfig()
    qos.memory_evict_interval = 3600.0
    node_at(host, 50)
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", pods_file=str(tmp_path / "pods.json"),
                              node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "slo.json"),
                              strategies=["memoryHigh"], feature_gates={"BEMemoryHigh": True}, metrics_addr="",
                              cgroup_version="2", cgroup_driver="cgroupfs", qos=qos))
    with agent_running(agent) as until:
        tick = next(j for j in agent.scheduler.jobs if j.name == "memoryHigh")
        until("memoryHigh's first tick", lambda: tick.runs >= 1)
        assert uncapped(host)
        node_at(host, 65)
        until("BE's cap", lambda: not uncapped(host))
        assert tick.runs == 2 and agent.scheduler.wakes >= 1


def test_v1_ls_alone_past_the_line_caps_be_at_zero(tmp_path: Path) -> None:
    """cgroup v1: LS alone past L (BE's budget below zero) has BE's soft limit at 0, the kernel's least (global
    reclaim takes from BE first); the executor refused 0 as a memory limit, and BE stayed uncapped (seen on
    the real v1 kernel by tests/test_kernel_memtrigger.py's first numbers)."""
    host, agent, clock = make(tmp_path, 1, strategies=["memoryHigh"], gates={"BEMemoryHigh": True})
    try:
        trigger = agent.memtrigger
        assert trigger is not None
        node_at(host, 50)
        clock.t += 1.0
        agent.scheduler.run_ripe()
        node_at(host, 80)  # 12.8 GiB in use, BE 1 GiB of it: the rest alone is past L (68 %)
        clock.t += INTERVAL
        assert trigger.check() == ("memoryHigh",)
        agent.scheduler.run_ripe()
        assert cap(host) == "0" and agent.executor.stats.invalid == 0
    finally:
        agent.close()
