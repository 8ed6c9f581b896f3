# cython: language_level=3
"""qosmanager._native.reader -- the collector's hot loop.

``StatReader`` owns, for every tracked cgroup (a *slot*: a pod or a container),
the open file descriptors of the stat files the agent needs and reads them all
in one call per tick with ``pread(fd, buf, n, 0)``.  It parses only the keys it
needs, straight into preallocated numpy arrays, and turns counters into rates:

* CPU usage in cores  = delta(usage ns) / delta(monotonic ns), first sample skipped,
  counter resets (usage going backwards) skipped, samples older than ``max_gap_ns``
  treated as a first sample again;
* throttle ratio      = delta(nr_throttled) / delta(nr_periods), 0 when no period elapsed;
* memory usage        = inactive_anon + active_anon + unevictable;
* with page cache     = usage + inactive_file + active_file.

Files per slot (``FILE_*`` indices):

=============  =========================  ================================
index          cgroup v1                  cgroup v2
=============  =========================  ================================
FILE_USAGE     cpuacct/.../cpuacct.usage  (unused: usage is in cpu.stat)
FILE_CPUSTAT   cpu/.../cpu.stat           cpu.stat (usage_usec + throttling)
FILE_MEMSTAT   memory/.../memory.stat     memory.stat
FILE_CPUSET    cpuset/.../cpuset.cpus     cpuset.cpus.effective
=============  =========================  ================================

``cpuset`` is optional (only the BE cgroups need it, for the BE real CPU limit):
``cpuset_count[slot]`` is the number of CPUs it lists, -1 when not read.

Each file of a slot lives on its own: a file that cannot be opened (its cgroup is
missing in that hierarchy, e.g. no memory hierarchy for the pod) or that vanishes
later (ENOENT, ENODEV) is not tracked, its bit is set in ``missing[slot]`` (and, in
the read where it vanished, in ``vanished[slot]``), its values are NaN, and the
slot's other files are still read.  Only when every file of a slot is gone is the
slot dead: ``state[slot]`` becomes ``STATE_DEAD`` and ``died[slot]`` is set.
:meth:`StatReader.open_file` tracks a missing file again.  A garbled file gives NaN
for the values it carries and a negative code in ``errors[slot]``.  When the
process runs out of descriptors, a slot's file is kept as a path and opened,
read and closed on every tick instead ("reopen mode"), so the agent degrades
instead of failing.

The plain-Python twin of this module is ``qosmanager._native.pure_reader``; the
two must produce the same arrays for the same files and the same clock.
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.string cimport memcmp, memchr, strlen, memcpy
from libc.stdlib cimport malloc, free, realloc
from libc.math cimport NAN

import os

import numpy as np

cdef extern from "<errno.h>" nogil:
    int errno
    enum:
        EINTR
        ENOENT
        ENODEV
        EMFILE
        ENFILE
        EFBIG
        ENOMEM
        EPERM

cdef extern from "<fcntl.h>" nogil:
    int c_open "open"(const char *path, int flags)
    enum:
        O_RDONLY
        O_CLOEXEC
        O_NOATIME

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void *buf, size_t count, long offset)
    int close(int fd)

cdef extern from "<time.h>" nogil:
    ctypedef int clockid_t
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(clockid_t clk, timespec *tp)
    enum:
        CLOCK_MONOTONIC

# ---------------------------------------------------------------------------
# public constants
# ---------------------------------------------------------------------------
cdef enum:
    C_STATE_FREE = 0
    C_STATE_LIVE = 1
    C_STATE_DEAD = 2
    C_ERR_GARBLED_USAGE = -1
    C_ERR_GARBLED_CPUSTAT = -2
    C_ERR_GARBLED_MEMSTAT = -3
    C_ERR_GARBLED_CPUSET = -4

FILE_USAGE = 0
FILE_CPUSTAT = 1
FILE_MEMSTAT = 2
FILE_CPUSET = 3
NFILES = 4

STATE_FREE = C_STATE_FREE
STATE_LIVE = C_STATE_LIVE
STATE_DEAD = C_STATE_DEAD

ERR_GARBLED_USAGE = C_ERR_GARBLED_USAGE
ERR_GARBLED_CPUSTAT = C_ERR_GARBLED_CPUSTAT
ERR_GARBLED_MEMSTAT = C_ERR_GARBLED_MEMSTAT
ERR_GARBLED_CPUSET = C_ERR_GARBLED_CPUSET

DEF C_NFILES = 4
cdef int64_t INT64_MAX_C = 9223372036854775807
DEF BUFSIZE = 65536
DEF NKEYS_MEM = 5
DEF NKEYS_CPU = 4

cdef inline int64_t _now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


def monotonic_ns():
    """The clock the reader stamps samples with (CLOCK_MONOTONIC, ns)."""
    return _now_ns()


cdef inline ssize_t _pread0(int fd, char *buf, size_t n) noexcept nogil:
    """pread at offset 0, retrying on EINTR; returns -errno on failure."""
    cdef ssize_t r
    while True:
        r = pread(fd, buf, n, 0)
        if r >= 0:
            return r
        if errno != EINTR:
            return -errno


cdef inline int _open_ro(const char *path) noexcept nogil:
    """open read-only without access-time updates (O_NOATIME: a read of a file on tmpfs, such as
    a fake tree, otherwise stamps its inode's atime every time; cgroupfs keeps none); a file the
    process may not open so (not its owner, no CAP_FOWNER: EPERM) is opened plainly."""
    cdef int fd = c_open(path, O_RDONLY | O_CLOEXEC | O_NOATIME)
    if fd < 0 and errno == EPERM:
        fd = c_open(path, O_RDONLY | O_CLOEXEC)
    return fd


cdef inline ssize_t _read_path(const char *path, char *buf, size_t n) noexcept nogil:
    """open + pread + close for a file kept in reopen mode; returns -errno on failure."""
    cdef int fd = _open_ro(path)
    cdef ssize_t r
    if fd < 0:
        return -errno
    r = _pread0(fd, buf, n)
    close(fd)
    return r


cdef inline int _parse_int(const char *p, const char *end, int64_t *out) noexcept nogil:
    """Parse one non-negative decimal integer starting at p, ending at whitespace or end.

    Every number the agent reads from these files is a counter or a size, which the kernel
    prints unsigned: a sign, like any other non-digit, makes the token garbled.
    Returns the number of characters consumed, or -1 when the token is not such an integer.
    """
    cdef const char *s = p
    cdef uint8_t c
    cdef int64_t v = 0
    cdef int digits = 0
    while p < end:
        c = <uint8_t>p[0]
        if c >= 48 and c <= 57:
            if v > (INT64_MAX_C - <int64_t>(c - 48)) / 10:  # would overflow int64
                return -1
            v = v * 10 + (c - 48)
            digits += 1
            p += 1
        elif c == 32 or c == 10 or c == 9 or c == 13:
            break
        else:
            return -1
    if digits == 0:
        return -1
    out[0] = v
    return <int>(p - s)


cdef int _parse_single(const char *buf, ssize_t n, int64_t *out) noexcept nogil:
    """A file holding one integer (cpuacct.usage). 0 on success, -1 when garbled."""
    cdef const char *p = buf
    cdef const char *end = buf + n
    cdef int k
    while p < end and (p[0] == b' ' or p[0] == b'\t'):
        p += 1
    k = _parse_int(p, end, out)
    if k < 0:
        return -1
    p += k
    while p < end:
        if p[0] != b'\n' and p[0] != b' ' and p[0] != b'\r' and p[0] != b'\t':
            return -1
        p += 1
    return 0


cdef int _parse_kv(const char *buf, ssize_t n, const char **keys, const int *klen, int nkeys,
                   int64_t *out, int *bad) noexcept nogil:
    """Scan "key value" lines, pulling only the wanted keys.

    Returns a bitmask of the keys found; stops as soon as all were found.  A wanted
    key whose value is not an integer sets ``bad[0] = 1``.  Later duplicates of a key
    overwrite earlier ones (as koordlet's ParseKVMap), except that scanning stops once
    every key has been seen.
    """
    cdef const char *p = buf
    cdef const char *end = buf + n
    cdef const char *eol
    cdef const char *sp
    cdef int found = 0
    cdef int full = (1 << nkeys) - 1
    cdef int i, L, k
    cdef int64_t v
    while p < end:
        eol = <const char *>memchr(p, b'\n', end - p)
        if eol == NULL:
            eol = end
        # A line is key i's when its first space comes right after the key's bytes: a key holds
        # no space, so "a space at klen and the key before it" is that test without a search for
        # the space (most lines are no wanted key's and are passed over by two byte compares).
        L = <int>(eol - p)
        for i in range(nkeys):
            if L > klen[i] and p[klen[i]] == b' ' and p[0] == keys[i][0] and memcmp(p, keys[i], klen[i]) == 0:
                sp = p + klen[i] + 1
                while sp < eol and sp[0] == b' ':
                    sp += 1
                k = _parse_int(sp, eol, &v)
                if k < 0:
                    bad[0] = 1
                else:
                    out[i] = v
                    found |= (1 << i)
                if found == full:
                    return found
                break
        p = eol + 1
    return found


cdef inline int _digits(const char **pp, const char *end, int64_t *out) noexcept nogil:
    """Parse a run of decimal digits at *pp (a CPU id, at most 2^20); advance *pp."""
    cdef const char *p = pp[0]
    cdef int64_t v = 0
    cdef int n = 0
    while p < end and p[0] >= b'0' and p[0] <= b'9':
        v = v * 10 + (p[0] - 48)
        n += 1
        if v > 1048576:
            return -1
        p += 1
    if n == 0:
        return -1
    pp[0] = p
    out[0] = v
    return n


cdef int _parse_cpuset_count(const char *buf, ssize_t n) noexcept nogil:
    """Number of CPUs in a kernel CPU list ("0-3,8,10-11"); 0 when empty; -1 when garbled.

    The kernel prints ascending, disjoint ranges: anything else (overlaps, "0,0", ranges out of
    order) is garbled rather than counted twice, which also bounds the count by the largest id.
    """
    cdef const char *p = buf
    cdef const char *end = buf + n
    cdef int64_t a, b
    cdef int64_t last = -1
    cdef int64_t count = 0
    while end > p and (end[-1] == b'\n' or end[-1] == b' ' or end[-1] == b'\r' or end[-1] == b'\t'):
        end -= 1
    if p == end:
        return 0
    while True:
        if _digits(&p, end, &a) < 0 or a <= last:
            return -1
        b = a
        if p < end and p[0] == b'-':
            p += 1
            if _digits(&p, end, &b) < 0 or b < a:
                return -1
        count += b - a + 1
        last = b
        if p == end:
            break
        if p[0] != b',':
            return -1
        p += 1
    return <int>count


cdef const char *MEM_V1[5]
MEM_V1[0] = b"total_inactive_anon"
MEM_V1[1] = b"total_active_anon"
MEM_V1[2] = b"total_unevictable"
MEM_V1[3] = b"total_inactive_file"
MEM_V1[4] = b"total_active_file"
cdef const char *MEM_V2[5]
MEM_V2[0] = b"inactive_anon"
MEM_V2[1] = b"active_anon"
MEM_V2[2] = b"unevictable"
MEM_V2[3] = b"inactive_file"
MEM_V2[4] = b"active_file"
# cpu.stat: v1 has no usage key (usage lives in cpuacct.usage), so it parses 3 keys
# into positions 1..3 of the same 4-slot array v2 uses.
cdef const char *CPU_V1[3]
CPU_V1[0] = b"nr_periods"
CPU_V1[1] = b"nr_throttled"
CPU_V1[2] = b"throttled_time"
cdef const char *CPU_V2[4]
CPU_V2[0] = b"usage_usec"
CPU_V2[1] = b"nr_periods"
CPU_V2[2] = b"nr_throttled"
CPU_V2[3] = b"throttled_usec"


cdef class StatReader:
    """Slots of cgroup stat files, read all at once.

    Parameters
    ----------
    capacity:
        Number of slots; :meth:`resize` grows it.
    cgroup_version:
        1 or 2; selects the file set and the keys parsed.
    max_gap_ns:
        A previous sample older than this is discarded (as koordlet's 20 s
        last-counter cache): the next sample is treated as a first sample.
    max_fds:
        Descriptor budget.  Files beyond it are kept in reopen mode.

    Arrays (numpy, length ``capacity``), refreshed by :meth:`read`:

    ``state`` (uint8), ``errors`` (int32: 0, errno, or ERR_GARBLED_*), ``died``
    (uint8, set for slots that vanished during this read), ``sample_ns`` (int64),
    ``usage_ns``, ``nr_periods``, ``nr_throttled``, ``throttled_ns`` (int64 raw
    counters), ``mem_raw`` (int64, shape (capacity, 5): inactive_anon, active_anon,
    unevictable, inactive_file, active_file), ``cpu_cores``, ``throttled_ratio``,
    ``memory_usage``, ``memory_usage_with_cache`` (float64, NaN = no sample),
    ``cpuset_count`` (int32, -1 = no sample), ``missing`` (uint8 bitmask, bit
    ``FILE_*``: asked for but not tracked), ``vanished`` (uint8 bitmask: files that
    vanished during this read).
    """

    cdef readonly int capacity
    cdef readonly int cgroup_version
    cdef readonly int high_water
    cdef public long long max_gap_ns
    cdef public long long max_fds
    cdef readonly long long open_fds
    cdef int *fds
    cdef char **paths
    cdef char *buf
    cdef const char **cpu_keys
    cdef const char **mem_keys
    cdef int cpu_klen[4]
    cdef int n_cpu_keys
    cdef int mem_klen[5]

    cdef readonly object state, errors, died, sample_ns, usage_ns, nr_periods, nr_throttled
    cdef readonly object throttled_ns, mem_raw, cpu_cores, throttled_ratio
    cdef readonly object memory_usage, memory_usage_with_cache, cpuset_count
    cdef readonly object prev_usage, prev_t, has_prev, prev_periods, prev_throttled, has_prev_thr
    cdef readonly object missing, vanished

    cdef uint8_t[:] v_state
    cdef int32_t[:] v_errors
    cdef uint8_t[:] v_died
    cdef int64_t[:] v_sample, v_usage, v_periods, v_throttled, v_thr_ns
    cdef int64_t[:, :] v_mem
    cdef double[:] v_cores, v_ratio, v_memu, v_memc
    cdef int32_t[:] v_cpuset
    cdef int64_t[:] v_prev_usage, v_prev_t, v_prev_periods, v_prev_throttled
    cdef uint8_t[:] v_has_prev, v_has_prev_thr, v_missing, v_vanished

    def __cinit__(self, int capacity, int cgroup_version, long long max_gap_ns=20_000_000_000,
                  long long max_fds=-1):
        cdef int i
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        if cgroup_version not in (1, 2):
            raise ValueError("cgroup_version must be 1 or 2")
        self.fds = <int *>malloc(sizeof(int) * capacity * C_NFILES)
        self.paths = <char **>malloc(sizeof(char *) * capacity * C_NFILES)
        self.buf = <char *>malloc(BUFSIZE)
        if self.fds == NULL or self.paths == NULL or self.buf == NULL:
            raise MemoryError()
        for i in range(capacity * C_NFILES):
            self.fds[i] = -1
            self.paths[i] = NULL

    def __init__(self, int capacity, int cgroup_version, long long max_gap_ns=20_000_000_000,
                 long long max_fds=-1):
        cdef int i
        self.capacity = capacity
        self.cgroup_version = cgroup_version
        self.max_gap_ns = max_gap_ns
        self.max_fds = max_fds
        self.open_fds = 0
        self.high_water = 0
        if cgroup_version == 1:
            self.cpu_keys = CPU_V1
            self.mem_keys = MEM_V1
        else:
            self.cpu_keys = CPU_V2
            self.mem_keys = MEM_V2
        self.n_cpu_keys = 3 if cgroup_version == 1 else 4
        for i in range(self.n_cpu_keys):
            self.cpu_klen[i] = <int>strlen(self.cpu_keys[i])
        for i in range(NKEYS_MEM):
            self.mem_klen[i] = <int>strlen(self.mem_keys[i])

        self._alloc_arrays(capacity)

    # (name, dtype, fill, per-slot width) of every per-slot array, in one place so
    # that __init__ and resize() cannot drift apart.
    _ARRAYS = (
        ("state", np.uint8, 0, 0), ("errors", np.int32, 0, 0), ("died", np.uint8, 0, 0),
        ("sample_ns", np.int64, 0, 0), ("usage_ns", np.int64, 0, 0), ("nr_periods", np.int64, 0, 0),
        ("nr_throttled", np.int64, 0, 0), ("throttled_ns", np.int64, 0, 0),
        ("mem_raw", np.int64, 0, NKEYS_MEM), ("cpu_cores", np.float64, np.nan, 0),
        ("throttled_ratio", np.float64, np.nan, 0), ("memory_usage", np.float64, np.nan, 0),
        ("memory_usage_with_cache", np.float64, np.nan, 0), ("cpuset_count", np.int32, -1, 0),
        ("prev_usage", np.int64, 0, 0), ("prev_t", np.int64, 0, 0), ("has_prev", np.uint8, 0, 0),
        ("prev_periods", np.int64, 0, 0), ("prev_throttled", np.int64, 0, 0),
        ("has_prev_thr", np.uint8, 0, 0), ("missing", np.uint8, 0, 0), ("vanished", np.uint8, 0, 0),
    )

    def _alloc_arrays(self, int capacity):
        for name, dtype, fill, width in self._ARRAYS:
            shape = (capacity, width) if width else capacity
            arr = np.full(shape, fill, dtype=dtype)
            old = self._get_array(name)
            if old is not None:
                arr[: len(old)] = old
            self._set_array(name, arr)
        self._bind_views()

    cdef object _get_array(self, str name):
        if name == "state":
            return self.state
        elif name == "errors":
            return self.errors
        elif name == "died":
            return self.died
        elif name == "sample_ns":
            return self.sample_ns
        elif name == "usage_ns":
            return self.usage_ns
        elif name == "nr_periods":
            return self.nr_periods
        elif name == "nr_throttled":
            return self.nr_throttled
        elif name == "throttled_ns":
            return self.throttled_ns
        elif name == "mem_raw":
            return self.mem_raw
        elif name == "cpu_cores":
            return self.cpu_cores
        elif name == "throttled_ratio":
            return self.throttled_ratio
        elif name == "memory_usage":
            return self.memory_usage
        elif name == "memory_usage_with_cache":
            return self.memory_usage_with_cache
        elif name == "cpuset_count":
            return self.cpuset_count
        elif name == "prev_usage":
            return self.prev_usage
        elif name == "prev_t":
            return self.prev_t
        elif name == "has_prev":
            return self.has_prev
        elif name == "prev_periods":
            return self.prev_periods
        elif name == "prev_throttled":
            return self.prev_throttled
        elif name == "has_prev_thr":
            return self.has_prev_thr
        elif name == "missing":
            return self.missing
        elif name == "vanished":
            return self.vanished
        raise KeyError(name)

    cdef void _set_array(self, str name, object arr):
        if name == "state":
            self.state = arr
        elif name == "errors":
            self.errors = arr
        elif name == "died":
            self.died = arr
        elif name == "sample_ns":
            self.sample_ns = arr
        elif name == "usage_ns":
            self.usage_ns = arr
        elif name == "nr_periods":
            self.nr_periods = arr
        elif name == "nr_throttled":
            self.nr_throttled = arr
        elif name == "throttled_ns":
            self.throttled_ns = arr
        elif name == "mem_raw":
            self.mem_raw = arr
        elif name == "cpu_cores":
            self.cpu_cores = arr
        elif name == "throttled_ratio":
            self.throttled_ratio = arr
        elif name == "memory_usage":
            self.memory_usage = arr
        elif name == "memory_usage_with_cache":
            self.memory_usage_with_cache = arr
        elif name == "cpuset_count":
            self.cpuset_count = arr
        elif name == "prev_usage":
            self.prev_usage = arr
        elif name == "prev_t":
            self.prev_t = arr
        elif name == "has_prev":
            self.has_prev = arr
        elif name == "prev_periods":
            self.prev_periods = arr
        elif name == "prev_throttled":
            self.prev_throttled = arr
        elif name == "has_prev_thr":
            self.has_prev_thr = arr
        elif name == "missing":
            self.missing = arr
        elif name == "vanished":
            self.vanished = arr

    def _bind_views(self):
        self.v_state = self.state
        self.v_errors = self.errors
        self.v_died = self.died
        self.v_sample = self.sample_ns
        self.v_usage = self.usage_ns
        self.v_periods = self.nr_periods
        self.v_throttled = self.nr_throttled
        self.v_thr_ns = self.throttled_ns
        self.v_mem = self.mem_raw
        self.v_cores = self.cpu_cores
        self.v_ratio = self.throttled_ratio
        self.v_memu = self.memory_usage
        self.v_memc = self.memory_usage_with_cache
        self.v_cpuset = self.cpuset_count
        self.v_prev_usage = self.prev_usage
        self.v_prev_t = self.prev_t
        self.v_has_prev = self.has_prev
        self.v_prev_periods = self.prev_periods
        self.v_prev_throttled = self.prev_throttled
        self.v_has_prev_thr = self.has_prev_thr
        self.v_missing = self.missing
        self.v_vanished = self.vanished

    def resize(self, int capacity):
        """Grow to ``capacity`` slots, keeping every slot's descriptors and history.

        The array attributes are replaced by larger copies: re-read them after a resize.
        """
        cdef int i
        cdef int *nfds
        cdef char **npaths
        if capacity <= self.capacity:
            return
        nfds = <int *>realloc(self.fds, sizeof(int) * capacity * C_NFILES)
        if nfds == NULL:
            raise MemoryError()
        self.fds = nfds
        npaths = <char **>realloc(self.paths, sizeof(char *) * capacity * C_NFILES)
        if npaths == NULL:
            raise MemoryError()
        self.paths = npaths
        for i in range(self.capacity * C_NFILES, capacity * C_NFILES):
            self.fds[i] = -1
            self.paths[i] = NULL
        self._alloc_arrays(capacity)
        self.capacity = capacity

    def __dealloc__(self):
        cdef int i
        if self.fds != NULL:
            for i in range(self.capacity * C_NFILES):
                if self.fds[i] >= 0:
                    close(self.fds[i])
            free(self.fds)
        if self.paths != NULL:
            for i in range(self.capacity * C_NFILES):
                if self.paths[i] != NULL:
                    free(self.paths[i])
            free(self.paths)
        if self.buf != NULL:
            free(self.buf)

    # ------------------------------------------------------------------
    # slot management
    # ------------------------------------------------------------------
    cdef void _release(self, int slot) noexcept nogil:
        cdef int f
        for f in range(C_NFILES):
            self._drop_file(slot, f)

    cdef void _drop_file(self, int slot, int f) noexcept nogil:
        cdef int i = slot * C_NFILES + f
        if self.fds[i] >= 0:
            close(self.fds[i])
            self.fds[i] = -1
            self.open_fds -= 1
        if self.paths[i] != NULL:
            free(self.paths[i])
            self.paths[i] = NULL

    cdef int _open_one(self, int slot, int f, object path) except -1:
        """Track file ``f`` of ``slot``: a descriptor, or its path in reopen mode; 0 or an errno."""
        cdef int i = slot * C_NFILES + f
        cdef int fd, err
        cdef ssize_t r
        cdef bytes b = path.encode() if isinstance(path, str) else bytes(path)
        cdef char *copy
        if self.max_fds >= 0 and self.open_fds >= self.max_fds:
            fd = -1
            err = EMFILE
        else:
            fd = _open_ro(b)
            err = errno if fd < 0 else 0
        if fd >= 0:
            self.fds[i] = fd
            self.open_fds += 1
            return 0
        if err == EMFILE or err == ENFILE:
            # Out of descriptors: probe that the file exists, then keep its path.
            r = _read_path(b, self.buf, 1)
            if r < 0:
                return <int>(-r)
            copy = <char *>malloc(len(b) + 1)
            if copy == NULL:
                raise MemoryError()
            memcpy(copy, <const char *>b, len(b))
            copy[len(b)] = 0
            self.paths[i] = copy
            return 0
        return err

    def open(self, int slot, usage=None, cpu_stat=None, memory_stat=None, cpuset=None):
        """Start tracking a cgroup in ``slot``.

        Paths are bytes or str; ``None`` skips that file.  The slot goes live when at
        least one file could be opened (the others are flagged in ``missing[slot]``)
        and 0 is returned; when none could, the slot is left free and the errno of
        the first failure is returned (ENOENT: the cgroup does not exist yet).
        """
        cdef int f, err, first_err = 0
        cdef uint8_t miss = 0
        if slot < 0 or slot >= self.capacity:
            raise IndexError("slot out of range")
        if self.v_state[slot] != C_STATE_FREE:
            self._release(slot)
        self.v_state[slot] = C_STATE_FREE
        self._reset_slot(slot)
        if self.cgroup_version == 2 and usage is not None:
            raise ValueError("cgroup v2 keeps CPU usage in cpu.stat; pass usage=None")
        if usage is None and cpu_stat is None and memory_stat is None and cpuset is None:
            raise ValueError("at least one file is needed")
        for f, p in enumerate((usage, cpu_stat, memory_stat, cpuset)):
            if p is None:
                continue
            try:
                err = self._open_one(slot, f, p)
            except BaseException:
                self._release(slot)
                raise
            if err:
                miss |= <uint8_t>(1 << f)
                if first_err == 0:
                    first_err = err
        if not self._any_file(slot):
            return first_err
        self.v_missing[slot] = miss
        self.v_state[slot] = C_STATE_LIVE
        if slot + 1 > self.high_water:
            self.high_water = slot + 1
        return 0

    def open_file(self, int slot, int file, path):
        """Track ``file`` (a ``FILE_*`` index) of a live slot that is missing it.

        Returns 0 (also when it is tracked already) or the errno; the slot's other
        files and its history are kept, but a CPU counter file that comes (back) starts
        its deltas afresh: it may belong to a new cgroup.
        """
        cdef int err
        if slot < 0 or slot >= self.capacity:
            raise IndexError("slot out of range")
        if file < 0 or file >= C_NFILES:
            raise IndexError("file index out of range")
        if self.v_state[slot] != C_STATE_LIVE:
            raise ValueError("open_file needs a live slot")
        if self.cgroup_version == 2 and file == 0:
            raise ValueError("cgroup v2 keeps CPU usage in cpu.stat; there is no usage file")
        if self._has_file(slot, file):
            return 0
        err = self._open_one(slot, file, path)
        if err:
            self.v_missing[slot] |= <uint8_t>(1 << file)
            return err
        self.v_missing[slot] &= <uint8_t>(~(1 << file) & 0xFF)
        if file == 0 or (file == 1 and self.cgroup_version == 2):
            self.v_has_prev[slot] = 0
        if file == 1:
            self.v_has_prev_thr[slot] = 0
        return 0

    def close(self, int slot):
        """Stop tracking ``slot`` (closing its descriptors) and free it."""
        if slot < 0 or slot >= self.capacity:
            raise IndexError("slot out of range")
        self._release(slot)
        self.v_state[slot] = C_STATE_FREE
        self._reset_slot(slot)
        while self.high_water > 0 and self.v_state[self.high_water - 1] == C_STATE_FREE:
            self.high_water -= 1

    cdef void _reset_slot(self, int slot) noexcept nogil:
        cdef int k
        self.v_has_prev[slot] = 0
        self.v_has_prev_thr[slot] = 0
        self.v_errors[slot] = 0
        self.v_died[slot] = 0
        self.v_usage[slot] = 0
        self.v_periods[slot] = 0
        self.v_throttled[slot] = 0
        self.v_thr_ns[slot] = 0
        self.v_sample[slot] = 0
        for k in range(NKEYS_MEM):
            self.v_mem[slot, k] = 0
        self.v_cores[slot] = NAN
        self.v_ratio[slot] = NAN
        self.v_memu[slot] = NAN
        self.v_memc[slot] = NAN
        self.v_cpuset[slot] = -1
        self.v_missing[slot] = 0
        self.v_vanished[slot] = 0

    def is_reopen(self, int slot, int file):
        """True when ``file`` of ``slot`` is kept as a path (descriptor budget exhausted)."""
        return self.paths[slot * C_NFILES + file] != NULL

    # ------------------------------------------------------------------
    # the tick
    # ------------------------------------------------------------------
    cdef ssize_t _read_file(self, int slot, int f) noexcept nogil:
        cdef int i = slot * C_NFILES + f
        cdef ssize_t r
        if self.fds[i] >= 0:
            r = _pread0(self.fds[i], self.buf, BUFSIZE)
        elif self.paths[i] != NULL:
            r = _read_path(self.paths[i], self.buf, BUFSIZE)
        else:
            return -ENOENT - 100000  # file not tracked: caller checks has_file first
        if r == BUFSIZE:
            return -EFBIG
        return r

    cdef inline bint _has_file(self, int slot, int f) noexcept nogil:
        cdef int i = slot * C_NFILES + f
        return self.fds[i] >= 0 or self.paths[i] != NULL

    cdef inline bint _any_file(self, int slot) noexcept nogil:
        return (self._has_file(slot, 0) or self._has_file(slot, 1) or self._has_file(slot, 2)
                or self._has_file(slot, 3))

    cdef inline bint _gone(self, int slot, int f, ssize_t r) noexcept nogil:
        """A file that vanished (ENOENT, ENODEV) is no longer tracked; the slot lives on its others."""
        if r == -ENOENT or r == -ENODEV:
            self._drop_file(slot, f)
            self.v_missing[slot] |= <uint8_t>(1 << f)
            self.v_vanished[slot] |= <uint8_t>(1 << f)
            return True
        return False

    def read(self, long long now_ns=-1):
        """Read every live slot once.  Returns the number of slots read without error.

        ``now_ns`` >= 0 stamps every slot with that time instead of the monotonic
        clock (deterministic tests, equivalence with the reference reader).
        """
        cdef int slot, n_ok = 0
        cdef int hw = self.high_water
        with nogil:
            for slot in range(hw):
                self.v_died[slot] = 0
                self.v_vanished[slot] = 0
                if self.v_state[slot] != C_STATE_LIVE:
                    continue
                if self._read_slot(slot, now_ns, 15):
                    n_ok += 1
        return n_ok

    def read_some(self, slots, files=15, long long now_ns=-1):
        """Read only the live slots named in ``slots`` (an integer array), and of each only the
        files whose bit (``1 << FILE_*``) is set in ``files`` (one mask for all, or an array of one
        mask per entry of ``slots``).  Every other slot, and every file
        left out, has no sample this read (NaN, cpuset -1); the counters of what is not read stay
        as they were, so the next read of a slot gives its rate since its previous read.
        Returns the number of slots read without error.
        """
        cdef int64_t[:] idx = np.ascontiguousarray(slots, dtype=np.int64)
        cdef Py_ssize_t i, n = idx.shape[0]
        cdef uint8_t[:] fm
        if isinstance(files, (int, np.integer)):
            fm = np.full(n, int(files) & 15, dtype=np.uint8)
        else:
            fm = np.ascontiguousarray(files, dtype=np.uint8)
            if fm.shape[0] != n:
                raise ValueError("read_some: one files mask per slot, or one for all")
        cdef int slot, n_ok = 0
        cdef int hw = self.high_water
        with nogil:
            for slot in range(hw):
                self.v_died[slot] = 0
                self.v_vanished[slot] = 0
                self.v_cores[slot] = NAN
                self.v_ratio[slot] = NAN
                self.v_memu[slot] = NAN
                self.v_memc[slot] = NAN
                self.v_cpuset[slot] = -1
            for i in range(n):
                slot = <int>idx[i]
                if slot < 0 or slot >= hw or self.v_state[slot] != C_STATE_LIVE:
                    continue
                if self._read_slot(slot, now_ns, fm[i]):
                    n_ok += 1
        return n_ok

    cdef bint _read_slot(self, int slot, long long now_ns, int files) noexcept nogil:
        cdef ssize_t r
        cdef int64_t usage = 0, t
        cdef int64_t cpu[4]
        cdef int64_t mem[5]
        cdef int found, bad, k
        cdef bint usage_ok = False, thr_ok = False, gone = False
        cdef int32_t err = 0
        cdef int64_t dp, dthr, dt, total

        cpu[0] = 0; cpu[1] = 0; cpu[2] = 0; cpu[3] = 0
        # --- CPU usage (v1 cpuacct.usage) ---
        if self.cgroup_version == 1 and (files & 1) and self._has_file(slot, 0):
            r = self._read_file(slot, 0)
            if r < 0:
                err = <int32_t>(-r)
                gone |= self._gone(slot, 0, r)
            elif _parse_single(self.buf, r, &usage) == 0:
                usage_ok = True
            else:
                err = C_ERR_GARBLED_USAGE
        # --- cpu.stat (v1 throttling; v2 usage + throttling) ---
        if (files & 2) and self._has_file(slot, 1):
            r = self._read_file(slot, 1)
            if r < 0:
                err = <int32_t>(-r)
                gone |= self._gone(slot, 1, r)
            else:
                bad = 0
                if self.cgroup_version == 2:
                    found = _parse_kv(self.buf, r, self.cpu_keys, self.cpu_klen, 4, cpu, &bad)
                else:
                    # v1 keys land in cpu[1..3]; shift the mask to the v2 layout
                    found = _parse_kv(self.buf, r, self.cpu_keys, self.cpu_klen, 3, &cpu[1], &bad) << 1
                if self.cgroup_version == 2 and (cpu[0] > INT64_MAX_C / 1000 or cpu[3] > INT64_MAX_C / 1000):
                    bad = 1  # microseconds beyond what int64 nanoseconds hold: not a real counter
                if bad:
                    err = C_ERR_GARBLED_CPUSTAT
                elif self.cgroup_version == 2:
                    if found & 1:
                        usage = cpu[0] * 1000
                        usage_ok = True
                    else:
                        err = C_ERR_GARBLED_CPUSTAT
                    # throttling keys are absent where the cpu controller is off: no error
                    thr_ok = (found & 14) == 14
                    cpu[3] = cpu[3] * 1000
                elif (found & 14) == 14:
                    thr_ok = True
                else:
                    err = C_ERR_GARBLED_CPUSTAT
        t = now_ns if now_ns >= 0 else _now_ns()
        self.v_sample[slot] = t
        # usage -> cores
        self.v_cores[slot] = NAN
        if usage_ok:
            self.v_usage[slot] = usage
            if self.v_has_prev[slot]:
                dt = t - self.v_prev_t[slot]
                if usage >= self.v_prev_usage[slot] and dt > 0 and dt <= self.max_gap_ns:
                    self.v_cores[slot] = <double>(usage - self.v_prev_usage[slot]) / <double>dt
            self.v_prev_usage[slot] = usage
            self.v_prev_t[slot] = t
            self.v_has_prev[slot] = 1
        # throttling
        self.v_ratio[slot] = NAN
        if thr_ok:
            self.v_periods[slot] = cpu[1]
            self.v_throttled[slot] = cpu[2]
            self.v_thr_ns[slot] = cpu[3]
            if self.v_has_prev_thr[slot]:
                dp = cpu[1] - self.v_prev_periods[slot]
                dthr = cpu[2] - self.v_prev_throttled[slot]
                if dp >= 0 and dthr >= 0:
                    if dp > 0:
                        self.v_ratio[slot] = <double>dthr / <double>dp
                    else:
                        self.v_ratio[slot] = 0.0
            self.v_prev_periods[slot] = cpu[1]
            self.v_prev_throttled[slot] = cpu[2]
            self.v_has_prev_thr[slot] = 1
        # --- memory.stat ---
        self.v_memu[slot] = NAN
        self.v_memc[slot] = NAN
        if (files & 4) and self._has_file(slot, 2):
            r = self._read_file(slot, 2)
            if r < 0:
                err = <int32_t>(-r)
                gone |= self._gone(slot, 2, r)
            else:
                bad = 0
                for k in range(NKEYS_MEM):
                    mem[k] = 0
                found = _parse_kv(self.buf, r, self.mem_keys, self.mem_klen, NKEYS_MEM, mem, &bad)
                if not bad and found == 31:
                    # sizes whose sum int64 cannot hold are garbage, not a wrapped-around sum
                    total = 0
                    for k in range(NKEYS_MEM):
                        if mem[k] > INT64_MAX_C - total:
                            bad = 1
                            break
                        total += mem[k]
                if bad or found != 31:
                    err = C_ERR_GARBLED_MEMSTAT
                else:
                    for k in range(NKEYS_MEM):
                        self.v_mem[slot, k] = mem[k]
                    self.v_memu[slot] = <double>(mem[0] + mem[1] + mem[2])
                    self.v_memc[slot] = <double>(mem[0] + mem[1] + mem[2] + mem[3] + mem[4])
        # --- cpuset.cpus (BE cgroups only) ---
        self.v_cpuset[slot] = -1
        if (files & 8) and self._has_file(slot, 3):
            r = self._read_file(slot, 3)
            if r < 0:
                err = <int32_t>(-r)
                gone |= self._gone(slot, 3, r)
            else:
                k = _parse_cpuset_count(self.buf, r)
                if k < 0:
                    err = C_ERR_GARBLED_CPUSET
                else:
                    self.v_cpuset[slot] = k
        self.v_errors[slot] = err
        if gone and not self._any_file(slot):
            # every file vanished: the cgroup is gone
            self.v_state[slot] = C_STATE_DEAD
            self.v_died[slot] = 1
        return err == 0

    def pread_only(self):
        """The floor: pread every tracked descriptor once, parse nothing.

        Returns the number of bytes read.  Used by the benchmarks to show how close
        :meth:`read` comes to the kernel's own cost.
        """
        cdef int slot, f
        cdef ssize_t r
        cdef long long total = 0
        cdef int hw = self.high_water
        with nogil:
            for slot in range(hw):
                if self.v_state[slot] != C_STATE_LIVE:
                    continue
                for f in range(C_NFILES):
                    if self._has_file(slot, f):
                        r = self._read_file(slot, f)
                        if r > 0:
                            total += r
        return total


# ---------------------------------------------------------------------------
# node-level procfs reader
# ---------------------------------------------------------------------------
cdef class NodeReader:
    """Keeps ``/proc/stat`` and ``/proc/meminfo`` open and parses them natively.

    :meth:`read_stat` returns the node's busy ticks (user + nice + system + irq +
    softirq) and fills ``cpu_ticks`` (int64, per CPU id, -1 where absent) and
    ``total_ticks`` (every field of the ``cpu`` line) in the same pass.  :meth:`read_meminfo` returns ``(MemTotal, MemFree, MemAvailable)`` in KiB.

    Each file stands alone: one that cannot be opened at construction is opened again
    on its next read, and only that read fails (OSError naming the file).
    """

    cdef int stat_fd, meminfo_fd
    cdef bytes stat_path, meminfo_path
    cdef char *buf
    cdef size_t bufsize
    cdef readonly object cpu_ticks
    # every field of the ``cpu `` line summed (idle and iowait too) at the last read_stat, -1 before
    # the first: it grows on a live node whatever the load, so a value that stands still is frozen
    cdef readonly int64_t total_ticks
    cdef int64_t[:] v_ticks

    def __cinit__(self, stat_path, meminfo_path, int max_cpus=4096):
        self.stat_fd = -1
        self.meminfo_fd = -1
        self.total_ticks = -1
        self.bufsize = 262144
        self.buf = <char *>malloc(self.bufsize)
        if self.buf == NULL:
            raise MemoryError()

    def __init__(self, stat_path, meminfo_path, int max_cpus=4096):
        self.stat_path = stat_path.encode() if isinstance(stat_path, str) else bytes(stat_path)
        self.meminfo_path = meminfo_path.encode() if isinstance(meminfo_path, str) else bytes(meminfo_path)
        self.stat_fd = c_open(self.stat_path, O_RDONLY | O_CLOEXEC)
        self.meminfo_fd = c_open(self.meminfo_path, O_RDONLY | O_CLOEXEC)
        self.cpu_ticks = np.full(max_cpus, -1, dtype=np.int64)
        self.v_ticks = self.cpu_ticks

    def __dealloc__(self):
        if self.stat_fd >= 0:
            close(self.stat_fd)
        if self.meminfo_fd >= 0:
            close(self.meminfo_fd)
        if self.buf != NULL:
            free(self.buf)

    cdef ssize_t _read_all(self, int which) except -2:
        """Read file ``which`` (0: stat, 1: meminfo) whole into ``buf``, (re)opening it if needed."""
        cdef ssize_t r
        cdef char *nb
        cdef int fd = self.stat_fd if which == 0 else self.meminfo_fd
        cdef bytes path = self.stat_path if which == 0 else self.meminfo_path
        if fd < 0:
            fd = c_open(path, O_RDONLY | O_CLOEXEC)
            if fd < 0:
                err = errno
                raise OSError(err, "cannot open: " + os.strerror(err), os.fsdecode(path))
            if which == 0:
                self.stat_fd = fd
            else:
                self.meminfo_fd = fd
        while True:
            with nogil:
                r = _pread0(fd, self.buf, self.bufsize)
            if r < 0:
                raise OSError(-r, "read failed: " + os.strerror(-r), os.fsdecode(path))
            if <size_t>r < self.bufsize:
                return r
            nb = <char *>realloc(self.buf, self.bufsize * 2)
            if nb == NULL:
                raise MemoryError()
            self.buf = nb
            self.bufsize *= 2

    def read_stat(self):
        """Busy ticks of the node (the ``cpu `` line), per-CPU ticks into ``cpu_ticks``."""
        cdef ssize_t n = self._read_all(0)
        cdef const char *p = self.buf
        cdef const char *end = self.buf + n
        cdef const char *eol
        cdef int64_t total = -1, v, busy, cpu_id, every, all_ticks = -1
        cdef int field, k
        cdef bint is_total
        cdef int maxc = self.v_ticks.shape[0]
        self.v_ticks[:] = -1
        while p < end:
            eol = <const char *>memchr(p, b'\n', end - p)
            if eol == NULL:
                eol = end
            if eol - p < 4 or memcmp(p, b"cpu", 3) != 0:
                break  # the cpu lines come first; stop at the first other line
            is_total = p[3] == b' '
            p += 3
            cpu_id = -1
            if not is_total:
                k = _parse_int(p, eol, &cpu_id)
                if k < 0:
                    raise ValueError("garbled /proc/stat cpu line")
                p += k
            field = 0
            busy = 0
            every = 0
            while p < eol:
                while p < eol and p[0] == b' ':
                    p += 1
                if p >= eol:
                    break
                k = _parse_int(p, eol, &v)
                if k < 0:
                    raise ValueError("garbled /proc/stat value")
                p += k
                field += 1
                if v > INT64_MAX_C - every or v < 0:
                    raise ValueError("garbled /proc/stat value")  # ticks beyond int64: not a real count
                every += v
                # user nice system idle iowait irq softirq ...
                if field == 1 or field == 2 or field == 3 or field == 6 or field == 7:
                    if v > INT64_MAX_C - busy:
                        raise ValueError("garbled /proc/stat value")  # ticks beyond int64: not a real count
                    busy += v
            if field < 7:
                raise ValueError("/proc/stat cpu line has too few fields")
            if is_total:
                total = busy
                all_ticks = every
            elif 0 <= cpu_id < maxc:
                self.v_ticks[cpu_id] = busy
            p = eol + 1
        if total < 0:
            raise ValueError("/proc/stat has no total cpu line")
        self.total_ticks = all_ticks
        return total

    def read_meminfo(self):
        """``(MemTotal, MemFree, MemAvailable)`` in KiB; -1 for a key that is missing or whose
        value is not a number >= 0 (the first line of a key decides)."""
        cdef ssize_t n = self._read_all(1)
        cdef const char *keys[3]
        cdef int klen[3]
        cdef int64_t out[3]
        cdef int bad = 0
        cdef const char *p = self.buf
        cdef const char *end = self.buf + n
        cdef const char *eol
        cdef const char *colon
        cdef int i, L, found = 0
        cdef int64_t v
        keys[0] = b"MemTotal"; keys[1] = b"MemFree"; keys[2] = b"MemAvailable"
        klen[0] = 8; klen[1] = 7; klen[2] = 12
        out[0] = -1; out[1] = -1; out[2] = -1
        while p < end and found != 7:
            eol = <const char *>memchr(p, b'\n', end - p)
            if eol == NULL:
                eol = end
            colon = <const char *>memchr(p, b':', eol - p)
            if colon != NULL:
                L = <int>(colon - p)
                for i in range(3):
                    if L == klen[i] and memcmp(p, keys[i], L) == 0:
                        if not (found & (1 << i)):
                            colon += 1
                            while colon < eol and colon[0] == b' ':
                                colon += 1
                            if _parse_int(colon, eol, &v) >= 0 and v >= 0:
                                out[i] = v
                            found |= 1 << i
                        break
            p = eol + 1
        return (out[0], out[1], out[2])
