"""CPU pressure feeds the fast path (``qosmanager.framework.psi`` with ``FastPath.pressure``): a PSI trigger on
the LS classes' ``cpu.pressure`` makes the fast path sample and decide at once, not at its sampler's next
sample.

The watch on a fake host whose kernel models PSI triggers (``qosmanager.sim.fakepsi``), the agent's scheduler
and fast path on a fake clock, the watch's ``poll`` called by hand (``PressureWatch.wait``)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from agentloop import agent_running
from qosmanager.agent import Agent
from qosmanager.framework.fastpath import FOLLOW, INTERVAL
from qosmanager.framework.psi import CPU_NOTE, NOTE, PressureWatch
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from test_fastpath import setup, steps
from test_psi import GATES, make, pod, psi_series, started
from test_strategy_cpu_suppress import read_quota

CPU_ONLY = ["cpuSuppress"]
BOTH = ["cpuSuppress", "memoryHigh", "memoryEvict"]


def cpu_files(host: FakeHost) -> list[str]:
    lay = host.layout
    return [lay.file("", lay.qos_dir(KubeQoS.BURSTABLE), "cpu.pressure"),
            lay.file("", lay.pod_dir(KubeQoS.GUARANTEED, pod(2, KubeQoS.GUARANTEED).uid), "cpu.pressure")]


def spied(agent: Agent) -> tuple[PressureWatch, list[bool]]:
    """The agent's watch, its fast path's pressure() calls recorded (follow flags)."""
    watch = agent.psi
    assert isinstance(watch, PressureWatch) and agent.fastpath is not None and watch.fastpath is agent.fastpath
    calls: list[bool] = []
    real = agent.fastpath.pressure

    def pressure(follow: bool = True) -> object:
        calls.append(follow)
        return real(follow)

    watch.fastpath = type("Spy", (), {"pressure": staticmethod(pressure)})()
    return watch, calls


# ---------------------------------------------------------------------- the watch
@pytest.mark.parametrize("version", [1, 2])
def test_a_cpu_stall_of_ls_samples_the_fast_path_at_once(tmp_path: Path, version: int) -> None:
    host, agent, clock = make(tmp_path, version, strategies=CPU_ONLY, gates={})
    try:
        watch, calls = spied(agent)
        assert watch.resources == ("cpu",), "no memory level runs: CPU pressure only"
        started(agent, clock)
        assert host.kernel is not None
        files = cpu_files(host) if version == 2 else [host.roots.proc_path("pressure/cpu")]
        assert sorted(watch.fds) == sorted(files)
        for f in files:
            assert host.kernel.psi.triggers(f) == [("some", *map(int, watch.line.split()[1:]))]
        recs = [r for r in agent.audit.recent if r["action"] == "psi-trigger"]
        assert {r["target"] for r in recs} >= {"proc/pressure/cpu"} if version == 1 else len(recs) == 2
        assert watch.wait(0) == ()
        assert host.kernel.psi.fire(files[0]) == 1
        assert watch.wait(0) == ("fastpath",)
        # the LS cgroups' own stall is followed; the node's (v1: BE's stall counts there too) is only sampled
        assert calls == [version == 2]
        assert watch.wait(0) == (), "the event was consumed"
        assert agent.scheduler.run_ripe() == 0, "no job is woken: the fast path is not the scheduler's"
        if version == 2:
            assert psi_series(agent)[0][("cpu", "qos")] == 1.0
        else:
            assert psi_series(agent)[0][("cpu", "node")] == 1.0
    finally:
        agent.close()


def test_the_running_agent_samples_the_fast_path_on_a_stall(tmp_path: Path) -> None:
    """``Agent.run``: the watch's thread registers and sleeps in its poll beside the fast path's thread; a
    fired trigger makes the fast path sample from the watch's thread."""
    host, agent, _ = make(tmp_path, 2, strategies=CPU_ONLY, gates={})
    watch, fp = agent.psi, agent.fastpath
    assert watch is not None and fp is not None
    with agent_running(agent, real_time=True) as until:
        until("the triggers", lambda: len(watch.fds) >= 2)
        assert host.kernel is not None
        host.kernel.psi.fire(cpu_files(host)[0])
        until("the fast path's sample", lambda: fp.pressures > 0)
        assert watch.events == 1 and fp.step_errors == 0
    assert host.kernel is not None
    assert watch.fds == {} and host.kernel.psi.triggers(cpu_files(host)[0]) == [], "the triggers end with the loop"


