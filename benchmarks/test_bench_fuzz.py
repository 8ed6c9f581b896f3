"""The stat parser's fuzz target, run long:

    QOSMANAGER_FUZZ_SECONDS=600 pytest benchmarks/test_bench_fuzz.py -s

The test suite runs the same target for a few thousand inputs (``tests/test_fuzz_stat_reader.py``);
this runs it for the given time, without an input bound, and prints what it reached.  Skipped unless
asked for, so the quick benchmark pass stays quick.
"""

from __future__ import annotations

import os

import pytest

SECONDS = int(os.environ.get("QOSMANAGER_FUZZ_SECONDS", "0") or 0)

pytestmark = pytest.mark.skipif(SECONDS <= 0, reason="a long fuzz run: set QOSMANAGER_FUZZ_SECONDS to run it")


def test_fuzz_stat_reader_long(tmp_path) -> None:
    pytest.importorskip("atheris", reason="atheris is not installed (pip install '.[fuzz]')")
    pytest.importorskip("qosmanager._native.reader")
    import fuzzrun

    r = fuzzrun.run(str(tmp_path), seconds=SECONDS, timeout=SECONDS + 120)
    print(f"\nfuzz stat_reader: {r.runs} inputs in {r.seconds} s ({r.runs / max(r.seconds, 1):.0f}/s), "
          f"coverage {r.coverage}")
    assert r.returncode == 0, f"the fuzz target failed; its input is in the artifact named below\n{r.tail()}"
    assert r.runs > 0, r.tail()
