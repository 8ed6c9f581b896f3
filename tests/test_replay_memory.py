"""replay models a memory load (``memoryLoad``), the memory trigger and the graduated levels: the node's
memory moves every 50 ms of scenario time, BE is held under the fake kernel's memory.high, the trigger wakes
memoryHigh between the ticks, and the output times each level (``memoryReactions``).  The numbers are the
scenario's, derived in its description (tests/scenarios/memory-load-v2.yaml)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from qosmanager.framework.fastpath import INTERVAL
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.fakememory import MemoryLoad, hold
from qosmanager.sim.replay import ScenarioError, parse_scenario, run_scenario

SCENARIO = Path(__file__).parent / "scenarios" / "memory-load-v2.yaml"
GiB = 1 << 30
CAPACITY = 100 * GiB


def doc() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(SCENARIO.read_text()))


def replay(d: dict[str, Any]) -> dict[str, Any]:
    return run_scenario(parse_scenario(d))


@pytest.fixture(scope="module")
def fast() -> dict[str, Any]:
    return replay(doc())


@pytest.fixture(scope="module")
def tick() -> dict[str, Any]:
    d = doc()
    d["reactMode"] = "tick"
    return replay(d)


def caps(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in out["writes"] if w["file"].endswith("besteffort/memory.high")]


def test_the_trigger_caps_be_between_ticks_one_sample_after_the_crossing(fast: dict[str, Any]) -> None:
    first = caps(fast)[0]
    assert first["ts"] == pytest.approx(1001.95)  # the first 50 ms sample after the crossing at 1001.9
    assert fast["memoryReactions"][0] == {"level": 1, "ts": pytest.approx(1001.95), "seconds": INTERVAL}
    levels = fast["memoryProtection"]
    assert [p["level"] for p in levels if p["ts"] < 1001.95] == [0, 0]
    # the cap follows the budget down as non-BE usage grows, at samples between the ticks too
    values = [int(w["value"]) for w in caps(fast)]
    assert values == sorted(values, reverse=True) and len(values) > 5
    assert any(not math.isclose(w["ts"], round(w["ts"])) for w in caps(fast)[1:])


def test_tick_mode_caps_at_the_tick(tick: dict[str, Any]) -> None:
    first = caps(tick)[0]
    assert first["ts"] == 1002.0
    assert tick["memoryReactions"][0] == {"level": 1, "ts": 1002.0, "seconds": 1.0}  # the tick's window
    assert all(math.isclose(w["ts"], round(w["ts"])) for w in caps(tick))


def test_be_is_held_by_the_cap_before_the_eviction(fast: dict[str, Any]) -> None:
    [ev] = fast["evictions"]
    assert ev["pod"] == "default/be-a"
    first_cap = caps(fast)[0]["ts"]
    # T (70 %) is reached at 1004.74; level 3 waits one cool-down (4 s) with the node over it, at a tick
    assert first_cap < 1004.74 + 4 <= ev["ts"]
    assert ev["ts"] == 1009.0
    level_3 = [r for r in fast["memoryReactions"] if r["level"] == 3]
    assert level_3 == [{"level": 3, "ts": 1009.0, "seconds": pytest.approx(4.3)}]
    # BE's page cache went with the cap (reclaimed when the cap fell below BE's usage); its anon stays
    usage = [p["beUsage"] for p in fast["memoryProtection"]]
    assert usage[0] == 12 * GiB and usage[-1] == 8 * GiB


def test_without_memory_high_the_same_load_is_evicted_at_the_first_tick_at_t() -> None:
    d = doc()
    d["featureGates"] = {"BEMemoryEvict": True}
    d["strategies"] = ["memoryEvict"]
    out = replay(d)
    assert caps(out) == []
    assert [e["ts"] for e in out["evictions"]][:1] == [1005.0]  # koordlet: the first tick at T


@pytest.mark.parametrize("change,message", [
    (lambda d: d["memoryLoad"].pop("nonBE"), "memoryLoad: nonBE is required"),
    (lambda d: d["memoryLoad"].update(beAnon=[[1000.0, -1]]), r"memoryLoad.beAnon\[0\]: bytes must be >= 0"),
    (lambda d: d["memoryLoad"].update(beCache=[[1000.0, 1], [1000.0, 2]]), "memoryLoad.beCache: two samples"),
    (lambda d: d["memoryLoad"].update(nonBE=[]), "memoryLoad.nonBE: at least one"),
    (lambda d: d["memoryLoad"].update(swap=[[1000.0, 1]]), "memoryLoad"),
    (lambda d: d["metrics"].append({"name": "node_memory_usage", "samples": [[1000.0, 1]]}),
     r"metrics\[1\]: node_memory_usage comes from memoryLoad"),
])
def test_a_bad_memory_load_is_refused_naming_the_field(change: Any, message: str) -> None:
    d = doc()
    change(d)
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(d)


def test_the_hold_rule() -> None:
    assert hold(None, 10.0, 5.0, None) == (10.0, 5.0, False)
    assert hold(None, 10.0, 5.0, 12) == (10.0, 2.0, True)  # page cache cut to what the cap leaves
    assert hold(8.0, 10.0, 0.0, 9) == (9.0, 0.0, True)  # anonymous growth stalls at the cap
    assert hold(10.0, 10.0, 0.0, 4) == (10.0, 0.0, False)  # what BE holds stays (no swap), no growth
    assert hold(10.0, 12.0, 0.0, 4) == (10.0, 0.0, True)


def test_the_model_writes_what_the_agent_reads_and_honours_the_kernel(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), version=2, memory_bytes=CAPACITY)
    load = MemoryLoad(host, {"nonBE": [(0.0, 50 * GiB)], "beAnon": [(0.0, 4 * GiB), (10.0, 14 * GiB)],
                             "beCache": [(0.0, 2 * GiB)]})
    be = host.layout.qos_dir(KubeQoS.BESTEFFORT)
    current = host.layout.file("memory", be, "memory.current")
    assert load.update(0.0) == 54 * GiB
    assert Path(current).read_text().strip() == str(6 * GiB)
    meminfo = Path(host.roots.proc_path("meminfo")).read_text()
    avail = next(int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemAvailable:"))
    assert avail == 46 * GiB // 1024  # BE's page cache is available memory: used = non-BE + BE's anon
    # a cap below BE's usage: the kernel reclaims its page cache at the write, then holds its growth
    with open(host.layout.file("memory", be, "memory.high"), "w") as f:
        f.write(str(5 * GiB))
    assert load.update(5.0) == 50 * GiB + 5 * GiB  # anon 9 GiB wanted, held at 5 (no cache left)
    assert Path(current).read_text().strip() == str(5 * GiB)
    events = Path(host.layout.file("memory", be, "memory.events")).read_text()
    assert "high 1" in events
