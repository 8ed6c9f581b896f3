"""Benchmark harness: every variant of a scenario is measured in the same run, and ratio
bounds between variants are checked at the end of the scenario.

``bench(scenario, variant, fn)`` runs ``fn`` under pytest-benchmark and records its
best time (the minimum over rounds is the least noisy estimate on a shared machine).
A module declares its bounds and ends with a test calling ``check_bounds``, so a
missed bound fails the run.  A bound missed on the first measurement is measured again before it
fails: the two variants' functions run interleaved, round after round, for up to a few seconds, and
each keeps its best time.  On a shared machine noise only ever adds time, and interleaving makes
both variants see the same neighbours, so a real regression still fails while a burst of load on
the other core during one variant's rounds does not.  The terminal summary prints every ratio, and the results
are written to ``benchmarks/latest.json`` (the README's table is made from it).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

RESULTS: dict[str, dict[str, dict[str, float]]] = {}
# the measured functions and their untimed set-up, for re-measuring
FNS: dict[str, dict[str, tuple[Callable[[], Any] | None, Callable[[], Any]]]] = {}
RATIOS: list[dict[str, Any]] = []
OUT = os.path.join(os.path.dirname(__file__), "latest.json")


@pytest.fixture
def bench(benchmark: Any) -> Callable[..., Any]:
    def run(scenario: str, variant: str, fn: Callable[[], Any], *, per: int = 1, unit: str = "op",
            remeasure: bool = True, setup: Callable[[], Any] | None = None, rounds: int = 15) -> Any:
        """``remeasure=False``: a variant no bound compares (its function may hold descriptors that
        must go when the test ends, not when the scenario's bounds are checked).  ``setup``: run
        before every round, untimed (e.g. advance the counters the next tick reads); then
        ``rounds`` rounds are measured."""
        benchmark.group = scenario
        benchmark.name = variant
        if setup is None:
            result = benchmark(fn)
        else:
            result = benchmark.pedantic(fn, setup=setup, rounds=rounds, iterations=1)
        stats = benchmark.stats
        if stats is not None:  # None when benchmarks are disabled
            RESULTS.setdefault(scenario, {})[variant] = {
                "min": stats.stats.min, "median": stats.stats.median, "per": per, "unit": unit,
                "rounds": stats.stats.rounds,
            }
            if remeasure:
                FNS.setdefault(scenario, {})[variant] = (setup, fn)
        return result

    return run


def check_bounds(scenario: str, bounds: list[tuple[str, str, str, float]]) -> None:
    """``(fast, slow, op, bound)``: op ``">="`` means slow/fast >= bound (fast is that much faster);
    ``"<="`` means fast/slow <= bound (fast costs at most bound times slow)."""
    got = RESULTS.get(scenario)
    if not got:
        pytest.fail(f"no benchmark results for {scenario} (were benchmarks disabled?)")
    failures = []
    for a, b, op, bound in bounds:
        if a not in got or b not in got:
            pytest.fail(f"{scenario}: missing variant {a if a not in got else b}")
        ratio, ok = _ratio(got, a, b, op, bound)
        remeasured = False
        if not ok and _remeasure(scenario, (a, b)):
            remeasured = True
            ratio, ok = _ratio(got, a, b, op, bound)
        desc = f"{b}/{a}" if op == ">=" else f"{a}/{b}"
        RATIOS.append({"scenario": scenario, "ratio": desc, "value": ratio, "bound": f"{op} {bound}",
                       "ok": ok, "remeasured": remeasured})
        if not ok:
            failures.append(f"{desc} = {ratio:.2f}, bound {op} {bound}")
    FNS.pop(scenario, None)  # their closures may hold descriptors (reference readers): let them go
    if failures:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        pytest.fail(f"{scenario}: " + "; ".join(failures) + f" (load average {load} on {os.cpu_count()} CPUs)")


def _ratio(got: dict[str, dict[str, float]], a: str, b: str, op: str, bound: float) -> tuple[float, bool]:
    ta, tb = got[a]["min"], got[b]["min"]
    ratio = tb / ta if op == ">=" else ta / tb
    return ratio, (ratio >= bound if op == ">=" else ratio <= bound)


def _remeasure(scenario: str, variants: tuple[str, ...], budget: float = 4.0, rounds: int = 50) -> bool:
    """Run ``variants`` interleaved (up to ``rounds`` rounds or ``budget`` seconds) and lower each one's
    best time to what it reached; False when a function can no longer run (its fixture is gone)."""
    fns = FNS.get(scenario, {})
    if any(v not in fns for v in variants):
        return False
    best = dict.fromkeys(variants, float("inf"))
    deadline = time.perf_counter() + budget
    try:
        for _ in range(rounds):
            for v in variants:
                setup, fn = fns[v]
                if setup is not None:
                    setup()
                t0 = time.perf_counter()
                fn()
                best[v] = min(best[v], time.perf_counter() - t0)
            if time.perf_counter() > deadline:
                break
    except Exception:
        return False
    for v in variants:
        RESULTS[scenario][v]["min"] = min(RESULTS[scenario][v]["min"], best[v])
    return True


@pytest.fixture(scope="session")
def tmpfs_dir() -> Iterator[str]:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="qosm-bench-", dir=base)
    yield d
    import shutil

    shutil.rmtree(d, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section("qosmanager benchmark ratios")
    for scenario, variants in RESULTS.items():
        for v, r in variants.items():
            per = r["per"]
            tr.write_line(f"{scenario:<34} {v:<16} min {r['min'] * 1e3:9.3f} ms"
                          + (f"   {r['min'] / per * 1e6:8.3f} µs/{r['unit']}" if per > 1 else ""))
    for r in RATIOS:
        again = " (measured again, interleaved)" if r.get("remeasured") else ""
        tr.write_line(f"{r['scenario']:<34} {r['ratio']:<28} {r['value']:8.2f}  bound {r['bound']:<8} "
                      f"{'ok' if r['ok'] else 'MISSED'}{again}")
    with open(OUT, "w") as f:
        json.dump({"results": RESULTS, "ratios": RATIOS}, f, indent=1, sort_keys=True)
