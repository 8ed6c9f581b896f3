"""benchmarks/readme_figures.py: the README's benchmark figures come from the last run, and --check
fails when they disagree beyond the stated spread."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(path: str = "benchmarks/readme_figures.py", name: str = "qosm_readme_figures") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rf = load()
outcome = load("benchmarks/outcome/report.py", "qosm_outcome_report")


def ratio(value: float, low: float, high: float, scenario: str = "demand tmpfs v2 2000c") -> dict:
    return {"scenario": scenario, "ratio": "agent tick, steady/floor", "value": value, "spread": [low, high],
            "bound": "<= 0.3", "ok": True, "command": "pytest benchmarks/test_bench_demand.py"}


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nfigures:\n{rf.BEGIN}\nold\n{rf.END}\nafter\n", encoding="utf-8")
    latest = tmp_path / "latest.json"
    monkeypatch.setenv("QOSM_README", str(readme))
    monkeypatch.setenv("QOSM_BENCH_RESULTS", str(latest))
    return readme, latest


def write(latest: Path, *ratios: dict) -> None:
    latest.write_text(json.dumps({"results": {}, "ratios": [*ratios, {"scenario": "memory", "ratio": "peak RSS",
                                                                      "value": 50.0, "bound": "<= 60",
                                                                      "ok": True}]}))


def test_generated_figures_pass_the_check_and_a_disjoint_run_fails_it(files: tuple[Path, Path]) -> None:
    readme, latest = files
    write(latest, ratio(0.19, 0.18, 0.23))
    assert rf.main([]) == 0
    text = readme.read_text(encoding="utf-8")
    assert "| demand tmpfs v2 2000c | agent tick, steady/floor | 0.19 (0.18-0.23) | <= 0.3 | " \
           "`pytest benchmarks/test_bench_demand.py` |" in text
    assert "old" not in text and text.endswith("after\n") and "peak RSS" not in text  # interleaved ratios only
    assert rf.main(["--check"]) == 0
    write(latest, ratio(0.21, 0.20, 0.25))  # another run, overlapping: agrees
    assert rf.main(["--check"]) == 0
    write(latest, ratio(0.29, 0.27, 0.31))  # disjoint, but within the run-to-run spread: agrees
    assert rf.main(["--check"]) == 0
    write(latest, ratio(0.40, 0.37, 0.43))  # about 2x: the README is out of date
    assert rf.main(["--check"]) == 1
    write(latest, ratio(0.09, 0.08, 0.10))  # about 1/2: out of date too
    assert rf.main(["--check"]) == 1
    write(latest, ratio(0.19, 0.18, 0.23, scenario="renamed"))  # the README's scenario is gone
    assert rf.main(["--check"]) == 1


def test_a_row_the_kernel_moves_has_its_own_measured_run_to_run_spread(files: tuple[Path, Path]) -> None:
    _readme, latest = files
    kernel = dict(scenario="collect kernel v1 2000c", ratio="naive/native", bound=">= 4.0")
    write(latest, {**ratio(9.47, 9.20, 9.73), **kernel})
    assert rf.main([]) == 0
    write(latest, {**ratio(5.88, 5.82, 5.94), **kernel})  # the next CI run of the same code (1.6x apart)
    assert rf.main(["--check"]) == 0
    write(latest, {**ratio(4.2, 4.1, 4.4), **kernel})  # 2.2x: the code's cost changed
    assert rf.main(["--check"]) == 1
    assert rf.run_to_run("collect kernel v1 2000c", "naive/native") == 2.0
    assert rf.run_to_run("collect tmpfs v1 2000c", "naive/native") == rf.RUN_TO_RUN


def test_the_readme_has_the_block_and_its_rows_parse() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = rf.readme_rows(text)
    assert rows, "README.md's benchmark figures block is empty"
    assert all(r["spread"][0] <= r["value"] <= r["spread"][1] for r in rows)


def test_ci_checks_the_figures_after_the_test_command() -> None:
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_line = run.index(".venv/bin/python -m pytest")
    assert run.index("benchmarks/readme_figures.py --check") > test_line


def test_the_readme_outcome_table_is_made_from_the_outcome_results(tmp_path: Path) -> None:
    """The README's outcome table is what benchmarks/outcome/report.py makes of results.json: a figure
    edited by hand, or results without the README rewritten, fails the test run (and so CI)."""
    assert outcome.main(["--check", str(ROOT / "README.md")]) == 0
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    a = text.index(outcome.BEGIN)
    row = next(line for line in text[a:].splitlines() if line.startswith("| agent, fast path (default) |"))
    cells = row.split(" | ")
    cells[5] = "1 (1-2)"  # the fast path's reaction, edited by hand
    readme.write_text(text.replace(row, " | ".join(cells)), encoding="utf-8")
    assert outcome.main(["--check", str(readme)]) == 1
    assert outcome.main(["--readme", str(readme)]) == 0  # rewritten from the results, it agrees again
    assert outcome.main(["--check", str(readme)]) == 0 and readme.read_text(encoding="utf-8") == text


def cpu_results(fast_mean: float = 0.19, rounds: int = 32) -> dict:
    return {"meta": {"date": "2026-12-05 09:00 UTC", "commit": "abc1234", "containers": 2000, "machine_cpus": 2,
                     "bound": 0.3, "rounds": rounds, "round_seconds": 2.0, "load": [3.9, 3.6, 5.7]},
            "fast": {"ratio": 0.18, "interval": [0.17, 0.2], "mean_ratio": fast_mean},
            "tick": {"ratio": 0.12, "interval": [0.11, 0.13], "mean_ratio": 0.13}}


def plain(text: str) -> str:
    """The README's times sign and range dash as ASCII."""
    return text.replace(outcome.X, "x").replace(outcome.DASH, "-")


def test_the_whole_process_paragraph_says_the_figures_and_whether_the_bound_holds() -> None:
    text = plain(outcome.cpu_paragraph(cpu_results()))
    assert "**0.19x** the read-everything floor over 32 rounds of 2 s (64 s" in text
    assert "the rounds' median 0.18x, 0.17-0.20" in text and "beside it 0.13x (median 0.12x)" in text
    assert "bound 0.3x on the fast path's mean and median: **met**" in text
    assert "load average 3.9 on 2 CPUs" in text and "commit abc1234" in text
    assert "**not met**" in plain(outcome.cpu_paragraph(cpu_results(fast_mean=0.31)))
    short = plain(outcome.cpu_paragraph(cpu_results(fast_mean=0.31, rounds=7)))  # under a minute: the median alone
    assert "fast path's median (the mean is bound over a minute or more): **met**" in short


def test_the_readme_whole_process_paragraph_is_made_from_its_results(tmp_path: Path) -> None:
    """The README's whole-process CPU paragraph is what report.py makes of cpu_results.json."""
    data = json.loads((ROOT / "benchmarks/outcome/cpu_results.json").read_text(encoding="utf-8"))
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert outcome.cpu_paragraph(data) in text
    readme = tmp_path / "README.md"
    edited = outcome.cpu_paragraph({**data, "fast": {**data["fast"], "mean_ratio": 0.01}})  # edited by hand
    readme.write_text(text.replace(outcome.cpu_paragraph(data), edited), encoding="utf-8")
    assert outcome.main(["--check", str(readme)]) == 1
    assert outcome.main(["--readme", str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == text
