"""A simulated clock for whole-agent tests: wall time, monotonic seconds and nanoseconds all move
together when a test advances ``t``."""

from __future__ import annotations

S = 10**9


class Clock:
    def __init__(self, t: float = 1_767_225_600.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def mono(self) -> float:
        return self.t

    def mono_ns(self) -> int:
        return int(self.t * S)
