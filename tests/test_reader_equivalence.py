"""The native stat reader and its plain-Python twin agree, number for number.

Both readers get the same files (valid, garbled, vanishing) and the same clock;
every output array must be identical after every tick.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qosmanager._native import pure_reader

native = pytest.importorskip("qosmanager._native.reader")

ARRAYS = [
    "state", "errors", "died", "sample_ns", "usage_ns", "nr_periods", "nr_throttled", "throttled_ns",
    "mem_raw", "cpu_cores", "throttled_ratio", "memory_usage", "memory_usage_with_cache", "cpuset_count",
    "missing", "vanished",
]

V1_MEM_KEYS = [
    "cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback", "pgpgin", "pgpgout",
    "pgfault", "pgmajfault", "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
    "hierarchical_memory_limit", "total_cache", "total_rss", "total_rss_huge", "total_shmem",
    "total_mapped_file", "total_dirty", "total_writeback", "total_pgpgin", "total_pgpgout",
    "total_pgfault", "total_pgmajfault", "total_inactive_anon", "total_active_anon",
    "total_inactive_file", "total_active_file", "total_unevictable",
]
V2_MEM_KEYS = [
    "anon", "file", "kernel", "kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc",
    "shmem", "file_mapped", "file_dirty", "file_writeback", "swapcached", "anon_thp", "inactive_anon",
    "active_anon", "inactive_file", "active_file", "unevictable", "slab_reclaimable", "slab_unreclaimable",
    "slab", "workingset_refault_anon", "pgfault", "pgmajfault",
]


def assert_same(a, b) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        np.testing.assert_array_equal(x, y, err_msg=name)


class Tree:
    """A handful of cgroups whose stat files a test rewrites between ticks."""

    def __init__(self, root: str, version: int, n: int) -> None:
        self.root, self.version, self.n = root, version, n
        for i in range(n):
            os.makedirs(self.dir(i), exist_ok=True)

    def dir(self, i: int) -> str:
        return os.path.join(self.root, f"cg{i}")

    def paths(self, i: int) -> dict[str, str]:
        d = self.dir(i)
        p = {"cpu_stat": f"{d}/cpu.stat", "memory_stat": f"{d}/memory.stat", "cpuset": f"{d}/cpuset.cpus"}
        if self.version == 1:
            p["usage"] = f"{d}/cpuacct.usage"
        return p

    def write(self, i: int, name: str, text: str) -> None:
        with open(os.path.join(self.dir(i), name), "w") as f:
            f.write(text)

    def write_valid(self, i: int, rng: random.Random, usage_ns: int, periods: int, throttled: int) -> None:
        mem = {k: rng.randrange(0, 1 << 40) for k in (V1_MEM_KEYS if self.version == 1 else V2_MEM_KEYS)}
        self.write(i, "memory.stat", "".join(f"{k} {v}\n" for k, v in mem.items()))
        lo = rng.randrange(0, 8)
        self.write(i, "cpuset.cpus", f"{lo}-{lo + rng.randrange(0, 8)},{lo + 20}\n")
        if self.version == 1:
            self.write(i, "cpuacct.usage", f"{usage_ns}\n")
            self.write(i, "cpu.stat", f"nr_periods {periods}\nnr_throttled {throttled}\n"
                                      f"throttled_time {throttled * 1000}\nnr_bursts 0\nburst_time 0\n")
        else:
            self.write(i, "cpu.stat", f"usage_usec {usage_ns // 1000}\nuser_usec 1\nsystem_usec 2\n"
                                      f"nr_periods {periods}\nnr_throttled {throttled}\n"
                                      f"throttled_usec {throttled}\nnr_bursts 0\nburst_usec 0\n")


GARBAGE = ["", "\n", "abc\n", "12x\n", "-\n", "99999999999999999999999\n", "1 2\n", " 7\n", "nr_periods\n",
           "nr_periods x\nnr_throttled 1\nthrottled_time 1\n", "total_active_anon -5\n", "0-\n", "3-1\n",
           "1,,2\n", "usage_usec 10\n", "inactive_anon 1\nactive_anon\n"]


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_random_trees_agree(tmp_path_factory, version: int, seed: int) -> None:
    rng = random.Random(seed)
    tree = Tree(str(tmp_path_factory.mktemp("t")), version, n=6)
    usage = [rng.randrange(0, 1 << 50) for _ in range(tree.n)]
    periods = [rng.randrange(0, 1 << 20) for _ in range(tree.n)]
    thr = [rng.randrange(0, p + 1) for p in periods]
    for i in range(tree.n):
        tree.write_valid(i, rng, usage[i], periods[i], thr[i])
    a = native.StatReader(8, version)
    b = pure_reader.StatReader(8, version)
    for i in range(tree.n):
        assert a.open(i, **tree.paths(i)) == b.open(i, **tree.paths(i)) == 0
    t = 1_000_000_000
    for _tick in range(6):
        assert a.read(t) == b.read(t)
        assert_same(a, b)
        t += rng.randrange(1, 3_000_000_000)
        for i in range(tree.n):
            if True:
                roll = rng.random()
                usage[i] += rng.randrange(0, 4_000_000_000)
                periods[i] += rng.randrange(0, 20)
                thr[i] += rng.randrange(0, 5)
                if roll < 0.1:
                    usage[i] = rng.randrange(0, 1000)  # counter reset
                if os.path.isdir(tree.dir(i)):
                    tree.write_valid(i, rng, usage[i], periods[i], min(thr[i], periods[i]))
                    if roll > 0.8:
                        name = rng.choice(["memory.stat", "cpu.stat", "cpuset.cpus"]
                                          + (["cpuacct.usage"] if version == 1 else []))
                        tree.write(i, name, rng.choice(GARBAGE))
                    elif 0.75 < roll <= 0.8:
                        for f in os.listdir(tree.dir(i)):
                            os.unlink(os.path.join(tree.dir(i), f))
                        os.rmdir(tree.dir(i))
    a.close(0)
    b.close(0)
    assert_same(a, b)


def test_first_sample_skipped_then_cores(tmp_path) -> None:
    for impl in (native, pure_reader):
        tree = Tree(str(tmp_path / impl.__name__.rsplit(".", 1)[-1]), 1, 1)
        rng = random.Random(1)
        tree.write_valid(0, rng, 10_000_000_000, 100, 10)
        r = impl.StatReader(2, 1)
        assert r.open(0, **tree.paths(0)) == 0
        r.read(5_000_000_000)
        assert np.isnan(r.cpu_cores[0]) and np.isnan(r.throttled_ratio[0])
        tree.write_valid(0, rng, 12_500_000_000, 150, 35)
        r.read(6_000_000_000)  # 2.5 s of CPU in 1 s of wall time
        assert r.cpu_cores[0] == pytest.approx(2.5)
        assert r.throttled_ratio[0] == pytest.approx(25 / 50)
        # no period elapsed: ratio 0, not NaN (koordlet's rule)
        tree.write_valid(0, rng, 12_500_000_000, 150, 35)
        r.read(7_000_000_000)
        assert r.cpu_cores[0] == 0.0 and r.throttled_ratio[0] == 0.0
        # a stale previous sample counts as a first sample
        tree.write_valid(0, rng, 13_500_000_000, 160, 35)
        r.read(7_000_000_000 + 21_000_000_000)
        assert np.isnan(r.cpu_cores[0])


def test_memory_usage_definitions(tmp_path) -> None:
    for version, keys in ((1, V1_MEM_KEYS), (2, V2_MEM_KEYS)):
        for impl in (native, pure_reader):
            d = tmp_path / f"{impl.__name__.rsplit('.', 1)[-1]}{version}"
            d.mkdir()
            vals = {k: 1000 * (n + 1) for n, k in enumerate(keys)}
            (d / "memory.stat").write_text("".join(f"{k} {v}\n" for k, v in vals.items()))
            r = impl.StatReader(1, version)
            assert r.open(0, memory_stat=str(d / "memory.stat")) == 0
            r.read(0)
            p = "total_" if version == 1 else ""
            anon = vals[p + "inactive_anon"] + vals[p + "active_anon"] + vals[p + "unevictable"]
            assert r.memory_usage[0] == anon
            assert r.memory_usage_with_cache[0] == anon + vals[p + "inactive_file"] + vals[p + "active_file"]


def test_vanished_cgroup_marks_only_its_slot(tmp_path) -> None:
    """A regular file stays readable through an open descriptor after unlink (cgroupfs answers
    ENODEV instead: see the kernel test), so the fake tree uses reopen mode to see ENOENT."""
    for impl in (native, pure_reader):
        tree = Tree(str(tmp_path / impl.__name__.rsplit(".", 1)[-1]), 2, 3)
        rng = random.Random(2)
        for i in range(3):
            tree.write_valid(i, rng, 1_000_000, 1, 0)
        r = impl.StatReader(4, 2, max_fds=3)
        for i in range(3):
            assert r.open(i, **tree.paths(i)) == 0
        assert r.read(0) == 3
        for name in os.listdir(tree.dir(2)):  # the whole cgroup goes
            os.unlink(os.path.join(tree.dir(2), name))
        assert r.read(1_000_000_000) == 2
        assert list(r.state[:3]) == [1, 1, 2] and list(r.died[:3]) == [0, 0, 1]
        assert r.errors[2] == 2  # ENOENT
        assert np.isnan(r.cpu_cores[2]) and np.isnan(r.memory_usage[2]) and r.cpuset_count[2] == -1
        r.read(2_000_000_000)
        assert r.died[2] == 0 and r.state[2] == 2
        with pytest.raises(ValueError):
            r.open_file(2, 1, tree.paths(0)["cpu_stat"])  # a dead slot is reopened whole
        # the slot is reused by a new cgroup
        r.close(2)
        assert r.open(2, **tree.paths(0)) == 0 and r.state[2] == 1


@pytest.mark.parametrize("version", [1, 2])
def test_a_vanished_file_leaves_the_slot_its_other_files(tmp_path, version: int) -> None:
    """cpu.stat goes (v2: the CPU numbers) or memory.stat goes: the other file's numbers stay."""
    results = []
    for impl in (native, pure_reader):
        tree = Tree(str(tmp_path / f"{impl.__name__.rsplit('.', 1)[-1]}"), version, 2)
        rng = random.Random(5)
        usage = 1_000_000_000
        for i in range(2):
            tree.write_valid(i, rng, usage, 10, 1)
        r = impl.StatReader(2, version, max_fds=0)  # reopen mode: an unlinked file answers ENOENT
        for i in range(2):
            assert r.open(i, **tree.paths(i)) == 0
        r.read(0)
        gone = "cpu.stat" if version == 2 else "memory.stat"
        bit = 1 << (1 if version == 2 else 2)
        os.unlink(os.path.join(tree.dir(0), gone))
        usage += 500_000_000
        for i in range(2):
            tree.write_valid(i, rng, usage, 20, 2)
        os.unlink(os.path.join(tree.dir(0), gone))
        assert r.read(1_000_000_000) == 1
        assert r.state[0] == 1 and r.died[0] == 0
        assert r.missing[0] == bit and r.vanished[0] == bit and r.errors[0] == 2
        if version == 2:
            assert np.isnan(r.cpu_cores[0]) and r.memory_usage[0] > 0
        else:
            assert r.cpu_cores[0] == pytest.approx(0.5) and np.isnan(r.memory_usage[0])
        assert r.cpu_cores[1] == pytest.approx(0.5) and r.memory_usage[1] > 0 and r.missing[1] == 0
        # the next read: still missing, no longer an error or a fresh vanish
        usage += 500_000_000
        tree.write_valid(1, rng, usage, 30, 3)
        assert r.read(2_000_000_000) == 2
        assert r.missing[0] == bit and r.vanished[0] == 0 and r.errors[0] == 0
        # it comes back: tracked again, its counters start afresh (it may be a new cgroup's)
        tree.write_valid(0, rng, usage, 30, 3)
        assert r.open_file(0, 1 if version == 2 else 2, tree.paths(0)[gone.replace(".", "_")]) == 0
        assert r.missing[0] == 0
        r.read(3_000_000_000)
        # v2: the CPU file came back, first sample; v1: CPU kept its history (2.0 s -> 2.5 s of usage)
        assert np.isnan(r.cpu_cores[0]) if version == 2 else r.cpu_cores[0] == pytest.approx(0.5)
        assert r.memory_usage[0] > 0
        usage += 250_000_000
        tree.write_valid(0, rng, usage, 40, 4)
        r.read(4_000_000_000)
        assert r.cpu_cores[0] == pytest.approx(0.25)
        results.append(r)
    assert_same(*results)


