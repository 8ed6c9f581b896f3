"""The memory trigger: memoryHigh (and memoryEvict) woken within a tenth of a second of the node's memory
crossing their lines, instead of at their next tick (``--memory-evict-interval-seconds``, 1 s).

A thread reads one file every ``interval`` (50 ms, the fast path's cadence): ``/proc/meminfo``, from a
descriptor it keeps open (one ``pread`` of its first lines), for the node's ``MemTotal - MemAvailable``,
the term both strategies decide on (memoryHigh reads it again at its tick, next to BE's counters).  It
compares that with the lines from the Node and NodeSLO in the state store (capacity C,
``memoryEvictThresholdPercent`` T, ``memoryEvictLowerPercent`` L):

* ``C x (L - 5) / 100``, where memoryHigh engages level 1 (BE capped by ``memory.high`` at its budget):
  crossing it upward wakes memoryHigh; while the node stays over it, each further rise by memoryHigh's
  write step (0.5 % of C, at least 4 MiB) wakes it again, so the cap follows a growing LS at once;
* ``C x T / 100``, memoryEvict's threshold: crossing it upward wakes the collector (memoryEvict judges the
  node by its sample), memoryHigh and memoryEvict, in that order.

A line is armed again once the node falls one write step below it.  The wake is the scheduler's
(:meth:`~qosmanager.framework.scheduler.Scheduler.wake`): the strategies still run on the scheduler's
thread, in their own order, with their own reads and checks; the trigger only moves their run forward.
Its cost is one file read per sample whatever the number of pods.

On with the fast path (``--react-mode fast``, the default) when memoryHigh runs (gate ``BEMemoryHigh``);
off in tick mode.  PSI triggers (:mod:`qosmanager.framework.psi`) wake the same jobs when LS stalls on
memory; they complement this poll: the counter crossing is what the levels are defined on, and level 1
must cap BE before any stall.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Collection
from typing import Protocol

from qosmanager.framework.fastpath import INTERVAL, REACT_FAST
from qosmanager.framework.scheduler import Scheduler
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.states.store import StateStore
from qosmanager.strategies._helpers import threshold_feature_disabled
from qosmanager.strategies.memory_evict import check_common_config, memory_evict_lower_percent
from qosmanager.strategies.memory_high import ENGAGE_BAND_PERCENT, MIN_STEP_BYTES, MIN_STEP_PERCENT


class _ReactConfig(Protocol):
    @property
    def react_mode(self) -> str: ...


class AgentParts(Protocol):
    """What the trigger takes from the agent (a protocol, not the Agent: the agent imports this module)."""

    @property
    def cfg(self) -> _ReactConfig: ...
    @property
    def strategy_names(self) -> Collection[str]: ...
    @property
    def layout(self) -> CgroupLayout: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def scheduler(self) -> Scheduler: ...

log = logging.getLogger(__name__)

HIGH, EVICT, COLLECT = "memoryHigh", "memoryEvict", "collect"
HEAD_BYTES = 512  # MemTotal and MemAvailable are the first and third lines of /proc/meminfo


def parse_used(head: bytes) -> int | None:
    """``MemTotal - MemAvailable`` (bytes) from the head of ``/proc/meminfo``; None when either is missing."""
    total = avail = None
    for line in head.split(b"\n"):
        key, _, rest = line.partition(b":")
        if key == b"MemTotal" or key == b"MemAvailable":
            fields = rest.split()
            if not fields or not fields[0].isdigit():
                return None
            if key == b"MemTotal":
                total = int(fields[0])
            else:
                avail = int(fields[0])
            if total is not None and avail is not None:
                return max(0, total - avail) * 1024
    return None


def protection_lines(store: StateStore) -> tuple[float, float, float] | None:
    """(memoryHigh's engage line, memoryEvict's threshold, the write step), bytes; None where the NodeSLO
    says nothing (the strategies' own switch and checks) or the capacity is not known."""
    node = store.node
    cfg = store.nodeslo.resource_used_threshold_with_be
    if (node is None or node.memory_capacity <= 0 or check_common_config(cfg) is not None
            or threshold_feature_disabled(store.nodeslo, store.nodeslo_present) is not False):
        return None
    threshold = cfg.memory_evict_threshold_percent
    assert threshold is not None  # checked by check_common_config
    capacity = node.memory_capacity
    lower = memory_evict_lower_percent(cfg, threshold)
    step = max(MIN_STEP_BYTES, capacity * MIN_STEP_PERCENT / 100)
    return capacity * (lower - ENGAGE_BAND_PERCENT) / 100, capacity * threshold / 100, step


class MemoryTrigger:
    """The watcher thread and its lines (see the module docstring)."""

    def __init__(self, layout: CgroupLayout, store: StateStore, wake: Callable[..., None], *,
                 evict: bool = True, interval: float = INTERVAL) -> None:
        self.store, self.wake, self.interval = store, wake, interval
        self.evict = evict  # memoryEvict runs: its threshold is watched too
        self.path = layout.roots.proc_path("meminfo")
        self._fd = -1
        self.samples = self.errors = self.wakes = 0
        self.on_sample: list[Callable[[int], object]] = []  # each sample's used bytes (memory reaction times)
        self._high_mark: float | None = None  # node usage at the last wake of memoryHigh (None: disarmed)
        self._over_evict = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_agent(cls, agent: AgentParts) -> MemoryTrigger | None:
        """The agent's trigger, registered as a watcher of its scheduler (started and stopped with its
        loop), or None: tick mode, or memoryHigh not running."""
        names = agent.strategy_names
        if agent.cfg.react_mode != REACT_FAST or HIGH not in names:
            return None
        trigger = cls(agent.layout, agent.store, agent.scheduler.wake, evict=EVICT in names)
        agent.scheduler.watchers.append(trigger)
        return trigger

    # ------------------------------------------------------------------ the thread
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="memtrigger", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:  # the thread must outlive any one sample; the ticks still protect
                self.errors += 1
                log.exception("memory trigger: a sample failed")

    # ------------------------------------------------------------------ one sample
    def lines(self) -> tuple[float, float, float] | None:
        """The lines now (:func:`protection_lines`)."""
        return protection_lines(self.store)

    def read_used(self) -> int | None:
        """The node's ``MemTotal - MemAvailable`` now (one ``pread``); None when unreadable."""
        try:
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            return parse_used(os.pread(self._fd, HEAD_BYTES, 0))
        except OSError:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            self._fd = -1
            return None

    def check(self) -> tuple[str, ...]:
        """Read the node's memory; wake the strategies whose line it crossed.  Returns the jobs woken."""
        self.samples += 1
        used = self.read_used()
        lines = self.lines()
        if used is None or lines is None:
            self._high_mark, self._over_evict = None, False
            return ()
        for cb in self.on_sample:
            cb(used)
        engage, threshold, step = lines
        woken: tuple[str, ...] = ()
        if used >= threshold and self.evict and not self._over_evict:
            self._over_evict = True
            woken = (COLLECT, HIGH, EVICT)
        elif used < threshold - step:
            self._over_evict = False
        if used >= engage and (self._high_mark is None or used >= self._high_mark + step):
            self._high_mark = float(used)
            woken = woken or (HIGH,)
        elif used < engage - step:
            self._high_mark = None
        if woken:
            self.wakes += 1
            self.wake(*woken)
        return woken


__all__ = ["MemoryTrigger", "parse_used", "protection_lines"]
