"""The process's file descriptors: one budget the collector's readers and the executor share.

``RLIMIT_NOFILE`` (the soft limit, raised to the hard one at start) is split three ways:

* :data:`BASE_RESERVE` (64) for what the process holds besides: stdio, the audit log,
  ``/proc/stat`` and ``/proc/meminfo``, the stat files of the three kube QoS dirs (up to 12), the BE
  quota files, the API server connections (about 6), log files, and the descriptor a one-shot
  read or write (below) takes for a moment;
* :data:`HEALTH_SERVER_RESERVE` (32) for ``/metrics`` and ``/healthz``: the server's connections,
  its own sockets and a health check's file reads
  (:func:`qosmanager.exporter.server.descriptor_reserve` stays within it), so the probes can always
  be accepted and answered;
* the rest is the **budget**: the descriptors the collector's readers keep open across ticks and
  those the executor's write LRU caches, counted together.  The readers come first (they read
  every tick): when the budget is spent, the executor's cached descriptors are closed to make
  room.  Beyond the budget the readers read (reopen mode) and the executor reads and writes
  (one-shot mode) with open, read or write, close each time, one file at a time: slower, never
  failing for want of a descriptor.

At ``ulimit -n 256`` the budget is 256 - 64 - 32 = 160 descriptors.
"""

from __future__ import annotations

import os
from collections.abc import Callable

BASE_RESERVE = 64
HEALTH_SERVER_RESERVE = 32
DEFAULT_LIMIT = 1024  # where the limit cannot be read


def nofile_limit(raise_soft: bool = True) -> int:
    """The descriptor limit of this process; the soft limit is raised to the hard one first."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if raise_soft and hard != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        if soft == resource.RLIM_INFINITY:
            return 1 << 20
        return int(soft)
    except (ImportError, ValueError, OSError):
        return DEFAULT_LIMIT


def open_descriptors() -> int:
    """How many descriptors this process holds now (0 where ``/proc/self/fd`` cannot be listed)."""
    try:
        return max(0, len(os.listdir("/proc/self/fd")) - 1)  # less the one listing the directory
    except OSError:
        return 0


class DescriptorBudget:
    """How many descriptors the readers and the executor may keep open, together.

    Holders register a function returning how many they hold; a holder that caches descriptors
    (the executor) also registers one closing up to ``n`` of them, so :meth:`reclaim` can make room
    for the readers.  Used from the agent's thread only (the collector and the executor run there).
    """

    def __init__(self, total: int) -> None:
        self.total = max(0, int(total))
        self._held: list[Callable[[], int]] = []
        self._shed: list[Callable[[int], int]] = []

    @classmethod
    def for_process(cls, base_reserve: int = BASE_RESERVE,
                    server_reserve: int = HEALTH_SERVER_RESERVE) -> DescriptorBudget:
        """The budget of this process: its limit minus what it already holds and both reserves (at
        least 0).  At the agent's start it holds a handful; a process that builds a collector later
        (a test session, a benchmark) keeps its reserves on top of what it has opened by then."""
        return cls(nofile_limit() - open_descriptors() - base_reserve - server_reserve)

    def add_holder(self, held: Callable[[], int], shed: Callable[[int], int] | None = None) -> None:
        self._held.append(held)
        if shed is not None:
            self._shed.append(shed)

    def held(self) -> int:
        return sum(f() for f in self._held)

    def available(self) -> int:
        return max(0, self.total - self.held())

    def reclaim(self, n: int) -> int:
        """Have cached descriptors closed until ``n`` are available (if the caches hold that many);
        returns how many were closed."""
        freed = 0
        for shed in self._shed:
            short = n - self.available()
            if short <= 0:
                break
            freed += shed(short)
        return freed
