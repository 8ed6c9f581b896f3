"""How soon memory protection acts: the reaction time of each level, for ``/metrics``
(``qosmanager_memory_protection_reaction_seconds{level}``) and ``simulate``.

A level's reaction runs from the **start of the sample window that showed the node's memory crossing the
level's line** to the **level's action in the kernel**:

* the line: memoryHigh's engage line ``C x (L - 5) / 100`` for levels 1 and 2, memoryEvict's threshold
  ``C x T / 100`` for level 3 (:func:`~qosmanager.framework.memtrigger.protection_lines`, the memory
  trigger's own lines); the node's memory is ``MemTotal - MemAvailable``;
* the samples: the memory trigger's (every 50 ms, :class:`~qosmanager.framework.memtrigger.MemoryTrigger`),
  the collector's (every pass, its ``node_memory_usage``) and memoryHigh's own reading at its tick (the
  only ones in ``--react-mode tick``), whichever shows the crossing first.  The window starts at the
  sample before it from the same source (the last that showed the node below the line): the crossing
  happened within that window, so the time is an upper bound, by at most one sampling interval (50 ms
  with the trigger, the tick interval without it), as for ``qosmanager_be_limit_reaction_seconds``;
* the action, on the executor's result: level 1, memoryHigh's cap on the BE QoS dir (``memory.high``; v1:
  ``memory.soft_limit_in_bytes``) written, or found already holding that value (results ``written``,
  ``unchanged``, ``cached``: in the kernel; ``--dry-run`` never is); level 2, its first ``memory.reclaim``
  written after the crossing (level 2 acts only once BE is over its cap's target, so its time includes
  BE's growth to it); level 3, the first eviction executed after the crossing of T (under
  ``--evict-mode none`` none is, unless :attr:`MemoryReactions.count_decided`, which ``simulate`` sets: its
  load model honours every decision).

One reaction per crossing and level: a line is armed again once the node falls one write step (0.5 % of
capacity, at least 4 MiB) below it, as the trigger's lines are.  A level already in force when its line
is crossed (a cap kept since an earlier crossing) has nothing to react to and is not timed.  Times are the
agent scheduler's monotonic clock.  The hooks are O(1) and never raise into the agent (a failure is
logged once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from qosmanager.framework.memlevel import LEVEL_CAP, LEVEL_RECLAIM, MemoryProtection
from qosmanager.framework.memtrigger import MemoryTrigger, protection_lines
from qosmanager.framework.scheduler import Job, Scheduler
from qosmanager.states.store import StateStore

if TYPE_CHECKING:
    from qosmanager.eviction.coordinator import EvictionCoordinator
    from qosmanager.eviction.types import EvictDecision
    from qosmanager.executor.executor import Executor, WriteResult
    from qosmanager.metrics.cache import MetricCache

log = logging.getLogger(__name__)

LEVEL_EVICT = 3
LEVELS = (LEVEL_CAP, LEVEL_RECLAIM, LEVEL_EVICT)
HIGH = "memoryHigh"
CAP_FILES = frozenset({"memory.high", "memory.soft_limit_in_bytes"})
RECLAIM = "memory.reclaim"
IN_KERNEL = frozenset({"written", "unchanged", "cached"})
UNLIMITED = frozenset({"max", "-1"})
ENGAGE, EVICT = 0, 1  # the two lines
SOURCES = ("trigger", "collect", HIGH)


class _Shared(Protocol):
    @property
    def memory_protection(self) -> MemoryProtection: ...


class _Manager(Protocol):
    @property
    def shared(self) -> _Shared: ...
    @property
    def on_tick(self) -> list[Callable[[str, float], None]]: ...


class AgentParts(Protocol):
    """What :meth:`MemoryReactions.for_agent` takes from the agent (``memtrigger`` is read if present)."""

    @property
    def store(self) -> StateStore: ...
    @property
    def cache(self) -> MetricCache: ...
    @property
    def executor(self) -> Executor: ...
    @property
    def coordinator(self) -> EvictionCoordinator: ...
    @property
    def manager(self) -> _Manager: ...
    @property
    def scheduler(self) -> Scheduler: ...


class MemoryReactions:
    """The crossings and the reactions to them (see the module docstring).  ``observe(level, seconds)``
    gets each reaction."""

    def __init__(self, store: StateStore, protection: MemoryProtection, clock: Callable[[], float],
                 observe: Callable[[int, float], object] | None = None) -> None:
        self.store, self.protection, self.clock, self.observe = store, protection, clock, observe
        self.count_decided = False  # level 3: an eviction decided but not executed counts (simulate)
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # source -> time of its last sample
        self._over = [False, False]  # per line: the node is over it (armed again below it less a step)
        self._since: dict[int, float] = {}  # level -> start of the window that showed its line crossed
        self._level = 0  # the level memoryHigh had in force after its last tick (its on_tick)
        self._failed = False

    @classmethod
    def for_agent(cls, agent: AgentParts, observe: Callable[[int, float], object] | None = None,
                  trigger: MemoryTrigger | None = None) -> MemoryReactions:
        """Fed by the agent's memory trigger (if any), its collector passes, executor results and eviction
        decisions; timed on its scheduler's monotonic clock."""
        sched = agent.scheduler
        self = cls(agent.store, agent.manager.shared.memory_protection, sched.monotonic, observe)
        trigger = trigger if trigger is not None else getattr(agent, "memtrigger", None)
        if trigger is not None:
            trigger.on_sample.append(lambda used: self.sample(used, "trigger"))
        cache = agent.cache

        def on_run(job: Job, seconds: float) -> None:
            if job.name == "collect":
                wall = sched.wall()
                used = cache.query("node_memory_usage", wall - 2 * job.interval, wall, "last")
                if used is not None and used == used:
                    self.sample(used, "collect", sched.monotonic() - seconds)  # the pass's start

        sched.on_run.append(on_run)
        agent.manager.on_tick.append(self.on_tick)
        agent.executor.on_batch.append(self.on_batch)
        agent.coordinator.on_decision.append(self.on_decision)
        return self

    # ------------------------------------------------------------------ samples
    def sample(self, used: float, source: str, at: float | None = None) -> None:
        """A sample of the node's memory (bytes) from ``source`` taken at ``at`` (now by default)."""
        try:
            now = self.clock() if at is None else at
            lines = protection_lines(self.store)
            with self._lock:
                start = self._last.get(source, now)
                self._last[source] = now
                if lines is None:
                    self._over, self._since = [False, False], {}
                    return
                engage, threshold, step = lines
                for line, value, levels in ((ENGAGE, engage, (LEVEL_CAP, LEVEL_RECLAIM)),
                                            (EVICT, threshold, (LEVEL_EVICT,))):
                    if used >= value and not self._over[line]:
                        self._over[line] = True
                        for level in levels:
                            if level == LEVEL_EVICT or self._level < level:
                                self._since[level] = start
                    elif used < value - step and self._over[line]:
                        self._over[line] = False
                        for level in levels:
                            self._since.pop(level, None)
        except Exception:
            self._fail("sample")

    def on_tick(self, name: str, _seconds: float) -> None:
        """QoS manager ``on_tick``: memoryHigh's reading at its tick is a sample too."""
        if name == HIGH:
            self._high_sample()
            self._level = self.protection.level

    def _high_sample(self) -> None:
        used = self.protection.node_used
        if used is not None:
            self.sample(used, HIGH)

    # ------------------------------------------------------------------ actions
    def acted(self, level: int, at: float | None = None) -> float | None:
        """Level ``level`` acted in the kernel now (or at ``at``): its reaction, if a crossing waited for it."""
        with self._lock:
            since = self._since.pop(level, None)
        if since is None:
            return None
        seconds = max(0.0, (self.clock() if at is None else at) - since)
        if self.observe is not None:
            self.observe(level, seconds)
        return seconds

    def on_batch(self, results: Sequence[WriteResult], _seconds: float) -> None:
        """Executor ``on_batch``: memoryHigh's cap (level 1) and reclaim (level 2) in the kernel."""
        if not results or results[0].write.strategy != HIGH:  # a batch is one strategy's: others cost one check
            return
        try:
            self._high_sample()  # the tick's reading, before what it wrote (its on_tick comes after)
            now = self.clock()
            for r in results:
                w = r.write
                if r.status not in IN_KERNEL:
                    continue
                if w.resource in CAP_FILES and w.value.strip() not in UNLIMITED:
                    self.acted(LEVEL_CAP, now)
                elif w.resource == RECLAIM and r.status == "written":
                    self.acted(LEVEL_RECLAIM, now)
        except Exception:
            self._fail("on_batch")

    def on_decision(self, d: EvictDecision, _strategy: str) -> None:
        """Coordinator ``on_decision``: an eviction (level 3)."""
        try:
            if d.action == "evicted" and (d.executed or self.count_decided):
                self.acted(LEVEL_EVICT)
        except Exception:
            self._fail("on_decision")

    def pending(self) -> dict[int, float]:
        """Level -> start of the window of a crossing not acted on yet (a snapshot)."""
        with self._lock:
            return dict(self._since)

    def _fail(self, where: str) -> None:
        if not self._failed:
            self._failed = True
            log.exception("memory reaction times: %s failed (logged once; the agent is not affected)", where)


__all__ = ["LEVELS", "LEVEL_EVICT", "MemoryReactions"]
