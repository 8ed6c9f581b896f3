"""Plain-Python twin of the native ``qosmanager._native.sampler`` (the fast path's counter sampler).

Same API, same samples, same wake-ups for the same files; the readable statement of what the
native sampler does (see its module docstring), and what ``QOSMANAGER_PURE=1`` runs.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
import weakref

KIND_PROC_STAT = 0
KIND_USAGE_USEC = 1
KIND_NS = 2
WOKE_STOP = 0
WOKE_TRIGGER = 1
MAXKEEP = 256
_BUSY_FIELDS = (1, 2, 3, 6, 7)  # user nice system irq softirq
_MAX_DIGITS = 18


def _number(tok: bytes) -> int:
    if not tok or not tok.isdigit() or len(tok) > _MAX_DIGITS:
        raise ValueError(f"not a counter: {tok!r}")
    return int(tok)


def parse_proc_stat_busy(raw: bytes) -> float:
    """Busy ticks of ``/proc/stat``'s first line, which must be the ``cpu`` total (more than 7 numbers):
    the per-CPU lines of a large node would cost more to parse than everything else a sample does."""
    if not raw.startswith(b"cpu "):
        raise ValueError("/proc/stat does not start with the cpu total line")
    fields = raw.split(b"\n", 1)[0][4:].replace(b"\t", b" ").split(b" ")
    numbers = [_number(f) for f in fields if f]
    if len(numbers) < 7:
        raise ValueError("/proc/stat: cpu line has too few fields")
    return float(sum(numbers[i - 1] for i in _BUSY_FIELDS))


def parse_usage_usec(raw: bytes) -> float:
    """cgroup v2 ``cpu.stat``: ``usage_usec`` in seconds."""
    for line in raw.split(b"\n"):
        if line.startswith(b"usage_usec "):
            return _number(line[11:]) / 1e6
    raise ValueError("cpu.stat has no usage_usec")


def parse_ns(raw: bytes) -> float:
    """cgroup v1 ``cpuacct.usage``: nanoseconds in seconds."""
    return _number(raw.rstrip(b"\n ")) / 1e9


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class CounterSampler:
    """The three counters, their last ``keep`` samples and the trigger (see the native module)."""

    def __init__(self, node_path: str, kubepods_path: str, be_path: str, usage_kind: int, hz: float,
                 keep: int, interval: float, stop_fd: int) -> None:
        if not 3 <= keep <= MAXKEEP:
            raise ValueError(f"keep must be 3..{MAXKEEP}, got {keep}")
        if usage_kind not in (KIND_USAGE_USEC, KIND_NS):
            raise ValueError(f"unknown usage kind {usage_kind}")
        self._paths = (node_path, kubepods_path, be_path)
        self._fds: list[int | None] = [None, None, None]
        usage = parse_usage_usec if usage_kind == KIND_USAGE_USEC else parse_ns
        self._parse = (lambda raw: parse_proc_stat_busy(raw) / hz, usage, usage)
        self._keep, self._stop_fd = keep, stop_fd
        self._interval = interval
        self._interval_ns = int(interval * 1e9)
        self._next_ns = 0
        self._step_ns = self._interval_ns
        self._prev_load = math.nan
        self._samples: list[tuple[float, float, float, float]] = []
        self._quiet: list[bool] = []  # each sample taken after a quiet sleep (two intervals)?
        self._level = self._follow_level = math.inf
        self._follow_until = -math.inf
        self._system_floor, self._system_fixed = 0.0, math.nan
        self._lock = threading.Lock()
        self._interrupted = threading.Event()
        # interrupt() ends a poll by this pipe (the native sampler sleeps on a futex word instead)
        self._int_r, self._int_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        weakref.finalize(self, _close_fds, self._int_r, self._int_w)
        self.taken = 0
        self.errors = 0

    def close(self) -> None:
        with self._lock:
            for k, fd in enumerate(self._fds):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                    self._fds[k] = None

    def _read(self, k: int) -> float:
        fd = self._fds[k]
        try:
            if fd is None:
                fd = self._fds[k] = os.open(self._paths[k], os.O_RDONLY | os.O_CLOEXEC)
            return self._parse[k](os.pread(fd, 4096, 0))
        except (OSError, ValueError):
            if fd is not None:  # the dir was recreated, or the file replaced: open it again next time
                with contextlib.suppress(OSError):
                    os.close(fd)
                self._fds[k] = None
            raise

    def _record(self, mono: float, quiet: bool = False) -> bool:
        try:
            node, kubepods, be = self._read(0), self._read(1), self._read(2)
        except (OSError, ValueError):
            self._samples.clear()
            self._quiet.clear()
            self._prev_load = math.nan
            self.errors += 1
            return False
        self._keep_sample((mono, node, kubepods, be), quiet)
        return True

    def _keep_sample(self, sample: tuple[float, float, float, float], quiet: bool = False) -> None:
        """At most ``keep`` samples, spanning at most ``keep - 0.5`` intervals."""
        self._samples.append(sample)
        self._quiet.append(quiet)
        del self._samples[:-self._keep], self._quiet[:-self._keep]
        while len(self._samples) > 3 and sample[0] - self._samples[0][0] > (self._keep - 0.5) * self._interval:
            del self._samples[0], self._quiet[0]
        self.taken += 1

    def _first(self) -> int:
        """The pods' window's first sample: two back, one back after a quiet sleep (n >= 3)."""
        n = len(self._samples)
        return n - 2 if self._quiet[-1] or self._quiet[-2] else n - 3

    def _load(self) -> float:
        s = self._samples
        if len(s) < 3:
            return math.nan
        now, first, oldest = s[-1], s[self._first()], s[0]
        dt, span = now[0] - first[0], now[0] - oldest[0]
        if dt <= 0 or span <= 0:
            return math.nan
        pods = max((now[2] - first[2]) / dt - (now[3] - first[3]) / dt, 0.0)
        if math.isnan(self._system_fixed):
            system = max((now[1] - oldest[1] - (now[2] - oldest[2])) / span, 0.0, self._system_floor)
        else:
            system = self._system_fixed
        return pods + system

    def record(self, mono: float) -> bool:
        """Read the three counters now and keep them as the sample at ``mono`` (seconds)."""
        with self._lock:
            return self._record(mono)

    def push(self, mono: float, node: float, kubepods: float, be: float, quiet: bool = False) -> None:
        """Keep these counter values (seconds) as the sample at ``mono``, read elsewhere (replay); ``quiet``:
        as if taken after a quiet sleep."""
        with self._lock:
            self._keep_sample((mono, node, kubepods, be), quiet)

    def load(self) -> float:
        with self._lock:
            return self._load()

    def samples(self) -> list[tuple[float, float, float, float]]:
        """The kept samples, oldest first: ``(mono, node, kubepods, be)`` in seconds."""
        with self._lock:
            return list(self._samples)

    def window(self) -> tuple[list[tuple[float, float, float, float]], int]:
        """The kept samples and the index of the pods' window's first one (-1 with fewer than three)."""
        with self._lock:
            return list(self._samples), self._first() if len(self._samples) >= 3 else -1

    def set_trigger(self, level: float, follow_level: float, follow_until: float, system_floor: float,
                    system_fixed: float) -> None:
        with self._lock:
            self._level, self._follow_level, self._follow_until = level, follow_level, follow_until
            self._system_floor, self._system_fixed = system_floor, system_fixed

    def interrupt(self) -> None:
        """Make :meth:`wait` return ``WOKE_STOP`` at once, and every later call too (thread-safe)."""
        self._interrupted.set()
        with contextlib.suppress(OSError):
            os.write(self._int_w, b"x")

    def wait(self) -> int:
        """Sample at the cadence until the load reaches the trigger level, or :meth:`interrupt` was called
        or the stop descriptor is readable (see the native module)."""
        poller = select.poll()
        poller.register(self._int_r, select.POLLIN)
        if self._stop_fd >= 0:
            poller.register(self._stop_fd, select.POLLIN)
        while True:
            if self._interrupted.is_set():
                return WOKE_STOP
            now = time.monotonic_ns()
            if self._next_ns == 0:
                self._next_ns = now
            quiet = self._step_ns != self._interval_ns
            self._next_ns += self._step_ns
            wait_ns = self._next_ns - now
            if wait_ns < 0:
                self._next_ns, wait_ns = now, 0
            if poller.poll(math.ceil(wait_ns / 1e6)):
                return WOKE_STOP
            mono = time.monotonic_ns() / 1e9
            with self._lock:
                load = self._load() if self._record(mono, quiet) else math.nan
                level = self._follow_level if mono < self._follow_until else self._level
                prev, self._prev_load = self._prev_load, load
                if not math.isnan(load) and load >= level:
                    self._step_ns = self._interval_ns  # Python decides, then the next sample at the interval
                    return WOKE_TRIGGER
                # alert (the next sample at the interval): the load covered half the way to the level
                alert = (mono < self._follow_until or math.isnan(load) or math.isnan(prev)
                         or load >= (level + prev) / 2)
                self._step_ns = self._interval_ns if alert else 2 * self._interval_ns


__all__ = ["KIND_NS", "KIND_PROC_STAT", "KIND_USAGE_USEC", "WOKE_STOP", "WOKE_TRIGGER", "CounterSampler"]
