"""replay models the node's memory stalls with ``memoryLoad`` (qosmanager.sim.fakestall) and the kernel's PSI
triggers on them: with ``reactMode: fast`` the agent's PSI watch registers on the replayed node, and a trigger
that fires wakes memoryEvict at once, whose graduated level 3 evicts for the LS stall between its ticks.  The
output's ``psi`` lists the triggers, their events and the stalls.  The PSI window is the kernel's for a process
with CAP_SYS_RESOURCE (0.5 s), patched in so the times do not depend on who runs the test."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from qosmanager.framework import psi
from qosmanager.sim import fakepsi
from qosmanager.sim.replay import ScenarioError, parse_scenario, run_scenario

SCENARIO = Path(__file__).parent / "scenarios" / "memory-load-v2.yaml"
GiB = 1 << 30
BURSTABLE = "kubepods/burstable/memory.pressure"


def stalling(react_mode: str = "fast") -> dict[str, Any]:
    """memory-load-v2's node, memoryEvict alone (graduated: gate BEMemoryHigh), non-BE usage jumping at 1002 s
    from 54 GB to 90 GiB of 100 GiB: with BE's 8 GiB the node is over T (70 %) and MemAvailable (2 GiB) is
    below the page cache in use (6 GiB outside BE): every class stalls a third of the time."""
    d = copy.deepcopy(yaml.safe_load(SCENARIO.read_text()))
    d["strategies"] = ["memoryEvict"]
    d["reactMode"] = react_mode
    d["ticks"] = 6
    d["memoryLoad"]["nonBE"] = [[1000.0, 54_000_000_000], [1002.0, 54_000_000_000], [1002.01, 90 * GiB]]
    d["memoryLoad"]["nonBECache"] = [[1000.0, 6 * GiB]]
    return d


@pytest.fixture
def privileged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fakepsi, "cap_sys_resource", lambda: True)
    monkeypatch.setattr(psi, "cap_sys_resource", lambda: True)


def replay(d: dict[str, Any]) -> dict[str, Any]:
    return run_scenario(parse_scenario(d))


def test_a_psi_event_wakes_level_3_which_evicts_for_the_ls_stall_between_ticks(privileged: None) -> None:
    out = replay(stalling())
    assert out["psi"]["triggers"] == [{"file": BURSTABLE, "line": "some 5000 500000"}]
    first = out["psi"]["events"][0]
    assert first["file"] == BURSTABLE and first["stallUs"] >= 5000
    assert 1002.0 < first["ts"] <= 1002.1  # within a tenth of the window of the stall's start
    [ev] = out["evictions"]
    assert ev["ts"] == pytest.approx(first["ts"]) and "LS stalled on memory" in ev["reason"]
    assert out["psi"]["lsStallMs"] > 0
    gaps = [b["ts"] - a["ts"] for a, b in zip(out["psi"]["events"], out["psi"]["events"][1:], strict=False)]
    assert min(gaps) >= 0.5 - 1e-9, "at most one event per window"


def test_tick_mode_registers_no_trigger_and_evicts_at_the_tick(privileged: None) -> None:
    out = replay(stalling("tick"))
    assert out["psi"]["triggers"] == [] and out["psi"]["events"] == []
    [ev] = out["evictions"]
    assert ev["ts"] == 1003.0 and "LS stalled on memory" in ev["reason"], "the tick judges the same stall, later"


def test_no_stall_without_a_memory_shortage() -> None:
    d = copy.deepcopy(yaml.safe_load(SCENARIO.read_text()))
    out = replay(d)
    assert out["psi"]["triggers"] and out["psi"]["events"] == [] and out["psi"]["lsStallMs"] == 0
    assert "LS stalled" not in out["evictions"][0]["reason"]


def test_non_be_cache_is_checked_as_the_other_series() -> None:
    d = stalling()
    d["memoryLoad"]["nonBECache"] = [[1000.0, -1]]
    with pytest.raises(ScenarioError, match=r"memoryLoad.nonBECache\[0\]"):
        parse_scenario(d)
