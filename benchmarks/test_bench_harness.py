"""The benchmark harness itself: a bound missed because one variant's rounds met a burst of load is
measured again, interleaved, before it fails; a real gap still fails."""

from __future__ import annotations

import time

import pytest

import conftest
from conftest import check_bounds


def _record(scenario: str, variant: str, best: float, fn: object) -> None:
    conftest.RESULTS.setdefault(scenario, {})[variant] = {"min": best, "median": best, "per": 1, "unit": "op",
                                                           "rounds": 1}
    conftest.FNS.setdefault(scenario, {})[variant] = (None, fn)  # type: ignore[assignment]


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_noisy_first_measurement_is_measured_again() -> None:
    scenario = "harness self-test: noise"
    # "fast" really is 4x faster, but its first rounds were measured 10x too slow
    _record(scenario, "fast", 0.010, lambda: _spin(0.0005))
    _record(scenario, "slow", 0.002, lambda: _spin(0.002))
    try:
        check_bounds(scenario, [("fast", "slow", ">=", 2.0)])
        assert conftest.RATIOS[-1]["remeasured"] is True and conftest.RATIOS[-1]["ok"] is True
    finally:
        conftest.RESULTS.pop(scenario, None)
        conftest.RATIOS[:] = [r for r in conftest.RATIOS if r["scenario"] != scenario]


def test_a_real_gap_still_fails() -> None:
    scenario = "harness self-test: real gap"
    _record(scenario, "fast", 0.002, lambda: _spin(0.002))
    _record(scenario, "slow", 0.002, lambda: _spin(0.002))
    try:
        with pytest.raises(pytest.fail.Exception, match="slow/fast"):
            check_bounds(scenario, [("fast", "slow", ">=", 2.0)])
        assert conftest.RATIOS[-1]["remeasured"] is True and conftest.RATIOS[-1]["ok"] is False
    finally:
        conftest.RESULTS.pop(scenario, None)
        conftest.RATIOS[:] = [r for r in conftest.RATIOS if r["scenario"] != scenario]


def test_a_setup_runs_untimed_when_measured_again() -> None:
    scenario = "harness self-test: setup"
    calls = []
    _record(scenario, "fast", 0.010, lambda: _spin(0.0005))
    _record(scenario, "slow", 0.002, lambda: _spin(0.002))
    conftest.FNS[scenario]["fast"] = (lambda: (calls.append(1), _spin(0.01)), lambda: _spin(0.0005))
    try:
        check_bounds(scenario, [("fast", "slow", ">=", 2.0)])  # the 10 ms set-up is not counted
        assert calls and conftest.RATIOS[-1]["ok"] is True
    finally:
        conftest.RESULTS.pop(scenario, None)
        conftest.RATIOS[:] = [r for r in conftest.RATIOS if r["scenario"] != scenario]
