"""simulate models the node's memory stalls (qosmanager.sim.fakestall) and the kernel's PSI triggers on them
(qosmanager.sim.fakepsi): the agent's PSI watch registers on the simulated node, a trigger fires when LS stalls
past its threshold within its window, and the memory levels wake at once.  BE held at its memory.high stalls BE
alone: the LS triggers stay quiet.  Times are simulated seconds (deterministic for a given seed; the trigger's
window depends on the process's CAP_SYS_RESOURCE, as the kernel's)."""

from __future__ import annotations

import itertools
import json
import os
import socket
from pathlib import Path

import pytest

from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.procfs import parse_psi
from qosmanager.host.roots import HostRoots
from qosmanager.sim import fakepsi
from qosmanager.sim.fakepsi import PressureRules
from qosmanager.sim.fakestall import THRASH_MAX, PressureFile, Stall, memory_stall, thrash_share
from qosmanager.sim.load import LoadShape
from qosmanager.sim.simulate import SimConfig, SimResult, result_json, run_simulation, summarize


def _run(version: int, growth: float, gates: dict[str, bool] | None = None) -> SimResult:
    return run_simulation(SimConfig(containers=200, duration=20.0, cpus=16, memory_gib=32, seed=0,
                                    cgroup_version=version, feature_gates={"BEMemoryHigh": True} if gates is None
                                    else gates, shape=LoadShape(ls_growth=growth)))


@pytest.fixture(scope="module")
def v2_ls_stalls() -> SimResult:
    return _run(2, 4.0)  # LS alone grows past the node: it stalls before BE is gone


@pytest.fixture(scope="module")
def v2_be_held() -> SimResult:
    return _run(2, 0.4)  # the node crosses T, the cap holds BE, LS never short


# ------------------------------------------------------------------ the kernel's rules, on their own
def test_memory_stall_model() -> None:
    assert thrash_share(10.0, 5.0) == 0.0
    assert thrash_share(0.0, 5.0) == THRASH_MAX
    assert 0 < thrash_share(4.0, 5.0) < thrash_share(1.0, 5.0) < THRASH_MAX
    held = memory_stall(10.0, 5.0, be_denied=1.0)
    assert held.ls == 0.0 and held.be == 1.0 and held.some == 1.0
    assert held.full == 0.0, "BE stalled alone is no node-wide full stall while LS runs"
    both = memory_stall(1.0, 5.0)
    assert both.ls == both.be > 0 and 0 < both.full <= both.some
    assert Stall(0.2, 0.0, be_alive=False).full == pytest.approx(0.04)


def test_averages_and_totals_follow_the_kernel(tmp_path: Path) -> None:
    f = tmp_path / "memory.pressure"
    f.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    pf = PressureFile([str(f)], 0.0)
    for i in range(1, 1201):  # 60 s stalled 10 % (some), 1 % (full), in 50 ms steps
        pf.advance(i * 0.05, 0.10, 0.01)
    assert pf.write()
    psi = parse_psi(f.read_text())
    assert psi.some.total == pytest.approx(6_000_000, rel=1e-6) and psi.full.total == pytest.approx(600_000, rel=1e-6)
    assert psi.some.avg10 == pytest.approx(10.0, abs=0.05)  # 30 periods of 2 s: converged
    assert 4.0 < psi.some.avg60 < 10.0 and psi.some.avg300 < psi.some.avg60
    assert not pf.write(), "figures that did not move are not written again"