def test_memory_and_cpu_each_wake_their_own(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 2, strategies=BOTH, gates=GATES)
    try:
        watch, calls = spied(agent)
        assert watch.resources == ("memory", "cpu")
        started(agent, clock)
        lay = host.layout
        memory = lay.file("", lay.qos_dir(KubeQoS.BURSTABLE), "memory.pressure")
        assert len(watch.fds) == 4 and memory in watch.fds
        assert host.kernel is not None
        host.kernel.psi.fire(cpu_files(host)[1])
        assert watch.wait(0) == ("fastpath",) and calls == [True]
        assert agent.scheduler.run_ripe() == 0, "a CPU stall wakes no memory job"
        host.kernel.psi.fire(memory)
        assert watch.wait(0) == ("collect", "memoryHigh", "memoryEvict") and calls == [True]
        host.kernel.psi.fire(memory)
        host.kernel.psi.fire(cpu_files(host)[0])
        assert watch.wait(0) == ("collect", "memoryHigh", "memoryEvict", "fastpath")
        events, triggers = psi_series(agent)
        assert triggers == {("memory", "node"): 0, ("memory", "qos"): 1, ("memory", "pod"): 1,
                            ("cpu", "node"): 0, ("cpu", "qos"): 1, ("cpu", "pod"): 1}
        assert events == {("memory", "node"): 0, ("memory", "qos"): 2, ("memory", "pod"): 0,
                          ("cpu", "node"): 0, ("cpu", "qos"): 1, ("cpu", "pod"): 1}
    finally:
        agent.close()


def test_cgroup_cpu_psi_refused_falls_back_to_the_node_file_and_says_so(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 2, strategies=BOTH, gates=GATES)
    try:
        assert host.kernel is not None
        for f in cpu_files(host):
            host.kernel.psi.refuse[f] = errno.EOPNOTSUPP
        watch, calls = spied(agent)
        started(agent, clock)
        node = host.roots.proc_path("pressure/cpu")
        assert node in watch.fds and not set(cpu_files(host)) & set(watch.fds)
        notes = agent.store.conditions.notes()
        assert "node-wide /proc/pressure/cpu" in notes[CPU_NOTE].message
        assert NOTE not in notes or "node-wide" not in notes[NOTE].message, "memory.pressure took its triggers"
        assert agent.store.conditions.get(CPU_NOTE) is None, "informational, not a degraded condition"
        host.kernel.psi.fire(node)
        assert watch.wait(0) == ("fastpath",) and calls == [False], "node-wide: sampled, not followed"
    finally:
        agent.close()


def test_dry_run_registers_no_cpu_trigger_and_says_so(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 2, strategies=CPU_ONLY, gates={}, dry_run=True)
    try:
        watch = agent.psi
        assert watch is not None
        started(agent, clock)
        assert watch.fds == {} and watch.dry_run
        assert host.kernel is not None and all(host.kernel.psi.triggers(f) == [] for f in cpu_files(host))
        recs = [r for r in agent.audit.recent if r["action"] == "psi-trigger"]
        assert len(recs) == 1 and recs[0]["executed"] is False
        assert "--dry-run" in agent.store.conditions.notes()[CPU_NOTE].message
    finally:
        agent.close()


