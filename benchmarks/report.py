"""Print every scenario of the benchmark results (benchmarks/latest.json) as markdown tables.

The file holds the last run of each scenario: a run of one module replaces that module's scenarios
and keeps the others (benchmarks/conftest.py), so after a full run every scenario is there; the
"measured" column says when each was.  ``--ratios`` prints only the bounds.
"""

from __future__ import annotations

import json
import os
import sys

LATEST = os.path.join(os.path.dirname(__file__), "latest.json")


def load(path: str = LATEST) -> dict:
    with open(path) as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        data = load()
    except FileNotFoundError:
        print(f"no results yet: {LATEST} is written by a benchmark run (python -m pytest benchmarks)",
              file=sys.stderr)
        return 1
    measured = data.get("measured", {})
    if "--ratios" not in args:
        print("| scenario | variant | min | median | interleaved median (CPU) | per item | measured |")
        print("|---|---|---:|---:|---:|---:|---|")
        for scenario, variants in data["results"].items():
            for v, r in variants.items():
                per = f"{r['min'] / r['per'] * 1e6:.2f} µs/{r['unit']}" if r.get("per", 1) > 1 else ""
                inter = r.get("interleaved_median")
                cells = [scenario, v, f"{r['min'] * 1e3:.2f} ms", f"{r.get('median', r['min']) * 1e3:.2f} ms",
                         f"{inter * 1e3:.2f} ms" if inter is not None else "", per, measured.get(scenario, "")]
                print("| " + " | ".join(cells) + " |")
        print()
    print("| scenario | ratio | value | 95 % interval | bound | command |")
    print("|---|---|---:|---|---|---|")
    for r in data["ratios"]:
        spread = r.get("spread")
        interval = f"{spread[0]:.2f}-{spread[1]:.2f}" if spread else ""
        mark = "✓" if r["ok"] else "✗"
        print(f"| {r['scenario']} | {r['ratio']} | {r['value']:.2f} | {interval} | {r['bound']} {mark} | "
              f"{r.get('command', '')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