@pytest.mark.parametrize("version", [1, 2])
def test_open_with_some_files_missing(tmp_path, version: int) -> None:
    """A cgroup absent in one hierarchy (no memory cgroup) still opens and yields its CPU usage."""
    for impl in (native, pure_reader):
        tree = Tree(str(tmp_path / f"{impl.__name__.rsplit('.', 1)[-1]}"), version, 1)
        rng = random.Random(6)
        tree.write_valid(0, rng, 1_000_000_000, 10, 1)
        paths = tree.paths(0)
        paths["memory_stat"] = str(tmp_path / "no-memory-hierarchy" / "memory.stat")
        r = impl.StatReader(2, version)
        assert r.open(0, **paths) == 0
        assert r.state[0] == 1 and r.missing[0] == 1 << 2 and r.open_fds == len(paths) - 1
        r.read(0)
        tree.write_valid(0, rng, 3_000_000_000, 20, 2)
        assert r.read(1_000_000_000) == 1  # a file that was never there is no error
        assert r.cpu_cores[0] == pytest.approx(2.0) and np.isnan(r.memory_usage[0])
        assert r.open_file(0, 2, paths["memory_stat"]) == 2 and r.missing[0] == 1 << 2
        # nothing of it exists: the slot stays free and the first errno is the answer
        r.close(0)
        assert r.open(1, memory_stat=paths["memory_stat"], cpu_stat=paths["memory_stat"]) == 2
        assert r.state[1] == 0 and r.high_water == 0 and r.open_fds == 0


