"""Print the latest benchmark results (benchmarks/latest.json) as the README's markdown table."""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    path = os.path.join(os.path.dirname(__file__), "latest.json")
    with open(path) as f:
        data = json.load(f)
    print("| scenario | variant | min | per item |")
    print("|---|---|---:|---:|")
    for scenario, variants in data["results"].items():
        for v, r in variants.items():
            per = f"{r['min'] / r['per'] * 1e6:.2f} µs/{r['unit']}" if r["per"] > 1 else ""
            print(f"| {scenario} | {v} | {r['min'] * 1e3:.2f} ms | {per} |")
    print()
    print("| scenario | ratio | value | bound |")
    print("|---|---|---:|---|")
    for r in data["ratios"]:
        print(f"| {r['scenario']} | {r['ratio']} | {r['value']:.2f} | {r['bound']} {'✓' if r['ok'] else '✗'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
