"""simulate's closed loop with memoryHigh (memory protection level 1) on a cgroup v2 node: BE's leakers
drive node memory toward memoryEvict's threshold; with the gate on, the kernel's memory.high (the fake
kernel, honoured by the load model) holds BE at its budget before any eviction, and BE is never above
the cap in force; with it off, the same load evicts."""

from __future__ import annotations

import pytest

from qosmanager.sim.simulate import SimConfig, SimResult, run_simulation, summarize

GiB = 1 << 30


def _run(gates: dict[str, bool]) -> SimResult:
    return run_simulation(SimConfig(containers=200, duration=20.0, cpus=16, memory_gib=32, seed=0,
                                    cgroup_version=2, feature_gates=gates))


@pytest.fixture(scope="module")
def capped() -> SimResult:
    return _run({"BEMemoryHigh": True})


@pytest.fixture(scope="module")
def uncapped() -> SimResult:
    return _run({})


def test_without_the_cap_the_same_load_evicts(uncapped: SimResult) -> None:
    assert uncapped.evictions, "the load must reach the eviction threshold for the comparison to mean anything"
    assert all(r.be_memory_high == -1 for r in uncapped.records)


def test_be_is_held_by_memory_high_before_any_eviction(capped: SimResult, uncapped: SimResult) -> None:
    assert "memoryHigh" in capped.strategies
    first_eviction = min((e.t for e in capped.evictions), default=float("inf"))
    held = [r for r in capped.records if r.be_memory_high >= 0 and r.t < first_eviction]
    assert held, "memory.high was never in force before the first eviction"
    events = [r.be_high_events for r in capped.records if r.t < first_eviction]
    assert events and events[-1] > 0, "the kernel never held BE at the cap"
    assert len(capped.evictions) < len(uncapped.evictions)
    for r in capped.records:
        if r.be_memory_high >= 0:
            assert r.be_memory <= r.be_memory_high + 1024, r  # BE is never above the cap in force
    peak = max(r.memory_used / r.memory_total for r in capped.records)
    assert peak < capped.config.memory_threshold_percent / 100


def test_summary_says_how_long_be_was_capped(capped: SimResult) -> None:
    text = summarize(capped)
    assert "memory.high" in text and "held" in text
