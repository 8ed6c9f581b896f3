"""One loop runs every periodic job (the collector, each strategy) at its own interval.

Semantics follow koordlet's ``wait.Until``: a job runs, then the next run is due
``interval`` after it *finished* (no catch-up after a slow run).  A little jitter
(±5 % by default) varies each job's period within ``interval x (1 ± jitter)``.
A job that raises is logged and reported to ``on_error``; it runs again at its next
interval and never takes the loop or the other jobs down.

One wake-up, many jobs: each wake-up of the loop costs the process CPU (about 70 µs on a small VM
through ``threading.Event.wait``, half that through one ``poll``), as much as a small job.  So when
the loop wakes for a job, every other job whose jitter window has opened (``interval x (1 - jitter)``
after it finished) runs in the same wake-up: the jobs that share an interval stay together and the
agent wakes about once per interval instead of once per job, each job's period still within its jitter
bounds.  The loop also waits past the first due time for a later job while every job ripe by then stays
within its window (:meth:`Scheduler.wake_at`), runs the job whose window closes first first, and moves a
jittered job's next due time towards its *anchor* (a job without jitter at its interval) by at most its
jitter: the collector (no jitter) and the strategies (5 %) share one wake-up a second, the collector first,
where a strategy whose random period came out short woke the loop alone a few milliseconds before it, and
one that ran late stayed apart for a random walk (2.3-2.7 wake-ups a second on the outcome CPU benchmark's
node, not 1).  With a :class:`StopEvent` the loop sleeps in one
``poll`` on a descriptor that :meth:`StopEvent.set` makes readable.

Everything runs on the caller's thread, so strategies see a consistent context and
need no locks; blocking work (file I/O) is done in native batch calls.  So a job that runs long holds
every other one: :class:`LongRuns` says so (``agent/long-run``: the node is beyond what the agent does in
one tick).

A watcher on another thread (the memory trigger, :mod:`qosmanager.framework.memtrigger`) can ask for a job
*now*: :meth:`Scheduler.wake` marks it due and writes a byte to the scheduler's own pipe, which the loop's
``poll`` watches beside the stop event's.  Wakes coalesce (a job asked for three times before the loop
looks runs once), the job still runs on the loop's thread, and no other job moves: its next run is due
``interval`` after this one, as after any run.  Such a watcher is registered in
:attr:`Scheduler.watchers`: :meth:`Scheduler.run` starts its thread and stops it when the loop ends.
(With a plain :class:`threading.Event` for ``stop`` the loop cannot watch the pipe: a wake is taken at its
next wake-up.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import select
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qosmanager.framework.conditions import Conditions

log = logging.getLogger(__name__)

COND_LONG_RUN = "agent/long-run"
LONG_RUN_SECONDS = 5.0  # a run that holds every other job this long (five collector passes at the default)


@dataclass
class Job:
    name: str
    interval: float
    fn: Callable[[float], object]  # called with the wall-clock time of the run
    jitter: float = 0.05
    next_at: float = 0.0  # monotonic
    earliest: float = 0.0  # monotonic: from here it may run in another job's wake-up (its jitter window)
    latest: float = 0.0  # monotonic: the end of its jitter window (a wake-up may wait for another job until here)
    runs: int = 0
    errors: int = 0
    last_duration: float = 0.0
    last_error: str = ""


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class StopEvent(threading.Event):
    """A :class:`threading.Event` that :meth:`sleep` waits for in one ``poll``: :meth:`set` also writes a
    byte to a pipe.  The pipe lives as long as the event (a signal handler may still set it after the
    agent closed)."""

    def __init__(self) -> None:
        super().__init__()
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        weakref.finalize(self, _close, self._r, self._w)

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # full (already set) or closed at exit
            os.write(self._w, b"\0")

    def clear(self) -> None:
        super().clear()
        with contextlib.suppress(OSError):
            while os.read(self._r, 64):
                pass

    def sleep(self, timeout: float, wake_fd: int = -1) -> bool:
        """Wait until set, ``wake_fd`` is readable, or ``timeout`` seconds passed (rounded up to the
        millisecond); True when set."""
        if not self.is_set():
            p = select.poll()
            p.register(self._r, select.POLLIN)
            if wake_fd >= 0:
                p.register(wake_fd, select.POLLIN)
            p.poll(max(0.0, timeout) * 1000.0)
        return self.is_set()


class Watcher(Protocol):
    """A thread that wakes jobs (:meth:`Scheduler.wake`), running while the loop runs."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Scheduler:
    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, seed: int | None = None) -> None:
        self.jobs: list[Job] = []
        self.monotonic = monotonic
        self.wall = wall
        self._rng = random.Random(seed)
        self.on_error: list[Callable[[Job, BaseException], None]] = []
        self.on_run: list[Callable[[Job, float], None]] = []
        self._woken: dict[str, None] = {}  # jobs a watcher asked for now (wake), in the order asked
        self._wake_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        weakref.finalize(self, _close, self._wake_r, self._wake_w)
        self.wakes = 0  # jobs run early because a watcher asked (coalesced)
        self.watchers: list[Watcher] = []  # started by run(), stopped when it returns

    def add(self, name: str, interval: float, fn: Callable[[float], object], *, jitter: float = 0.05,
            first_delay: float = 0.0) -> Job:
        if interval <= 0:
            raise ValueError(f"job {name}: interval must be positive, got {interval}")
        due = self.monotonic() + first_delay
        job = Job(name, interval, fn, jitter, due, due, due)
        self.jobs.append(job)
        return job

    def wake(self, *names: str) -> None:
        """Thread-safe: run these jobs at once, on the loop's thread (see the module docstring).  A name
        with no job is ignored."""
        with self._wake_lock:
            for name in names:
                self._woken[name] = None
        with contextlib.suppress(OSError):  # full (a wake already pending) or closed at exit
            os.write(self._wake_w, b"\0")

    def take_wakes(self, drain: bool = True) -> int:
        """Make the jobs a watcher asked for due now (their jitter window open); the number made due.
        ``drain`` empties the wake pipe first (the loop, after each sleep: a byte left would end every
        ``poll`` at once)."""
        if drain:
            with contextlib.suppress(OSError):
                while os.read(self._wake_r, 64):
                    pass
        if not self._woken:
            return 0
        with self._wake_lock:
            names, self._woken = self._woken, {}
        if not names:
            return 0
        now = self.monotonic()
        n = 0
        for job in self.jobs:
            if job.name in names:
                job.next_at = min(job.next_at, now)
                job.earliest = min(job.earliest, now)
                job.latest = min(job.latest, now)
                n += 1
        self.wakes += n
        return n

    def _next_interval(self, job: Job) -> float:
        if job.jitter <= 0:
            return job.interval
        return job.interval * (1.0 + self._rng.uniform(-job.jitter, job.jitter))

    def run_job(self, job: Job) -> None:
        t0 = self.monotonic()
        try:
            job.fn(self.wall())
        except Exception as e:  # one job's failure must not stop the others
            job.errors += 1
            job.last_error = f"{type(e).__name__}: {e}"
            log.exception("job %s failed", job.name)
            for cb in self.on_error:
                cb(job, e)
        finally:
            end = self.monotonic()
            job.runs += 1
            job.last_duration = end - t0
            job.next_at = self._steer(job, end, end + self._next_interval(job))
            job.earliest = end + job.interval * (1.0 - min(max(job.jitter, 0.0), 1.0))
            job.latest = max(job.next_at, end + job.interval * (1.0 + max(job.jitter, 0.0)))
            for run_cb in self.on_run:
                run_cb(job, job.last_duration)

    def _steer(self, job: Job, end: float, due: float) -> float:
        """A jittered job's next due time, moved towards its anchor (a job without jitter at the same
        interval: the collector), so that they share a wake-up: the anchor's next run where it falls within
        the job's jitter window, else the window's edge nearest it (a job that ran late, behind a slow run,
        comes back within a few intervals, not by a random walk).  Without an anchor: ``due``."""
        if job.jitter <= 0:
            return due
        anchor = next((k.next_at for k in self.jobs if k.jitter <= 0 and k.interval == job.interval), None)
        if anchor is None:
            return due
        lo = end + job.interval * (1.0 - min(job.jitter, 1.0))
        hi = end + job.interval * (1.0 + job.jitter)
        # the anchor's run nearest the middle of the window (it may not have run yet in this wake-up)
        anchor += round((end + job.interval - anchor) / job.interval) * job.interval
        return min(max(anchor, lo), hi)

    def wake_at(self) -> float:
        """When the loop wakes next (monotonic; jobs exist): the first job's due time, or a later job's where
        every job ripe by then is still within its jitter window (``latest``), so that one wake-up runs them
        all.  Without this, a job whose random period came out short woke the loop apart from a job without
        jitter (the collector) a few milliseconds later: two or three wake-ups per interval, not one."""
        jobs = sorted(self.jobs, key=lambda j: j.next_at)
        at = jobs[0].next_at
        latest = min(j.latest for j in jobs if j.earliest <= at)
        for j in jobs[1:]:
            if j.earliest <= at:
                continue  # ripe by then: runs in that wake-up anyway
            if j.next_at > latest:
                break
            at = j.next_at
            latest = min(latest, min(k.latest for k in jobs if k.earliest <= at))
        return at

    def run_ripe(self, stop: threading.Event | None = None) -> int:
        """Run every job whose jitter window has opened, the one whose window closes first first (a job
        without jitter, the collector, before the strategies that share its wake-up: they see its data);
        the number run."""
        ran = 0
        while stop is None or not stop.is_set():
            self.take_wakes(drain=False)
            now = self.monotonic()
            ripe = [j for j in self.jobs if j.earliest <= now]
            if not ripe:
                break
            self.run_job(min(ripe, key=lambda j: (j.latest, j.next_at)))
            ran += 1
        return ran

    def run(self, stop: threading.Event, duration: float = 0.0) -> None:
        """Run due jobs until ``stop`` is set or ``duration`` seconds (0 = forever) have passed; the
        :attr:`watchers` run meanwhile."""
        started: list[Watcher] = []
        try:
            for w in self.watchers:
                w.start()
                started.append(w)
            self._loop(stop, duration)
        finally:
            for w in started:
                w.stop()

    def _loop(self, stop: threading.Event, duration: float) -> None:
        deadline = self.monotonic() + duration if duration > 0 else None
        if isinstance(stop, StopEvent):
            def sleep(timeout: float) -> bool:
                return stop.sleep(timeout, self._wake_r)
        else:
            sleep = stop.wait
        while not stop.is_set():
            self.take_wakes()
            if not self.jobs:
                sleep(0.1 if deadline is None else max(0.0, min(0.1, deadline - self.monotonic())))
            else:
                job = min(self.jobs, key=lambda j: j.next_at)
                now = self.monotonic()
                wait = self.wake_at() - now
                if deadline is not None:
                    wait = min(wait, deadline - now)
                if wait > 0 and sleep(wait):
                    break
                if deadline is not None and self.monotonic() >= deadline:
                    break
                now = self.monotonic()
                if job.next_at <= now:
                    self.run_job(min((j for j in self.jobs if j.earliest <= now), key=lambda j: (j.latest, j.next_at)))
                    self.run_ripe(stop)  # the jobs whose window has opened, in this wake-up
            if deadline is not None and self.monotonic() >= deadline:
                break


