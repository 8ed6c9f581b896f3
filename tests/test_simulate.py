"""``qosmanager simulate``: the closed loop between the real agent and the load model.

Small runs (200 containers, 16 CPUs, 20 simulated seconds) of the real agent.  What is checked:

* (cgroup v1, cfsQuota) the BE quota the agent writes follows koordlet's formula (§4.1) applied to
  the load the model put on the node: ``max((capacity x 65 % - LS used - system) x 100, 2000)``,
  raised by at most 10 % of the node per write, never below the 2000 us floor (the spike drives it
  there);
* (cgroup v2, cpuset) the BE cpuset never has fewer than 2 CPUs and grows by at most
  ceil(10 % of the CPUs) per write;
* BE memory growth triggers BEMemoryEvict, which evicts only BE pods, lowest priority first (every BE
  pod of a lower priority was already evicted), larger users first within a priority, and the
  evicted pods stop using memory;
* the load model itself: it reads back the limits the agent wrote and writes counters the collector
  turns into exactly the usage it decided.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qosmanager.framework.manager import load_strategies
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim import plot
from qosmanager.sim.fakehost import USER_HZ, FakeHost
from qosmanager.sim.load import LoadModel, LoadShape
from qosmanager.sim.simulate import Progress, SimConfig, SimResult, result_json, run_simulation, sparkline, summarize

CPUS = 16
PERIOD = 100_000
MAX_INC_QUOTA = int(CPUS * PERIOD * 0.1)  # beMaxIncreaseCPUPercent of the node per write: 160000
MAX_INC_CPUS = math.ceil(CPUS * 0.1)  # 2 CPUs
# the node's usage is read from /proc/stat in ticks of 1/USER_HZ s: 1 tick of error per sample
QUOTA_TOLERANCE = 2 * PERIOD // USER_HZ + 500


def _require(*names: str) -> None:
    missing = [n for n in names if n not in load_strategies()]
    if missing:
        pytest.skip(f"strategy not implemented yet: {', '.join(missing)}")


def _small(**kw: object) -> SimConfig:
    """The checks here hold the tick to koordlet's formula on each step's record: at cpuSuppress's pace
    (the fast path, whose sub-steps move LS demand within a step, has tests/test_simulate_fastpath.py)."""
    base: dict[str, object] = {"containers": 200, "duration": 20.0, "cpus": CPUS, "memory_gib": 32, "seed": 0,
                               "react_mode": "tick"}
    base.update(kw)
    return SimConfig(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def quota_run() -> SimResult:
    _require("cpuSuppress")
    return run_simulation(_small(cgroup_version=1, suppress_policy="cfsQuota"))


@pytest.fixture(scope="module")
def cpuset_run() -> SimResult:
    _require("cpuSuppress", "memoryEvict")
    # every BE pod's memory grows too, so eviction goes on through the priority tiers
    return run_simulation(_small(cgroup_version=2, suppress_policy="cpuset", shape=LoadShape(be_growth=1.0)))


def _quota(value: str | None) -> int:
    """Canonical quota of a v1 cpu.cfs_quota_us or v2 cpu.max content."""
    if value is None:
        return -1
    first = value.split()[0]
    return -1 if first in ("max", "-1") else int(first)


def _expected_quota(res: SimResult, t: float) -> int:
    """koordlet-qos §4.1 on what the agent measured at the last collect before ``t`` (collects run at
    whole seconds, just after the load model's step for that second)."""
    rec = res.records[math.floor(t + 1e-9)]
    capacity_m = CPUS * 1000
    suppress_m = capacity_m * 65 // 100 - int(rec.ls_used * 1000) - int(rec.system * 1000)
    return max(suppress_m * PERIOD // 1000, 2000)


def test_be_quota_follows_ls_load_with_koordlets_formula(quota_run: SimResult) -> None:
    writes = [w for w in quota_run.be_writes if w.strategy == "cpuSuppress" and "cpuset" not in w.file]
    assert len(writes) >= 10
    for w in writes:
        new, old = _quota(w.value), _quota(w.old)
        want = _expected_quota(quota_run, w.t)
        if old != -1 and new == old + MAX_INC_QUOTA:  # the step limit cut the increase
            assert want >= new - QUOTA_TOLERANCE, (w, want)
        else:
            assert abs(new - want) <= QUOTA_TOLERANCE, (w, want)


def test_be_quota_falls_as_ls_rises_and_never_below_the_floor(quota_run: SimResult) -> None:
    recs = quota_run.records
    values = [_quota(w.value) for w in quota_run.be_writes
              if w.strategy == "cpuSuppress" and "cpu." in w.file]
    assert min(values) == 2000  # the LS spike pushes the quota down to koordlet's beMinQuota ...
    assert all(v >= 2000 for v in values)  # ... and never lower
    # the limit the model reads back moves against LS usage (a step later: the agent acts on the last sample)
    ls = np.array([r.ls_used for r in recs])
    limit = np.array([r.be_limit for r in recs])
    assert np.isfinite(limit[2:]).all()
    assert np.corrcoef(ls[2:-1], limit[3:])[0, 1] < -0.8
    # and BE used what its limit allowed, never more
    assert all(r.be_used <= r.be_limit + 1e-9 for r in recs)


def test_be_quota_rises_again_in_bounded_steps(quota_run: SimResult) -> None:
    pairs = [(_quota(w.old), _quota(w.value)) for w in quota_run.be_writes
             if w.strategy == "cpuSuppress" and "cpu." in w.file and w.old is not None]
    rises = [(old, new) for old, new in pairs if old != -1 and new > old]
    assert rises, "the quota never rose again after the spike"
    assert all(new - old <= MAX_INC_QUOTA for old, new in rises)
    assert any(new - old == MAX_INC_QUOTA for old, new in rises)  # recovering from the floor takes steps
    floor_at = next(i for i, (_, new) in enumerate(pairs) if new == 2000)
    assert pairs[-1][1] > 2000 and floor_at < len(pairs) - 1


def test_cpuset_policy_keeps_two_cpus_and_grows_by_at_most_ten_percent(cpuset_run: SimResult) -> None:
    def count(text: str | None) -> int:
        from qosmanager.host.cpuset import parse_cpu_list

        return CPUS if not text or not text.strip() else len(parse_cpu_list(text))

    writes = [w for w in cpuset_run.be_writes
              if w.strategy == "cpuSuppress" and w.file.endswith("cpuset.cpus")]
    assert writes
    sizes = [(count(w.old), count(w.value)) for w in writes]
    assert all(new >= 2 for _, new in sizes)
    assert any(new < old for old, new in sizes) and any(new > old for old, new in sizes)
    assert all(new - old <= MAX_INC_CPUS for old, new in sizes)
    assert min(r.be_cpus for r in cpuset_run.records) == 2  # the spike takes BE down to beMinCPUSetCores


def test_memory_pressure_evicts_be_pods_lowest_priority_first(cpuset_run: SimResult) -> None:
    res = cpuset_run
    ev = res.evictions
    assert len({e.t for e in ev}) >= 2 and len({e.priority for e in ev}) >= 2, ev
    assert all(e.uid in res.be_uids for e in ev), "an LS pod was evicted"
    assert all(e.feature == "BEMemoryEvict" for e in ev)
    assert len({e.uid for e in ev}) == len(ev), "a pod was evicted twice"
    evicted_at = {e.uid: e.t for e in ev}
    for e in ev:
        lower = [u for u in res.be_uids if res.priorities[u] < e.priority]
        assert all(evicted_at.get(u, math.inf) <= e.t for u in lower), f"{e.pod} went before a lower priority"
    # within one round and one priority, larger users first
    for t in sorted({e.t for e in ev}):
        for prio in {e.priority for e in ev if e.t == t}:
            mem = [e.memory for e in ev if e.t == t and e.priority == prio]
            assert mem == sorted(mem, reverse=True)


def test_evicted_pods_stop_using_memory(cpuset_run: SimResult) -> None:
    recs = cpuset_run.records
    first = min(e.t for e in cpuset_run.evictions)
    before = recs[math.floor(first)]
    after = recs[math.floor(first) + 1]
    freed = sum(e.memory for e in cpuset_run.evictions if e.t == first)
    assert after.memory_used < before.memory_used
    assert after.be_pods_alive == before.be_pods_alive - sum(1 for e in cpuset_run.evictions if e.t == first)
    assert freed > 0
    # the threshold (70 %) is what started it
    assert before.memory_used * 100 // before.memory_total >= 69


def test_summary_reads_at_a_glance(quota_run: SimResult) -> None:
    text = summarize(quota_run)
    for fragment in ("CPU per tick", "ms median", "peak RSS", "threshold 65 % = 10.4 cores", "BE limit",
                     "BE quota", "evictions", "timeline"):
        assert fragment in text, fragment
    ascii_text = summarize(quota_run, unicode=False)
    assert ascii_text.isascii()
    med, mean, worst = quota_run.tick_cpu_stats()
    assert 0 < med <= worst and mean <= worst
    assert quota_run.peak_rss >= quota_run.baseline_rss > 0


def test_the_fake_kernels_emulation_is_counted_apart_from_the_agent(quota_run: SimResult, tmp_path: Path) -> None:
    """The agent's quota writes went through the fake kernel's rules in Python (v1: the bandwidth check),
    work a node's kernel does in C: the summary says it apart, and the agent's figures leave it out."""
    from qosmanager._native import sysio
    from qosmanager.sim import fakesysio

    assert quota_run.kernel_emulation_seconds > 0
    text = summarize(quota_run)
    assert "not counted:" in text and "fake kernel emulating the agent's writes" in text
    assert result_json(quota_run)["agent"]["kernel_emulation_seconds"] == quota_run.kernel_emulation_seconds
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=4)
    assert host.kernel is not None
    path = host.layout.file("cpu", host.layout.qos_dir(KubeQoS.BESTEFFORT), "cpu.cfs_quota_us")
    before = fakesysio.emulation_seconds()
    fds = sysio.open_batch([path], os.O_WRONLY)
    try:
        for _ in range(200):
            assert sysio.pwrite_batch(fds, [b"50000"], np.ones(1, dtype=bool)).tolist() == [0]
    finally:
        sysio.close_batch(fds)
    assert fakesysio.emulation_seconds() > before, "writes through the fake kernel are counted"


# ----------------------------------------------------------------------------------------------
# the load model alone
# ----------------------------------------------------------------------------------------------
def _model(tmp_path: Path, version: int = 1, **shape: float) -> tuple[FakeHost, LoadModel]:
    host = FakeHost(str(tmp_path / "host"), version=version, n_cpus=8, memory_bytes=16 << 30)
    pods = FakeHost.make_pods(8, seed=1)
    host.add_pods(pods)
    prio = {p.uid: 5500 for p in pods}
    shape_kw = {"noise": 0.0, "spike_height": 0.0, **shape}
    return host, LoadModel(host, pods, prio, duration=10.0, shape=LoadShape(**shape_kw), seed=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [1, 2])
def test_model_gives_be_what_its_quota_allows(tmp_path: Path, version: int) -> None:
    host, model = _model(tmp_path, version)
    be = host.layout.qos_dir(KubeQoS.BESTEFFORT)
    if version == 1:
        host.write(f"cgroup/cpu/{be}/cpu.cfs_quota_us", "150000\n")
    else:
        host.write(f"cgroup/{be}/cpu.max", "150000 100000\n")
    model.step(0.0)
    rec = model.step(1.0)
    # the daily curve at x = 1 s / 10 s, from the LoadShape defaults (no noise, no spike)
    x = 0.1
    ls_frac = 0.28 + (0.52 - 0.28) * (1 - math.cos(2 * math.pi * x)) / 2
    assert rec.ls_used == pytest.approx(ls_frac * 8)
    assert rec.be_quota_us == 150000 and rec.be_limit == pytest.approx(1.5)
    assert rec.be_used == pytest.approx(min(0.85 * 8, 1.5, 8 - 0.03 * 8 - ls_frac * 8))


def test_model_gives_be_its_cpuset_and_the_collector_sees_the_usage(tmp_path: Path) -> None:
    host, model = _model(tmp_path, 1)
    be = host.layout.qos_dir(KubeQoS.BESTEFFORT)
    host.write(f"cgroup/cpuset/{be}/cpuset.cpus", "0-2\n")
    model.step(0.0)
    rec = model.step(2.0)
    assert rec.be_cpus == 3 and rec.be_quota_us == -1 and rec.be_limit == 3.0
    assert rec.be_used == pytest.approx(3.0)
    # cumulative CPU time of the BE QoS dir = BE usage x 2 s (the kernel's nanoseconds)
    ns = int(host.read(f"cgroup/cpuacct/{be}/cpuacct.usage"))
    assert ns == pytest.approx(3.0 * 2e9, rel=1e-6)
    # /proc/stat busy ticks sum to (LS + BE + system) x 2 s x USER_HZ
    cpu_line = host.read("proc/stat").splitlines()[0].split()
    user, nice, system, idle, _iowait, irq, softirq = (int(v) for v in cpu_line[1:8])
    busy = user + nice + system + irq + softirq
    assert busy == int((rec.ls_used + rec.be_used + rec.system) * 2 * USER_HZ)
    assert 8 * 2 * USER_HZ - 1 <= busy + idle <= 8 * 2 * USER_HZ  # each part truncated to whole ticks


def test_model_evicted_pod_stops_and_its_cgroups_go(tmp_path: Path) -> None:
    host, model = _model(tmp_path, 2)
    be_pod = next(p for p in model.pods if p.qos is KubeQoS.BESTEFFORT)
    model.step(0.0)
    before = model.step(1.0)
    assert model.evict(be_pod.uid, 1.0)
    assert not model.evict(be_pod.uid, 1.0)  # already evicted
    after = model.step(2.0)
    assert after.be_pods_alive == before.be_pods_alive - 1
    assert after.memory_used < before.memory_used
    rel = host.pod_dir(be_pod.uid)
    assert model.due_removals(2.5) == []  # termination takes 2 s
    assert model.due_removals(3.0) == [be_pod.uid]
    assert not os.path.exists(host.layout.abs_dir("", rel))
    model.step(4.0)  # writing the remaining pods still works


def test_sparkline_scales_into_the_range() -> None:
    assert sparkline([0.0, 0.5, 1.0, float("nan")], 0.0, 1.0) == "▁▅█ "
    assert sparkline([0.0, 1.0], 0.0, 1.0, unicode=False) == "_#"
    assert sparkline([5.0, -1.0], 0.0, 1.0) == "█▁"


def test_progress_updates_one_line_on_a_terminal_and_prints_lines_otherwise() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    p = Progress(tty, 10.0)
    p.update(0.0, "first")
    p.done()
    assert tty.getvalue().startswith("\r[   0.0s] first") and "\n" not in tty.getvalue()
    plain = io.StringIO()
    p = Progress(plain, 10.0)
    for t in range(11):
        p.update(float(t), f"t={t}")
    assert plain.getvalue().splitlines() == [f"[{t:6.1f}s] t={t}" for t in range(11)]


def test_simulate_command_runs_and_summarises(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "qosmanager", "simulate", "--containers", "40",
                           "--duration", "5", "--cpus", "4", "--memory-gib", "8", "--cgroup-version", "2",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "qosmanager simulate: 40 containers in 20 pods" in proc.stdout
    assert "[   0.0s]" in proc.stderr  # progress, plain lines when not on a terminal
    # and nothing else: the agent's start-up summary and INFO lines are for `run`
    assert all(ln.startswith("[") for ln in proc.stderr.splitlines()), proc.stderr
    import json

    data = json.loads(out.read_text())
    assert len(data["timeline"]) == 6 and data["agent"]["ticks"] >= 5


def test_plot_needs_matplotlib_or_draws(tmp_path: Path, cpuset_run: SimResult) -> None:
    png = tmp_path / "run.png"
    try:
        plot.check_available()
    except plot.PlotUnavailable as e:
        assert "pip install" in str(e)
        proc = subprocess.run([sys.executable, "-m", "qosmanager", "simulate", "--plot", str(png)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.strip().endswith(plot.INSTALL_HINT)
        assert not png.exists()
        return
    plot.draw(cpuset_run, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_flags_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "qosmanager", "simulate", "--cpus", "3"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("qosmanager simulate: --cpus must be an even number >= 2 "
                                   "(two threads per core)")


def test_summary_names_units_and_prints_a_limit_at_the_floor_as_the_floor(quota_run: SimResult,
                                                                          cpuset_run: SimResult) -> None:
    text = summarize(quota_run, unicode=False)
    lines = text.splitlines()
    (be_limit,) = [ln for ln in lines if ln.startswith("BE limit ")]
    assert be_limit.startswith("BE limit   at the floor (quota 2000 us = 0.02 cores) .. ")
    assert "; at the floor for " in be_limit and be_limit.split("for ")[-1].endswith(" s")
    assert "(mean " in text and " cores); threshold 65 % = 10.4 cores" in text
    assert "(demand " in text and "cores)" in text.split("(demand ", 1)[1].split("\n", 1)[0]
    # the table: a unit under every column, and "floor" where the limit is the floor, never "0.0"
    header = lines.index(next(ln for ln in lines if ln.strip().startswith("t   LS used")))
    units = ["(s)", "(cores)", "(cores)", "(cores)", "(us)", "(%", "used)", "(pods)"]
    assert lines[header + 1].split() == units
    rows = []
    for ln in lines[header + 2:]:
        if not ln.strip() or ln.strip().startswith("floor:"):
            break
        rows.append(ln.split())
    assert rows and all(r[3] != "0.0" and r[3] != "0.00" for r in rows)
    floor_rows = [r for r in rows if r[3] == "floor"]
    picked = {int(r[0]) for r in rows}
    at_floor_t = {int(rec.t) for rec in quota_run.records if rec.be_quota_us == 2000}
    assert {int(r[0]) for r in floor_rows} == picked & at_floor_t
    assert all(r[4] == "2000" for r in floor_rows)
    assert "floor: koordlet's minimum BE limit, quota 2000 us = 0.02 cores" in text
    # the cpuset policy's floor is 2 CPUs
    cs = summarize(cpuset_run, unicode=False)
    assert "BE limit   at the floor (2 CPUs) .. " in cs


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--json", "{tmp}/missing/run.json",
     "--json {tmp}/missing/run.json: directory {tmp}/missing does not exist"),
    ("--json", "{tmp}", "--json {tmp}: is a directory"),
    ("--plot", "{tmp}/missing/run.png",
     "--plot {tmp}/missing/run.png: directory {tmp}/missing does not exist"),
    ("--workdir", "{tmp}/missing", "--workdir {tmp}/missing: does not exist"),
    ("--workdir", "{tmp}/file", "--workdir {tmp}/file: not a directory"),
    ("--audit-log", "{tmp}/file/audit.log",
     "--audit-log {tmp}/file/audit.log: {tmp}/file is not a directory"),
])
def test_output_paths_are_checked_before_anything_runs(tmp_path: Path, capsys, flag: str, value: str,
                                                      message: str) -> None:
    from qosmanager.cli import main

    (tmp_path / "file").write_text("")
    arg = value.format(tmp=tmp_path)
    code = main(["simulate", "--containers", "20", "--duration", "2", "--cpus", "4", "--memory-gib", "8",
                 flag, arg])
    assert code == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing ran: no summary ...
    assert err == f"qosmanager simulate: {message.format(tmp=tmp_path)}\n"  # ... no progress, one line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_audit_log_in_a_new_directory_is_fine(tmp_path: Path, capsys) -> None:
    from qosmanager.cli import main

    audit = tmp_path / "new" / "dir" / "audit.log"
    assert main(["simulate", "--containers", "20", "--duration", "2", "--cpus", "4", "--memory-gib", "8",
                 "--audit-log", str(audit), "--workdir", str(tmp_path)]) == 0
    assert audit.read_text().splitlines()
    assert "BE limit" in capsys.readouterr().out