class HierTree:
    """Each cgroup in one dir per hierarchy (v1: cpuacct, cpu, memory, cpuset): a hierarchy can lack it."""

    FILES = {"usage": ("cpuacct", "cpuacct.usage"), "cpu_stat": ("cpu", "cpu.stat"),
             "memory_stat": ("memory", "memory.stat"), "cpuset": ("cpuset", "cpuset.cpus")}
    INDEX = {"usage": 0, "cpu_stat": 1, "memory_stat": 2, "cpuset": 3}

    def __init__(self, root: str, version: int) -> None:
        self.root, self.version = root, version
        self.kinds = [k for k in self.FILES if version == 1 or k != "usage"]

    def path(self, i: int, kind: str) -> str:
        h, name = self.FILES[kind]
        return os.path.join(self.root, h, f"cg{i}", name)

    def paths(self, i: int) -> dict[str, str]:
        return {k: self.path(i, k) for k in self.kinds}

    def exists(self, i: int, kind: str) -> bool:
        return os.path.exists(self.path(i, kind))

    def remove(self, i: int, kind: str) -> None:
        if self.exists(i, kind):
            os.unlink(self.path(i, kind))
            os.rmdir(os.path.dirname(self.path(i, kind)))

    def write(self, i: int, rng: random.Random, usage_ns: int, periods: int, throttled: int,
              create: bool = False) -> None:
        v1 = self.version == 1
        texts = {
            "usage": f"{usage_ns}\n",
            "cpu_stat": (f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {throttled * 1000}\n"
                         if v1 else f"usage_usec {usage_ns // 1000}\nnr_periods {periods}\n"
                                    f"nr_throttled {throttled}\nthrottled_usec {throttled}\n"),
            "memory_stat": "".join(f"{k} {rng.randrange(0, 1 << 40)}\n"
                                   for k in (V1_MEM_KEYS if v1 else V2_MEM_KEYS)),
            "cpuset": f"0-{rng.randrange(0, 16)}\n",
        }
        for kind in self.kinds:
            if not create and not self.exists(i, kind):
                continue
            os.makedirs(os.path.dirname(self.path(i, kind)), exist_ok=True)
            with open(self.path(i, kind), "w") as f:
                f.write(texts[kind])


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_random_missing_files_per_hierarchy_agree(tmp_path_factory, version: int, seed: int) -> None:
    """Cgroups absent from random hierarchies at open, files vanishing and coming back between
    ticks, some files in reopen mode: both readers agree on every array and every answer."""
    rng = random.Random(seed)
    tree = HierTree(str(tmp_path_factory.mktemp("h")), version)
    n = 6
    usage = [rng.randrange(0, 1 << 40) for _ in range(n)]
    periods = [rng.randrange(0, 1 << 20) for _ in range(n)]
    for i in range(n):
        tree.write(i, rng, usage[i], periods[i], 0, create=True)
        for kind in tree.kinds:
            if rng.random() < 0.3:
                tree.remove(i, kind)
    max_fds = rng.choice([-1, 0, 3, 9])
    a = native.StatReader(n, version, max_fds=max_fds)
    b = pure_reader.StatReader(n, version, max_fds=max_fds)
    for i in range(n):
        assert a.open(i, **tree.paths(i)) == b.open(i, **tree.paths(i))
        assert a.open_fds == b.open_fds
    t = 1_000_000_000
    for _tick in range(8):
        assert a.read(t) == b.read(t)
        assert_same(a, b)
        t += rng.randrange(1, 2_000_000_000)
        for i in range(n):
            usage[i] += rng.randrange(0, 2_000_000_000)
            periods[i] += rng.randrange(0, 20)
            tree.write(i, rng, usage[i], periods[i], 0)
            roll = rng.random()
            if roll < 0.25:
                tree.remove(i, rng.choice(tree.kinds))
            elif roll < 0.5:  # a hierarchy gets the cgroup (back); discovery tracks its file again
                kind = rng.choice(tree.kinds)
                tree.write(i, rng, usage[i], periods[i], 0, create=True)
                if a.state[i] == 1:
                    f = tree.INDEX[kind]
                    assert a.open_file(i, f, tree.path(i, kind)) == b.open_file(i, f, tree.path(i, kind))
                else:
                    assert a.open(i, **tree.paths(i)) == b.open(i, **tree.paths(i))
            assert a.open_fds == b.open_fds
    assert_same(a, b)


