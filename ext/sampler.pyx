# cython: language_level=3
"""qosmanager._native.sampler -- the fast path's counter sampler.

The fast path (``qosmanager.framework.fastpath``) watches three counters every 50 ms: the node's busy
time (``/proc/stat``'s ``cpu`` line), the kubepods dir's and the BestEffort dir's CPU usage.  In Python
each sample cost a thread wake-up, three reads and a decision, about 0.2 ms: 20 times a second, more
than the rest of the agent together.  Here the sampling thread stays in C, without the GIL, between
samples: :meth:`CounterSampler.wait` sleeps until the next sample is due, reads the three counters
(one ``pread`` each on descriptors kept open), keeps the last ``keep`` samples (at most ``keep``
intervals' time), and estimates the non-BE load (pods over the *window*, the node's system term over
the whole ring).  It returns to Python only when that load reaches the *trigger level* the fast path
set (the lowest load at which its decision could lower BE's quota), or when it is stopped.  Python then
decides, from the same samples and window (:meth:`CounterSampler.window`), exactly as it does for every
sample in tick-by-tick tests.

The cadence: every ``interval`` while the load moves towards the level, every second interval while it
stays away (*quiet*): a thread wake-up costs 20-35 us of CPU on a VM, and the wake-ups were most of what
the fast path cost.  A sample is taken at the interval (*alert*) after one whose load covered half the
way from the previous sample's load to the level or more, within the fast path's follow time after a
write (``follow_until``), after a return to Python, and while fewer than three samples are kept.  The
window is the last two intervals (the sample two back) as before, but the last sample back after a
quiet sleep: a quiet sample and the one that follows it (an alert one) span only the rise they saw, so
a burst that a quiet sample shows in part is seen whole one interval later.  Samples recorded or pushed
from Python (tick-by-tick, replay) are never quiet: their window is the two intervals.

The thread sleeps between samples in one futex wait with an absolute deadline, on a word that
:meth:`CounterSampler.interrupt` sets (how the fast path stops it): on a small VM a ``ppoll`` on a
stop pipe cost 5-9 us more per wake-up (a sample 24-31 us of CPU against 22-25 us, side by side).  A
sampler given a stop descriptor (tests, benchmarks) still polls it.

Counter kinds: ``KIND_PROC_STAT`` (busy ticks of ``/proc/stat``'s first line: user + nice + system +
irq + softirq, divided by ``hz``), ``KIND_USAGE_USEC`` (cgroup v2 ``cpu.stat``: ``usage_usec`` / 1e6),
``KIND_NS`` (cgroup v1 ``cpuacct.usage``: nanoseconds / 1e9).  A counter that cannot be read or parsed
is closed (opened again at the next sample: the dir was recreated, or the file replaced), the samples
are dropped and ``errors`` counts it.

The plain-Python twin is ``qosmanager._native.pure_sampler``; both keep the same samples and wake at
the same loads for the same files (tests/test_sampler.py).
"""

from libc.math cimport INFINITY, NAN, isnan
from libc.stdint cimport int64_t, uint32_t
from libc.string cimport memcpy, memmove
from cpython.pythread cimport (
    PyThread_type_lock, PyThread_allocate_lock, PyThread_acquire_lock, PyThread_release_lock,
    PyThread_free_lock, WAIT_LOCK,
)

import os

cdef extern from "<errno.h>" nogil:
    int errno
    enum:
        EINTR
        EAGAIN
        ETIMEDOUT

cdef extern from "<fcntl.h>" nogil:
    int c_open "open"(const char *path, int flags)
    enum:
        O_RDONLY
        O_CLOEXEC

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void *buf, size_t count, long offset)
    int close(int fd)

cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *tp)
    int clock_nanosleep(int clk, int flags, const timespec *request, timespec *remain)
    enum:
        CLOCK_MONOTONIC
        TIMER_ABSTIME

cdef extern from "<linux/futex.h>" nogil:
    enum:
        FUTEX_WAIT_BITSET
        FUTEX_WAKE
        FUTEX_PRIVATE_FLAG
        FUTEX_BITSET_MATCH_ANY

cdef extern from "<sys/syscall.h>" nogil:
    enum:
        SYS_futex

cdef extern from "<unistd.h>" nogil:
    long syscall(long number, ...)