def test_no_cpu_psi_on_the_kernel_is_a_note(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 1, strategies=CPU_ONLY, gates={})
    try:
        Path(host.roots.proc_path("pressure/cpu")).unlink()
        watch = agent.psi
        assert watch is not None
        started(agent, clock)
        assert watch.fds == {}
        assert "no PSI on this kernel" in agent.store.conditions.notes()[CPU_NOTE].message
    finally:
        agent.close()


# ---------------------------------------------------------------------- the fast path's side
@pytest.mark.parametrize("version", [1, 2])
def test_a_stall_writes_the_be_quota_before_the_next_sample_is_due(version: int) -> None:
    """LS goes from 1 to 4 cores just after a sample: the sampler would see it one interval later; the stall
    event 30 ms in samples at once and writes (cpuSuppress's formula over the window it has)."""
    h, c, fp, observed = setup(version)
    fp.step()
    assert steps(fp, c, 4, ls=1.0) == [None] * 4
    c.advance(0.6 * INTERVAL, ls=4.0, be=1.0)
    samples = fp.samples
    w = fp.pressure()
    assert w is not None and fp.samples == samples + 1 and fp.pressures == 1
    assert read_quota(h) < 420000 - 20000, "lowered by more than the hysteresis at once"
    assert observed, "timed as a reaction"
    assert fp._follow_until >= c.t + FOLLOW - 1e-9, "followed: the rise shows in part"
    # the next samples follow it to its level (5200m - 4000m)
    steps(fp, c, 3, ls=4.0)
    assert abs(read_quota(h) - 120000) <= 1000, "to its level (within a millicore of rounding)"


def test_without_a_stall_the_rise_waits_for_the_next_sample() -> None:
    """The same rise without the event: nothing is written until a sample is due (what the event gains)."""
    h, c, fp, _ = setup(2)
    fp.step()
    steps(fp, c, 4, ls=1.0)
    c.advance(0.6 * INTERVAL, ls=4.0, be=1.0)
    assert read_quota(h) == 420000


def test_a_node_wide_stall_samples_without_following() -> None:
    h, c, fp, _ = setup(2)
    fp.step()
    steps(fp, c, 4, ls=1.0)
    follow = fp._follow_until
    c.advance(0.6 * INTERVAL, ls=1.0, be=1.0)
    assert fp.pressure(follow=False) is None, "no rise: nothing to write"
    assert fp._follow_until == follow and read_quota(h) == 420000


def test_a_stall_right_after_a_sample_decides_on_that_sample() -> None:
    """A sample under half an interval old is decided on again, not joined by a second one (a window of a
    few milliseconds would be noise)."""
    h, c, fp, _ = setup(2)
    fp.step()
    steps(fp, c, 4, ls=1.0)
    c.advance(0.1 * INTERVAL, ls=4.0, be=1.0)
    samples = fp.samples
    fp.pressure()
    assert fp.samples == samples and read_quota(h) == 420000


def test_a_stopped_fast_path_ignores_a_stall() -> None:
    _, _, fp, _ = setup(2)
    fp.step()
    fp.stop()
    samples = fp.samples
    assert fp.pressure() is None and fp.samples == samples


def test_the_thread_ends_where_no_trigger_can_come(tmp_path: Path) -> None:
    """A kernel without PSI: the watch's thread registers nothing, says so, and ends (no idle thread)."""
    host, agent, clock = make(tmp_path, 1, strategies=CPU_ONLY, gates={})
    try:
        Path(host.roots.proc_path("pressure/cpu")).unlink()
        clock.t += 1.0
        agent.scheduler.run_ripe()
        watch = agent.psi
        assert watch is not None
        watch.start()
        assert watch._thread is not None
        watch._thread.join(30)
        assert not watch._thread.is_alive() and watch.syncs == 1
        assert "no PSI on this kernel" in agent.store.conditions.notes()[CPU_NOTE].message
    finally:
        agent.close()
