"""Benchmark harness: every variant of a scenario is measured in the same run, and ratio
bounds between variants are checked at the end of the scenario.

``bench(scenario, variant, fn)`` runs ``fn`` under pytest-benchmark and records its
best time (the minimum over rounds is the least noisy estimate on a shared machine).
A module declares its bounds and ends with a test calling ``check_bounds``, so a
missed bound fails the run.  The terminal summary prints every ratio, and the results
are written to ``benchmarks/latest.json`` (the README's table is made from it).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

RESULTS: dict[str, dict[str, dict[str, float]]] = {}
RATIOS: list[dict[str, Any]] = []
OUT = os.path.join(os.path.dirname(__file__), "latest.json")


@pytest.fixture
def bench(benchmark: Any) -> Callable[..., Any]:
    def run(scenario: str, variant: str, fn: Callable[[], Any], *, per: int = 1, unit: str = "op") -> Any:
        benchmark.group = scenario
        benchmark.name = variant
        result = benchmark(fn)
        stats = benchmark.stats
        if stats is not None:  # None when benchmarks are disabled
            RESULTS.setdefault(scenario, {})[variant] = {
                "min": stats.stats.min, "median": stats.stats.median, "per": per, "unit": unit,
                "rounds": stats.stats.rounds,
            }
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
        ta, tb = got[a]["min"], got[b]["min"]
        ratio = tb / ta if op == ">=" else ta / tb
        ok = ratio >= bound if op == ">=" else ratio <= bound
        desc = f"{b}/{a}" if op == ">=" else f"{a}/{b}"
        RATIOS.append({"scenario": scenario, "ratio": desc, "value": ratio, "bound": f"{op} {bound}",
                       "ok": ok})
        if not ok:
            failures.append(f"{desc} = {ratio:.2f}, bound {op} {bound}")
    if failures:
        pytest.fail(f"{scenario}: " + "; ".join(failures))


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
        tr.write_line(f"{r['scenario']:<34} {r['ratio']:<28} {r['value']:8.2f}  bound {r['bound']:<8} "
                      f"{'ok' if r['ok'] else 'MISSED'}")
    with open(OUT, "w") as f:
        json.dump({"results": RESULTS, "ratios": RATIOS}, f, indent=1, sort_keys=True)