class LongRuns:
    """``Scheduler.on_run``: a job that ran :data:`LONG_RUN_SECONDS` or longer held every other job that long
    (the collector's passes, the other strategies): the node is beyond what the agent does in one tick (a
    first tick over 100,000 pods).  The ``agent/long-run`` condition names each such job with its last run
    and interval, until its next shorter run; logged when a job starts and stops running long."""

    def __init__(self, conditions: Conditions, seconds: float = LONG_RUN_SECONDS) -> None:
        self.conditions = conditions
        self.seconds = seconds
        self.long: dict[str, tuple[float, float]] = {}  # job -> (its last run's seconds, its interval)

    def on_run(self, job: Job, seconds: float) -> None:
        if seconds >= self.seconds:
            if job.name not in self.long:
                log.warning("job %s ran %.1f s (its interval %g s): every other job of the agent waited that "
                            "long; the node is beyond what the agent does in one tick", job.name, seconds,
                            job.interval)
            self.long[job.name] = (seconds, job.interval)
        elif self.long.pop(job.name, None) is not None:
            log.info("job %s runs within %g s again (%.2f s)", job.name, self.seconds, seconds)
        else:
            return
        if not self.long:
            self.conditions.clear(COND_LONG_RUN)
            return
        runs = "; ".join(f"job {name} ran {took:.1f} s (its interval {every:g} s)"
                         for name, (took, every) in sorted(self.long.items()))
        self.conditions.set(COND_LONG_RUN, f"{runs}: every other job of the agent waited that long (the node is "
                                           "beyond what the agent does in one tick)")
