"""simulate models the memory trigger and the graduated levels: the load model moves node memory at every
50 ms sub-step (not only at its steps), the memory trigger samples it there and wakes memoryHigh, so BE is
capped (level 1) within a sample or two of the node crossing L - 5 % -- in tick mode only at a tick,
seconds later.  With LS growing past the threshold in spite of the cap, memoryEvict evicts, and only
after the cap held BE first.  Times are simulated seconds (deterministic: same seed, same run)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qosmanager import cli
from qosmanager.framework.fastpath import INTERVAL
from qosmanager.sim.load import LoadShape
from qosmanager.sim.simulate import SimConfig, SimResult, result_json, run_simulation, summarize


def _run(react_mode: str = "fast", shape: LoadShape | None = None, step: float = 1.0) -> SimResult:
    return run_simulation(SimConfig(containers=200, duration=20.0, cpus=16, memory_gib=32, seed=0, cgroup_version=2,
                                    feature_gates={"BEMemoryHigh": True}, react_mode=react_mode, step=step,
                                    shape=shape or LoadShape()))


@pytest.fixture(scope="module")
def fast() -> SimResult:
    return _run(step=2.0)  # model steps 2 s apart: the trigger's samples between them see memory move


@pytest.fixture(scope="module")
def tick() -> SimResult:
    return _run("tick", step=2.0)


@pytest.fixture(scope="module")
def ls_growth() -> SimResult:
    return _run(shape=LoadShape(ls_growth=0.4, leak_total=0.0))  # LS alone takes the node past T


def level_1(res: SimResult) -> list[tuple[float, float]]:
    return [(t, s) for level, t, s in res.memory_reactions if level == 1]


def test_the_trigger_caps_be_within_a_sample_or_two_of_the_crossing(fast: SimResult, tick: SimResult) -> None:
    got = level_1(fast)
    assert got, "BE was never capped"
    t_cap, seconds = got[0]
    assert seconds <= 2 * INTERVAL + 1e-9
    # memory moved between the model's steps: the crossing, and the cap, fall between two of them
    assert not math.isclose(t_cap / fast.config.step, round(t_cap / fast.config.step), abs_tol=1e-6), t_cap
    slow = level_1(tick)
    assert slow and slow[0][1] >= fast.config.collect_interval * 0.95, "tick mode reacts at a tick"
    assert slow[0][0] > t_cap


def test_the_level_in_force_is_recorded_and_summarized(fast: SimResult) -> None:
    first = next(r.t for r in fast.records if r.memory_level >= 1)
    assert all(r.memory_level == 0 for r in fast.records if r.t < first)
    text = summarize(fast)
    assert "mem levels" in text and "1 (BE capped)" in text and "level 1 1x" in text
    doc = result_json(fast)
    assert doc["memory_reactions"][0]["level"] == 1
    assert all("memory_level" in r for r in doc["timeline"])


def test_eviction_only_once_the_node_stays_over_the_threshold_in_spite_of_the_cap(ls_growth: SimResult) -> None:
    res = ls_growth
    assert res.evictions, "LS growing past T must end in evictions"
    first_cap = next(r.t for r in res.records if r.memory_level >= 1 and r.be_memory_high >= 0)
    first_eviction = min(e.t for e in res.evictions)
    assert first_cap < first_eviction
    threshold = res.config.memory_threshold_percent / 100
    over = [r.t for r in res.records if r.memory_used / r.memory_total >= threshold]
    assert over and over[0] < first_eviction, "evicted before the node reached the threshold"
    # the kernel held BE at its cap before (a cap below BE's anonymous memory only throttles: no swap)
    before = [r for r in res.records if r.t < first_eviction]
    assert before[-1].be_high_events > 0
    level_3 = [s for level, _, s in res.memory_reactions if level == 3]
    assert level_3 and level_3[0] > 0


def test_the_command_line_grows_ls_memory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_json = tmp_path / "run.json"
    rc = cli.main(["simulate", "--containers", "100", "--duration", "4", "--cpus", "16", "--memory-gib", "32",
                   "--cgroup-version", "2", "--feature-gates", "BEMemoryHigh=true", "--ls-memory-growth", "0.4",
                   "--json", str(out_json)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "mem levels" in text and "mem level " in text
    doc = json.loads(out_json.read_text())
    assert doc["shape"]["ls_growth"] == 0.4
    assert all("memory_level" in r for r in doc["timeline"]) and "memory_reactions" in doc
    assert cli.main(["simulate", "--ls-memory-growth", "-1"]) == 2
    assert "--ls-memory-growth must be within" in capsys.readouterr().err


def test_the_plot_draws_the_memory_levels(fast: SimResult, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from qosmanager.sim import plot

    out = tmp_path / "run.png"
    plot.draw(fast, str(out))
    assert out.stat().st_size > 0
