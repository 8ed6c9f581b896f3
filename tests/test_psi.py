"""PSI triggers (``qosmanager.framework.psi``): the memory levels woken when the LS classes stall on memory.

The whole agent on a fake host whose kernel models PSI triggers (``qosmanager.sim.fakepsi``: registered as
the kernel registers them, fired when the test says), its scheduler driven by a fake clock, the watch's
``poll`` called by hand (``PressureWatch.wait``, what its thread does)."""

from __future__ import annotations

import errno
import json
import os
import select
import shutil
import time
from pathlib import Path

import pytest

from agentloop import agent_running
from qosmanager._native import sysio
from qosmanager.agent import Agent, AgentConfig
from qosmanager.executor.psi import PressureTrigger
from qosmanager.framework.psi import NOTE, UNPRIVILEGED_WINDOW_US, WINDOW_US, PressureWatch, trigger_line
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.fakepsi import parse_trigger
from qosmanager.sim.objects import node_object, nodeslo_object, pod_list, pod_object
from simclock import Clock

GiB = 1 << 30
CAP = 16 * GiB
T0 = 1000.0
SLO = {"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 70}}
MEMORY = ["memoryHigh", "memoryEvict"]
GATES = {"BEMemoryHigh": True, "BEMemoryEvict": True}


def pod(i: int, qos: KubeQoS) -> FakePod:
    return FakePod(f"{i:08d}-0000-4000-8000-000000000{i:03d}", "default", f"p-{i}", qos,
                   [FakeContainer("c", f"containerd://{i:064x}")])


def make(tmp_path: Path, version: int, *, strategies: list[str] = MEMORY, gates: dict[str, bool] = GATES,
         react_mode: str = "fast", dry_run: bool = False, kernel: bool = True,
         memory_evict_interval: float = 3600.0) -> tuple[FakeHost, Agent, Clock]:
    from qosmanager.framework.strategy import QoSConfig

    host = FakeHost(str(tmp_path / "host"), version=version, memory_bytes=CAP, kernel=kernel)
    pods = [pod(1, KubeQoS.BESTEFFORT), pod(2, KubeQoS.GUARANTEED), pod(3, KubeQoS.BURSTABLE)]
    host.add_pods(pods)
    (tmp_path / "pods.json").write_text(json.dumps(pod_list(pod_object(p, memory=GiB) for p in pods)))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    (tmp_path / "slo.json").write_text(json.dumps(nodeslo_object(SLO)))
    qos = QoSConfig()
    qos.memory_evict_interval = memory_evict_interval
    clock = Clock(T0)
    agent = Agent(AgentConfig(roots=host.roots, node_name="n1", pods_file=str(tmp_path / "pods.json"),
                              node_file=str(tmp_path / "node.json"), node_slo_file=str(tmp_path / "slo.json"),
                              strategies=strategies, feature_gates=gates, metrics_addr="", react_mode=react_mode,
                              cgroup_version=str(version), cgroup_driver="cgroupfs", dry_run=dry_run, qos=qos),
                  clock=clock, monotonic=clock, seed=1)
    return host, agent, clock


def watch_of(agent: Agent) -> PressureWatch:
    assert isinstance(agent.psi, PressureWatch) and agent.psi in agent.scheduler.watchers
    return agent.psi


def ls_files(host: FakeHost) -> list[str]:
    lay = host.layout
    return [lay.file("", lay.qos_dir(KubeQoS.BURSTABLE), "memory.pressure"),
            lay.file("", lay.pod_dir(KubeQoS.GUARANTEED, pod(2, KubeQoS.GUARANTEED).uid), "memory.pressure")]


def started(agent: Agent, clock: Clock) -> dict[str, int]:
    """The agent past its first ticks (the pods known), the watch's triggers registered; the runs so far."""
    clock.t += 1.0
    agent.scheduler.run_ripe()
    assert agent.psi is not None
    agent.psi.sync()
    return {j.name: j.runs for j in agent.scheduler.jobs}


# ---------------------------------------------------------------------- the wake
@pytest.mark.parametrize("version", [1, 2])
def test_a_stall_of_ls_wakes_the_memory_levels_before_their_next_tick(tmp_path: Path, version: int) -> None:
    host, agent, clock = make(tmp_path, version)
    try:
        watch = watch_of(agent)
        runs = started(agent, clock)
        assert host.kernel is not None
        files = ls_files(host) if version == 2 else [host.roots.proc_path("pressure/memory")]
        assert sorted(watch.fds) == sorted(files)
        for f in files:
            assert host.kernel.psi.triggers(f) == [("some", *map(int, watch.line.split()[1:]))]
        assert watch.wait(0) == (), "no event yet"
        clock.t += 0.05
        assert agent.scheduler.run_ripe() == 0, "no tick is due (memoryEvict's next one is an hour away)"
        assert host.kernel.psi.fire(files[-1]) == 1
        assert watch.wait(0) == ("collect", "memoryHigh", "memoryEvict")
        assert watch.wait(0) == (), "the poll that reported the event consumed it"
        order: list[str] = []
        agent.scheduler.on_run.append(lambda job, _: order.append(job.name))
        assert agent.scheduler.run_ripe() == 3
        assert order == ["collect", "memoryHigh", "memoryEvict"], "the collector first, then the levels in order"
        assert {n: j.runs - runs[n] for n, j in ((j.name, j) for j in agent.scheduler.jobs)} == {
            "collect": 1, "memoryHigh": 1, "memoryEvict": 1}
    finally:
        agent.close()


def test_the_running_agent_wakes_memory_evict_on_a_stall(tmp_path: Path) -> None:
    """``Agent.run``: the thread registers, sleeps in its poll, and a fired trigger runs memoryEvict long before
    its next tick (an hour)."""
    host, agent, _ = make(tmp_path, 2)
    watch = watch_of(agent)
    with agent_running(agent, real_time=True) as until:
        evict = next(j for j in agent.scheduler.jobs if j.name == "memoryEvict")
        until("the first tick and the triggers", lambda: evict.runs >= 1 and len(watch.fds) >= 2)
        assert host.kernel is not None
        runs = evict.runs
        host.kernel.psi.fire(ls_files(host)[0])
        until("memoryEvict woken", lambda: evict.runs != runs)
        assert watch.events == 1 and agent.scheduler.wakes >= 1
    assert host.kernel is not None
    assert watch.fds == {} and host.kernel.psi.triggers(ls_files(host)[0]) == [], "the triggers end with the loop"


def test_a_guaranteed_pod_gone_drops_its_trigger_and_the_pod_set_resyncs(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 2)
    try:
        watch = watch_of(agent)
        started(agent, clock)
        burstable, guaranteed = ls_files(host)
        assert host.kernel is not None
        host.kernel.psi.gone(guaranteed)  # the pod's cgroup removed
        assert watch.wait(0) == (), "a trigger whose cgroup is gone is no stall"
        assert burstable in watch.fds and watch.syncs >= 2
        # the pod set changes: the collector's run pokes the thread, which registers again
        (tmp_path / "pods.json").write_text(json.dumps(pod_list([pod_object(pod(3, KubeQoS.BURSTABLE))])))
        clock.t += 1.0
        gen = agent.store.pods_generation
        deadline = time.monotonic() + 30
        while agent.store.pods_generation == gen:
            agent.scheduler.run_ripe()
            assert time.monotonic() < deadline, "the pods file was not read again"
            time.sleep(0.01)
        agent.scheduler.run_ripe()  # the collector's run pokes the watch
        watch.wait(0)
        assert sorted(watch.fds) == [burstable]
    finally:
        agent.close()


def test_a_pod_dir_made_after_the_pod_was_listed_gets_its_trigger_after_the_next_collect(tmp_path: Path) -> None:
    """The kubelet makes a pod's cgroup after the pod is listed: the trigger follows at the next collector run."""
    host, agent, clock = make(tmp_path, 2)
    try:
        watch = watch_of(agent)
        burstable, guaranteed = ls_files(host)
        pod_dir = os.path.dirname(guaranteed)
        os.rename(pod_dir, pod_dir + ".later")
        runs = started(agent, clock)
        assert list(watch.fds) == [burstable] and watch.missing == 1
        assert guaranteed not in watch.refused, "a cgroup not made yet is no refusal"
        os.rename(pod_dir + ".later", pod_dir)
        clock.t += 1.0
        collect = next(j for j in agent.scheduler.jobs if j.name == "collect")
        agent.scheduler.run_job(collect)  # pokes the watch: the pod set is the same, a file was missing
        assert collect.runs > runs["collect"]
        watch.wait(0)
        assert sorted(watch.fds) == sorted([burstable, guaranteed]) and watch.missing == 0
    finally:
        agent.close()


# ---------------------------------------------------------------------- where it falls back
def test_dry_run_registers_nothing_audits_it_and_says_so(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 2, dry_run=True)
    try:
        watch = watch_of(agent)
        started(agent, clock)
        assert watch.fds == {} and watch.dry_run
        assert host.kernel is not None and all(host.kernel.psi.triggers(f) == [] for f in ls_files(host))
        recs = [r for r in agent.audit.recent if r["action"] == "psi-trigger"]
        assert recs and all(r["executed"] is False for r in recs)
        note = agent.store.conditions.notes()[NOTE]
        assert "--dry-run" in note.message
        assert not agent.store.conditions.get(NOTE), "informational, not a degraded condition"
        # nothing will ever be registered: the collector's runs do not poke the thread into a sync
        assert watch.missing == 0
        collect = next(j for j in agent.scheduler.jobs if j.name == "collect")
        syncs = []
        for _ in range(4):
            clock.t += 1.0
            agent.scheduler.run_job(collect)
            watch.wait(0)
            syncs.append(watch.syncs)
        assert len(set(syncs[1:])) == 1, f"syncs after each collector run: {syncs}"  # (the first: the pods in)
    finally:
        agent.close()


def test_cgroup_psi_refused_falls_back_to_the_node_file(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 2)
    try:
        assert host.kernel is not None
        for f in ls_files(host):
            host.kernel.psi.refuse[f] = errno.EOPNOTSUPP
        watch = watch_of(agent)
        started(agent, clock)
        node = host.roots.proc_path("pressure/memory")
        assert list(watch.fds) == [node]
        assert "node-wide" in agent.store.conditions.notes()[NOTE].message
        errors = [r for r in agent.audit.recent if r["action"] == "psi-trigger" and r.get("error")]
        assert {r["target"] for r in errors} == {os.path.relpath(f, host.roots.cgroup) for f in ls_files(host)}
        assert all(os.strerror(errno.EOPNOTSUPP) in r["error"] for r in errors)
        host.kernel.psi.fire(node)
        assert watch.wait(0) == ("collect", "memoryHigh", "memoryEvict")
    finally:
        agent.close()


def test_no_psi_on_the_kernel_is_a_note_not_a_fault(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path, 1)
    try:
        os.unlink(host.roots.proc_path("pressure/memory"))  # a kernel booted without psi=1
        watch = watch_of(agent)
        started(agent, clock)
        assert watch.fds == {}
        assert "no PSI on this kernel" in agent.store.conditions.notes()[NOTE].message
        assert agent.store.conditions.get(NOTE) is None
    finally:
        agent.close()


def test_a_v2_kernel_without_psi_is_asked_once_not_after_every_collect(tmp_path: Path) -> None:
    """A v2 kernel booted with psi=0 (some distributions' default) has no pressure files at all: no
    /proc/pressure, no memory.pressure.  That is the kernel's answer, not a cgroup still to come: the
    collector's runs must not make the watch register again (a pass over the pods) at every tick."""
    host, agent, clock = make(tmp_path, 2)
    try:
        for f in ls_files(host):
            os.unlink(f)
        node = host.roots.proc_path("pressure/memory")
        shutil.rmtree(os.path.dirname(node))
        watch = watch_of(agent)
        started(agent, clock)
        assert watch.fds == {} and watch.missing == 0
        assert "no PSI on this kernel" in agent.store.conditions.notes()[NOTE].message
        watch.wait(0)  # the start's own poke (the pods first seen)
        syncs = watch.syncs
        collect = next(j for j in agent.scheduler.jobs if j.name == "collect")
        for _ in range(3):
            clock.t += 1.0
            agent.scheduler.run_job(collect)
            watch.wait(0)
        assert watch.syncs == syncs
    finally:
        agent.close()


def test_healthz_lists_notes_under_info_and_stays_ok() -> None:
    from qosmanager.exporter.agent_metrics import AgentMetrics
    from qosmanager.exporter.health import Health, HealthBounds
    from qosmanager.states.store import StateStore

    store = StateStore()
    metrics = AgentMetrics()
    health = Health(metrics, HealthBounds(), store=store, clock=lambda: metrics.started_at)
    store.conditions.note(NOTE, "no PSI on this kernel")
    ok, body = health.check()
    assert ok and list(body["info"]) == [NOTE] and body["info"][NOTE]["detail"] == "no PSI on this kernel"
    assert "degraded" not in body and body["status"] == "ok"


@pytest.mark.parametrize("strategies,gates", [
    (["memoryHigh", "memoryEvict", "cpuSuppress"], GATES),
    (["cpuSuppress"], {}),
])
def test_no_watch_in_tick_mode(tmp_path: Path, strategies: list[str], gates: dict[str, bool]) -> None:
    """koordlet's pace: neither the memory levels nor the fast path are woken by PSI."""
    _, agent, _ = make(tmp_path, 2, strategies=strategies, gates=gates, react_mode="tick")
    try:
        assert agent.psi is None and not any(isinstance(w, PressureWatch) for w in agent.scheduler.watchers)
    finally:
        agent.close()


def test_no_watch_without_a_memory_level_or_the_fast_path(tmp_path: Path) -> None:
    _, agent, _ = make(tmp_path, 2, strategies=["cpuBurst"], gates={"CPUBurst": True})
    try:
        assert agent.fastpath is None and agent.psi is None
    finally:
        agent.close()


def test_memory_evict_alone_gets_the_watch(tmp_path: Path) -> None:
    _, agent, _ = make(tmp_path, 2, strategies=["memoryEvict"], gates={"BEMemoryEvict": True})
    try:
        assert agent.memtrigger is None, "the usage lines are memoryHigh's"
        watch_of(agent)
    finally:
        agent.close()


# ---------------------------------------------------------------------- the kernel's side
def test_a_plain_file_is_never_written_as_a_trigger(tmp_path: Path) -> None:
    """A host without a (fake) kernel: the pressure file is a plain copy; registration is refused, the file
    keeps its content (a write would have replaced the averages the stall judgement reads)."""
    plain = tmp_path / "memory"
    plain.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n")
    before = plain.read_text()
    with pytest.raises(OSError) as e:
        sysio.psi_trigger(str(plain), trigger_line(True).encode())
    assert e.value.errno == errno.EOPNOTSUPP and plain.read_text() == before


def test_the_lines_are_the_kernels() -> None:
    assert trigger_line(True) == f"some {WINDOW_US // 100} {WINDOW_US}"
    assert trigger_line(False) == f"some {UNPRIVILEGED_WINDOW_US // 100} {UNPRIVILEGED_WINDOW_US}"
    assert parse_trigger(b"some 5000 500000\0", True) == ("some", 5000, 500000)
    assert parse_trigger(b"full 20000 2000000\n", False) == ("full", 20000, 2000000)
    for data, privileged in [
        (b"some 5000 2000000", False),  # no NUL: the kernel cuts the last digit, a 0.2 s window
        (b"some 0 500000\0", True),  # no threshold
        (b"some 600000 500000\0", True),  # threshold above the window
        (b"some 5000 0\0", True),  # no window
        (b"some 5000 20000000\0", True),  # over 10 s
        (b"some 5000 500000\0", False),  # unprivileged: multiples of 2 s only
        (b"avg 5000 500000\0", True),
    ]:
        with pytest.raises(OSError) as e:
            parse_trigger(data, privileged)
        assert e.value.errno == errno.EINVAL, data


def test_the_fake_descriptor_polls_as_the_kernels(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), version=2, memory_bytes=CAP)
    path = host.layout.file("", host.layout.qos_dir(KubeQoS.BURSTABLE), "memory.pressure")
    fd = sysio.psi_trigger(path, trigger_line(False).encode())
    try:
        assert host.kernel is not None
        assert sysio.psi_poll([(fd, select.POLLPRI)], 0) == []
        host.kernel.psi.fire(path)
        host.kernel.psi.fire(path)  # two events before one poll: one POLLPRI
        assert sysio.psi_poll([(fd, select.POLLPRI)], 0) == [(fd, select.POLLPRI)]
        assert sysio.psi_poll([(fd, select.POLLPRI)], 0) == []
        host.kernel.psi.gone(path)
        assert sysio.psi_poll([(fd, select.POLLPRI)], 0) == [(fd, select.POLLERR | select.POLLPRI)]
        with pytest.raises(FileNotFoundError):
            sysio.psi_trigger(path + ".x", b"some 20000 2000000")
    finally:
        os.close(fd)
    assert host.kernel.psi.triggers(path) == []


