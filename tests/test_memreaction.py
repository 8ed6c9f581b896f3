"""Memory protection's reaction times (``qosmanager.framework.memreaction``, ``/metrics``
``qosmanager_memory_protection_reaction_seconds{level}``): from the start of the sample window that showed
the node crossing a level's line to the level's action in the kernel.

The whole agent on a fake host with its exporter (never bound), its clocks one fake clock: the memory
trigger's samples taken by hand (``MemoryTrigger.check``), the scheduler driven by ``run_ripe``.  A kernel
slow to take the cap is a write that lets the clock run on before it returns."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memnode
from memnode import CAP, SLO, T0, GiB, be_pod, node_at
from promtext import buckets, parse
from qosmanager.agent import Agent
from qosmanager.api.pod import pod_meta
from qosmanager.eviction.types import EvictDecision
from qosmanager.executor.executor import Write, WriteResult
from qosmanager.framework.fastpath import INTERVAL
from qosmanager.framework.memlevel import MemoryProtection
from qosmanager.framework.memreaction import MemoryReactions
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, nodeslo_object, pod_object
from qosmanager.states.store import StateStore
from simclock import Clock

FAMILY = "qosmanager_memory_protection_reaction_seconds"


def make(tmp_path: Path, *, react_mode: str = "fast", version: int = 2) -> tuple[FakeHost, Agent, Clock]:
    """memoryHigh alone, with its exporter (never bound)."""
    return memnode.make(tmp_path, version, strategies=["memoryHigh"], gates={"BEMemoryHigh": True},
                        react_mode=react_mode, metrics_addr="127.0.0.1:0")


def reactions(agent: Agent, level: str = "1") -> tuple[list[tuple[float, float]], float]:
    """The histogram's buckets (le, cumulative count) and sum for ``level``, as /metrics shows them."""
    assert agent.exporter is not None
    fams = parse(agent.exporter.metrics.registry.render())
    fam = fams[FAMILY]
    sums = fam.series("_sum")
    return buckets(fam, level=level), sums.get((("level", level),), 0.0)


def count_le(bs: list[tuple[float, float]], le: float) -> float:
    return next(v for b, v in bs if b == le)


def slow_kernel(agent: Agent, clock: Clock, seconds: float) -> None:
    """The executor's writes take ``seconds`` (the clock runs on before they return their results)."""
    apply: Callable[..., Any] = agent.executor.apply

    def slow(*a: Any, **kw: Any) -> Any:
        clock.t += seconds
        return apply(*a, **kw)

    agent.executor.apply = slow  # type: ignore[method-assign]


def cross_with_trigger(host: FakeHost, agent: Agent, clock: Clock) -> None:
    """50 % at the trigger's sample, then 65 % (over L - 5 % = 63 %) at the next one: the trigger wakes
    memoryHigh, which caps BE."""
    trigger = agent.memtrigger
    assert trigger is not None
    node_at(host, 50)
    clock.t += 1.0
    agent.scheduler.run_ripe()
    assert trigger.check() == ()
    node_at(host, 65)
    clock.t += INTERVAL
    assert trigger.check() == ("memoryHigh",)
    agent.scheduler.run_ripe()
    assert agent.shared.memory_protection.level >= 1


def test_level_1_is_timed_from_the_trigger_window_to_the_cap_in_the_kernel(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path)
    try:
        cross_with_trigger(host, agent, clock)
        bs, total = reactions(agent)
        # one reaction: the window from the sample below the line to the one over it, the cap written at once
        assert bs[-1] == (float("inf"), 1)
        assert total == pytest.approx(INTERVAL)
        assert count_le(bs, 0.05) == 1
        assert reactions(agent, "3")[0] == [], "no eviction: no level-3 series"
    finally:
        agent.close()


def test_a_kernel_slow_to_take_the_cap_shows_in_the_histogram(tmp_path: Path) -> None:
    host, agent, clock = make(tmp_path)
    try:
        slow_kernel(agent, clock, 0.4)
        cross_with_trigger(host, agent, clock)
        bs, total = reactions(agent)
        assert total == pytest.approx(INTERVAL + 0.4)
        assert count_le(bs, 0.25) == 0 and count_le(bs, 0.5) == 1
    finally:
        agent.close()


def test_tick_mode_is_timed_from_the_collector_window(tmp_path: Path) -> None:
    """No trigger: the collector's pass one interval after the last one below the line shows the crossing;
    memoryHigh caps BE at its tick after it.  The time spans the collector's window (its whole interval)."""
    host, agent, clock = make(tmp_path, react_mode="tick")
    try:
        assert agent.memtrigger is None
        node_at(host, 50)
        clock.t += 1.0
        agent.scheduler.run_ripe()  # a collector pass below the line, memoryHigh's first tick
        assert agent.shared.memory_protection.level == 0
        node_at(host, 65)
        collect = next(j for j in agent.scheduler.jobs if j.name == "collect")
        before = collect.runs
        clock.t = max(j.next_at for j in agent.scheduler.jobs)
        agent.scheduler.run_ripe()
        assert collect.runs == before + 1 and agent.shared.memory_protection.level >= 1
        bs, total = reactions(agent)
        assert bs[-1] == (float("inf"), 1)
        assert total >= collect.interval * (1 - collect.jitter) - 1e-9  # the window: one collector interval
        assert count_le(bs, 0.5) == 0
    finally:
        agent.close()


