"""The README's outcome table and timeline plot, made from the outcome benchmark's figures.

    QOSM_OUTCOME=1 pytest benchmarks/test_bench_outcome.py -s     # writes benchmarks/outcome/results.json
    python benchmarks/outcome/report.py [--readme README.md] [--plot docs/outcome-timeline.png]
    python benchmarks/outcome/report.py --check README.md
    QOSM_OUTCOME_CPU=1 QOSM_OUTCOME_CPU_ROUNDS=32 pytest benchmarks/test_bench_outcome_cpu.py -s
                                                                  # writes benchmarks/outcome/cpu_results.json

Without options it prints the table and the whole-process paragraph.  ``--readme`` replaces the text
between the README's ``<!-- outcome:begin -->`` and ``<!-- outcome:end -->`` markers with the table, and
between ``<!-- whole-process-cpu:begin -->`` and ``<!-- whole-process-cpu:end -->`` with the paragraph on
the whole-process CPU (``test_bench_outcome_cpu.py``'s figures); ``--check`` changes nothing and fails
(exit 1) when either text is not made of its results (tests/test_readme_figures.py runs it in every
test run, so a README edited by hand or a new results file without the README fails CI); ``--plot``
draws one round of each agent mode around its LS burst (LS request latency, BE's quota and both classes'
CPU use) with matplotlib, the tool ``qosmanager simulate --plot`` uses.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results.json")
CPU_RESULTS = os.path.join(HERE, "cpu_results.json")
BEGIN, END = "<!-- outcome:begin -->", "<!-- outcome:end -->"
X, DASH = "\u00d7", "\u2013"  # the README's times sign and range dash
CPU_BEGIN, CPU_END = "<!-- whole-process-cpu:begin -->", "<!-- whole-process-cpu:end -->"
MIN_BURST = 0.4  # outcome_common.MIN_BURST_CORES
MODE_TEXT = {"none": "no agent (BE at cpu.shares 2)", "tick": "agent, `--react-mode tick` (koordlet's pace)",
             "fast": "agent, fast path (default)", "fast-idle": "fast path + `BECPUIdle`"}


def _cell(d: dict[str, float] | None, scale: float = 1.0, digits: int = 0) -> str:
    if d is None:
        return "-"
    f = f"{{:.{digits}f}}"
    return f"{f.format(d['median'] * scale)} ({f.format(d['min'] * scale)}-{f.format(d['max'] * scale)})"


def table(data: dict[str, Any]) -> str:
    meta = data["meta"]
    rows = [
        "| mode | LS p50 ms | LS p99 ms | LS p99.9 ms | BE CPU s per round | reaction ms | rounds timed |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    starved = 0
    for mode, row in data["summary"].items():
        timed = sum(1 for x in row["reactions"] if x is not None)
        if mode != "none":
            starved += row["rounds"] - timed
        count = "-" if mode == "none" else f"{timed} of {row['rounds']}"
        rows.append(f"| {MODE_TEXT.get(mode, mode)} | {_cell(row['p50'], 1e-3, 2)} | {_cell(row['p99'], 1e-3, 1)} "
                    f"| {_cell(row['p999'], 1e-3, 1)} | {_cell(row['be_cpu_seconds'], 1, 2)} "
                    f"| {_cell(row['reaction'], 1e3)} | {count} |")
    load = meta.get("load") or [math.nan]
    rows.append("")
    rows.append(f"Medians of {meta.get('rounds_per_mode')} interleaved rounds per mode (min-max across rounds), "
                f"{meta.get('variant')} probe, {meta.get('cpus')} CPUs, cpuSuppress threshold "
                f"{meta.get('threshold')} %, load average {load[0]:.1f} at the end of the run. A round's reaction "
                f"is timed only when its LS burst got at least {MIN_BURST} cores from this shared machine "
                f"({starved} agent rounds did not). "
                "Made by `benchmarks/outcome/report.py` from `benchmarks/outcome/results.json`; every test run "
                "checks that the two agree (`report.py --check README.md`).")
    return "\n".join(rows)


def cpu_paragraph(data: dict[str, Any]) -> str:
    """The README's whole-process sentence of ``test_bench_outcome_cpu.py``'s results: the fast path's and
    tick mode's mean (every round's CPU over every round's time) and median of the rounds' ratios to the
    read-everything floor, against the bound, with the load and date of the run."""
    meta = data["meta"]
    fast, tick = data["fast"], data["tick"]
    rounds, seconds, bound = meta["rounds"], meta["round_seconds"], meta["bound"]
    minute = rounds * seconds >= 60  # the mean is bound only over a minute or more (its once-a-minute work)
    held = fast["ratio"] <= bound and (fast["mean_ratio"] <= bound or not minute)
    lo, hi = fast["interval"]
    load = meta["load"]
    commit = f", commit {meta['commit']}" if meta.get("commit") else ""
    verdict = "**met**" if held else "**not met**"
    scope = "mean and median" if minute else "median (the mean is bound over a minute or more)"
    return (f"**Whole-process CPU.** At {meta['containers']:,} containers, every thread counted (`/metrics` served), "
            f"the agent with the fast path used on average **{fast['mean_ratio']:.2f}{X}** the read-everything "
            f"floor over {rounds} rounds of {seconds:g} s ({rounds * seconds:g} s: the once-a-minute re-checks "
            f"counted in; the rounds' median {fast['ratio']:.2f}{X}, {lo:.2f}{DASH}{hi:.2f}), `--react-mode tick` "
            f"beside it {tick['mean_ratio']:.2f}{X} (median {tick['ratio']:.2f}{X}); bound {bound:g}{X} on the "
            f"fast path's {scope}: {verdict}. Measured {meta['date']}{commit}, load average {load[0]:.1f} on "
            f"{meta['machine_cpus']} CPUs; made by `benchmarks/outcome/report.py` from "
            "`benchmarks/outcome/cpu_results.json`.")


def plot(data: dict[str, Any], path: str) -> None:
    from qosmanager.sim.plot import check_available

    check_available()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in ("tick", "fast", "fast-idle") if any(r["mode"] == m for r in data["rounds"])]
    fig, axes = plt.subplots(2, len(modes), sharex=True, figsize=(5 * len(modes), 6), squeeze=False)
    cap = data["meta"].get("cpus", 1)
    for i, mode in enumerate(modes):
        r = next(r for r in data["rounds"] if r["mode"] == mode and r["reaction"] is not None)
        b = r["burst_at"]
        lat, ax_u = axes[0][i], axes[1][i]
        lat.scatter([t - b for t, _ in r["latencies"]], [v / 1e3 for _, v in r["latencies"]], s=2,
                    color="tab:blue")
        lat.set_yscale("log")
        lat.set_ylabel("LS request latency, ms")
        reaction = r["reaction"]
        title = f"{mode}: reaction {reaction * 1e3:.0f} ms" if math.isfinite(reaction) else f"{mode}: no reaction"
        lat.set_title(title)
        t = [s["t"] - b for s in r["timeline"]]
        ax_u.plot(t, [s["ls_used"] for s in r["timeline"]], label="LS used", color="tab:blue")
        ax_u.plot(t, [s["be_used"] for s in r["timeline"]], label="BE used", color="tab:orange")
        ax_u.step(t, [cap if s["be_quota"] < 0 else s["be_quota"] / 100_000 for s in r["timeline"]], where="post",
                  label="BE limit (quota)", color="tab:red", linestyle="--")
        ax_u.axhline(r["safe_quota"] / 100_000, color="grey", linestyle=":", label="safe level")
        ax_u.set_ylabel("cores")
        ax_u.set_xlabel("seconds since LS demand started")
        ax_u.set_ylim(0, cap * 1.05)
        for ax in (lat, ax_u):
            ax.axvline(0, color="black", linewidth=0.8)
            ax.axvline(r["burst_end"] - b, color="black", linewidth=0.8, linestyle="--")
        if i == 0:
            ax_u.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _block(path: str, begin: str = BEGIN, end: str = END) -> tuple[str, int, int]:
    with open(path, encoding="utf-8") as f:
        readme = f.read()
    a, b = readme.find(begin), readme.find(end)
    if a < 0 or b < a:
        raise SystemExit(f"{path}: no {begin} ... {end} markers")
    return readme, a + len(begin), b


def write_readme(path: str, text: str, begin: str = BEGIN, end: str = END) -> None:
    readme, a, b = _block(path, begin, end)
    with open(path, "w", encoding="utf-8") as f:
        f.write(readme[:a] + "\n" + text + "\n" + readme[b:])


def check_readme(path: str, text: str, begin: str = BEGIN, end: str = END) -> bool:
    """Whether the README's block between ``begin`` and ``end`` is ``text`` (made of the results)."""
    readme, a, b = _block(path, begin, end)
    return readme[a:b].strip("\n") == text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--cpu-results", default=CPU_RESULTS, help="the whole-process CPU benchmark's results")
    p.add_argument("--readme", default=None, help="rewrite the outcome section of this README")
    p.add_argument("--check", default=None, metavar="README",
                   help="fail when this README's outcome section is not the table of the results")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="draw the timeline plot")
    args = p.parse_args(argv)
    with open(args.results) as f:
        data = json.load(f)
    with open(args.cpu_results) as f:
        cpu = cpu_paragraph(json.load(f))
    text = table(data)
    blocks = ((text, BEGIN, END, "outcome table", args.results), (cpu, CPU_BEGIN, CPU_END, "whole-process CPU",
                                                                  args.cpu_results))
    if args.check:
        bad = [(what, src) for t, b, e, what, src in blocks if not check_readme(args.check, t, b, e)]
        for what, src in bad:
            print(f"outcome report: {args.check}'s {what} is not made of {src}; "
                  f"python benchmarks/outcome/report.py --readme {args.check} rewrites it", file=sys.stderr)
        if not bad:
            print(f"outcome report: {args.check}'s outcome table and whole-process CPU are made of their results")
        return 1 if bad else 0
    if args.plot:
        plot(data, args.plot)
    if args.readme:
        for t, b, e, _, _ in blocks:
            write_readme(args.readme, t, b, e)
    else:
        print(text + "\n\n" + cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