def test_the_executor_audits_each_registration_and_a_failure_once(tmp_path: Path) -> None:
    host, agent, _ = make(tmp_path, 2)
    try:
        node = host.roots.proc_path("pressure/memory")
        t = PressureTrigger("psi", node, trigger_line(False), "why")
        first, second = agent.executor.psi_trigger(t), agent.executor.psi_trigger(t)
        assert first.status == second.status == "registered" and first.fd != second.fd
        recs = [r for r in agent.audit.recent if r["action"] == "psi-trigger"]
        assert len(recs) == 2 and recs[0]["target"] == "proc/pressure/memory" and recs[0]["executed"] is True
        assert recs[0]["value"] == trigger_line(False)
        for r in (first, second):
            os.close(r.fd)
        bad = host.layout.file("", host.layout.qos_dir(KubeQoS.BURSTABLE), "memory.pressure")
        assert host.kernel is not None
        host.kernel.psi.refuse[bad] = errno.EOPNOTSUPP
        t = PressureTrigger("psi", bad, trigger_line(False), "why")
        results = [agent.executor.psi_trigger(t) for _ in range(3)]
        assert {(r.status, r.errno) for r in results} == {("failed", errno.EOPNOTSUPP)}
        failed = [r for r in agent.audit.recent if r["action"] == "psi-trigger" and r.get("error")]
        assert len(failed) == 1 and failed[0]["executed"] is False, "the same refusal is audited once"
    finally:
        agent.close()


