"""The memory outcome benchmark's table (``test_bench_outcome_memory.py``), from its JSON report.

    python benchmarks/outcome/memory_report.py [benchmarks/outcome/memory_results.json]

One row per case and mode: medians over the rounds (min-max when there are several) of BE's work (what
the load processed until it was killed or the case ended; *kept*: the same, 0 when the load was killed,
its work lost with the pod), LS's requests and memory stall; the BE pods evicted and the OOM kills
summed over the rounds; in graduated mode the highest cap on the BE QoS dir against the highest budget
memoryHigh audited (over the rounds).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "memory_results.json")
HEADER = ("| case | mode | BE pods evicted | BE work MiB | BE work kept MiB | LS requests | LS stall some / full ms "
          "| OOM kills LS / BE | peak node use % | peak cap / top budget MiB |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")


def _cell(values: list[float]) -> str:
    med = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return f"{med:.0f}"
    return f"{med:.0f} ({min(values):.0f}-{max(values):.0f})"


def _caps(runs: list[dict[str, Any]]) -> str:
    """The highest memory.high seen on the BE dir / the highest budget memoryHigh audited (the largest of
    the rounds each; reports from before the budget was recorded show the cap alone)."""
    caps = [r["peak_cap_mib"] for r in runs if r.get("peak_cap_mib") is not None]
    if not caps:
        return "—"
    budgets = [r["top_budget_mib"] for r in runs if r.get("top_budget_mib") is not None]
    return f"{max(caps):.0f} / {max(budgets):.0f}" if budgets else f"{max(caps):.0f} / ?"


def rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (case, mode), in the run's order: the rounds' figures gathered."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for run in data["runs"]:
        row = out.setdefault((run["case"], run["mode"]), {"case": run["case"], "mode": run["mode"], "runs": []})
        row["runs"].append(run)
    return sorted(out.values(), key=lambda r: (list(dict.fromkeys(x["case"] for x in data["runs"])).index(r["case"]),
                                               r["mode"] != "tick"))


def table(data: dict[str, Any]) -> str:
    lines = []
    for row in rows(data):
        runs = row["runs"]
        evicted = sum(len(r["be_evicted"]) for r in runs)
        lines.append(
            f"| {row['case']} | {row['mode']} | {evicted} | {_cell([r['be_work_mib'] for r in runs])} "
            f"| {_cell([r['be_work_mib'] if r['be_alive'] else 0.0 for r in runs])} "
            f"| {_cell([r['ls_requests'] for r in runs])} "
            f"| {_cell([r['ls_stall_some_ms'] for r in runs])} / {_cell([r['ls_stall_full_ms'] for r in runs])} "
            f"| {sum(r['oom_kill_ls'] for r in runs)} / {sum(r['oom_kill_be'] for r in runs)} "
            f"| {_cell([r['peak_used_pct'] for r in runs])} | {_caps(runs)} |")
    note = (f"{data['rounds']} round(s) of {data['case_seconds']:.0f} s per case and mode; "
            f"node {data['capacity_mib']} MiB "
            f"(tree memory.max), eviction at {data['threshold']} %, lower {data['lower']} %; kernel {data['kernel']}, "
            f"{data['cpus']} CPUs (QEMU, no KVM); {data['date']}")
    return HEADER + "\n".join(lines) + "\n\n" + note + "\n"


def main(argv: list[str]) -> int:
    with open(argv[0] if argv else RESULTS) as f:
        print(table(json.load(f)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