@pytest.mark.parametrize("privileged", [True, False])
def test_a_trigger_fires_once_the_window_holds_its_threshold_at_most_once_per_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, privileged: bool) -> None:
    monkeypatch.setattr(fakepsi, "cap_sys_resource", lambda: privileged)
    roots = HostRoots(cgroup=str(tmp_path / "cg"), proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"))
    os.makedirs(roots.proc_path("pressure"))
    path = roots.proc_path("pressure/memory")
    Path(path).write_text("")
    rules = PressureRules(roots, 1)
    window = 500_000 if privileged else 2_000_000
    fd = rules.register(path, f"some {window // 100} {window}\0".encode())
    seen: list[tuple[int, int]] = []
    rules.on_event.append(lambda p, line, growth: seen.append((now, growth)))
    s = socket.socket(fileno=fd)
    try:
        total, now = 0, 0
        for step in range(200):  # 10 s in 50 ms steps: quiet 2 s, then stalled 5 % of the time
            now = step * 50_000
            if now >= 2_000_000:
                total += 2_500
            rules.update(path, now, total, 0)
        assert seen, "a stall of 5 % over a 1 % trigger must fire"
        first = seen[0][0]
        assert seen[0][1] >= window // 100
        # the stall began at 2 s; the threshold is crossed within the first tenth of a window (privileged) or at
        # the next 2 s update (unprivileged)
        assert 2_000_000 < first <= 2_000_000 + (window // 10 + 50_000 if privileged else 2_000_000)
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
        assert gaps and min(gaps) >= window, "at most one event per window"
        assert s.recv(1, socket.MSG_OOB) == b"!"  # the agent's poll sees POLLPRI
        before = len(seen)
        for step in range(200, 300):  # no new stall: nothing more
            rules.update(path, step * 50_000, total, 0)
        assert len(seen) - before <= 1  # an event pending from the last window may still go out, once
    finally:
        s.close()
        rules.close()


# ------------------------------------------------------------------ the closed loop
def test_ls_stall_fires_the_agents_triggers_and_level_3_evicts_for_it(v2_ls_stalls: SimResult) -> None:
    res = v2_ls_stalls
    assert res.psi_triggers, "the agent's PSI watch registered no trigger on the simulated node"
    files = {f for f, _ in res.psi_triggers}
    assert "kubepods/burstable/memory.pressure" in files
    assert not any(f.startswith(("kubepods/besteffort", "/proc")) or f == "kubepods/memory.pressure" for f in files)
    assert res.psi_events and res.psi_wakes >= 1
    assert res.ls_stall_first is not None and res.psi_events[0][0] >= res.ls_stall_first
    assert all(f in files for _, f, _ in res.psi_events)
    assert any("LS stalled on memory" in e.reason for e in res.evictions), "level 3 judged the LS stall"
    text = summarize(res)
    assert "PSI        LS stalled on memory" in text and "fired" in text and "the memory levels woken" in text
    assert "LS stall" in text  # the timeline's row
    assert "for LS's stall" in text
    doc = json.loads(json.dumps(result_json(res)))
    assert doc["psi"]["events"] and doc["psi"]["triggers"] and doc["psi"]["wakes"] == res.psi_wakes
    assert doc["timeline"][-1]["ls_stall_ms"] > 0 and doc["timeline"][-1]["psi_events"] == len(res.psi_events)


def test_be_held_at_memory_high_stalls_be_alone_before_any_eviction(v2_be_held: SimResult) -> None:
    res = v2_be_held
    first_eviction = min(e.t for e in res.evictions)
    before = [r for r in res.records if r.t < first_eviction]
    assert before[-1].be_memory_high >= 0 and before[-1].be_stall_ms > 0, "BE held by memory.high: it stalls"
    assert res.records[-1].ls_stall_ms == 0 and not res.psi_events, "BE's stall at its cap is not LS's"
    assert res.psi_triggers, "the triggers were registered all the same"
    text = summarize(res)
    assert "never fired" in text and "BE stall" in text


def test_v1_says_the_soft_limit_holds_nothing() -> None:
    res = _run(1, 0.4)
    soft = [r for r in res.records if r.memory_level >= 1]
    assert soft and any(r.be_soft_limit >= 0 for r in soft) and all(r.be_memory_high < 0 for r in res.records)
    text = summarize(res)
    assert "1 (BE capped)" not in text
    assert "not capped: cgroup v1 has no memory.high" in text and "holds nothing" in text
    assert "/proc/pressure/memory" in text, "v1: the node-wide trigger"


def test_cpu_waits_while_ls_and_what_bes_limit_allows_exceed_the_cpus(tmp_path: Path) -> None:
    from qosmanager.sim.fakehost import FakeHost
    from qosmanager.sim.fakestall import NodePressure, cpu_stall

    assert cpu_stall(16, 0.5, 6.0, 5.0, 5.0).ls == 0.0, "room for all: nobody waits"
    unlimited = cpu_stall(16, 0.5, 6.0, 13.0, 9.5)
    assert unlimited.ls == pytest.approx(3.5 / 19.0) and unlimited.be == pytest.approx(3.5 / 13.0)
    assert cpu_stall(16, 0.5, 6.0, 9.5, 9.5).ls == 0.0, "a BE limit at LS's room ends LS's wait"
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=16)
    p = NodePressure(host.layout, host.kernel.psi if host.kernel else None, resource="cpu")
    p.advance(0.0, unlimited)
    p.advance(2.0, unlimited)
    node = parse_psi(Path(host.roots.proc_path("pressure/cpu")).read_text())
    assert node.full.total == 0 and node.some.avg10 > 0, "the node's CPU full is 0, as the kernel shows it"
    ls = parse_psi(Path(host.layout.file("", host.layout.qos_dir(KubeQoS.BURSTABLE), "cpu.pressure")).read_text())
    assert ls.some.total == pytest.approx(2e6 * 3.5 / 19.0, rel=1e-3)
    assert p.ls_stall_us == pytest.approx(ls.some.total, rel=1e-3)


def test_simulate_counts_ls_cpu_waits(v2_be_held: SimResult) -> None:
    recs = v2_be_held.records
    assert recs[-1].ls_cpu_stall_ms > 0, "BE unlimited at the start: LS waits until cpuSuppress limits BE"
    assert recs[-1].ls_cpu_stall_ms == recs[-5].ls_cpu_stall_ms, "BE's limit in force leaves LS its room"
    assert "LS waited for a CPU" in summarize(v2_be_held)


def test_simulate_reports_the_fast_paths_cpu_triggers_and_the_samples_they_took(v2_be_held: SimResult) -> None:
    res = v2_be_held
    # the fast path's triggers: on the LS cgroups' cpu.pressure (v2), none on a memory file
    assert res.psi_cpu_triggers and all(f.endswith("cpu.pressure") for f, _ in res.psi_cpu_triggers)
    assert not {f for f, _ in res.psi_cpu_triggers} & {f for f, _ in res.psi_triggers}
    # LS waited for a CPU at the start (BE unlimited): the triggers fired, and each poll that found one
    # sampled the fast path at once
    assert res.psi_cpu_events and all(f.endswith("cpu.pressure") for _, f, _ in res.psi_cpu_events)
    assert 1 <= res.psi_cpu_samples <= len(res.psi_cpu_events)
    assert 0 <= res.psi_cpu_writes <= res.psi_cpu_samples
    assert not any(f.endswith("cpu.pressure") for _, f, _ in res.psi_events), "memory events stay memory's"
    text = summarize(res)
    assert f"CPU trigger(s) ({res.psi_cpu_triggers[0][1]})" in text
    assert f"the fast path sampled at once {res.psi_cpu_samples} time(s)" in text
    cpu = json.loads(json.dumps(result_json(res)))["psi"]["cpu"]
    assert cpu["fast_path_samples"] == res.psi_cpu_samples and cpu["fast_path_writes"] == res.psi_cpu_writes
    assert len(cpu["events"]) == len(res.psi_cpu_events) and len(cpu["triggers"]) == len(res.psi_cpu_triggers)
