"""Gate BECPUIdle (``qosmanager.framework.beidle``): the BE QoS dir's cpu.idle kept at 1, through the
executor; a kernel without the file is skipped; an outside reset is undone at the next run."""

from __future__ import annotations

import os

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.framework.beidle import BEIdle
from qosmanager.sim.harness import Harness

BE_DIR = "kubepods/besteffort"


@pytest.mark.parametrize("version", [1, 2])
def test_be_dir_goes_idle_and_stays_idle(version: int) -> None:
    h = Harness(version=version, strategies=[])
    f = h.cgroup_file("cpu", BE_DIR, "cpu.idle")
    h.write_file(f, "0\n")
    job = BEIdle(h.layout, h.executor)
    job.tick(h.now)
    assert (h.read_file(f) or "").strip() == "1"
    assert [w["strategy"] for w in h.recorded.writes] == ["beCPUIdle"]
    h.write_file(f, "0\n")  # someone resets it
    h.now += 61  # past the write cache's force interval
    job.tick(h.now)
    assert (h.read_file(f) or "").strip() == "1"


def test_a_kernel_without_cpu_idle_is_skipped() -> None:
    h = Harness(version=1, strategies=[])
    os.remove(h.path(h.cgroup_file("cpu", BE_DIR, "cpu.idle")))  # a kernel older than 5.15 has none
    results = BEIdle(h.layout, h.executor).tick(h.now)
    assert [r.status for r in results] == ["missing"]  # no file: nothing created, nothing failed
    assert h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.idle")) is None


@pytest.mark.parametrize("gates,jobs", [({}, False), ({"BECPUIdle": True}, True)])
def test_the_gate_adds_the_job(tmp_path, gates: dict[str, bool], jobs: bool) -> None:
    h = Harness(version=1, strategies=[], root=str(tmp_path))
    agent = Agent(AgentConfig(roots=h.host.roots, cgroup_version="1", cgroup_driver="cgroupfs",
                              feature_gates=gates))
    try:
        assert ("beCPUIdle" in [j.name for j in agent.scheduler.jobs]) is jobs
    finally:
        agent.close()