def test_open_missing_cgroup_leaves_slot_free(tmp_path) -> None:
    for impl in (native, pure_reader):
        r = impl.StatReader(2, 1)
        assert r.open(0, usage=str(tmp_path / "nope" / "cpuacct.usage")) == 2
        assert r.state[0] == 0 and r.open_fds == 0 and r.high_water == 0


def test_descriptor_budget_falls_back_to_reopen(tmp_path) -> None:
    tree = Tree(str(tmp_path), 1, 3)
    results = []
    for impl in (native, pure_reader):
        rng = random.Random(3)
        for i in range(3):
            tree.write_valid(i, rng, 5_000_000_000 * (i + 1), 10, 1)
        r = impl.StatReader(4, 1, max_fds=5)
        for i in range(3):
            assert r.open(i, **tree.paths(i)) == 0
        assert r.open_fds == 5
        assert not r.is_reopen(0, 0) and r.is_reopen(2, 2)
        r.read(0)
        for i in range(3):
            tree.write_valid(i, rng, 5_000_000_000 * (i + 1) + 1_000_000_000, 20, 2)
        r.read(1_000_000_000)
        results.append(r)
        np.testing.assert_allclose(r.cpu_cores[:3], [1.0, 1.0, 1.0])
    assert_same(*results)


def test_resize_keeps_slots(tmp_path) -> None:
    tree = Tree(str(tmp_path), 2, 2)
    for impl in (native, pure_reader):
        rng = random.Random(4)
        for i in range(2):
            tree.write_valid(i, rng, 1_000_000_000, 1, 0)
        r = impl.StatReader(1, 2)
        assert r.open(0, **tree.paths(0)) == 0
        r.read(0)
        r.resize(8)
        assert r.capacity == 8 and r.state.shape == (8,) and r.state[0] == 1
        assert r.open(5, **tree.paths(1)) == 0
        tree.write_valid(0, rng, 3_000_000_000, 1, 0)
        r.read(1_000_000_000)
        assert r.cpu_cores[0] == pytest.approx(2.0) and np.isnan(r.cpu_cores[5])


