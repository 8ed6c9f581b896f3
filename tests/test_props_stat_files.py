"""Properties of the cgroup stat-file parsers: the native ``StatReader`` and its plain-Python twin.

On arbitrary bytes (random, and lines built from the wanted keys with hostile values) both
readers never crash, agree on every array, and never report a wrong number: every value they
report is one the file states in the kernel's format, and a file that states something else
gives NaN (or -1) and a garbled code for that metric only.  Clean files give exactly their
numbers.  ``tests/test_reader_equivalence.py`` covers whole trees with vanishing files; here
the files' bytes are the search space.
"""

from __future__ import annotations

import math
import os
import re
import tempfile

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from props import props
from qosmanager._native import pure_reader
from qosmanager.host.cpuset import MAX_CPU_ID, format_cpu_list, parse_cpu_list

native = pytest.importorskip("qosmanager._native.reader")

INT64_MAX = 2**63 - 1
MAX_USEC = INT64_MAX // 1000
ARRAYS = ["state", "errors", "died", "usage_ns", "nr_periods", "nr_throttled", "throttled_ns", "mem_raw",
          "cpu_cores", "throttled_ratio", "memory_usage", "memory_usage_with_cache", "cpuset_count",
          "missing", "vanished"]
CPU_KEYS = {1: ["nr_periods", "nr_throttled", "throttled_time"],
            2: ["usage_usec", "nr_periods", "nr_throttled", "throttled_usec"]}
MEM_KEYS = {1: ["total_inactive_anon", "total_active_anon", "total_unevictable", "total_inactive_file",
                "total_active_file"],
            2: ["inactive_anon", "active_anon", "unevictable", "inactive_file", "active_file"]}
DECOYS = ["cache", "rss", "nr_bursts", "user_usec", "inactive_anon_x", "total_", "usage", "active",
          "nr_periods:", "NR_PERIODS", "total_inactive_anon\t", ""]
NUMBER = re.compile(rb"[0-9]+\Z")