# ---------------------------------------------------------------------- /metrics
def psi_series(agent: Agent) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """(events, triggers) by (resource, scope), as /metrics shows them."""
    from promtext import parse
    from qosmanager.exporter import Exporter

    fams = parse(Exporter.for_agent(agent, "127.0.0.1:0").metrics.registry.render())
    out: list[dict[tuple[str, str], float]] = []
    for name, sample in (("qosmanager_psi_events_total", "qosmanager_psi_events_total"),
                         ("qosmanager_psi_triggers", "qosmanager_psi_triggers")):
        got = {}
        for (n, labels), v in fams[name].samples.items():
            assert n == sample
            d = dict(labels)
            got[(d["resource"], d["scope"])] = v
        out.append(got)
    return out[0], out[1]


@pytest.mark.parametrize("version", [1, 2])
def test_metrics_count_events_and_triggers_by_resource_and_scope(tmp_path: Path, version: int) -> None:
    host, agent, clock = make(tmp_path, version)
    try:
        watch = watch_of(agent)
        zero = {("memory", s): 0.0 for s in ("node", "qos", "pod")}
        assert psi_series(agent) == (zero, zero), "every scope shown from the start, at 0"
        started(agent, clock)
        assert host.kernel is not None
        if version == 2:
            burstable, guaranteed = ls_files(host)
            assert psi_series(agent)[1] == {**zero, ("memory", "qos"): 1.0, ("memory", "pod"): 1.0}
            host.kernel.psi.fire(guaranteed)
            watch.wait(0)
            host.kernel.psi.fire(guaranteed)
            watch.wait(0)
            host.kernel.psi.fire(burstable)
            watch.wait(0)
            assert psi_series(agent)[0] == {**zero, ("memory", "qos"): 1.0, ("memory", "pod"): 2.0}
        else:
            node = host.roots.proc_path("pressure/memory")
            assert psi_series(agent)[1] == {**zero, ("memory", "node"): 1.0}
            host.kernel.psi.fire(node)
            watch.wait(0)
            assert psi_series(agent)[0] == {**zero, ("memory", "node"): 1.0}
        assert watch.events == (3 if version == 2 else 1)
    finally:
        agent.close()


def test_metrics_show_no_trigger_under_dry_run_and_no_series_without_a_watch(tmp_path: Path) -> None:
    _, agent, clock = make(tmp_path / "dry", 2, dry_run=True)
    try:
        started(agent, clock)
        events, triggers = psi_series(agent)
        assert set(triggers.values()) == {0.0} and set(events.values()) == {0.0} and len(triggers) == 3
    finally:
        agent.close()
    _, agent, _ = make(tmp_path / "tick", 2, react_mode="tick")
    try:
        assert psi_series(agent) == ({}, {})
    finally:
        agent.close()
