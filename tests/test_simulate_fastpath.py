"""``qosmanager simulate`` models the fast path: with ``--react-mode fast`` (the default) BE's limit falls
within a tenth of a (simulated) second of a rise in LS demand, between the ticks; with ``tick`` only at
cpuSuppress's ticks, a second or more later.  Simulated time is deterministic: these are the model's
seconds, not the machine's."""

from __future__ import annotations

from qosmanager.host.cpuset import parse_cpu_list
from qosmanager.sim.load import LoadShape
from qosmanager.sim.result import SimConfig, SimResult
from qosmanager.sim.simulate import result_json, run_simulation, summarize

CPUS = 8
DURATION = 10.0
SPIKE_AT = 5.5  # seconds: half-way between two ticks (collect and cpuSuppress every second)
# LS at 30 % of the node, then 25 % more: cpuSuppress's budget falls from
# 65 % x 8 - 2.4 - 0.24 (system) = 2.56 cores to 0.56 cores
SHAPE = LoadShape(ls_trough=0.3, ls_peak=0.3, noise=0.0, spike_start=SPIKE_AT / DURATION, spike_length=0.3,
                  spike_height=0.25, leak_total=0.0, be_memory=0.05, ls_memory=0.05)
SAFE_QUOTA = 56_000 + CPUS * 1000  # the budget under the spike, within koordlet's 1 % bypass


def simulate(mode: str) -> SimResult:
    return run_simulation(SimConfig(containers=40, cpus=CPUS, memory_gib=8, duration=DURATION, shape=SHAPE,
                                    react_mode=mode))


def reaction(res: SimResult) -> float:
    """Simulated seconds from the spike to the first write that put BE's quota at the safe level."""
    for w in res.be_writes:
        if w.t >= SPIKE_AT - 0.1 and w.file.endswith("cpu.cfs_quota_us") and 0 <= int(w.value) <= SAFE_QUOTA:
            return w.t - SPIKE_AT
    raise AssertionError(f"BE's quota never reached {SAFE_QUOTA}: {[(w.t, w.value) for w in res.be_writes]}")


def test_simulate_reacts_between_ticks_in_fast_mode_and_at_a_tick_in_tick_mode() -> None:
    fast, tick = simulate("fast"), simulate("tick")
    assert not fast.evictions and not tick.evictions
    r_fast, r_tick = reaction(fast), reaction(tick)
    assert r_fast <= 0.15 < 0.5 <= r_tick, (r_fast, r_tick)  # sub-tick, against a tick or more
    assert r_fast <= 0.15 * r_tick
    # the fast path's own writes, timed by it, are in the result and its summary
    assert fast.reactions and all(0 < r <= 0.15 for r in fast.reactions)
    assert not tick.reactions
    first = next(w for w in fast.be_writes if w.t >= SPIKE_AT - 0.1)
    assert first.t % 1.0 > 1e-6, "written between ticks (the ticks run on whole seconds here)"
    assert "fast path  lowered BE's limit" in summarize(fast)
    assert "fast path  off (--react-mode tick)" in summarize(tick)
    assert result_json(fast)["fast_path"]["reactions"] == fast.reactions


def test_the_fast_path_does_not_change_a_steady_run() -> None:
    """With no rise in LS demand the fast path writes nothing: the sub-steps' counters agree with the
    steps' (no spurious rates between them), and the run's BE limits are the tick mode's."""
    steady = LoadShape(ls_trough=0.3, ls_peak=0.3, noise=0.0, spike_height=0.0, leak_total=0.0, be_memory=0.05,
                       ls_memory=0.05)
    runs = [run_simulation(SimConfig(containers=40, cpus=CPUS, memory_gib=8, duration=6.0, shape=steady,
                                     react_mode=mode)) for mode in ("fast", "tick")]
    assert not runs[0].reactions
    assert [r.be_limit for r in runs[0].records] == [r.be_limit for r in runs[1].records]


def test_simulate_narrows_the_be_cpuset_between_ticks_in_fast_mode() -> None:
    """The cpuset policy: 2.56 cores of budget are 3 CPUs, under the spike 0.56 cores are koordlet's minimum
    of 2; the fast path narrows BE's cpuset within 100 ms, the tick mode at its next tick."""
    def narrowed(mode: str) -> float:
        res = run_simulation(SimConfig(containers=40, cpus=CPUS, memory_gib=8, duration=DURATION, shape=SHAPE,
                                       suppress_policy="cpuset", react_mode=mode))
        assert any(w.file.endswith("cpuset.cpus") and len(parse_cpu_list(w.value)) == 3 for w in res.be_writes)
        return next(w.t for w in res.be_writes if w.t >= SPIKE_AT - 0.1 and w.file.endswith("cpuset.cpus")
                    and len(parse_cpu_list(w.value)) == 2) - SPIKE_AT

    r_fast, r_tick = narrowed("fast"), narrowed("tick")
    assert r_fast <= 0.15 < 0.5 <= r_tick, (r_fast, r_tick)
