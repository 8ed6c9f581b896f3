"""One loop runs every periodic job (the collector, each strategy) at its own interval.

Semantics follow koordlet's ``wait.Until``: a job runs, then the next run is due
``interval`` after it *finished* (no catch-up after a slow run).  A little jitter
(±5 % by default) keeps jobs that share an interval from piling up on one instant.
A job that raises is logged and reported to ``on_error``; it runs again at its next
interval and never takes the loop or the other jobs down.

Everything runs on the caller's thread, so strategies see a consistent context and
need no locks; blocking work (file I/O) is done in native batch calls.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class Job:
    name: str
    interval: float
    fn: Callable[[float], object]  # called with the wall-clock time of the run
    jitter: float = 0.05
    next_at: float = 0.0  # monotonic
    runs: int = 0
    errors: int = 0
    last_duration: float = 0.0
    last_error: str = ""


class Scheduler:
    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, seed: int | None = None) -> None:
        self.jobs: list[Job] = []
        self.monotonic = monotonic
        self.wall = wall
        self._rng = random.Random(seed)
        self.on_error: list[Callable[[Job, BaseException], None]] = []
        self.on_run: list[Callable[[Job, float], None]] = []

    def add(self, name: str, interval: float, fn: Callable[[float], object], *, jitter: float = 0.05,
            first_delay: float = 0.0) -> Job:
        if interval <= 0:
            raise ValueError(f"job {name}: interval must be positive, got {interval}")
        job = Job(name, interval, fn, jitter, self.monotonic() + first_delay)
        self.jobs.append(job)
        return job

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
            job.next_at = end + self._next_interval(job)
            for run_cb in self.on_run:
                run_cb(job, job.last_duration)

    def run(self, stop: threading.Event, duration: float = 0.0) -> None:
        """Run due jobs until ``stop`` is set or ``duration`` seconds (0 = forever) have passed."""
        deadline = self.monotonic() + duration if duration > 0 else None
        while not stop.is_set():
            if not self.jobs:
                stop.wait(0.1 if deadline is None else max(0.0, min(0.1, deadline - self.monotonic())))
            else:
                job = min(self.jobs, key=lambda j: j.next_at)
                now = self.monotonic()
                wait = job.next_at - now
                if deadline is not None:
                    wait = min(wait, deadline - now)
                if wait > 0 and stop.wait(wait):
                    break
                if deadline is not None and self.monotonic() >= deadline:
                    break
                if job.next_at <= self.monotonic():
                    self.run_job(job)
            if deadline is not None and self.monotonic() >= deadline:
                break
