"""memoryHigh (levels 1 and 2 of memory protection) on the fake host and its kernel: the cap on the BE
QoS dir, its budget in memoryEvict's terms, the budget alone moving it (not BE's usage), bounded writes,
level 2's reclaim steps, lifting (pressure over, NodeSLO off, clean exit), a cap left by a killed agent,
v1's soft limit."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from qosmanager.agent import Agent, AgentConfig
from qosmanager.framework.memlevel import LEVEL_CAP, LEVEL_NONE, LEVEL_RECLAIM
from qosmanager.host.cgroups import KubeQoS
from qosmanager.restore import OriginalsJournal, read_originals
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.strategies.memory_high import RECLAIM_STEP_BYTES

GiB = 1 << 30
MiB = 1 << 20
CAP = 100 * GiB
T0 = 1000.0
SLO = {"memoryEvictThresholdPercent": 70}  # lower percent 68: budget at 68 %, engage at 63 %, lift below 58 %


def be_pod(i: int) -> dict[str, Any]:
    fp = FakePod(f"{i:08d}-0000-4000-8000-00000000be00", "default", f"be-{i}", KubeQoS.BESTEFFORT,
                 [FakeContainer("c", f"containerd://{i:064x}")])
    return pod_object(fp, memory=GiB, priority=5500)


def harness(*, version: int = 2, reclaim: bool = False, slo: Mapping[str, Any] | None = None,
            enable: bool = True, dry_run: bool = False, root: str | None = None) -> Harness:
    gates = {"BEMemoryHigh": True, "BEMemoryReclaim": reclaim}
    h = Harness(version=version, gates=gates, strategies=["memoryHigh"], memory_bytes=CAP, now=T0,
                dry_run=dry_run, root=root)
    h.set_node(node_object(h.host))
    h.set_pods([be_pod(1)])
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": enable, **(slo or SLO)}})
    return h


def be_dir(h: Harness) -> str:
    return h.layout.qos_dir(KubeQoS.BESTEFFORT.value)


def cap_file(h: Harness) -> str:
    name = "memory.high" if h.layout.version == 2 else "memory.soft_limit_in_bytes"
    return h.cgroup_file("memory", be_dir(h), name)


def state(h: Harness, now: float, node_gib: float, be_anon: int, be_file: int = 0) -> None:
    """Node usage (memoryEvict's node_memory_usage) and BE's page counter (anon + page cache)."""
    h.add_samples("node_memory_usage", [(now, node_gib * GiB)])
    h.host.set_memory(be_dir(h), 0, be_anon, 0, be_file // 2, be_file - be_file // 2)


def tick(h: Harness, now: float) -> None:
    h.now = now
    h.tick("memoryHigh", now)


def cap(h: Harness) -> str:
    return (h.read_file(cap_file(h)) or "").strip()


def cap_writes(h: Harness) -> list[str]:
    return [w["value"] for w in h.recorded.writes if w["file"] == cap_file(h)]


def test_be_page_cache_is_not_counted_in_node_usage_but_is_under_the_cap() -> None:
    """Node usage (MemTotal - MemAvailable) counts BE's anonymous memory, not its page cache: non-BE is
    usage minus BE's counter without cache; the cap, which the kernel compares with the whole counter,
    leaves BE only the budget for both."""
    h = harness()
    state(h, T0, 64, 8 * GiB, be_file=GiB)  # BE 9 GiB, 8 counted; non-BE 56 GiB: budget 12 GiB
    tick(h, T0)
    assert cap(h) == str(12 * GiB)
    assert h.shared.memory_protection.budget == 12 * GiB


def test_below_the_engage_band_nothing_is_written() -> None:
    h = harness()
    state(h, T0, 62.9, 10 * GiB)
    tick(h, T0)
    assert h.recorded.writes == []
    assert h.shared.memory_protection.level == LEVEL_NONE
    assert cap(h) == "max"


def test_level1_caps_be_at_its_budget_and_follows_it() -> None:
    h = harness()
    state(h, T0, 64, 10 * GiB)  # non-BE 54 GiB: BE's budget at 68 % is 14 GiB
    tick(h, T0)
    assert cap(h) == str(14 * GiB)
    prot = h.shared.memory_protection
    assert (prot.level, prot.cap, prot.budget, prot.be_usage) == (LEVEL_CAP, 14 * GiB, 14 * GiB, 10 * GiB)
    # LS grows by 2 GiB: the budget follows it down
    state(h, T0 + 1, 66, 10 * GiB)
    tick(h, T0 + 1)
    assert cap(h) == str(12 * GiB)
    # a move smaller than 0.5 % of capacity (512 MiB) is not written
    state(h, T0 + 2, 66.3, 10 * GiB)
    tick(h, T0 + 2)
    assert cap_writes(h) == [str(14 * GiB), str(12 * GiB)]
    # LS shrinks by 3 GiB: the cap rises with the budget
    state(h, T0 + 3, 63, 10 * GiB)
    tick(h, T0 + 3)
    assert cap(h) == str(15 * GiB)


def test_a_fast_allocator_does_not_drag_the_cap_up() -> None:
    """The kernel lets a throttled allocator pass memory.high; BE's usage above the cap must not raise the
    cap (it did: the cap followed a fast allocator up and the node stayed over the threshold)."""
    h = harness()
    state(h, T0, 64, 10 * GiB)  # non-BE 54 GiB: BE's budget at 68 % is 14 GiB
    tick(h, T0)
    assert cap(h) == str(14 * GiB)
    for k, be in enumerate((15, 17, 19, 22), start=1):  # BE passes its cap, tick after tick
        state(h, T0 + k, 54 + be, be * GiB)
        tick(h, T0 + k)
        assert cap(h) == str(14 * GiB), (k, be)
        assert h.shared.memory_protection.budget == 14 * GiB
    assert cap_writes(h) == [str(14 * GiB)]


def test_the_cap_follows_the_budget_alone() -> None:
    """Whatever BE's usage does, the cap in force is BE's budget (within one write step, never below 0):
    LS's usage moves it, BE's does not."""
    h = harness()
    step = CAP // 200  # 0.5 % of capacity
    rng = random.Random(7)
    for k in range(60):
        be = rng.randrange(1, 40) * GiB + rng.randrange(0, GiB)
        used = rng.uniform(60, 99) * GiB
        state(h, T0 + k, used / GiB, be)
        tick(h, T0 + k)
        value = cap(h)
        if h.shared.memory_protection.level:
            budget = max(0, int(CAP * 0.68) - int(used - be))
            assert abs(int(value) - budget) < step + 4096, (k, value, budget, be)


def test_level2_reclaims_be_over_its_budget_in_32mib_steps() -> None:
    h = harness(reclaim=True)
    state(h, T0, 64, 6 * GiB)  # non-BE 58 GiB: budget 10 GiB, BE within it
    tick(h, T0)
    assert cap(h) == str(10 * GiB)
    assert not [w for w in h.recorded.writes if w["file"].endswith("memory.reclaim")]
    # BE passes its cap (the kernel lets it, throttled): 9.5 GiB anonymous + 1 GiB page cache
    state(h, T0 + 1, 67.5, 9 * GiB + GiB // 2, be_file=GiB)
    tick(h, T0 + 1)
    prot = h.shared.memory_protection
    assert prot.level == LEVEL_RECLAIM and prot.reclaimed == RECLAIM_STEP_BYTES
    reclaims = [w for w in h.recorded.writes if w["file"].endswith("memory.reclaim")]
    assert [w["value"] for w in reclaims] == [str(RECLAIM_STEP_BYTES)]
    current = int(h.read_file(h.cgroup_file("memory", be_dir(h), "memory.current")) or 0)
    assert current == 10 * GiB + GiB // 2 - RECLAIM_STEP_BYTES  # the fake kernel took it from BE's page cache
    # the next tick, again at most 32 MiB; 16 MiB over: 16 MiB
    state(h, T0 + 2, 67.5, 9 * GiB + GiB // 2, be_file=GiB // 2 + 16 * MiB)
    tick(h, T0 + 2)
    reclaims = [w["value"] for w in h.recorded.writes if w["file"].endswith("memory.reclaim")]
    assert reclaims == [str(RECLAIM_STEP_BYTES), str(16 * MiB)]
    # within the budget: no reclaim, level 1
    state(h, T0 + 3, 67.5, 9 * GiB + GiB // 2, be_file=GiB // 2)
    tick(h, T0 + 3)
    assert h.shared.memory_protection.level == LEVEL_CAP
    assert len([w for w in h.recorded.writes if w["file"].endswith("memory.reclaim")]) == 2
    assert cap_writes(h) == [str(10 * GiB)]


def test_level2_off_on_a_kernel_without_memory_reclaim() -> None:
    h = harness(reclaim=True)
    os.unlink(h.path(h.cgroup_file("memory", be_dir(h), "memory.reclaim")))
    for k in range(3):  # the first tick's cap, below BE's usage, reclaims in its write: level 2 from the next
        state(h, T0 + k, 69, 10 * GiB)
        tick(h, T0 + k)
    assert h.strategy("memoryHigh").reclaim_unsupported  # type: ignore[attr-defined]
    assert h.shared.memory_protection.level == LEVEL_CAP
    assert not [w for w in h.recorded.writes if w["file"].endswith("memory.reclaim")]


def test_lifted_when_pressure_ends_with_hysteresis() -> None:
    h = harness()
    state(h, T0, 64, 10 * GiB)
    tick(h, T0)
    state(h, T0 + 1, 58.5, 10 * GiB)  # below the engage band, above the lift line: still capped
    tick(h, T0 + 1)
    assert cap(h) == str(int(CAP * 0.68) - int(48.5 * GiB))  # (the budget rose with LS's fall)
    state(h, T0 + 2, 57.9, 10 * GiB)
    tick(h, T0 + 2)
    assert cap(h) == "max"
    assert h.shared.memory_protection.level == LEVEL_NONE
    tick(h, T0 + 3)  # nothing more to do
    assert cap_writes(h)[-1] == "max" and len(cap_writes(h)) == 3


def test_lifted_when_the_nodeslo_switches_off() -> None:
    h = harness()
    state(h, T0, 64, 10 * GiB)
    tick(h, T0)
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": False, **SLO}})
    tick(h, T0 + 1)
    assert cap(h) == "max"
    assert "not enabled" in h.shared.memory_protection.reason


def test_a_cap_left_by_a_killed_agent_is_reconciled_at_start() -> None:
    # below BE's usage, no pressure: lifted
    h = harness()
    h.write_file(cap_file(h), f"{5 * GiB}\n")
    state(h, T0, 40, 10 * GiB)
    tick(h, T0)
    assert cap(h) == "max"
    # below BE's usage, under pressure: raised to the usage at once (the budget is lower still)
    h = harness()
    h.write_file(cap_file(h), f"{10 * GiB - 100 * MiB}\n")  # within one write step of the usage
    state(h, T0, 75, 10 * GiB)  # non-BE 65 GiB: budget 3 GiB
    tick(h, T0)
    assert cap(h) == str(10 * GiB)
    # ... and held there, not dropped to the budget at the next tick; BE grows past it: not raised
    state(h, T0 + 1, 77, 12 * GiB)
    tick(h, T0 + 1)
    assert cap(h) == str(10 * GiB)
    # the floor falls with BE's usage (BE frees memory)
    state(h, T0 + 2, 73, 8 * GiB)
    tick(h, T0 + 2)
    assert cap(h) == str(8 * GiB)
    state(h, T0 + 3, 77, 12 * GiB)
    tick(h, T0 + 3)
    assert cap(h) == str(8 * GiB)
    # LS shrinks: the budget (9 GiB) passes the floor and the cap follows the budget alone from then on
    state(h, T0 + 4, 71, 12 * GiB)  # non-BE 59 GiB
    tick(h, T0 + 4)
    assert cap(h) == str(9 * GiB)
    state(h, T0 + 5, 67, 6 * GiB)  # BE frees; non-BE 61 GiB: budget 7 GiB
    tick(h, T0 + 5)
    assert cap(h) == str(7 * GiB)
    # a cap found in force above BE's usage and above the budget: brought down, to the usage, not below
    h = harness()
    h.write_file(cap_file(h), f"{12 * GiB}\n")
    state(h, T0, 75, 10 * GiB)
    tick(h, T0)
    assert cap(h) == str(10 * GiB)


def killed_agent_left_a_cap(tmp_path: Path, version: int, *, journal: bool = True) -> tuple[Harness, str, str]:
    """An agent with BEMemoryHigh on (and the originals file, unless ``journal`` is False) caps BE, then
    dies without a clean exit (SIGKILL): its cap stays.  The harness, the originals file's path and what
    the cap file held before."""
    h = harness(version=version, root=str(tmp_path / "host"))
    before = cap(h)
    path = str(tmp_path / "originals.jsonl")
    if journal:
        j = OriginalsJournal(path, h.executor, clock=lambda: h.now)
        h.executor.on_write.append(j.on_write)
    state(h, T0, 64, 10 * GiB)
    tick(h, T0)
    if journal:
        j.close()
    assert cap(h) == str(14 * GiB)
    return h, path, before


def restarted(h: Harness, tmp_path: Path, *, gates: Mapping[str, bool], originals: str | None) -> None:
    """A new agent on the same node, run briefly: BEMemoryHigh off (``gates``)."""
    agent = Agent(AgentConfig(roots=h.host.roots, cgroup_version=str(h.layout.version), cgroup_driver="cgroupfs",
                              feature_gates=dict(gates), originals_file=originals,
                              audit_log=str(tmp_path / "audit.jsonl")))
    agent.run(duration=0.05)


@pytest.mark.parametrize("version", [1, 2])
def test_a_cap_left_by_a_killed_agent_is_lifted_when_the_gate_is_off_at_restart(tmp_path: Path,
                                                                                version: int) -> None:
    """The next agent does not run memoryHigh (gate off) and so never ticks it: the cap would stay for
    good.  The originals file says memoryHigh set it: the agent writes back what the file held before."""
    h, path, original = killed_agent_left_a_cap(tmp_path, version)
    assert original == "max" or int(original) >= 1 << 62
    restarted(h, tmp_path, gates={"BEMemoryHigh": False}, originals=path)
    assert cap(h) == original
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    [lift] = [r for r in audit if r["action"] == "write" and r["target"].endswith(cap_file(h).split("/")[-1])]
    assert lift["strategy"] == "memoryHigh" and "memoryHigh is off" in lift["reason"] and lift["executed"]
    # the record stays (a later uninstall writes the same value back); nothing more is done at the next start
    assert [o.strategy for o in read_originals(path)] == ["memoryHigh"]
    restarted(h, tmp_path, gates={}, originals=path)  # (the gate's default: off)
    assert cap(h) == original


def test_a_cap_no_record_claims_is_left_at_restart(tmp_path: Path) -> None:
    """Without the originals file (or its record), the agent cannot tell its own cap from an operator's:
    it leaves it."""
    h, path, _ = killed_agent_left_a_cap(tmp_path, 2, journal=False)
    restarted(h, tmp_path, gates={"BEMemoryHigh": False}, originals=None)
    assert cap(h) == str(14 * GiB)
    restarted(h, tmp_path, gates={"BEMemoryHigh": False}, originals=path)  # a file with no record of it
    assert cap(h) == str(14 * GiB)


def test_a_clean_exit_lifts_the_cap() -> None:
    h = harness()
    state(h, T0, 64, 10 * GiB)
    tick(h, T0)
    assert cap(h) != "max"
    h.manager.exit_writes(T0 + 1)
    assert cap(h) == "max"
    assert h.shared.memory_protection.level == LEVEL_NONE


def test_dry_run_decides_and_audits_but_writes_nothing() -> None:
    h = harness(dry_run=True, reclaim=True)
    seen: list[dict[str, Any]] = []
    h.audit.add_sink(seen.append)
    for k in range(2):  # the cap at the first tick, below BE's usage; level 2 at the next
        state(h, T0 + k, 69, 9 * GiB, be_file=GiB)
        tick(h, T0 + k)
    assert cap(h) == "max"
    assert int(h.read_file(h.cgroup_file("memory", be_dir(h), "memory.current")) or 0) == 10 * GiB
    targets = {r["target"] for r in seen if r["action"] == "write" and not r["executed"]}
    assert any(t.endswith("memory.high") for t in targets) and any(t.endswith("memory.reclaim") for t in targets)


def test_high_events_say_the_kernel_holds_be() -> None:
    h = harness()
    kernel = h.host.kernel
    assert kernel is not None
    state(h, T0, 64, 10 * GiB)
    tick(h, T0)
    assert not h.shared.memory_protection.holding()
    kernel.memory_event(h.layout.abs_dir("", be_dir(h)), "high", 5)
    tick(h, T0 + 1)
    prot = h.shared.memory_protection
    assert (prot.high_events, prot.high_events_delta) == (5, 5) and prot.holding()
    tick(h, T0 + 2)
    assert not h.shared.memory_protection.holding()


@pytest.mark.parametrize("reclaim", [False, True])
def test_v1_soft_limit_never_reclaim(reclaim: bool) -> None:
    h = harness(version=1, reclaim=reclaim)
    state(h, T0, 72, 10 * GiB)  # non-BE 62 GiB: budget 6 GiB
    tick(h, T0)
    assert cap(h) == str(6 * GiB)
    assert h.shared.memory_protection.level == LEVEL_CAP
    assert {w["file"] for w in h.recorded.writes} == {cap_file(h)}  # no memory.reclaim, no hard limit
    state(h, T0 + 1, 50, 10 * GiB)
    tick(h, T0 + 1)
    assert int(cap(h)) >= (1 << 62)  # v1 prints "unlimited" as the largest page-aligned count


def test_no_sample_keeps_what_is_in_force() -> None:
    h = harness()
    state(h, T0, 64, 10 * GiB)
    tick(h, T0)
    tick(h, T0 + 30)  # the node sample is stale now
    assert cap(h) == str(14 * GiB)
    assert len(cap_writes(h)) == 1
