"""The native stat reader reads without stamping access times.

cgroupfs keeps no access times, but a tree on tmpfs (the fake host's, the collector benchmarks')
does: every read there updated the file's atime (a tenth of the reader's kernel time on a tmpfs
tree).  The reader opens its files with O_NOATIME, and plainly where the kernel refuses that flag
(a file the process neither owns nor may override: EPERM).
"""

from __future__ import annotations

import os

import pytest

native = pytest.importorskip("qosmanager._native.reader")

OLD = 1_000_000_000  # 2001: an atime older than the file's mtime, which relatime would update


def stat_files(d: str) -> dict[str, str]:
    files = {"usage": "cpuacct.usage", "cpu_stat": "cpu.stat", "memory_stat": "memory.stat"}
    body = {"usage": "12345\n", "cpu_stat": "nr_periods 3\nnr_throttled 1\nthrottled_time 7\n",
            "memory_stat": "total_inactive_anon 1\ntotal_active_anon 2\ntotal_unevictable 3\n"
                           "total_inactive_file 4\ntotal_active_file 5\n"}
    out = {}
    for k, name in files.items():
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(body[k])
        os.utime(path, ns=(OLD, os.stat(path).st_mtime_ns))
        out[k] = path
    return out


@pytest.mark.parametrize("reopen", [False, True], ids=["kept", "reopened"])
def test_reads_leave_the_access_time_alone(tmp_path: object, reopen: bool) -> None:
    paths = stat_files(str(tmp_path))
    r = native.StatReader(4, 1)
    if reopen:
        r.max_fds = 0  # no descriptor budget: each read opens, reads and closes the file
    assert r.open(0, **paths) == 0
    assert r.is_reopen(0, native.FILE_USAGE) == reopen
    for _ in range(3):
        assert r.read() == 1
    assert r.usage_ns[0] == 12345 and r.memory_usage[0] == 6
    for path in paths.values():
        assert os.stat(path).st_atime_ns == OLD, path
    for slot in range(r.high_water):
        r.close(slot)
