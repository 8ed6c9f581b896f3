"""Coverage-guided fuzz target: the native stat parser against its plain-Python twin.

Each input is the content of a cgroup stat file.  It is written, as it is, to every file one
slot of a reader tracks -- v1 ``cpuacct.usage``, ``cpu.stat``, ``memory.stat``, ``cpuset.cpus``
and v2 ``cpu.stat``, ``memory.stat``, ``cpuset.cpus.effective`` -- and read by the native
``StatReader`` (``ext/reader.pyx``) and by ``pure_reader.StatReader``, twice, so that rates are
computed too.  An input holding two NUL bytes in a row is split there: the first part is read on
the first tick, the rest on the second (a counter that moved, or a file that became garbled).
Every output array of both readers must be identical after each tick, and no value may be out of
its range (a negative or infinite rate or size, a CPU count below -1).

Coverage comes from the twin's Python code (instrumented by atheris), whose branches mirror the
native parser's; the native reader is checked against it on every input.  The seed corpus in
``corpus/stat_reader`` holds real files of cgroup v1 (this repository's CI hosts) and v2 (the test
guest's 6.12 kernel).

    python fuzz/stat_reader_fuzz.py -runs=20000 CORPUS_DIR          # bounded run (the CI test)
    python fuzz/stat_reader_fuzz.py -max_total_time=600 CORPUS_DIR  # longer search
"""

from __future__ import annotations

import os
import sys

import atheris

with atheris.instrument_imports(include=["qosmanager._native.pure_reader"]):
    from qosmanager._native import pure_reader

import numpy as np

from qosmanager._native import reader as native

ARRAYS = ("state", "errors", "died", "sample_ns", "usage_ns", "nr_periods", "nr_throttled", "throttled_ns",
          "mem_raw", "cpu_cores", "throttled_ratio", "memory_usage", "memory_usage_with_cache",
          "cpuset_count", "missing", "vanished")
FILES = {1: ("usage", "cpu_stat", "memory_stat", "cpuset"), 2: ("cpu_stat", "memory_stat", "cpuset")}
# One in-memory file stands for all of them (every file gets the same bytes): the readers open it by
# its /proc/self/fd path, so a run leaves nothing behind and writes nothing to disk.
MEMFD = os.memfd_create("qosm-fuzz-stat")
PATH = f"/proc/self/fd/{MEMFD}"
READERS = {v: (native.StatReader(1, v), pure_reader.StatReader(1, v)) for v in (1, 2)}


def write_all(data: bytes) -> None:
    os.ftruncate(MEMFD, 0)
    os.pwrite(MEMFD, data, 0)


def check(version: int) -> None:
    a, b = READERS[version]
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        if not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            raise AssertionError(f"v{version} {name}: native {x!r} != pure {y!r}")
    for name in ("cpu_cores", "throttled_ratio", "memory_usage", "memory_usage_with_cache"):
        v = float(getattr(b, name)[0])
        if not (np.isnan(v) or 0.0 <= v < float("inf")):
            raise AssertionError(f"v{version} {name} out of range: {v}")
    if b.cpuset_count[0] < -1 or (b.errors[0] == 0) != (a.errors[0] == 0):
        raise AssertionError(f"v{version}: cpuset_count {b.cpuset_count[0]}, errors {b.errors[0]}")


def test_one_input(data: bytes) -> None:
    first, sep, second = data.partition(b"\x00\x00")
    if not sep:
        second = first
    write_all(first)
    for version, (a, b) in READERS.items():
        for r in (a, b):
            if r.open(0, **dict.fromkeys(FILES[version], PATH)) != 0:
                raise AssertionError(f"v{version}: open failed")
            r.read(1_000_000_000)
        check(version)
    write_all(second)
    for version, (a, b) in READERS.items():
        for r in (a, b):
            r.read(1_500_000_000)
        check(version)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
