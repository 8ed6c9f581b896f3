"""Shared pieces of the collector benchmarks: the four variants over one set of cgroups.

(a) ``native``    -- the collector's readers (``StatReader.read``: pread + parse + deltas, in C)
(b) ``reference`` -- the plain-Python twin of the same readers
(c) ``naive``     -- what a straightforward agent does: per file open, read, split, close,
                     a dict per cgroup, deltas in Python; the same files as the readers (a BE
                     cgroup's CPU list too, counted)
(d) ``floor``     -- the native readers' ``pread_only``: the same descriptors, no parsing
"""

from __future__ import annotations

import time
from collections.abc import Callable

from qosmanager._native import pure_reader
from qosmanager.metrics.collector import Collector

V1_MEM = ("total_inactive_anon", "total_active_anon", "total_unevictable", "total_inactive_file",
          "total_active_file")
V2_MEM = ("inactive_anon", "active_anon", "unevictable", "inactive_file", "active_file")


def tracked_files(col: Collector) -> list[dict[str, str | None]]:
    out = []
    for tp in col.tracked_pods().values():
        out.append(col.files(tp.cg))
        out.extend(col.files(tr) for tr in tp.containers.values())
    return out


def reference_readers(col: Collector) -> list[pure_reader.StatReader]:
    readers = []
    for src in (col.pod_reader, col.ctr_reader):
        r = pure_reader.StatReader(src.capacity, col.version)
        readers.append(r)
    for tp in col.tracked_pods().values():
        readers[0].open(tp.cg.col, **col.files(tp.cg))
        for tr in tp.containers.values():
            readers[1].open(tr.col, **col.files(tr))
    return readers


def naive_collector(files: list[dict[str, str | None]], version: int) -> Callable[[], int]:
    """Per file: open, read, split, close; keys into a dict; deltas against the previous dict."""
    mem_keys = V1_MEM if version == 1 else V2_MEM
    prev: dict[int, tuple[int, int, int, int]] = {}
    results: dict[int, tuple[float, float, int, int]] = {}

    def kv(path: str) -> dict[str, int]:
        with open(path) as f:
            text = f.read()
        out = {}
        for line in text.split("\n"):
            parts = line.split()
            if len(parts) >= 2:
                out[parts[0]] = int(parts[1])
        return out

    def cpus(path: str) -> int:
        with open(path) as f:
            text = f.read().strip()
        n = 0
        for part in text.split(",") if text else ():
            lo, _, hi = part.partition("-")
            n += int(hi or lo) - int(lo) + 1
        return n

    def run() -> int:
        for i, fs in enumerate(files):
            t = time.monotonic_ns()
            if version == 1:
                with open(fs["usage"]) as f:  # type: ignore[arg-type]
                    usage = int(f.read().split()[0])
                cpu = kv(fs["cpu_stat"])  # type: ignore[arg-type]
            else:
                cpu = kv(fs["cpu_stat"])  # type: ignore[arg-type]
                usage = cpu["usage_usec"] * 1000
            periods, throttled = cpu.get("nr_periods", 0), cpu.get("nr_throttled", 0)
            mem = kv(fs["memory_stat"]) if fs.get("memory_stat") else {}  # type: ignore[arg-type]
            memory = sum(mem.get(k, 0) for k in mem_keys[:3])
            ncpus = cpus(fs["cpuset"]) if fs.get("cpuset") else -1  # type: ignore[arg-type]
            p = prev.get(i)
            cores = ratio = float("nan")
            if p is not None and usage >= p[0] and t > p[1]:
                cores = (usage - p[0]) / (t - p[1])
                dp = periods - p[2]
                ratio = (throttled - p[3]) / dp if dp > 0 else 0.0
            prev[i] = (usage, t, periods, throttled)
            results[i] = (cores, ratio, memory, ncpus)
        return len(results)

    return run