cdef extern from * nogil:
    """
    static inline uint32_t qm_load_u32(uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
    static inline void qm_store_u32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
    """
    uint32_t qm_load_u32(uint32_t *p)
    void qm_store_u32(uint32_t *p, uint32_t v)

cdef extern from "<poll.h>" nogil:
    cdef struct pollfd:
        int fd
        short events
        short revents
    int ppoll(pollfd *fds, unsigned long nfds, const timespec *timeout, const void *sigmask)
    enum:
        POLLIN

DEF C_PROC_STAT = 0
DEF C_USAGE_USEC = 1
DEF C_NS = 2
DEF C_STOP = 0
DEF C_TRIGGER = 1
KIND_PROC_STAT = C_PROC_STAT
KIND_USAGE_USEC = C_USAGE_USEC
KIND_NS = C_NS
WOKE_STOP = C_STOP
WOKE_TRIGGER = C_TRIGGER

DEF NCOUNTERS = 3
DEF BUFSIZE = 4096
DEF MAXKEEP = 256
DEF PATHSIZE = 4096
DEF BUSY_MASK = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 6) | (1 << 7)  # user nice system irq softirq


cdef inline int64_t _now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef int _digits(const char *p, Py_ssize_t n, Py_ssize_t *i, int64_t *out) noexcept nogil:
    """Unsigned decimal at p[i[0]]: 0 and the value, i past it; -1 when no digit or too long."""
    cdef int64_t v = 0
    cdef Py_ssize_t start = i[0]
    while i[0] < n and p[i[0]] >= 48 and p[i[0]] <= 57:
        if i[0] - start >= 18:
            return -1
        v = v * 10 + (p[i[0]] - 48)
        i[0] += 1
    if i[0] == start:
        return -1
    out[0] = v
    return 0


cdef int _parse_proc_stat(const char *p, Py_ssize_t n, double *out) noexcept nogil:
    """Busy ticks of the first line, which must be the ``cpu`` total with more than 7 numbers."""
    cdef Py_ssize_t i = 4, end = 0
    cdef int field = 0
    cdef int64_t v, busy = 0
    if n < 4 or p[0] != 99 or p[1] != 112 or p[2] != 117 or p[3] != 32:  # "cpu "
        return -1
    while end < n and p[end] != 10:
        end += 1
    while True:
        while i < end and (p[i] == 32 or p[i] == 9):
            i += 1
        if i >= end:
            break
        field += 1
        if _digits(p, end, &i, &v) != 0:
            return -1
        if i < end and p[i] != 32 and p[i] != 9:
            return -1
        if field < 31 and (BUSY_MASK >> field) & 1:
            busy += v
    if field <= 6:  # the name and at least 7 numbers
        return -1
    out[0] = <double>busy
    return 0


cdef int _parse_usage_usec(const char *p, Py_ssize_t n, double *out) noexcept nogil:
    cdef Py_ssize_t i = 0, j
    cdef int64_t v
    while i < n:
        if n - i >= 11 and p[i] == 117 and p[i + 1] == 115 and p[i + 2] == 97 and p[i + 3] == 103 \
                and p[i + 4] == 101 and p[i + 5] == 95 and p[i + 6] == 117 and p[i + 7] == 115 \
                and p[i + 8] == 101 and p[i + 9] == 99 and p[i + 10] == 32:  # "usage_usec "
            j = i + 11
            if _digits(p, n, &j, &v) != 0 or (j < n and p[j] != 10):
                return -1
            out[0] = <double>v / 1e6
            return 0
        while i < n and p[i] != 10:
            i += 1
        i += 1
    return -1


cdef int _parse_ns(const char *p, Py_ssize_t n, double *out) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef int64_t v
    if _digits(p, n, &i, &v) != 0:
        return -1
    while i < n and (p[i] == 10 or p[i] == 32):
        i += 1
    if i != n:
        return -1
    out[0] = <double>v / 1e9
    return 0


