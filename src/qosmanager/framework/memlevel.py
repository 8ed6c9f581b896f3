"""The memory protection level in force: what memoryHigh (:mod:`qosmanager.strategies.memory_high`)
decided at its last tick, for the strategies that act after it and for ``/metrics``.

Levels (docs/interfaces.md, README "Memory protection"):

* ``0`` -- nothing in force: BE's cap is lifted (v2 ``memory.high`` "max", v1 soft limit unlimited);
* ``1`` -- BE capped: the BE QoS dir's ``memory.high`` (v1: ``memory.soft_limit_in_bytes``) at BE's
  budget (a cap found in force at start: never below BE's usage then);
* ``2`` -- capped and reclaiming: BE is over its budget and ``memory.reclaim`` takes at most 32 MiB of it
  per tick (gate ``BEMemoryReclaim``);
* level 3 (evict) is memoryEvict's.  What it reads here: :attr:`MemoryProtection.level`, and whether the
  kernel is holding BE at the cap (:meth:`MemoryProtection.holding`: the ``high`` events of the BE QoS
  dir's ``memory.events`` rose at the last tick), so that it evicts only where the cap does not do.

One object per agent (on :class:`~qosmanager.framework.context.Shared`); only memoryHigh's tick writes
it, on the scheduler's thread; the HTTP thread reads the level (an int: one consistent value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LEVEL_NONE, LEVEL_CAP, LEVEL_RECLAIM = 0, 1, 2


@dataclass
class MemoryProtection:
    level: int = LEVEL_NONE
    cap: int | None = None  # bytes of the cap in force on the BE QoS dir; None: lifted (or never set)
    budget: int | None = None  # BE's budget at the last tick (bytes; see memory_high's docstring)
    be_usage: int | None = None  # BE's page counter at the last tick (memory.current / usage_in_bytes)
    node_used: float | None = None  # the node's MemTotal - MemAvailable the last tick decided on (bytes)
    high_events: int | None = None  # the BE QoS dir's memory.events "high" (v2), cumulative
    high_events_delta: int = 0  # ... its rise since the tick before
    reclaimed: int = 0  # bytes memory.reclaim was asked for at the last tick (level 2)
    at: float = math.nan  # ctx.now of the last tick
    reason: str = ""  # why the level is what it is (the last decision, as audited)

    def holding(self) -> bool:
        """The kernel is holding BE at the cap: a cap is in force and its ``high`` events rose."""
        return self.level >= LEVEL_CAP and self.high_events_delta > 0
