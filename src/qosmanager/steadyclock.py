"""The agent's clock: wall-clock seconds that never jump.

Every interval the agent keeps is measured on one clock: cool-downs after an eviction, metric
windows, the executor's force interval and ownership leases, how long an evicted pod counts as
pending, a pod's eviction retry, how old the state from the API server is.  The system clock can
be stepped (NTP, an administrator, a VM resumed): an hour back would hold every cool-down for an
hour and stop evictions, an hour forward would empty every metric window and expire every lease at
once.

:class:`SteadyClock` starts at the wall clock and advances with the monotonic clock.  When the wall
clock departs from it, it follows *slowly*: each second of monotonic time it moves at most
``slew`` (10 %) more or less than a second towards the wall clock, so an interval measured on it is
never off by more than that, and it never runs backwards.  A step of an hour is caught up in ten
hours; audit timestamps lag the system clock by what is left meanwhile.  A departure of more than
a second is logged once (and again after the clocks agreed in between).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

SLEW = 0.1  # at most 10 % faster or slower than the monotonic clock while catching up
WARN_OFFSET = 1.0  # seconds between the wall clock and this one worth a log line
AGREE_OFFSET = 0.01  # ... and close enough to call them agreed again


class SteadyClock:
    def __init__(self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 *, slew: float = SLEW) -> None:
        if not 0.0 <= slew < 1.0:
            raise ValueError("slew is a fraction of a second per second, in [0, 1)")
        self._wall = wall
        self._monotonic = monotonic
        self.slew = slew
        self._lock = threading.Lock()
        self._mono = monotonic()
        self._now = wall()
        self.offset = 0.0  # wall clock minus this clock at the last reading
        self._warned = False

    def __call__(self) -> float:
        with self._lock:
            m, wall = self._monotonic(), self._wall()
            dm = m - self._mono
            if dm < 0:  # a monotonic clock does not go back; an injected one in a test might
                dm = 0.0
            self._mono = m
            now = self._now + dm
            err = wall - now
            room = self.slew * dm
            now += room if err > room else -room if err < -room else err
            self._now = now
            self.offset = offset = wall - now
            warn = not self._warned and abs(offset) > WARN_OFFSET
            agreed = self._warned and abs(offset) <= AGREE_OFFSET
            if warn:
                self._warned = True
            elif agreed:
                self._warned = False
        if warn:
            log.warning("the system clock moved %+.1f s against the monotonic clock; the agent's clock "
                        "follows it at most %g %% faster or slower, so no cool-down, window or lease jumps "
                        "(audit timestamps lag meanwhile)", offset, self.slew * 100)
        elif agreed:
            log.info("the agent's clock agrees with the system clock again")
        return now


__all__ = ["SLEW", "SteadyClock"]