# -- strategies ---------------------------------------------------------------------------------
counter = st.one_of(st.integers(0, 1000), st.integers(0, INT64_MAX), st.integers(0, INT64_MAX // 1000),
                    st.sampled_from([INT64_MAX, INT64_MAX // 1000, INT64_MAX // 1000 + 1, 2**62]))
hostile_value = st.one_of(
    counter.map(lambda v: str(v).encode()),
    st.integers(-(2**70), 2**70).map(lambda v: str(v).encode()),
    st.sampled_from([b"", b"-", b"-0", b"+5", b"0x10", b"1e3", b"1.5", b"12abc", b"\xd9\xa1\xd9\xa2",
                     b"9" * 25,
                     b"0" * 30 + b"7", b"nan", b"\x00", b"max", b" ", b"1 2", b"1\t2", b"1\r"]),
)


def kv_line(keys: list[str]) -> st.SearchStrategy[bytes]:
    key = st.sampled_from(keys + DECOYS).map(str.encode)
    sep = st.sampled_from([b" ", b"  ", b"\t", b"", b": ", b" \t"])
    tail = st.sampled_from([b"", b" ", b"\t", b"\r", b" 7", b" x", b"\x00"])
    return st.tuples(key, sep, hostile_value, tail).map(b"".join)


def kv_file(keys: list[str]) -> st.SearchStrategy[bytes]:
    lines = st.lists(kv_line(keys), max_size=14)
    return st.tuples(lines, st.sampled_from([b"\n", b"\r\n"]), st.sampled_from([b"", b"\n"])).map(
        lambda t: t[1].join(t[0]) + t[2])


def mutated(clean: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A clean file with a few bytes inserted, replaced or deleted."""
    def apply(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
        for op, pos, byte in edits:
            i = pos % (len(data) + 1)
            data = (data[:i] + byte + data[i:] if op == 0 else data[:i] + byte + data[i + 1:] if op == 1
                    else data[:i] + data[i + 1:])
        return data
    edit = st.tuples(st.integers(0, 2), st.integers(0, 10_000), st.binary(min_size=1, max_size=2))
    return st.builds(apply, clean, st.lists(edit, min_size=1, max_size=3))


def clean_kv(keys: list[str], extra: list[str]) -> st.SearchStrategy[bytes]:
    vals = st.fixed_dictionaries({k: counter for k in keys + extra})
    return st.tuples(vals, st.randoms(use_true_random=False)).map(
        lambda t: "".join(f"{k} {v}\n" for k, v in t[1].sample(sorted(t[0].items()), len(t[0]))).encode())


def cpu_stat_bytes(version: int) -> st.SearchStrategy[bytes]:
    clean = clean_kv(CPU_KEYS[version], ["nr_bursts", "burst_usec" if version == 2 else "burst_time"])
    return st.one_of(clean, mutated(clean), kv_file(CPU_KEYS[version]), st.binary(max_size=200))


def mem_stat_bytes(version: int) -> st.SearchStrategy[bytes]:
    clean = clean_kv(MEM_KEYS[version], ["cache", "rss", "file", "anon"])
    return st.one_of(clean, mutated(clean), kv_file(MEM_KEYS[version]), st.binary(max_size=200))


usage_bytes = st.one_of(
    st.tuples(st.sampled_from([b"", b" ", b"\t"]), hostile_value,
              st.sampled_from([b"\n", b"", b" \n", b"\r\n", b"\n\n", b"x"])).map(b"".join),
    st.binary(max_size=40),
)
cpu_ids = st.one_of(st.integers(0, 64), st.integers(0, 1_048_600))
cpuset_item = st.one_of(cpu_ids.map(lambda a: str(a).encode()),
                        st.tuples(cpu_ids, cpu_ids).map(lambda t: f"{t[0]}-{t[1]}".encode()),
                        st.sampled_from([b"", b"-", b"1-", b"-1", b" 1", b"1 ", b"a", b"01", b"0-1048576"]))
cpuset_bytes = st.one_of(
    st.sets(st.integers(0, 300), max_size=40).map(lambda s: (format_cpu_list(s) + "\n").encode()),
    st.tuples(st.lists(cpuset_item, max_size=8), st.sampled_from([b"", b"\n", b" \n"])).map(
        lambda t: b",".join(t[0]) + t[1]),
    st.lists(st.just(b"0-1048576"), min_size=2100, max_size=2100).map(lambda x: b",".join(x) + b"\n"),
    st.binary(max_size=40),
)


# -- oracles: what the kernel's format states, written independently of both readers --------------
def stated(data: bytes, key: str) -> set[int]:
    """Every value a ``key value`` line of the file states in the kernel's format."""
    out = set()
    for line in data.split(b"\n"):
        m = re.fullmatch(re.escape(key.encode()) + rb" +([0-9]+)(?:[ \t\r].*)?", line, re.S)
        if m and int(m.group(1)) <= INT64_MAX:
            out.add(int(m.group(1)))
    return out


def clean_values(data: bytes, keys: list[str]) -> dict[str, int] | None:
    """The values of a file in which every wanted key appears once, in the kernel's format."""
    out: dict[str, int] = {}
    for line in data.split(b"\n"):
        k, sp, v = line.partition(b" ")
        if k.decode("latin-1") in keys:
            if not sp or not NUMBER.match(v) or k.decode() in out or int(v) > INT64_MAX:
                return None
            out[k.decode()] = int(v)
    return out if len(out) == len(keys) else None


class Pair:
    """The native reader and its twin, one slot each, over files in one temporary directory."""

    def __init__(self, version: int, **files: bytes) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.paths = {name: os.path.join(self.dir.name, name) for name in files}
        self.write(**files)
        self.readers = [native.StatReader(1, version), pure_reader.StatReader(1, version)]
        for r in self.readers:
            assert r.open(0, **self.paths) == 0

    def write(self, **files: bytes) -> None:
        for name, data in files.items():
            with open(self.paths[name], "wb") as f:
                f.write(data)

    def read(self, t: int) -> pure_reader.StatReader:
        a, b = self.readers
        assert a.read(t) == b.read(t)
        for name in ARRAYS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        return b

    def close(self) -> None:
        for r in self.readers:
            r.close(0)
        self.dir.cleanup()


# -- cpu.stat and cpuacct.usage ---------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2])
@props(60)
@given(data=st.data())
def test_cpu_files_agree_and_state_only_what_the_file_says(version: int, data: st.DataObject) -> None:
    files = [data.draw(cpu_stat_bytes(version)) for _ in range(2)]
    usages = [data.draw(usage_bytes) for _ in range(2)] if version == 1 else None
    dt = data.draw(st.integers(1, 30_000_000_000))
    names = {"cpu_stat": files[0]} | ({"usage": usages[0]} if usages else {})
    pair = Pair(version, **names)
    try:
        r = pair.read(1_000_000_000)
        pair.write(cpu_stat=files[1], **({"usage": usages[1]} if usages else {}))
        r = pair.read(1_000_000_000 + dt)
        text = files[1]
        if version == 1:
            # cpuacct.usage: one number, optionally surrounded by blanks; else NaN and code -1
            m = re.fullmatch(rb"[ \t]*([0-9]+)[ \t\r\n]*", usages[1])
            ok = m is not None and int(m.group(1)) <= INT64_MAX
            if ok:
                assert r.usage_ns[0] == int(m.group(1))
            prev = re.fullmatch(rb"[ \t]*([0-9]+)[ \t\r\n]*", usages[0])
            usage_now = int(m.group(1)) if ok else None
            usage_then = int(prev.group(1)) if prev and int(prev.group(1)) <= INT64_MAX else None
        else:
            said = stated(text, "usage_usec")
            if not math.isnan(r.cpu_cores[0]) or r.errors[0] == 0:
                assert r.usage_ns[0] // 1000 in said and r.usage_ns[0] % 1000 == 0
            # a clean file whose microseconds fit int64 nanoseconds (beyond: the file is garbled)
            clean0, clean1 = (clean_values(f, CPU_KEYS[2]) for f in files)
            usage_then = clean0["usage_usec"] * 1000 if clean0 and max(clean0.values()) <= MAX_USEC else None
            usage_now = clean1["usage_usec"] * 1000 if clean1 and max(clean1.values()) <= MAX_USEC else None
        # cores: the usage delta over the time delta, only from two good samples, a rising counter
        if usage_now is not None and usage_then is not None and usage_then <= usage_now and dt <= 20 * 10**9:
            assert r.cpu_cores[0] == pytest.approx((usage_now - usage_then) / dt)
        if not math.isnan(r.cpu_cores[0]):
            assert r.cpu_cores[0] >= 0.0
        # throttling: a clean file's numbers exactly (v2: microseconds that fit int64 nanoseconds)
        clean = clean_values(text, CPU_KEYS[version])
        if clean and (version == 1 or max(clean.values()) <= MAX_USEC):
            assert r.nr_periods[0] == clean["nr_periods"] and r.nr_throttled[0] == clean["nr_throttled"]
            assert r.throttled_ns[0] == clean[CPU_KEYS[version][-1]] * (1000 if version == 2 else 1)
        if not math.isnan(r.throttled_ratio[0]):
            assert r.throttled_ratio[0] >= 0.0
            assert int(r.nr_periods[0]) in stated(text, "nr_periods")
            assert int(r.nr_throttled[0]) in stated(text, "nr_throttled")
    finally:
        pair.close()


# -- memory.stat ----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 2])
@props(80)
@given(text=st.one_of(mem_stat_bytes(1), mem_stat_bytes(2)))
def test_memory_stat_agrees_and_states_only_what_the_file_says(version: int, text: bytes) -> None:
    pair = Pair(version, memory_stat=text)
    try:
        r = pair.read(0)
        keys = MEM_KEYS[version]
        clean = clean_values(text, keys)
        if clean is not None and sum(clean.values()) <= INT64_MAX:
            assert r.errors[0] == 0
            assert list(r.mem_raw[0]) == [clean[k] for k in keys]
            assert r.memory_usage[0] == float(sum(clean[k] for k in keys[:3]))
            assert r.memory_usage_with_cache[0] == float(sum(clean.values()))
        if math.isnan(r.memory_usage[0]):
            assert math.isnan(r.memory_usage_with_cache[0]) and r.errors[0] == -3
        else:
            assert r.errors[0] == 0
            for k, v in zip(keys, r.mem_raw[0]):
                assert int(v) in stated(text, k), (k, v)
            # a sum is never wrapped around: no more than the sum of what the file states
            raw = [int(v) for v in r.mem_raw[0]]
            assert 0 <= r.memory_usage[0] == float(sum(raw[:3]))
            assert r.memory_usage_with_cache[0] == float(sum(raw))
    finally:
        pair.close()


# -- cpuset.cpus ------------------------------------------------------------------------------------
@props(200)
@given(text=cpuset_bytes)
def test_cpuset_count_agrees_and_counts_only_real_cpu_lists(text: bytes) -> None:
    pair = Pair(1, cpuset=text)
    try:
        r = pair.read(0)
        count = int(r.cpuset_count[0])
        assert count >= -1
        assert r.errors[0] == (0 if count >= 0 else -4)
        try:
            cpus = parse_cpu_list(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            cpus = None
        if count >= 0:
            # what the reader counts, the strict parser reads as that many distinct CPUs (ids up to
            # its own bound), and the kernel's canonical form of a set always counts
            body = text.decode("ascii").strip()
            if all(int(x) <= MAX_CPU_ID for x in re.findall(r"[0-9]+", body)):
                assert cpus is not None and len(cpus) == count
        if cpus is not None and (format_cpu_list(cpus) + "\n").encode() == text:
            assert count == len(cpus)
    finally:
        pair.close()


@props(100)
@given(cpus=st.sets(st.integers(0, 1_048_576), max_size=30))
def test_cpuset_count_of_any_canonical_list(cpus: set[int]) -> None:
    pair = Pair(2, cpuset=(format_cpu_list(cpus) + "\n").encode())
    try:
        assert pair.read(0).cpuset_count[0] == len(cpus)
    finally:
        pair.close()


# -- /proc/stat and /proc/meminfo: NodeReader (both) and host/procfs.py --------------------------------
def node_pair(stat: bytes, meminfo: bytes) -> tuple[tempfile.TemporaryDirectory, list]:
    d = tempfile.TemporaryDirectory()
    for name, data in (("stat", stat), ("meminfo", meminfo)):
        with open(os.path.join(d.name, name), "wb") as f:
            f.write(data)
    paths = (os.path.join(d.name, "stat"), os.path.join(d.name, "meminfo"))
    return d, [native.NodeReader(*paths, max_cpus=64), pure_reader.NodeReader(*paths, max_cpus=64)]


tick = st.one_of(st.integers(0, 10**12), st.sampled_from([0, INT64_MAX // 8]))
stat_token = st.one_of(tick.map(lambda v: str(v).encode()), hostile_value)
cpu_line = st.tuples(
    st.sampled_from([b"cpu ", b"cpu  ", b"cpu0 ", b"cpu1 ", b"cpu63 ", b"cpu64 ", b"cpu-1 ", b"cpu\t",
                     b"cpux ",
                     b"cpu01 ", b"cpu", b"intr "]),
    st.lists(stat_token, min_size=0, max_size=11),
    st.sampled_from([b" ", b"  ", b"\t"]),
    st.sampled_from([b"", b" ", b"\r"]),
).map(lambda t: t[0] + t[2].join(t[1]) + t[3])
proc_stat_bytes = st.one_of(
    st.lists(cpu_line, max_size=5).map(lambda ls: b"\n".join(ls) + b"\nintr 1 2\nctxt 5\n"),
    st.binary(max_size=120),
)


def valid_proc_stat(per_cpu: list[list[int]]) -> bytes:
    total = [sum(col) for col in zip(*per_cpu)]
    lines = ["cpu  " + " ".join(map(str, total))]
    lines += [f"cpu{i} " + " ".join(map(str, v)) for i, v in enumerate(per_cpu)]
    return ("\n".join(lines) + "\nintr 1 2 3\nctxt 7\nbtime 1\nprocesses 3\n").encode()


@props(150)
@example(stat=b"cpu\t1 2 3 4 5 6 7\n", meminfo=b"")
@example(stat=b"cpu 1 2 3 4 5 6 7\x0b\n", meminfo=b"")
@example(stat=b"cpu 0 0 1 0 0 0 9223372036854775807\n", meminfo=b"")
@given(stat=proc_stat_bytes, meminfo=st.one_of(
    st.lists(st.tuples(st.sampled_from([b"MemTotal", b"MemFree", b"MemAvailable", b"Buffers", b"Cached",
                                        b"MemTotal ", b"memfree"]),
                       st.sampled_from([b":", b": ", b":    ", b" :", b""]), hostile_value,
                       st.sampled_from([b" kB", b"", b"kB", b"\t kB"])).map(b"".join), max_size=8).map(
        lambda ls: b"\n".join(ls) + b"\n"),
    st.binary(max_size=80)))
def test_node_reader_agrees_on_any_bytes(stat: bytes, meminfo: bytes) -> None:
    d, (a, b) = node_pair(stat, meminfo)
    try:
        results = []
        for r in (a, b):
            try:
                results.append(("ok", r.read_stat(), list(r.cpu_ticks)))
            except ValueError:
                results.append(("ValueError",))
        assert results[0] == results[1]
        assert a.read_meminfo() == b.read_meminfo()
        total, free, avail = a.read_meminfo()
        for key, v in ((b"MemTotal", total), (b"MemFree", free), (b"MemAvailable", avail)):
            if v != -1:
                digits = str(v).encode() if v else b""
                assert re.search(rb"(?:^|\n)" + key + rb": *0*" + digits + rb"(?:[ \t\r\n]|$)", meminfo)
        if results[0][0] == "ok":
            assert results[0][1] >= 0 and min(results[0][2]) >= -1
    finally:
        d.cleanup()


@props(100)
@given(per_cpu=st.lists(st.lists(st.integers(0, 10**13), min_size=10, max_size=10), min_size=1, max_size=8),
       mem=st.tuples(*[st.integers(0, 2**50)] * 3))
def test_node_reader_and_procfs_read_real_files_alike(per_cpu: list[list[int]],
                                                      mem: tuple[int, int, int]) -> None:
    from qosmanager.host import procfs

    stat = valid_proc_stat(per_cpu)
    meminfo = (f"MemTotal:       {mem[0]} kB\nMemFree:        {mem[1]} kB\nMemAvailable:   {mem[2]} kB\n"
               f"Buffers:          1 kB\nHugePages_Total:       0\n").encode()
    busy = [v[0] + v[1] + v[2] + v[5] + v[6] for v in per_cpu]
    d, readers = node_pair(stat, meminfo)
    try:
        for r in readers:
            assert r.read_stat() == sum(busy)
            assert list(r.cpu_ticks[: len(busy)]) == busy and r.cpu_ticks[len(busy)] == -1
            assert r.read_meminfo() == mem
        assert procfs.parse_proc_stat(stat.decode()) == (sum(busy), dict(enumerate(busy)))
        info = procfs.parse_meminfo(meminfo.decode())
        assert (info["MemTotal"], info["MemFree"], info["MemAvailable"]) == mem
        assert info["HugePages_Total"] == 0
    finally:
        d.cleanup()


@props(150)
@given(text=st.one_of(proc_stat_bytes.map(lambda b: b.decode("latin-1")), st.text(max_size=100)))
def test_procfs_proc_stat_never_misreads(text: str) -> None:
    """host/procfs.py: a ValueError, or busy ticks the cpu lines state (user+nice+system+irq+softirq)."""
    from qosmanager.host import procfs

    try:
        total, per_cpu = procfs.parse_proc_stat(text)
    except ValueError:
        return
    def busy(fields: list[str]) -> int:
        return sum(int(fields[i]) for i in (1, 2, 3, 6, 7))

    cpu_lines = [ln.split() for ln in text.split("\n") if ln.startswith("cpu") and len(ln.split()) > 7]
    assert total in {busy(f) for f in cpu_lines if f[0] == "cpu"}
    for cpu, ticks in per_cpu.items():
        assert cpu >= 0
        assert ticks in {busy(f) for f in cpu_lines if f[0][3:].isdigit() and int(f[0][3:]) == cpu}


@props(150)
@given(text=st.text(alphabet=st.sampled_from(list("MemTotalFrAvi:kB 0123456789-\n\t\x0bé٣")), max_size=120))
def test_procfs_meminfo_never_raises(text: str) -> None:
    from qosmanager.host import procfs

    info = procfs.parse_meminfo(text)
    assert all(isinstance(v, int) for v in info.values())
    assert procfs.memory_usage_bytes(info) >= 0 and procfs.memory_usage_with_cache_bytes(info) >= 0


# -- PSI files -----------------------------------------------------------------------------------------
psi_value = st.one_of(st.floats(0, 100, allow_nan=False).map(lambda f: f"{f:.2f}"), st.sampled_from(
    ["", "x", "1e3", "nan", "inf", "-1", "1_0", "٣"]))
psi_line = st.tuples(st.sampled_from(["some", "full", "Some", ""]), st.lists(st.tuples(
    st.sampled_from(["avg10", "avg60", "avg300", "total", "avg"]), st.sampled_from(["=", ":", ""]),
    st.one_of(psi_value, st.integers(0, 2**64).map(str))).map("".join), max_size=5)).map(
    lambda t: " ".join([t[0], *t[1]]))


@props(100)
@given(text=st.one_of(st.lists(psi_line, max_size=3).map("\n".join), st.text(max_size=60)))
def test_psi_is_read_or_refused(text: str) -> None:
    from qosmanager.host.procfs import parse_psi

    try:
        psi = parse_psi(text)
    except ValueError:
        return
    for line in (psi.some, psi.full):
        assert all(math.isfinite(v) and v >= 0 for v in (line.avg10, line.avg60, line.avg300))
        assert line.total >= 0


@props(60)
@given(some=st.tuples(*[st.floats(0, 100, allow_nan=False)] * 3, st.integers(0, 2**63)),
       full=st.none() | st.tuples(*[st.floats(0, 100, allow_nan=False)] * 3, st.integers(0, 2**63)))
def test_psi_reads_what_the_kernel_prints(some: tuple, full: tuple | None) -> None:
    from qosmanager.host.procfs import parse_psi

    def line(kind: str, v: tuple) -> str:
        return f"{kind} avg10={v[0]:.2f} avg60={v[1]:.2f} avg300={v[2]:.2f} total={v[3]}\n"

    psi = parse_psi(line("some", some) + (line("full", full) if full else ""))
    assert psi.some.total == some[3] and psi.some.avg10 == float(f"{some[0]:.2f}")
    assert psi.full_supported == (full is not None)
    assert psi.full.total == (full[3] if full else 0)


# -- the strict CPU list parser (host/cpuset.py) --------------------------------------------------------
@props(150)
@given(text=st.one_of(cpuset_bytes.map(lambda b: b.decode("latin-1")),
                      st.text(alphabet=st.sampled_from(list("0123456789-, \n\t٣")), max_size=30)))
def test_cpu_list_parser_reads_or_refuses(text: str) -> None:
    try:
        cpus = parse_cpu_list(text)
    except ValueError as e:
        assert "CPU list" in str(e)
        return
    assert cpus == sorted(set(cpus)) and all(0 <= c <= MAX_CPU_ID for c in cpus)
    # the set it read is the set the text names
    named: set[int] = set()
    for item in filter(None, text.strip().split(",")):
        lo, _, hi = item.partition("-")
        named.update(range(int(lo), int(hi or lo) + 1))
    assert set(cpus) == named
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


# -- blkio and io files: the executor's read-compare and the content after a write ---------------------
dev = st.sampled_from(["8:0", "8:16", "253:0", "259:3"])
throttle_entry = st.tuples(dev, st.integers(0, 2**63 - 1)).map(lambda t: f"{t[0]} {t[1]}")
io_max_entry = st.tuples(dev, st.dictionaries(st.sampled_from(["rbps", "wbps", "riops", "wiops"]),
                                               st.one_of(st.just("max"), st.integers(0, 10**12).map(str)),
                                               min_size=1, max_size=4)).map(
    lambda t: t[0] + " " + " ".join(f"{k}={v}" for k, v in t[1].items()))
io_weight_entry = st.one_of(st.tuples(st.one_of(dev, st.just("default")), st.integers(1, 10000)).map(
    lambda t: f"{t[0]} {t[1]}"), dev.map(lambda d: f"{d} default"))
BLKIO_ENTRIES = {
    ("blkio.throttle.read_bps_device", 1): throttle_entry,
    ("blkio.throttle.write_iops_device", 1): throttle_entry,
    ("blkio.cost.weight", 1): st.tuples(dev, st.integers(1, 100)).map(lambda t: f"{t[0]} {t[1]}"),
    ("io.max", 2): io_max_entry,
    ("io.weight", 2): io_weight_entry,
}
table_line = st.one_of(
    throttle_entry, io_max_entry, io_weight_entry,
    st.sampled_from(["default 100", "8:0", "8:0 rbps", "garbage", "8:0 rbps=1=2", " ", "8:0 x=y z"]),
    st.text(max_size=12).filter(lambda s: "\n" not in s and "\r" not in s))


@pytest.mark.parametrize("name,version", list(BLKIO_ENTRIES), ids=[n for n, _ in BLKIO_ENTRIES])
@props(60)
@given(data=st.data(), lines=st.lists(table_line, max_size=5))
def test_device_tables_take_an_entry_and_compare_without_failing(
        name: str, version: int, data: st.DataObject, lines: list[str]) -> None:
    """Whatever the file holds, comparing it with an entry never raises; after the entry is written
    (the content the kernel shows) it compares equal, a second write changes nothing, and the other
    devices' lines stay."""
    from qosmanager.host import resources

    res = resources.get(name)
    entry = data.draw(BLKIO_ENTRIES[(name, version)])
    assert res.validate(entry) is None, entry
    current = "\n".join(lines) + ("\n" if lines else "")
    rendered = res.render(entry, current, version)
    res.equal(current, rendered, version)  # a bool, whatever the content
    assert res.merge_entry is not None
    clean = "".join(ln.strip() + "\n" for ln in lines if res.validate(ln) is None
                    and ln.split()[0] != entry.split()[0])
    after = res.merge_entry(clean, rendered)
    assert res.equal(after, rendered, version), (clean, rendered, after)
    assert res.merge_entry(after, rendered) == after
    assert all(ln in after.splitlines() for ln in clean.splitlines()), (clean, after)
