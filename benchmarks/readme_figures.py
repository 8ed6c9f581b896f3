"""The README's benchmark figures, made from the last run's results (benchmarks/latest.json).

``python benchmarks/readme_figures.py`` rewrites the table between the README's markers
``<!-- benchmark-figures:begin -->`` and ``<!-- benchmark-figures:end -->``: one row per ratio bound
measured interleaved (benchmarks/conftest.py), with its median, its 95 % interval, the bound and the
command that measures it.  ``--check`` changes nothing and fails (exit 1) when the README disagrees
with the last run: a row whose scenario is no longer measured, or whose stated interval, widened by
the run-to-run spread :data:`RUN_TO_RUN`, and the last run's do not overlap.  A 95 % interval says
how steady one run was; between runs on a shared machine (another load, another idle level) the
median itself moves, so two runs' bare intervals are often disjoint while the figure is not stale.
The check is for stale figures (a change of the code's cost), not for the machine's mood.  A ratio
the README does not show yet is only listed.  CI (.ci/run) runs the check after the test
command.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
LATEST = os.path.join(HERE, "latest.json")
README = os.path.join(HERE, "..", "README.md")
BEGIN, END = "<!-- benchmark-figures:begin -->", "<!-- benchmark-figures:end -->"
HEADER = ("| scenario | ratio | measured (95 % interval) | bound | command |\n"
          "|---|---|---:|---|---|\n")
# How far a ratio's median may move between two runs of the same code on this 2-core VM, as a factor:
# wide enough for the machine's load, narrow enough that a 2x change of the code's cost fails.  The
# README says it.
RUN_TO_RUN = 1.5
# Rows whose median moves further between runs, for a reason outside the code, with the factor measured.
# The real-kernel collect ratio is (Python's open + read + close) / (the extension's pread), and the
# kernel's own cost of producing v1 memory.stat, in both, moved 15-26 ms per 2,000 cgroups between
# clean-clone runs (the floor) with the dying memory cgroups earlier tests left for the kernel to free:
# the ratio read 5.73-9.47 in ten CI runs of unchanged code (1.65x).  A change of the code's cost still
# shows: its other row, native/floor, moved 1.06-1.12 in the same runs, and a 2x slower native pass
# fails that row's bound (<= 1.3) whatever the kernel's state.
RUN_TO_RUN_ROWS = {("collect kernel v1 2000c", "naive/native"): 2.0}


def run_to_run(scenario: str, ratio: str) -> float:
    """How far a row's median may move between runs of the same code, as a factor."""
    return RUN_TO_RUN_ROWS.get((scenario, ratio), RUN_TO_RUN)
ROW = re.compile(r"^\| (?P<scenario>[^|]+?) \| (?P<ratio>[^|]+?) \| (?P<value>[\d.]+) "
                 r"\((?P<low>[\d.]+)-(?P<high>[\d.]+)\) \| (?P<bound>[^|]+?) \| `(?P<command>[^`]*)` \|$")


def figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The ratios measured interleaved, in the run's order."""
    return [r for r in data.get("ratios", []) if r.get("spread")]


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"| {r['scenario']} | {r['ratio']} | {r['value']:.2f} ({r['spread'][0]:.2f}-{r['spread'][1]:.2f}) "
             f"| {r['bound']} | `{r.get('command', '')}` |" for r in rows]
    return HEADER + "\n".join(lines) + "\n"


def block(text: str) -> tuple[int, int]:
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < a:
        raise ValueError(f"README.md has no {BEGIN} ... {END} block")
    return a + len(BEGIN), b


def readme_rows(text: str) -> list[dict[str, Any]]:
    a, b = block(text)
    out = []
    for line in text[a:b].splitlines():
        m = ROW.match(line.strip())
        if m:
            out.append({"scenario": m["scenario"], "ratio": m["ratio"], "value": float(m["value"]),
                        "spread": (float(m["low"]), float(m["high"])), "bound": m["bound"]})
    return out


def disagreements(shown: list[dict[str, Any]], latest: list[dict[str, Any]]) -> list[str]:
    by_key = {(r["scenario"], r["ratio"]): r for r in latest}
    out = []
    for r in shown:
        got = by_key.get((r["scenario"], r["ratio"]))
        if got is None:
            out.append(f"{r['scenario']}: {r['ratio']} is in the README but not in the last run")
            continue
        lo, hi = r["spread"]
        glo, ghi = got["spread"]
        factor = run_to_run(r["scenario"], r["ratio"])
        if ghi < lo / factor or glo > hi * factor:
            out.append(f"{r['scenario']}: {r['ratio']} is {r['value']:.2f} ({lo:.2f}-{hi:.2f}) in the README, "
                       f"{got['value']:.2f} ({glo:.2f}-{ghi:.2f}) in the last run")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    latest_path = os.environ.get("QOSM_BENCH_RESULTS", LATEST)
    try:
        with open(latest_path) as f:
            latest = figures(json.load(f))
    except FileNotFoundError:
        print(f"readme_figures: no {latest_path}: run the benchmarks first (python -m pytest)", file=sys.stderr)
        return 1
    readme_path = os.environ.get("QOSM_README", README)
    with open(readme_path, encoding="utf-8") as f:
        text = f.read()
    if "--check" in args:
        shown = readme_rows(text)
        bad = disagreements(shown, latest)
        new = {(r["scenario"], r["ratio"]) for r in latest} - {(r["scenario"], r["ratio"]) for r in shown}
        for scenario, ratio in sorted(new):
            print(f"readme_figures: not in the README yet: {scenario}: {ratio}")
        for line in bad:
            print(f"readme_figures: {line}", file=sys.stderr)
        if bad:
            print("readme_figures: the README disagrees with the last run; "
                  "python benchmarks/readme_figures.py rewrites its figures", file=sys.stderr)
            return 1
        print(f"readme_figures: the README's {len(shown)} figures agree with the last run")
        return 0
    a, b = block(text)
    text = text[:a] + "\n" + table(latest) + text[b:]
    with open(readme_path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"readme_figures: {len(latest)} figures written to {readme_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