cdef class CounterSampler:
    """The three counters, their last ``keep`` samples and the trigger (see the module docstring)."""

    cdef char _paths[NCOUNTERS][PATHSIZE]
    cdef int _fds[NCOUNTERS]
    cdef int _kinds[NCOUNTERS]
    cdef double _scale[NCOUNTERS]
    cdef int _keep, _n, _stop_fd
    cdef uint32_t _interrupted  # interrupt(): a futex word the wait sleeps on (no descriptor to poll)
    cdef double _mono[MAXKEEP]
    cdef double _vals[NCOUNTERS][MAXKEEP]
    cdef char _quiet[MAXKEEP]  # taken after a quiet sleep (two intervals)
    cdef int64_t _interval_ns, _next_ns, _step_ns
    cdef double _interval, _prev_load
    cdef double _level, _follow_level, _follow_until, _system_floor, _system_fixed
    cdef PyThread_type_lock _lock
    cdef char _buf[BUFSIZE]
    cdef public long long taken, errors

    def __cinit__(self, node_path: str, kubepods_path: str, be_path: str, int usage_kind, double hz,
                  int keep, double interval, int stop_fd):
        cdef bytes raw
        if not 3 <= keep <= MAXKEEP:
            raise ValueError(f"keep must be 3..{MAXKEEP}, got {keep}")
        if usage_kind not in (KIND_USAGE_USEC, KIND_NS):
            raise ValueError(f"unknown usage kind {usage_kind}")
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()
        for k, path in enumerate((node_path, kubepods_path, be_path)):
            raw = os.fsencode(path)
            if len(raw) >= PATHSIZE or b"\0" in raw:
                raise ValueError(f"unusable counter path {path!r}")
            memcpy(self._paths[k], <const char *>raw, len(raw) + 1)
            self._fds[k] = -1
            self._kinds[k] = KIND_PROC_STAT if k == 0 else usage_kind
        self._scale[0] = hz
        self._keep, self._n, self._stop_fd = keep, 0, stop_fd
        self._interrupted = 0
        self._interval = interval
        self._interval_ns = <int64_t>(interval * 1e9)
        self._next_ns = 0
        self._step_ns = self._interval_ns
        self._prev_load = NAN
        self._level = INFINITY
        self._follow_level = INFINITY
        self._follow_until = -INFINITY
        self._system_floor = 0.0
        self._system_fixed = NAN
        self.taken = 0
        self.errors = 0

    def __dealloc__(self):
        self._close_fds()
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    cdef void _close_fds(self) noexcept nogil:
        cdef int k
        for k in range(NCOUNTERS):
            if self._fds[k] >= 0:
                close(self._fds[k])
                self._fds[k] = -1

    def close(self) -> None:
        with nogil:
            PyThread_acquire_lock(self._lock, WAIT_LOCK)
            self._close_fds()
            PyThread_release_lock(self._lock)

    cdef int _read(self, int k, double *out) noexcept nogil:
        cdef ssize_t got
        cdef int rc
        if self._fds[k] < 0:
            self._fds[k] = c_open(self._paths[k], O_RDONLY | O_CLOEXEC)
            if self._fds[k] < 0:
                return -1
        got = pread(self._fds[k], self._buf, BUFSIZE, 0)
        while got < 0 and errno == EINTR:
            got = pread(self._fds[k], self._buf, BUFSIZE, 0)
        if got < 0:
            rc = -1
        elif self._kinds[k] == C_PROC_STAT:
            rc = _parse_proc_stat(self._buf, got, out)
            if rc == 0:
                out[0] = out[0] / self._scale[0]
        elif self._kinds[k] == C_USAGE_USEC:
            rc = _parse_usage_usec(self._buf, got, out)
        else:
            rc = _parse_ns(self._buf, got, out)
        if rc != 0:
            close(self._fds[k])
            self._fds[k] = -1
        return rc

    cdef bint _record(self, double mono, bint quiet) noexcept nogil:
        """One sample at ``mono`` (lock held): False, and the samples dropped, when a counter failed."""
        cdef double v[NCOUNTERS]
        cdef int k
        for k in range(NCOUNTERS):
            if self._read(k, &v[k]) != 0:
                self._n = 0
                self._prev_load = NAN
                self.errors += 1
                return False
        self._keep_sample(mono, v, quiet)
        return True

    cdef void _drop_oldest(self) noexcept nogil:
        cdef int k
        memmove(&self._mono[0], &self._mono[1], (self._n - 1) * sizeof(double))
        memmove(&self._quiet[0], &self._quiet[1], (self._n - 1) * sizeof(char))
        for k in range(NCOUNTERS):
            memmove(&self._vals[k][0], &self._vals[k][1], (self._n - 1) * sizeof(double))
        self._n -= 1

    cdef void _keep_sample(self, double mono, double *v, bint quiet) noexcept nogil:
        """Keep a sample: at most ``keep``, spanning at most ``keep - 0.5`` intervals (quiet samples are
        two intervals apart: the system term stays over the last second)."""
        cdef int k
        if self._n == self._keep:
            self._drop_oldest()
        self._mono[self._n] = mono
        self._quiet[self._n] = quiet
        for k in range(NCOUNTERS):
            self._vals[k][self._n] = v[k]
        self._n += 1
        while self._n > 3 and mono - self._mono[0] > (self._keep - 0.5) * self._interval:
            self._drop_oldest()
        self.taken += 1

    cdef int _first(self) noexcept nogil:
        """The window's first sample (see the module docstring); n >= 3."""
        if self._quiet[self._n - 1] or self._quiet[self._n - 2]:
            return self._n - 2
        return self._n - 3

    cdef double _load(self) noexcept nogil:
        """The non-BE load in cores (pods over two intervals + the system term), NaN before 3 samples."""
        cdef int n = self._n, f
        cdef double dt, span, kubepods, be, pods, system
        if n < 3:
            return NAN
        f = self._first()
        dt = self._mono[n - 1] - self._mono[f]
        span = self._mono[n - 1] - self._mono[0]
        if dt <= 0 or span <= 0:
            return NAN
        kubepods = (self._vals[1][n - 1] - self._vals[1][f]) / dt
        be = (self._vals[2][n - 1] - self._vals[2][f]) / dt
        pods = kubepods - be
        if pods < 0.0:
            pods = 0.0
        if isnan(self._system_fixed):
            system = (self._vals[0][n - 1] - self._vals[0][0] - (self._vals[1][n - 1] - self._vals[1][0])) / span
            if system < 0.0:
                system = 0.0
            if system < self._system_floor:
                system = self._system_floor
        else:
            system = self._system_fixed
        return pods + system

    def record(self, double mono) -> bool:
        """Read the three counters now and keep them as the sample at ``mono`` (seconds)."""
        cdef bint ok
        with nogil:
            PyThread_acquire_lock(self._lock, WAIT_LOCK)
            ok = self._record(mono, False)
            PyThread_release_lock(self._lock)
        return ok

    def push(self, double mono, double node, double kubepods, double be, bint quiet=False) -> None:
        """Keep these counter values (seconds) as the sample at ``mono``, read elsewhere (replay); ``quiet``:
        as if taken after a quiet sleep (the window's rule, see the module docstring)."""
        cdef double v[NCOUNTERS]
        v[0] = node
        v[1] = kubepods
        v[2] = be
        with nogil:
            PyThread_acquire_lock(self._lock, WAIT_LOCK)
            self._keep_sample(mono, v, quiet)
            PyThread_release_lock(self._lock)

    def load(self) -> float:
        cdef double x
        with nogil:
            PyThread_acquire_lock(self._lock, WAIT_LOCK)
            x = self._load()
            PyThread_release_lock(self._lock)
        return x

    def samples(self) -> list:
        """The kept samples, oldest first: ``(mono, node, kubepods, be)`` in seconds."""
        cdef int i
        with nogil:
            PyThread_acquire_lock(self._lock, WAIT_LOCK)
        try:
            return [(self._mono[i], self._vals[0][i], self._vals[1][i], self._vals[2][i]) for i in range(self._n)]
        finally:
            PyThread_release_lock(self._lock)

    def window(self) -> tuple:
        """The kept samples (as :meth:`samples`) and the index of the pods' window's first one (-1 with
        fewer than three), in one look."""
        cdef int i, first
        with nogil:
            PyThread_acquire_lock(self._lock, WAIT_LOCK)
        try:
            first = self._first() if self._n >= 3 else -1
            return ([(self._mono[i], self._vals[0][i], self._vals[1][i], self._vals[2][i]) for i in range(self._n)],
                    first)
        finally:
            PyThread_release_lock(self._lock)

    def set_trigger(self, double level, double follow_level, double follow_until,
                    double system_floor, double system_fixed) -> None:
        """Wake at a load >= ``level`` (``follow_level`` for samples before ``follow_until``); the system
        term at least ``system_floor``, or ``system_fixed`` where that is not NaN."""
        with nogil:
            PyThread_acquire_lock(self._lock, WAIT_LOCK)
            self._level, self._follow_level, self._follow_until = level, follow_level, follow_until
            self._system_floor, self._system_fixed = system_floor, system_fixed
            PyThread_release_lock(self._lock)

    def interrupt(self) -> None:
        """Make :meth:`wait` return ``WOKE_STOP`` at once, and every later call too (thread-safe)."""
        with nogil:
            qm_store_u32(&self._interrupted, 1)
            syscall(SYS_futex, &self._interrupted, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 0x7fffffff, NULL, NULL, 0)

    cdef int _sleep_until(self, int64_t until_ns) noexcept nogil:
        """Sleep until ``until_ns`` (monotonic): 0 then, 1 when interrupted or the stop descriptor is
        readable.  Without a stop descriptor one futex wait on the interrupt word with an absolute
        deadline: a third less CPU per wake-up than a ``ppoll`` on a pipe on a small VM (16-25 against
        27-33 us), and the sampler's thread does little else."""
        cdef pollfd pfd
        cdef timespec ts
        cdef int64_t wait_ns
        cdef int rc
        if self._stop_fd < 0:
            ts.tv_sec = <long>(until_ns // 1000000000)
            ts.tv_nsec = <long>(until_ns % 1000000000)
            while qm_load_u32(&self._interrupted) == 0:
                rc = <int>syscall(SYS_futex, &self._interrupted, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, 0,
                                  &ts, NULL, FUTEX_BITSET_MATCH_ANY)
                if rc == 0 or errno == EINTR or errno == EAGAIN:
                    continue  # woken, a signal, or the word changed: look at it again
                if errno != ETIMEDOUT:  # no futex here (a seccomp filter): a plain sleep
                    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR:
                        pass
                return qm_load_u32(&self._interrupted) != 0
            return 1
        while True:
            if qm_load_u32(&self._interrupted) != 0:
                return 1
            wait_ns = until_ns - _now_ns()
            if wait_ns < 0:
                wait_ns = 0
            ts.tv_sec = <long>(wait_ns // 1000000000)
            ts.tv_nsec = <long>(wait_ns % 1000000000)
            pfd.fd = self._stop_fd
            pfd.events = POLLIN
            pfd.revents = 0
            rc = ppoll(&pfd, 1, &ts, NULL)
            if rc > 0 or (rc < 0 and errno != EINTR):
                return 1
            if rc == 0:
                return 0

    def wait(self) -> int:
        """Sample at the cadence (GIL released; see the module docstring) until the load reaches the
        trigger level (``WOKE_TRIGGER``), or :meth:`interrupt` was called or the stop descriptor is readable
        (``WOKE_STOP``).  A sampler that fell behind (a stopped process, a starved CPU) samples at once and
        keeps its cadence from there."""
        cdef int64_t now
        cdef double load, level, mono
        cdef bint quiet, alert
        cdef int woke = C_STOP
        with nogil:
            while True:
                now = _now_ns()
                if self._next_ns == 0:
                    self._next_ns = now
                quiet = self._step_ns != self._interval_ns
                self._next_ns += self._step_ns
                if self._next_ns < now:
                    self._next_ns = now
                if self._sleep_until(self._next_ns):
                    woke = C_STOP
                    break
                mono = <double>_now_ns() / 1e9
                PyThread_acquire_lock(self._lock, WAIT_LOCK)
                load = NAN
                if self._record(mono, quiet):
                    load = self._load()
                level = self._follow_level if mono < self._follow_until else self._level
                if not isnan(load) and load >= level:
                    self._step_ns = self._interval_ns  # Python decides, then the next sample at the interval
                    self._prev_load = load
                    PyThread_release_lock(self._lock)
                    woke = C_TRIGGER
                    break
                alert = (mono < self._follow_until or isnan(load) or isnan(self._prev_load)
                         or load >= (level + self._prev_load) / 2)
                self._step_ns = self._interval_ns if alert else 2 * self._interval_ns
                self._prev_load = load
                PyThread_release_lock(self._lock)
        return woke