@pytest.mark.parametrize("text,count", [("0-3\n", 4), ("0,4-5\n", 3), ("\n", 0), ("", 0), ("7", 1),
                                         ("0-3,8,10-11", 7), ("3-1", -1), ("a", -1), ("1,", -1),
                                         ("1-", -1), (" 1", -1)])
def test_cpuset_count(tmp_path, text: str, count: int) -> None:
    (tmp_path / "cpuset.cpus").write_text(text)
    for impl in (native, pure_reader):
        r = impl.StatReader(1, 1)
        assert r.open(0, cpuset=str(tmp_path / "cpuset.cpus")) == 0
        r.read(0)
        assert r.cpuset_count[0] == count
        assert r.errors[0] == (0 if count >= 0 else -4)


def test_node_reader_agrees_with_reference(tmp_path) -> None:
    stat = ("cpu  100 5 50 9000 20 3 7 0 0 0\ncpu0 60 5 20 4500 10 1 4 0 0 0\n"
            "cpu1 40 0 30 4500 10 2 3 0 0 0\nintr 1 2 3\nctxt 99\n")
    (tmp_path / "stat").write_text(stat)
    (tmp_path / "meminfo").write_text("MemTotal:  1000 kB\nMemFree:  200 kB\nMemAvailable: 500 kB\n"
                                      "Buffers: 1 kB\n")
    a = native.NodeReader(str(tmp_path / "stat"), str(tmp_path / "meminfo"))
    b = pure_reader.NodeReader(str(tmp_path / "stat"), str(tmp_path / "meminfo"))
    assert a.read_stat() == b.read_stat() == 100 + 5 + 50 + 3 + 7
    np.testing.assert_array_equal(a.cpu_ticks, b.cpu_ticks)
    assert list(a.cpu_ticks[:3]) == [60 + 5 + 20 + 1 + 4, 40 + 30 + 2 + 3, -1]
    assert a.read_meminfo() == b.read_meminfo() == (1000, 200, 500)
    (tmp_path / "stat").write_text("cpu  1 2 3\n")
    for r in (a, b):
        with pytest.raises(ValueError):
            r.read_stat()