def test_no_reaction_without_a_cap_in_the_kernel(tmp_path: Path) -> None:
    """--dry-run: the cap is decided, never in the kernel, so nothing is timed."""
    host, agent, clock = make(tmp_path)
    try:
        agent.executor.dry_run = True
        cross_with_trigger(host, agent, clock)
        bs, _ = reactions(agent)
        assert bs == [] or bs[-1][1] == 0
        assert agent.exporter is not None and agent.exporter.metrics.memory_reactions is not None
        assert 1 in agent.exporter.metrics.memory_reactions.pending()
    finally:
        agent.close()


# ---------------------------------------------------------------------------------------------
# the crossings and actions, on their own


def tracker(tmp_path: Path) -> tuple[MemoryReactions, list[tuple[int, float]], Clock, MemoryProtection]:
    host = FakeHost(str(tmp_path / "host"), version=2, memory_bytes=CAP)
    store = StateStore()
    store.set_node(node_object(host))
    store.set_nodeslo(nodeslo_object(SLO))
    seen: list[tuple[int, float]] = []
    clock = Clock(T0)
    prot = MemoryProtection()
    r = MemoryReactions(store, prot, clock, lambda level, s: seen.append((level, s)))
    return r, seen, clock, prot


def result(resource: str, value: str, status: str = "written") -> WriteResult:
    return WriteResult(Write("memoryHigh", resource, value, "kubepods/besteffort"), resource, status)


def at(pct: float) -> float:
    return CAP * pct / 100


def test_one_reaction_per_crossing_armed_again_a_step_below(tmp_path: Path) -> None:
    r, seen, clock, prot = tracker(tmp_path)
    r.sample(at(50), "trigger")
    clock.t += INTERVAL
    r.sample(at(64), "trigger")  # crossed 63 %
    clock.t += 0.01
    r.on_batch([result("memory.high", "123456789")], 0.0)
    prot.level = 1
    r.on_tick("memoryHigh", 0.0)
    assert seen == [(1, pytest.approx(INTERVAL + 0.01))]
    r.on_batch([result("memory.high", "133456789")], 0.0)  # the cap follows the budget: not a reaction
    clock.t += INTERVAL
    r.sample(at(62.8), "trigger")  # under the line, within a step (0.5 %): still the same crossing
    r.sample(at(64), "trigger")
    r.on_batch([result("memory.high", "123456789")], 0.0)
    assert len(seen) == 1
    prot.level = 0
    r.on_tick("memoryHigh", 0.0)
    r.sample(at(62), "trigger")  # a step below: armed again
    clock.t += INTERVAL
    r.sample(at(64), "trigger")
    r.on_batch([result("memory.high", "max")], 0.0)  # a lift is not the cap
    r.on_batch([result("memory.high", "123456789", "dry-run")], 0.0)  # not in the kernel
    assert len(seen) == 1
    r.on_batch([result("memory.high", "123456789", "unchanged")], 0.0)  # the kernel holds it already
    assert seen[1] == (1, pytest.approx(INTERVAL))


def test_a_level_in_force_before_the_crossing_is_not_timed(tmp_path: Path) -> None:
    r, seen, clock, prot = tracker(tmp_path)
    prot.level = 1  # a cap kept from an earlier crossing
    r.on_tick("memoryHigh", 0.0)
    r.sample(at(50), "collect")
    clock.t += 1.0
    r.sample(at(64), "collect")
    r.on_batch([result("memory.high", "123456789")], 0.0)
    assert seen == []


def test_levels_2_and_3(tmp_path: Path) -> None:
    r, seen, clock, prot = tracker(tmp_path)
    r.sample(at(60), "trigger")
    clock.t += INTERVAL
    r.sample(at(71), "trigger")  # over the engage line and T at once
    r.on_batch([result("memory.high", "123456789")], 0.0)
    prot.level = 1
    r.on_tick("memoryHigh", 0.0)
    clock.t += 1.0
    r.on_batch([result("memory.reclaim", "33554432")], 0.0)
    meta = pod_meta(pod_object(be_pod(1), memory=GiB, priority=5500))
    r.on_decision(EvictDecision(meta, "BEMemoryEvict", "evicted", False, "why"), "memoryEvict")
    assert [lv for lv, _ in seen] == [1, 2], "an eviction decided and not executed is not in the kernel"
    r.count_decided = True
    clock.t += 1.0
    r.on_decision(EvictDecision(meta, "BEMemoryEvict", "evicted", False, "why"), "memoryEvict")
    assert seen[1] == (2, pytest.approx(INTERVAL + 1.0))
    assert seen[2] == (3, pytest.approx(INTERVAL + 2.0))


def test_the_earliest_source_to_show_the_crossing_sets_the_window(tmp_path: Path) -> None:
    r, seen, clock, _ = tracker(tmp_path)
    r.sample(at(50), "collect")
    r.sample(at(50), "trigger")
    clock.t += 0.5
    r.sample(at(50), "trigger")
    clock.t += INTERVAL
    r.sample(at(65), "trigger")  # first to see it: the window starts at its previous sample
    clock.t += 0.45
    r.sample(at(65), "collect")  # its window started a second before: it does not move the crossing
    r.on_batch([result("memory.high", "123456789")], 0.0)
    assert seen == [(1, pytest.approx(INTERVAL + 0.45))]
