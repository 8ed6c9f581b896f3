"""The node's own counters: CPU from ``/proc/stat``, memory from ``/proc/meminfo``.

Map of the file:

* :class:`NodeCounters` - owned by the collector, one per node reader.
  ``busy_ticks()`` and ``memory_kib()`` read the files; ``cpu_cores()`` turns two
  ``/proc/stat`` samples into node CPU cores.  Each file (and each field) stands alone: a
  file that cannot be read drops only the series it feeds (``collector/proc-stat``,
  ``collector/proc-meminfo``).
* Samples that go backwards are skipped, the one before staying the baseline
  (``collector/proc-stat-backwards``); :data:`PROC_STAT_BACKWARDS_RESET` in a row are a
  counter reset.  Ticks that stand still for :data:`PROC_STAT_FROZEN_SECONDS` are frozen
  counters (``collector/proc-stat-frozen``): no node CPU usage from them.
* ``problem()`` raises or clears those conditions; the log says a failure once, then as a
  count every few minutes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from qosmanager._native import NodeReader
from qosmanager.framework.conditions import Conditions
from qosmanager.host.roots import HostRoots
from qosmanager.logfmt import RepeatLimiter

log = logging.getLogger("qosmanager.metrics.collector")

COND_PROC_STAT = "collector/proc-stat"
COND_PROC_STAT_BACKWARDS = "collector/proc-stat-backwards"  # a sample below the one before: skipped
COND_PROC_STAT_FROZEN = "collector/proc-stat-frozen"  # the CPU counters stand still
COND_PROC_MEMINFO = "collector/proc-meminfo"
# A /proc/stat sample below the baseline is skipped (it would make the next good one a burst that
# pins BE at the floor); this many in a row are a reset (a counter that restarted): the new baseline.
PROC_STAT_BACKWARDS_RESET = 5
# The cpu line's ticks (idle included) grow by USER_HZ x CPUs each second on a live node: standing
# still this long, they are frozen, and node CPU usage is not sampled from them.
PROC_STAT_FROZEN_SECONDS = 5.0


class NodeCounters:
    """Node CPU and memory from the proc files, with the conditions of what cannot be read."""

    def __init__(self, reader: NodeReader, roots: HostRoots, conditions: Conditions, clk_tck: int,
                 clock: Callable[[], float]) -> None:
        self.reader = reader
        self.roots = roots
        self.conditions = conditions
        self.clk_tck = clk_tck
        self._prev: tuple[int, int, int] | None = None  # (busy ticks, all ticks, monotonic ns)
        self._backwards = 0  # samples in a row below the baseline
        self._moved_ns = 0  # monotonic ns when the cpu line's ticks last grew
        self._errors = RepeatLimiter(300.0, clock=clock)  # a bad /proc/stat: said once, then counted

    def problem(self, key: str, message: str | None, error: BaseException | None = None) -> None:
        """Raise or clear a node counter condition; the log says a failure once (by its kind, not
        its text: a garbled file quotes changing counters), then as a count every few minutes."""
        conditions = self.conditions
        if message is None:
            conditions.clear(key)
            if key in self._errors:
                rep = self._errors.clear(key)
                log.warning("%s readable again%s", key.rpartition("/")[2].replace("-", "/"),
                            f" (it failed {rep.times()})" if rep is not None else "")
            return
        conditions.set(key, message)
        rep = self._errors.hit(key, (type(error).__name__, getattr(error, "errno", None)))
        if rep is not None:
            log.warning("%s%s", message, "" if rep.first else f" (failed {rep.times()})")

    def cpu_cores(self, busy: int, every: int, t: int) -> float:
        """Node CPU cores from busy ticks since the baseline sample, NaN when there is none.

        A sample below the baseline (busy or all ticks) is skipped and the baseline stays: taken as
        the baseline, it made the next good sample a burst of usage that pinned BE at the floor.
        :data:`PROC_STAT_BACKWARDS_RESET` such samples in a row are a counter that restarted: the
        latest becomes the baseline.  Ticks that stand still for :data:`PROC_STAT_FROZEN_SECONDS`
        are frozen counters: NaN (what reads node CPU holds its last decision) and a condition."""
        prev = self._prev
        if prev is None:
            self._prev, self._moved_ns = (busy, every, t), t
            return float("nan")
        pb, pe, pt = prev
        if busy < pb or every < pe:
            self._backwards += 1
            reset = self._backwards >= PROC_STAT_BACKWARDS_RESET
            self.problem(COND_PROC_STAT_BACKWARDS, (
                f"/proc/stat went backwards (busy ticks {busy} after {pb}, all ticks {every} after {pe}), "
                f"{self._backwards} sample(s) in a row: "
                + ("taken as a counter reset, the new baseline" if reset else
                   "skipped, the earlier sample stays the baseline; node_cpu_usage is not sampled")))
            if reset:
                self._prev, self._moved_ns, self._backwards = (busy, every, t), t, 0
            return float("nan")
        if self._backwards:
            self._backwards = 0
            self.problem(COND_PROC_STAT_BACKWARDS, None)
        if every > pe:
            self._moved_ns = t
            self.problem(COND_PROC_STAT_FROZEN, None)
        elif (t - self._moved_ns) / 1e9 >= PROC_STAT_FROZEN_SECONDS:
            self.problem(COND_PROC_STAT_FROZEN, (
                f"the CPU counters of /proc/stat have not moved for {(t - self._moved_ns) / 1e9:.0f} s "
                f"(all ticks {every}): frozen; node_cpu_usage and sys_cpu_usage are not sampled"))
            return float("nan")
        self._prev = (busy, every, t)
        dt = (t - pt) / 1e9
        return (busy - pb) / (dt * self.clk_tck) if dt > 0 else float("nan")

    def busy_ticks(self) -> int | None:
        """The busy ticks of ``/proc/stat``'s cpu line (all ticks: ``reader.total_ticks``), None
        when it cannot be read."""
        path = self.roots.proc_path("stat")
        try:
            busy = int(self.reader.read_stat())
        except (OSError, ValueError) as e:
            self.problem(COND_PROC_STAT, f"cannot read node CPU usage from {path}: {e}; "
                                         "node_cpu_usage and sys_cpu_usage are not sampled", e)
            return None
        self.problem(COND_PROC_STAT, None)
        return busy

    def memory_kib(self) -> tuple[int, int, int]:
        """``(MemTotal, MemFree, MemAvailable)`` in KiB, -1 for what cannot be read."""
        path = self.roots.proc_path("meminfo")
        try:
            total, free, avail = (int(v) for v in self.reader.read_meminfo())
        except (OSError, ValueError) as e:
            self.problem(COND_PROC_MEMINFO, f"cannot read node memory from {path}: {e}; "
                                            "the node memory series are not sampled", e)
            return -1, -1, -1
        lacking = [k for k, v in (("MemTotal", total), ("MemFree", free), ("MemAvailable", avail)) if v < 0]
        if lacking:
            lost = []
            if total < 0 or avail < 0:
                lost += ["node_memory_usage", "sys_memory_usage"]
            if total < 0 or free < 0:
                lost.append("node_memory_usage_with_page_cache")
            self.problem(COND_PROC_MEMINFO, f"{path} has no valid {', '.join(lacking)}: "
                                            f"{', '.join(lost)} not sampled")
        else:
            self.problem(COND_PROC_MEMINFO, None)
        return total, free, avail
