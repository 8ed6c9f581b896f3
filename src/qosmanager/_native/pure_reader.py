"""Plain-Python reference of ``ext/reader.pyx``.

Same API, same arrays, same numbers: the tests feed both the same files and the same
clock and compare every array.  It is what runs with ``QOSMANAGER_PURE=1``, and the
readable statement of what the native code does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

FILE_USAGE, FILE_CPUSTAT, FILE_MEMSTAT, FILE_CPUSET, NFILES = 0, 1, 2, 3, 4
STATE_FREE, STATE_LIVE, STATE_DEAD = 0, 1, 2
ERR_GARBLED_USAGE, ERR_GARBLED_CPUSTAT, ERR_GARBLED_MEMSTAT, ERR_GARBLED_CPUSET = -1, -2, -3, -4
BUFSIZE = 65536
INT64_MAX = 2**63 - 1

MEM_KEYS = {
    1: (b"total_inactive_anon", b"total_active_anon", b"total_unevictable",
        b"total_inactive_file", b"total_active_file"),
    2: (b"inactive_anon", b"active_anon", b"unevictable", b"inactive_file", b"active_file"),
}
CPU_KEYS = {
    1: (b"nr_periods", b"nr_throttled", b"throttled_time"),
    2: (b"usage_usec", b"nr_periods", b"nr_throttled", b"throttled_usec"),
}


def monotonic_ns() -> int:
    return time.monotonic_ns()


def _parse_int(tok: bytes) -> int | None:
    """Non-negative decimal integer, as the native scanner accepts it (counters and sizes are
    printed unsigned: a sign makes the token garbled)."""
    if not tok or not tok.isdigit() or len(tok.lstrip(b"0")) > 19:
        return None
    v = int(tok)
    return v if v <= INT64_MAX else None


def _parse_single(data: bytes) -> int | None:
    s = data.lstrip(b" \t")
    tok_end = len(s)
    for i, c in enumerate(s):
        if c in b" \n\t\r":
            tok_end = i
            break
    v = _parse_int(s[:tok_end])
    if v is None or s[tok_end:].strip(b" \n\t\r"):
        return None
    return v


def _first_token(rest: bytes) -> bytes:
    rest = rest.lstrip(b" ")
    for i, c in enumerate(rest):
        if c in b" \t\r\n":
            return rest[:i]
    return rest


def _parse_kv(data: bytes, keys: tuple[bytes, ...]) -> tuple[dict[bytes, int], bool]:
    """Wanted keys found (first space splits key from value), and whether one was garbled."""
    wanted = set(keys)
    found: dict[bytes, int] = {}
    bad = False
    for line in data.split(b"\n"):
        sp = line.find(b" ")
        if sp < 0:
            continue
        key = line[:sp]
        if key not in wanted:
            continue
        v = _parse_int(_first_token(line[sp + 1 :]))
        if v is None:
            bad = True
        else:
            found[key] = v
        if len(found) == len(keys):
            break
    return found, bad


def _parse_cpuset_count(data: bytes) -> int:
    """Number of CPUs in a kernel CPU list; 0 when empty; -1 when garbled (also when its ranges
    are not ascending and disjoint, as the kernel prints them)."""
    text = data.rstrip(b"\n \r\t")
    if not text:
        return 0
    count = 0
    last = -1
    for part in text.split(b","):
        lo, dash, hi = part.partition(b"-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            return -1
        if len(lo.lstrip(b"0")) > 8 or len(hi.lstrip(b"0")) > 8:
            return -1
        a = int(lo)
        b = int(hi) if dash else a
        if a > 1048576 or b > 1048576 or b < a or a <= last:
            return -1
        count += b - a + 1
        last = b
    return count


class StatReader:
    """See ``ext/reader.pyx``: the same class, in Python."""

    state: np.ndarray
    errors: np.ndarray
    died: np.ndarray
    sample_ns: np.ndarray
    usage_ns: np.ndarray
    nr_periods: np.ndarray
    nr_throttled: np.ndarray
    throttled_ns: np.ndarray
    mem_raw: np.ndarray
    cpu_cores: np.ndarray
    throttled_ratio: np.ndarray
    memory_usage: np.ndarray
    memory_usage_with_cache: np.ndarray
    cpuset_count: np.ndarray
    prev_usage: np.ndarray
    prev_t: np.ndarray
    has_prev: np.ndarray
    prev_periods: np.ndarray
    prev_throttled: np.ndarray
    has_prev_thr: np.ndarray
    missing: np.ndarray
    vanished: np.ndarray

    def __init__(self, capacity: int, cgroup_version: int, max_gap_ns: int = 20_000_000_000,
                 max_fds: int = -1) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        if cgroup_version not in (1, 2):
            raise ValueError("cgroup_version must be 1 or 2")
        self.capacity = capacity
        self.cgroup_version = cgroup_version
        self.max_gap_ns = max_gap_ns
        self.max_fds = max_fds
        self.open_fds = 0
        self.high_water = 0
        self._fds = [-1] * (capacity * NFILES)
        self._paths: list[bytes | None] = [None] * (capacity * NFILES)
        self._mem_keys = MEM_KEYS[cgroup_version]
        self._cpu_keys = CPU_KEYS[cgroup_version]
        self._alloc_arrays(capacity)

    _ARRAYS = (
        ("state", np.uint8, 0, 0), ("errors", np.int32, 0, 0), ("died", np.uint8, 0, 0),
        ("sample_ns", np.int64, 0, 0), ("usage_ns", np.int64, 0, 0), ("nr_periods", np.int64, 0, 0),
        ("nr_throttled", np.int64, 0, 0), ("throttled_ns", np.int64, 0, 0),
        ("mem_raw", np.int64, 0, 5), ("cpu_cores", np.float64, np.nan, 0),
        ("throttled_ratio", np.float64, np.nan, 0), ("memory_usage", np.float64, np.nan, 0),
        ("memory_usage_with_cache", np.float64, np.nan, 0), ("cpuset_count", np.int32, -1, 0),
        ("prev_usage", np.int64, 0, 0), ("prev_t", np.int64, 0, 0), ("has_prev", np.uint8, 0, 0),
        ("prev_periods", np.int64, 0, 0), ("prev_throttled", np.int64, 0, 0),
        ("has_prev_thr", np.uint8, 0, 0), ("missing", np.uint8, 0, 0), ("vanished", np.uint8, 0, 0),
    )

    def _alloc_arrays(self, capacity: int) -> None:
        for name, dtype, fill, width in self._ARRAYS:
            arr = np.full((capacity, width) if width else capacity, fill, dtype=dtype)
            old = getattr(self, name, None)
            if old is not None:
                arr[: len(old)] = old
            setattr(self, name, arr)

    def resize(self, capacity: int) -> None:
        if capacity <= self.capacity:
            return
        extra = (capacity - self.capacity) * NFILES
        self._fds.extend([-1] * extra)
        self._paths.extend([None] * extra)
        self._alloc_arrays(capacity)
        self.capacity = capacity

    # -- slots -----------------------------------------------------------
    def _release(self, slot: int) -> None:
        for f in range(NFILES):
            self._drop_file(slot, f)

    def _reset_slot(self, slot: int) -> None:
        self.has_prev[slot] = 0
        self.has_prev_thr[slot] = 0
        self.errors[slot] = 0
        self.died[slot] = 0
        self.usage_ns[slot] = 0
        self.nr_periods[slot] = 0
        self.nr_throttled[slot] = 0
        self.throttled_ns[slot] = 0
        self.sample_ns[slot] = 0
        self.mem_raw[slot, :] = 0
        self.cpu_cores[slot] = np.nan
        self.throttled_ratio[slot] = np.nan
        self.memory_usage[slot] = np.nan
        self.memory_usage_with_cache[slot] = np.nan
        self.cpuset_count[slot] = -1
        self.missing[slot] = 0
        self.vanished[slot] = 0

    def _open_one(self, slot: int, f: int, path: str | bytes) -> int:
        """Track file ``f`` of ``slot``: a descriptor, or its path in reopen mode; 0 or an errno."""
        b = path.encode() if isinstance(path, str) else bytes(path)
        i = slot * NFILES + f
        err = 0
        fd = -1
        if self.max_fds >= 0 and self.open_fds >= self.max_fds:
            err = errno.EMFILE
        else:
            try:
                fd = os.open(b, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                err = e.errno or errno.EIO
        if fd >= 0:
            self._fds[i] = fd
            self.open_fds += 1
            return 0
        if err in (errno.EMFILE, errno.ENFILE):
            r = self._read_path(b, 1)  # out of descriptors: the file must exist, then keep its path
            if isinstance(r, int):
                return -r
            self._paths[i] = b
            return 0
        return err

    def _drop_file(self, slot: int, f: int) -> None:
        i = slot * NFILES + f
        if self._fds[i] >= 0:
            os.close(self._fds[i])
            self._fds[i] = -1
            self.open_fds -= 1
        self._paths[i] = None

    def open(self, slot: int, usage: str | bytes | None = None, cpu_stat: str | bytes | None = None,
             memory_stat: str | bytes | None = None, cpuset: str | bytes | None = None) -> int:
        if slot < 0 or slot >= self.capacity:
            raise IndexError("slot out of range")
        if self.state[slot] != STATE_FREE:
            self._release(slot)
        self.state[slot] = STATE_FREE
        self._reset_slot(slot)
        if self.cgroup_version == 2 and usage is not None:
            raise ValueError("cgroup v2 keeps CPU usage in cpu.stat; pass usage=None")
        if usage is None and cpu_stat is None and memory_stat is None and cpuset is None:
            raise ValueError("at least one file is needed")
        first_err = 0
        missing = 0
        for f, p in enumerate((usage, cpu_stat, memory_stat, cpuset)):
            if p is None:
                continue
            err = self._open_one(slot, f, p)
            if err:
                missing |= 1 << f
                first_err = first_err or err
        if not any(self._has_file(slot, f) for f in range(NFILES)):
            return first_err
        self.missing[slot] = missing
        self.state[slot] = STATE_LIVE
        self.high_water = max(self.high_water, slot + 1)
        return 0

    def open_file(self, slot: int, file: int, path: str | bytes) -> int:
        if slot < 0 or slot >= self.capacity:
            raise IndexError("slot out of range")
        if file < 0 or file >= NFILES:
            raise IndexError("file index out of range")
        if self.state[slot] != STATE_LIVE:
            raise ValueError("open_file needs a live slot")
        if self.cgroup_version == 2 and file == FILE_USAGE:
            raise ValueError("cgroup v2 keeps CPU usage in cpu.stat; there is no usage file")
        if self._has_file(slot, file):
            return 0
        err = self._open_one(slot, file, path)
        if err:
            self.missing[slot] |= 1 << file
            return err
        self.missing[slot] &= ~(1 << file) & 0xFF
        # a file that comes (back) may belong to a new cgroup: its counters start afresh
        if file == FILE_USAGE or (file == FILE_CPUSTAT and self.cgroup_version == 2):
            self.has_prev[slot] = 0
        if file == FILE_CPUSTAT:
            self.has_prev_thr[slot] = 0
        return 0

    def close(self, slot: int) -> None:
        if slot < 0 or slot >= self.capacity:
            raise IndexError("slot out of range")
        self._release(slot)
        self.state[slot] = STATE_FREE
        self._reset_slot(slot)
        while self.high_water > 0 and self.state[self.high_water - 1] == STATE_FREE:
            self.high_water -= 1

    def is_reopen(self, slot: int, file: int) -> bool:
        return self._paths[slot * NFILES + file] is not None

    # -- reading ------------------------------------------------------------
    @staticmethod
    def _pread0(fd: int, n: int) -> bytes | int:
        try:
            return os.pread(fd, n, 0)
        except OSError as e:
            return -(e.errno or errno.EIO)

    def _read_path(self, path: bytes, n: int) -> bytes | int:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            return -(e.errno or errno.EIO)
        try:
            return self._pread0(fd, n)
        finally:
            os.close(fd)

    def _has_file(self, slot: int, f: int) -> bool:
        i = slot * NFILES + f
        return self._fds[i] >= 0 or self._paths[i] is not None

    def _read_file(self, slot: int, f: int) -> bytes | int:
        i = slot * NFILES + f
        fd = self._fds[i]
        path = self._paths[i]
        r = self._pread0(fd, BUFSIZE) if fd >= 0 else self._read_path(path, BUFSIZE)  # type: ignore[arg-type]
        if isinstance(r, bytes) and len(r) == BUFSIZE:
            return -errno.EFBIG
        return r

    def _gone(self, slot: int, f: int, r: int) -> bool:
        """A file that vanished (ENOENT, ENODEV) is no longer tracked; the slot lives on its others."""
        if r in (-errno.ENOENT, -errno.ENODEV):
            self._drop_file(slot, f)
            self.missing[slot] |= 1 << f
            self.vanished[slot] |= 1 << f
            return True
        return False

    def read(self, now_ns: int = -1) -> int:
        n_ok = 0
        for slot in range(self.high_water):
            self.died[slot] = 0
            self.vanished[slot] = 0
            if self.state[slot] != STATE_LIVE:
                continue
            if self._read_slot(slot, now_ns, 15):
                n_ok += 1
        return n_ok

    def read_some(self, slots: Any, files: Any = 15, now_ns: int = -1) -> int:
        """Read only the live slots named in ``slots``, and only the files in the ``files`` bitmask;
        every other slot and file has no sample this read (see the native reader)."""
        n_ok = 0
        hw = self.high_water
        self.died[:hw] = 0
        self.vanished[:hw] = 0
        for arr in (self.cpu_cores, self.throttled_ratio, self.memory_usage, self.memory_usage_with_cache):
            arr[:hw] = np.nan
        self.cpuset_count[:hw] = -1
        idx = np.asarray(slots, dtype=np.int64).tolist()
        if isinstance(files, (int, np.integer)):
            masks = [int(files) & 15] * len(idx)
        else:
            masks = np.asarray(files, dtype=np.uint8).tolist()
            if len(masks) != len(idx):
                raise ValueError("read_some: one files mask per slot, or one for all")
        for slot, mask in zip(idx, masks):
            if not 0 <= slot < hw or self.state[slot] != STATE_LIVE:
                continue
            if self._read_slot(slot, now_ns, mask):
                n_ok += 1
        return n_ok

    def _read_slot(self, slot: int, now_ns: int, files: int = 15) -> bool:
        err = 0
        gone = False
        usage = 0
        usage_ok = thr_ok = False
        cpu = [0, 0, 0, 0]
        if self.cgroup_version == 1 and files & 1 and self._has_file(slot, FILE_USAGE):
            r = self._read_file(slot, FILE_USAGE)
            if isinstance(r, int):
                err = -r
                gone |= self._gone(slot, FILE_USAGE, r)
            else:
                v = _parse_single(r)
                if v is None:
                    err = ERR_GARBLED_USAGE
                else:
                    usage, usage_ok = v, True
        if files & 2 and self._has_file(slot, FILE_CPUSTAT):
            r = self._read_file(slot, FILE_CPUSTAT)
            if isinstance(r, int):
                err = -r
                gone |= self._gone(slot, FILE_CPUSTAT, r)
            else:
                found, bad = _parse_kv(r, self._cpu_keys)
                if self.cgroup_version == 2 and max(found.get(b"usage_usec", 0),
                                                    found.get(b"throttled_usec", 0)) > INT64_MAX // 1000:
                    bad = True  # microseconds beyond what int64 nanoseconds hold: not a real counter
                if bad:
                    err = ERR_GARBLED_CPUSTAT
                elif self.cgroup_version == 2:
                    if b"usage_usec" in found:
                        usage, usage_ok = found[b"usage_usec"] * 1000, True
                    else:
                        err = ERR_GARBLED_CPUSTAT
                    if all(k in found for k in self._cpu_keys[1:]):
                        thr_ok = True
                        cpu = [0, found[b"nr_periods"], found[b"nr_throttled"],
                               found[b"throttled_usec"] * 1000]
                elif len(found) == 3:
                    thr_ok = True
                    cpu = [0, found[b"nr_periods"], found[b"nr_throttled"], found[b"throttled_time"]]
                else:
                    err = ERR_GARBLED_CPUSTAT
        t = now_ns if now_ns >= 0 else monotonic_ns()
        self.sample_ns[slot] = t
        self.cpu_cores[slot] = np.nan
        if usage_ok:
            self.usage_ns[slot] = usage
            if self.has_prev[slot]:
                dt = t - int(self.prev_t[slot])
                prev = int(self.prev_usage[slot])
                if usage >= prev and 0 < dt <= self.max_gap_ns:
                    self.cpu_cores[slot] = float(usage - prev) / float(dt)
            self.prev_usage[slot] = usage
            self.prev_t[slot] = t
            self.has_prev[slot] = 1
        self.throttled_ratio[slot] = np.nan
        if thr_ok:
            self.nr_periods[slot], self.nr_throttled[slot], self.throttled_ns[slot] = cpu[1], cpu[2], cpu[3]
            if self.has_prev_thr[slot]:
                dp = cpu[1] - int(self.prev_periods[slot])
                dthr = cpu[2] - int(self.prev_throttled[slot])
                if dp >= 0 and dthr >= 0:
                    self.throttled_ratio[slot] = float(dthr) / float(dp) if dp > 0 else 0.0
            self.prev_periods[slot] = cpu[1]
            self.prev_throttled[slot] = cpu[2]
            self.has_prev_thr[slot] = 1
        self.memory_usage[slot] = np.nan
        self.memory_usage_with_cache[slot] = np.nan
        if files & 4 and self._has_file(slot, FILE_MEMSTAT):
            r = self._read_file(slot, FILE_MEMSTAT)
            if isinstance(r, int):
                err = -r
                gone |= self._gone(slot, FILE_MEMSTAT, r)
            else:
                found, bad = _parse_kv(r, self._mem_keys)
                # sizes whose sum int64 cannot hold are garbage, not a wrapped-around sum
                if bad or len(found) != 5 or sum(found.values()) > INT64_MAX:
                    err = ERR_GARBLED_MEMSTAT
                else:
                    m = [found[k] for k in self._mem_keys]
                    self.mem_raw[slot, :] = m
                    self.memory_usage[slot] = float(m[0] + m[1] + m[2])
                    self.memory_usage_with_cache[slot] = float(m[0] + m[1] + m[2] + m[3] + m[4])
        self.cpuset_count[slot] = -1
        if files & 8 and self._has_file(slot, FILE_CPUSET):
            r = self._read_file(slot, FILE_CPUSET)
            if isinstance(r, int):
                err = -r
                gone |= self._gone(slot, FILE_CPUSET, r)
            else:
                k = _parse_cpuset_count(r)
                if k < 0:
                    err = ERR_GARBLED_CPUSET
                else:
                    self.cpuset_count[slot] = k
        self.errors[slot] = err
        if gone and not any(self._has_file(slot, f) for f in range(NFILES)):
            # every file vanished: the cgroup is gone
            self._release(slot)
            self.state[slot] = STATE_DEAD
            self.died[slot] = 1
        return err == 0

    def pread_only(self) -> int:
        total = 0
        for slot in range(self.high_water):
            if self.state[slot] != STATE_LIVE:
                continue
            for f in range(NFILES):
                if self._has_file(slot, f):
                    r = self._read_file(slot, f)
                    if isinstance(r, bytes):
                        total += len(r)
        return total

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # the default argument keeps os.close reachable when the interpreter is shutting down
        for fd in getattr(self, "_fds", ()):
            if fd >= 0:
                try:  # noqa: SIM105 (contextlib may be gone at shutdown)
                    _close(fd)
                except OSError:
                    pass


class NodeReader:
    """See ``ext/reader.pyx``: ``/proc/stat`` and ``/proc/meminfo`` kept open."""

    def __init__(self, stat_path: str | bytes, meminfo_path: str | bytes, max_cpus: int = 4096) -> None:
        self._paths = [os.fsencode(stat_path), os.fsencode(meminfo_path)]
        self._fds = [-1, -1]
        for k in (0, 1):
            with contextlib.suppress(OSError):
                self._fds[k] = os.open(self._paths[k], os.O_RDONLY | os.O_CLOEXEC)
        self.cpu_ticks = np.full(max_cpus, -1, dtype=np.int64)
        self.total_ticks = -1  # every field of the "cpu" line at the last read_stat

    def _read_all(self, k: int) -> bytes:
        if self._fds[k] < 0:
            try:
                self._fds[k] = os.open(self._paths[k], os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                raise OSError(e.errno, f"cannot open: {e.strerror}", os.fsdecode(self._paths[k])) from None
        fd = self._fds[k]
        size = 262144
        while True:
            try:
                data = os.pread(fd, size, 0)
            except OSError as e:
                raise OSError(e.errno, f"read failed: {e.strerror}", os.fsdecode(self._paths[k])) from None
            if len(data) < size:
                return data
            size *= 2

    def read_stat(self) -> int:
        data = self._read_all(0)
        total = all_ticks = -1
        self.cpu_ticks[:] = -1
        for line in data.split(b"\n"):
            if len(line) < 4 or not line.startswith(b"cpu"):
                break
            fields = [f for f in line.split(b" ") if f]  # fields are split by spaces only, as natively
            name = fields[0]
            vals = []
            for tok in fields[1:]:
                v = _parse_int(tok)
                if v is None:
                    raise ValueError("garbled /proc/stat value")
                vals.append(v)
            if len(vals) < 7:
                raise ValueError("/proc/stat cpu line has too few fields")
            every = 0
            for v in vals:  # natively the sum is checked as it grows: the first field to overflow fails
                if v < 0 or v > INT64_MAX - every:
                    raise ValueError("garbled /proc/stat value")
                every += v
            busy = vals[0] + vals[1] + vals[2] + vals[5] + vals[6]
            if busy > INT64_MAX:
                raise ValueError("garbled /proc/stat value")  # ticks beyond int64: not a real count
            if name == b"cpu":
                total = busy
                all_ticks = every
            else:
                cpu_id = _parse_int(name[3:])
                if cpu_id is None:
                    raise ValueError("garbled /proc/stat cpu line")
                if 0 <= cpu_id < len(self.cpu_ticks):
                    self.cpu_ticks[cpu_id] = busy
        if total < 0:
            raise ValueError("/proc/stat has no total cpu line")
        self.total_ticks = all_ticks
        return total

    def read_meminfo(self) -> tuple[int, int, int]:
        data = self._read_all(1)
        out = {b"MemTotal": -1, b"MemFree": -1, b"MemAvailable": -1}
        seen: set[bytes] = set()
        for line in data.split(b"\n"):
            key, sep, rest = line.partition(b":")
            if sep and key in out and key not in seen:
                seen.add(key)
                v = _parse_int(_first_token(rest))
                if v is not None and v >= 0:
                    out[key] = v
            if len(seen) == 3:
                break
        return out[b"MemTotal"], out[b"MemFree"], out[b"MemAvailable"]

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # the default argument keeps os.close reachable when the interpreter is shutting down
        for fd in getattr(self, "_fds", ()):
            if fd >= 0:
                try:  # noqa: SIM105 (contextlib may be gone at shutdown)
                    _close(fd)
                except OSError:
                    pass


__all__ = ["NodeReader", "StatReader", "monotonic_ns"]