@pytest.mark.parametrize("text,expected", [
    ("MemTotal: 1000 kB\nMemAvailable: 500 kB\n", (1000, -1, 500)),  # no MemFree
    ("MemFree: 7 kB\n", (-1, 7, -1)),
    ("MemTotal: lots kB\nMemFree: 7 kB\nMemAvailable: -5 kB\n", (-1, 7, -1)),  # garbled, negative
    ("MemTotal: 10 kB\nMemTotal: 20 kB\nMemFree: 1 kB\nMemAvailable: 2 kB\n", (10, 1, 2)),  # first wins
    ("", (-1, -1, -1)),
])
def test_meminfo_missing_or_garbled_keys_read_as_minus_one(tmp_path, text: str, expected: tuple) -> None:
    (tmp_path / "stat").write_text("cpu  1 2 3 4 5 6 7 8\n")
    (tmp_path / "meminfo").write_text(text)
    for impl in (native, pure_reader):
        r = impl.NodeReader(str(tmp_path / "stat"), str(tmp_path / "meminfo"))
        assert r.read_meminfo() == expected
        assert r.read_stat() == 1 + 2 + 3 + 6 + 7  # the other file is unaffected


def test_node_reader_files_stand_alone(tmp_path) -> None:
    """A file missing when the reader is built fails only its own reads, naming itself, until it appears."""
    (tmp_path / "stat").write_text("cpu  1 2 3 4 5 6 7 8\n")
    for impl in (native, pure_reader):
        meminfo = tmp_path / f"meminfo-{impl.__name__.rsplit('.', 1)[-1]}"
        r = impl.NodeReader(str(tmp_path / "stat"), str(meminfo))
        assert r.read_stat() == 19
        with pytest.raises(OSError) as e:
            r.read_meminfo()
        assert e.value.errno == 2 and e.value.filename == str(meminfo)
        meminfo.write_text("MemTotal: 3 kB\nMemFree: 2 kB\nMemAvailable: 1 kB\n")
        assert r.read_meminfo() == (3, 2, 1)


