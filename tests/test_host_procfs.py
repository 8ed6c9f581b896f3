"""procfs parsers on realistic kernel text, and on bad input (infra §2.7, §2.8)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from qosmanager._native import pure_reader
from qosmanager.host.procfs import (
    PSI,
    ProcFS,
    PSILine,
    clock_ticks,
    memory_total_bytes,
    memory_usage_bytes,
    memory_usage_with_cache_bytes,
    parse_cpuinfo,
    parse_meminfo,
    parse_pid_stat,
    parse_proc_stat,
    parse_psi,
)
from qosmanager.host.roots import HostRoots

# Field values are distinct powers of two, so any wrongly included or missed field shows.
# user nice system idle iowait irq softirq steal guest guest_nice
PROC_STAT = """\
cpu  1 2 4 1024 2048 8 16 4096 8192 16384
cpu0 100 0 200 5000 7 0 3 11 13 17
cpu1 1000 10 2000 6000 70 5 30 110 130 170
cpu3 1 1 1 1 1 1 1 1 1 1
intr 166153 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 15
ctxt 228157
btime 1796237361
processes 5270
procs_running 1
procs_blocked 0
softirq 147274 0 24471 3 4079 51506 0 2 40389 0 26824
"""


def test_proc_stat_busy_fields() -> None:
    total, per_cpu = parse_proc_stat(PROC_STAT)
    assert total == 1 + 2 + 4 + 8 + 16
    assert per_cpu == {0: 100 + 200 + 3, 1: 1000 + 10 + 2000 + 5 + 30, 3: 5}


def test_proc_stat_old_kernel_eight_fields() -> None:
    # 2.6.11-era kernels: user nice system idle iowait irq softirq (8 fields with the name)
    total, per_cpu = parse_proc_stat("cpu  1 2 4 8 16 32 64\ncpu0 1 2 4 8 16 32 64\n")
    assert total == 1 + 2 + 4 + 32 + 64
    assert per_cpu == {0: 103}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no 'cpu ' total"),
        ("intr 1 2 3\nctxt 5\n", "no 'cpu ' total"),
        ("cpu0 1 2 3 4 5 6 7 8\n", "no 'cpu ' total"),
        ("cpu  1 2 3 4 5 6\n", "too few fields"),
        ("cpu  1 2 3 4 5 6 7 8\ncpu0 1 2 3\n", "too few fields"),
        ("cpu  1 2 x 4 5 6 7 8\n", "not a tick count"),
        ("cpu  1 2 -3 4 5 6 7 8\n", "not a tick count"),
        ("cpu  1 2 3 4 5 6 7 8\ncpuX 1 2 3 4 5 6 7 8\n", "bad cpu line"),
    ],
)
def test_proc_stat_bad(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_proc_stat(text)


def test_proc_stat_without_per_cpu_lines() -> None:
    assert parse_proc_stat("cpu  1 2 4 8 16 32 64 128\nintr 1\n") == (1 + 2 + 4 + 32 + 64, {})


@pytest.mark.parametrize("impl", ["pure", "native"])
def test_proc_stat_matches_node_reader(tmp_path: Path, impl: str) -> None:
    """The parser is the reference of the collector's NodeReader: same numbers from the same file."""
    if impl == "native":
        mod = pytest.importorskip("qosmanager._native.reader")
    else:
        mod = pure_reader
    (tmp_path / "stat").write_text(PROC_STAT)
    (tmp_path / "meminfo").write_text(MEMINFO)
    reader = mod.NodeReader(str(tmp_path / "stat"), str(tmp_path / "meminfo"), 8)
    total, per_cpu = parse_proc_stat(PROC_STAT)
    assert reader.read_stat() == total
    expected = np.full(8, -1, dtype=np.int64)
    for cpu, busy in per_cpu.items():
        expected[cpu] = busy
    np.testing.assert_array_equal(reader.cpu_ticks, expected)
    mem = parse_meminfo(MEMINFO)
    assert reader.read_meminfo() == (mem["MemTotal"], mem["MemFree"], mem["MemAvailable"])


MEMINFO = """\
MemTotal:       24683568 kB
MemFree:        24338696 kB
MemAvailable:   24358352 kB
Buffers:            2564 kB
Cached:           218004 kB
SwapCached:            0 kB
Active:           120036 kB
Inactive:          97560 kB
Active(anon):       9528 kB
Inactive(anon):     5008 kB
Active(file):     110508 kB
Inactive(file):    92552 kB
Unevictable:       12632 kB
SReclaimable:      43252 kB
VmallocTotal:   34359738367 kB
HugePages_Total:       0
HugePages_Free:        3
Hugepagesize:       2048 kB
Bogus:          notanumber kB
Empty:
no colon line
"""


def test_meminfo() -> None:
    m = parse_meminfo(MEMINFO)
    assert m["MemTotal"] == 24683568
    assert m["Active(file)"] == 110508
    assert m["Inactive(anon)"] == 5008
    assert m["VmallocTotal"] == 34359738367
    assert m["HugePages_Free"] == 3
    assert m["Bogus"] == 0 and m["Empty"] == 0
    assert "no colon line" not in m
    assert memory_usage_bytes(m) == (24683568 - 24358352) * 1024
    assert memory_usage_with_cache_bytes(m) == (24683568 - 24338696) * 1024
    assert memory_total_bytes(m) == 24683568 * 1024
    assert memory_usage_bytes({}) == 0
    # a corrupt file never reports negative usage
    assert memory_usage_bytes({"MemTotal": 1, "MemAvailable": 5}) == 0


