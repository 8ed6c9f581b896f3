"""A short run of the native stat parser's coverage-guided fuzz target (atheris), in every test run.

``fuzz/stat_reader_fuzz.py`` writes each input as every stat file a v1 and a v2 reader slot
tracks and checks that the native reader and its plain-Python twin agree on every array, twice
(rates too), with every value in range.  Here it runs a bounded number of inputs from the seed
corpus of real files; ``benchmarks/test_bench_fuzz.py`` runs it longer when asked.
"""

from __future__ import annotations

import pytest

pytest.importorskip("atheris", reason="atheris is not installed (the 'test' extra installs it on x86_64 "
                                      "with Python 3.11-3.13, where it has wheels)")
pytest.importorskip("qosmanager._native.reader")

import fuzzrun


def test_fuzz_target_runs_clean(tmp_path) -> None:
    r = fuzzrun.run(str(tmp_path), runs=2500, seconds=60)
    assert r.returncode == 0, f"the fuzz target failed; its input is in the artifact named below\n{r.tail()}"
    assert r.runs >= 500, r.tail()  # it did run inputs, not only the seeds (a 60 s bound on a loaded box)
    assert r.coverage > 0, r.tail()


def test_fuzz_target_reports_a_divergence(tmp_path, monkeypatch) -> None:
    """The target is not blind: a twin that counts one CPU too many is caught on the seed corpus."""
    sitecustom = tmp_path / "site"
    sitecustom.mkdir()
    (sitecustom / "sitecustomize.py").write_text(
        "from qosmanager._native import pure_reader as p\n"
        "_orig = p._parse_cpuset_count\n"
        "p._parse_cpuset_count = lambda data: _orig(data) + (_orig(data) > 0)\n")
    monkeypatch.setenv("PYTHONPATH", str(sitecustom))
    work = tmp_path / "work"
    work.mkdir()
    r = fuzzrun.run(str(work), runs=50, seconds=60)
    assert r.returncode != 0 and "cpuset_count" in r.output, r.tail()
    assert list(work.glob("crash-*")), r.tail()