@pytest.mark.parametrize("version", [1, 2])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_partial_reads_agree(tmp_path_factory, version: int, seed: int) -> None:
    """``read_some`` (a subset of slots, a subset of files) agrees between the two readers, gives no
    sample for what it leaves out, and a slot read again gives its rate since its previous read."""
    rng = random.Random(seed)
    tree = Tree(str(tmp_path_factory.mktemp("p")), version, n=6)
    usage = [rng.randrange(0, 1 << 40) for _ in range(tree.n)]
    for i in range(tree.n):
        tree.write_valid(i, rng, usage[i], 100, 10)
    a = native.StatReader(8, version)
    b = pure_reader.StatReader(8, version)
    for i in range(tree.n):
        assert a.open(i, **tree.paths(i)) == b.open(i, **tree.paths(i)) == 0
    t = 1_000_000_000
    last: dict[int, tuple[int, int]] = {}  # slot -> (usage, time) of its previous read
    for _tick in range(8):
        slots = np.array(sorted(rng.sample(range(tree.n + 2), rng.randrange(0, tree.n + 2))), dtype=np.int64)
        files = rng.randrange(0, 16)
        per_slot = np.full(len(slots), files, dtype=np.uint8)  # the array form, one mask per slot
        assert a.read_some(slots, per_slot if _tick % 2 else files, t) == b.read_some(slots, files, t)
        assert_same(a, b)
        chosen = set(slots.tolist())
        for i in range(tree.n):
            cpu_file = 2 if version == 2 else 1
            if i not in chosen or not files & cpu_file:
                assert np.isnan(a.cpu_cores[i])
            if i not in chosen or not files & 4:
                assert np.isnan(a.memory_usage[i])
            if i not in chosen or not files & 8:
                assert a.cpuset_count[i] == -1
            if i in chosen and files & cpu_file:
                seen = usage[i] if version == 1 else usage[i] // 1000 * 1000
                if i in last:  # the rate spans every tick since this slot's previous read
                    assert a.cpu_cores[i] == pytest.approx((seen - last[i][0]) / (t - last[i][1]))
                last[i] = (seen, t)
        t += rng.randrange(1, 2_000_000_000)
        for i in range(tree.n):
            usage[i] += rng.randrange(0, 2_000_000_000)
            tree.write_valid(i, rng, usage[i], 100, 10)


def test_both_node_readers_give_every_tick_of_the_cpu_line(tmp_path) -> None:
    (tmp_path / "stat").write_text("cpu  100 5 50 9000 20 3 7 1 2 3\ncpu0 60 5 20 4500 10 1 4 0 0 0\n")
    (tmp_path / "meminfo").write_text("MemTotal: 1 kB\n")
    readers = [impl.NodeReader(str(tmp_path / "stat"), str(tmp_path / "meminfo")) for impl in (native, pure_reader)]
    assert [r.total_ticks for r in readers] == [-1, -1]
    assert [r.read_stat() for r in readers] == [165, 165]
    assert [r.total_ticks for r in readers] == [100 + 5 + 50 + 9000 + 20 + 3 + 7 + 1 + 2 + 3] * 2
    (tmp_path / "stat").write_text(f"cpu  1 2 3 4 5 6 {2**63 - 10} 0\n")  # all ticks beyond int64
    for r in readers:
        with pytest.raises(ValueError, match="garbled /proc/stat value"):
            r.read_stat()