# -- PSI ---------------------------------------------------------------------------
def test_psi_full() -> None:
    p = parse_psi("some avg10=1.50 avg60=0.07 avg300=0.09 total=3216701\n"
                  "full avg10=0.25 avg60=2.00 avg300=3.50 total=12\n")
    assert p == PSI(some=PSILine(1.5, 0.07, 0.09, 3216701), full=PSILine(0.25, 2.0, 3.5, 12),
                    full_supported=True)


def test_psi_without_full() -> None:
    p = parse_psi("some avg10=0.00 avg60=0.38 avg300=0.42 total=3706352\n")
    assert p.full_supported is False
    assert p.full == PSILine(0.0, 0.0, 0.0, 0)
    assert p.some.total == 3706352 and p.some.avg300 == 0.42


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no 'some'"),
        ("full avg10=0 avg60=0 avg300=0 total=0\n", "no 'some'"),
        ("some avg10=0 avg60=0 avg300=0 total=0\npartial avg10=0\n", "unexpected line prefix"),
        ("some avg10=0 avg60=0 total=0\n", "lacks 'avg300'"),
        ("some avg10=x avg60=0 avg300=0 total=0\n", "not a number"),
        ("some avg10=0 avg60=0 avg300=0 total=1.5\n", "not a number"),
        ("some avg10 avg60=0 avg300=0 total=0\n", "key=value"),
    ],
)
def test_psi_bad(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_psi(text)


# -- cpuinfo / pid stat ------------------------------------------------------------
CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz
flags\t\t: fpu vme de pse tsc cat_l3 cdp_l3 mba cqm_llc cqm_occup_llc
bogomips\t: 4999.99

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz
flags\t\t: fpu vme de pse tsc cat_l3 cdp_l3 mba cqm_llc cqm_occup_llc

"""


def test_cpuinfo() -> None:
    info = parse_cpuinfo(CPUINFO)
    assert info.vendor_id == "GenuineIntel"
    assert info.model_name == "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"
    assert info.flags == frozenset({"fpu", "vme", "de", "pse", "tsc", "cat_l3", "cdp_l3", "mba", "cqm_llc",
                                    "cqm_occup_llc"})
    assert info.processors == 2
    empty = parse_cpuinfo("")
    assert (empty.vendor_id, empty.model_name, empty.flags, empty.processors) == ("", "", frozenset(), 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1234 (bash) S 1 1234 1234 34816 1 4194560 0\n", (1234, "bash", "S", 1, 1234)),
        ("42 (my proc) R 7 40 40 0 -1\n", (42, "my proc", "R", 7, 40)),
        ("43 (a) b (c)) S 9 43 43\n", (43, "a) b (c)", "S", 9, 43)),  # koordlet split on the first ')'
        ("44 () Z 1 0 0\n", (44, "", "Z", 1, 0)),
    ],
)
def test_pid_stat(text: str, expected: tuple) -> None:
    assert parse_pid_stat(text) == expected


@pytest.mark.parametrize("text", ["", "1234 bash S 1 2", "x (bash) S 1 2", "5 (bash) S", "5 (bash) S 1 x"])
def test_pid_stat_bad(text: str) -> None:
    with pytest.raises(ValueError, match="stat"):
        parse_pid_stat(text)


def test_clock_ticks() -> None:
    assert clock_ticks() == os.sysconf("SC_CLK_TCK") > 0


# -- ProcFS reader ---------------------------------------------------------------------
def test_procfs_reader(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(PROC_STAT)
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    (tmp_path / "sys" / "vm").mkdir(parents=True)
    (tmp_path / "sys" / "vm" / "min_free_kbytes").write_text("67584\n")
    (tmp_path / "sys" / "vm" / "watermark_scale_factor").write_text("ten\n")
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n")
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "stat").write_text("77 (sh) S 1 70 70 0\n")
    proc = ProcFS(HostRoots(proc=str(tmp_path)))
    assert proc.stat() == parse_proc_stat(PROC_STAT)
    assert proc.meminfo()["MemFree"] == 24338696
    assert proc.cpuinfo().vendor_id == "GenuineIntel"
    assert proc.read_int("sys/vm/min_free_kbytes") == 67584
    with pytest.raises(ValueError, match="watermark_scale_factor"):
        proc.read_int("sys/vm/watermark_scale_factor")
    psi = proc.pressure("cpu")
    assert psi is not None and psi.some.total == 5 and not psi.full_supported
    assert proc.pressure("memory") is None
    with pytest.raises(ValueError, match="PSI resource"):
        proc.pressure("disk")
    assert proc.pid_stat(77) == (77, "sh", "S", 1, 70)
    with pytest.raises(FileNotFoundError):
        proc.read("nope")


def test_procfs_pressure_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = ProcFS(HostRoots(proc=str(tmp_path)))

    def unsupported(rel: str) -> str:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(proc, "read", unsupported)
    assert proc.pressure("io") is None


def test_real_proc_smoke() -> None:
    proc = ProcFS(HostRoots())
    total, per_cpu = proc.stat()
    assert total >= 0 and per_cpu and all(v >= 0 for v in per_cpu.values())
    assert set(per_cpu) <= set(range(os.cpu_count() or 1))
    m = proc.meminfo()
    assert 0 < memory_usage_bytes(m) <= memory_total_bytes(m)
    assert proc.cpuinfo().processors >= 1
