"""The benchmark harness itself: a bound is judged on an interleaved measurement of the two variants'
CPU time, so a bad first measurement or a busy neighbour does not fail it, while a real gap does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

import conftest
from conftest import check_bounds, median_interval


def _record(scenario: str, variant: str, best: float, fn: Callable[[], object],
            setup: Callable[[], object] | None = None) -> None:
    conftest.RESULTS.setdefault(scenario, {})[variant] = {"min": best, "median": best, "per": 1, "unit": "op",
                                                           "rounds": 1}
    conftest.FNS.setdefault(scenario, {})[variant] = (setup, fn)


def _spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.fixture
def scenario(request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"harness self-test: {request.node.name}"
    yield name
    conftest.RESULTS.pop(name, None)
    conftest.FNS.pop(name, None)
    conftest.RATIOS[:] = [r for r in conftest.RATIOS if r["scenario"] != name]


@pytest.fixture
def busy_neighbours() -> Iterator[None]:
    """Two busy loops beside the test, as on a loaded 2-core machine; killed by their pids."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def test_a_bad_first_measurement_does_not_decide(scenario: str) -> None:
    # "fast" really is 4x faster, but its pytest-benchmark rounds were measured 10x too slow
    _record(scenario, "fast", 0.010, lambda: _spin(0.0005))
    _record(scenario, "slow", 0.002, lambda: _spin(0.002))
    check_bounds(scenario, [("fast", "slow", ">=", 2.0)])
    r = conftest.RATIOS[-1]
    assert r["ok"] is True and r["measured"] == "interleaved cpu" and r["rounds"] >= conftest.MIN_ROUNDS
    assert r["spread"][0] <= r["value"] <= r["spread"][1]


def test_a_real_gap_still_fails(scenario: str) -> None:
    _record(scenario, "fast", 0.001, lambda: _spin(0.002))
    _record(scenario, "slow", 0.004, lambda: _spin(0.002))
    with pytest.raises(pytest.fail.Exception, match="slow/fast"):
        check_bounds(scenario, [("fast", "slow", ">=", 2.0)])
    assert conftest.RATIOS[-1]["ok"] is False


def test_busy_neighbours_do_not_fail_a_bound(scenario: str, busy_neighbours: None) -> None:
    # 3x apart against a bound of 2x: two busy loops on the other cores change neither variant's CPU time
    _record(scenario, "fast", 0.001, lambda: _spin(0.001))
    _record(scenario, "slow", 0.003, lambda: _spin(0.003))
    check_bounds(scenario, [("fast", "slow", ">=", 2.0)])
    assert 2.5 <= conftest.RATIOS[-1]["value"] <= 3.5


def test_a_2x_regression_fails_beside_busy_neighbours(scenario: str, busy_neighbours: None) -> None:
    # the same pair with "fast" made 2x slower
    _record(scenario, "fast", 0.001, lambda: _spin(0.002))
    _record(scenario, "slow", 0.003, lambda: _spin(0.003))
    with pytest.raises(pytest.fail.Exception, match=r"slow/fast = 1\.[3-7]"):
        check_bounds(scenario, [("fast", "slow", ">=", 2.0)])


def test_a_setup_runs_untimed(scenario: str) -> None:
    calls = []
    _record(scenario, "fast", 0.010, lambda: _spin(0.0005), setup=lambda: (calls.append(1), _spin(0.01)))
    _record(scenario, "slow", 0.002, lambda: _spin(0.002))
    check_bounds(scenario, [("fast", "slow", ">=", 2.0)])  # the 10 ms set-up is not counted
    assert len(calls) == conftest.RATIOS[-1]["rounds"] and conftest.RATIOS[-1]["ok"] is True


def test_without_its_functions_a_bound_uses_the_best_times(scenario: str) -> None:
    _record(scenario, "fast", 0.001, lambda: None)
    _record(scenario, "slow", 0.003, lambda: None)
    conftest.FNS.pop(scenario)
    check_bounds(scenario, [("fast", "slow", ">=", 2.0)])
    r = conftest.RATIOS[-1]
    assert r["measured"] == "best" and r["spread"] is None and r["value"] == pytest.approx(3.0)


def test_the_median_interval_widens_with_fewer_rounds() -> None:
    xs = [float(k) for k in range(101)]
    med, lo, hi = median_interval(xs)
    assert med == 50 and 35 <= lo < 50 < hi <= 65
    med, lo, hi = median_interval(xs[::10])
    assert med == 50 and lo <= 20 and hi >= 80


def test_a_loaded_machine_does_not_cut_the_rounds(scenario: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each call loses 40 ms of wall time to "neighbours" (a sleep: the CPU is elsewhere), so the
    # rounds take BUDGET seconds of wall time long before MIN_ROUNDS; the budget counts the measured
    # CPU time, so the bound is still judged on MIN_ROUNDS rounds (it was on FEW_ROUNDS).
    monkeypatch.setattr(conftest, "BUDGET", 0.3)
    _record(scenario, "fast", 0.001, lambda: (_spin(0.001), time.sleep(0.04)))
    _record(scenario, "slow", 0.003, lambda: (_spin(0.003), time.sleep(0.04)))
    check_bounds(scenario, [("fast", "slow", ">=", 2.0)])
    assert conftest.RATIOS[-1]["rounds"] >= conftest.MIN_ROUNDS
