"""memoryHigh: hold BE under a memory cap before memoryEvict has to kill (graduated protection).

memoryEvict has one step, a kill.  This strategy adds two gentler ones in front of it, on the same
NodeSLO thresholds (``resourceUsedThresholdWithBE``: ``enable``, ``memoryEvictThresholdPercent`` T,
``memoryEvictLowerPercent`` L, default T - 2), every ``--memory-evict-interval-seconds``:

* **Level 1** (gate ``BEMemoryHigh``): cap BE.  The BE QoS dir (``kubepods/besteffort``) gets
  ``memory.high`` = BE's budget (or a little over it, never below what BE cannot give back), so the
  kernel reclaims BE's page cache and then throttles BE's allocations at the cap: BE slows down,
  nothing is killed.
* **Level 2** (gate ``BEMemoryReclaim``, on top of level 1, cgroup v2 kernels with
  ``memory.reclaim``): while BE is above its cap's target, ask the kernel to reclaim
  ``min(32 MiB, usage - target)`` of its page cache per tick (koordinator's open #3189 steps of at
  most 32 MiB).
* Level 3 is memoryEvict's.  What this strategy has in force is published on
  ``ctx.memory_protection`` (:class:`~qosmanager.framework.memlevel.MemoryProtection`: the level, the
  cap, and whether the kernel is holding BE at it) and exported as
  ``qosmanager_memory_protection_level``.

The terms, in bytes, and why they are these:

* ``capacity``: the Node's memory capacity; ``used``: the node's MemTotal - MemAvailable, memoryEvict's
  own term (it evicts when ``used`` reaches T % of ``capacity``).  Where the host can be read it is
  read at the tick (``/proc/meminfo``), next to BE's counters: the collector's sample, up to two
  intervals old, set against BE's counters read now would count BE's growth since then as LS's.
  Elsewhere (replay, the harness) it is the collector's sample.
* ``be``: the BE QoS dir's page counter read at the tick (``memory.current`` on v2,
  ``memory.usage_in_bytes`` on v1): the number the kernel compares memory.high with.
* ``be_lru``: its file LRU pages, read at the same tick (``memory.stat`` ``active_file +
  inactive_file``, v1's ``total_`` ones): the page cache the kernel can reclaim, which MemAvailable
  counts as available.  ``pinned = be - be_lru``: BE's part of ``used``, and what the kernel cannot
  take back from BE by reclaim (anonymous memory, shmem, kernel memory; no swap).  These are the
  terms memoryEvict counts a victim's release in (:mod:`qosmanager.eviction.memsnap`: page counter
  minus file LRU), so a level and an eviction agree on what BE holds.  (``memory.stat`` ``file`` was
  used before: it includes shmem, which MemAvailable does not count as available.)
* ``non_be = max(0, used - pinned)`` and ``budget = capacity * L / 100 - non_be``.

The cap is compared by the kernel with the whole page counter, cache included, so a BE held at
``be <= budget`` has ``pinned <= budget`` and keeps ``used <= capacity * L / 100``: under
memoryEvict's threshold, in memoryEvict's own terms.  The budget is at L, not T, so that a BE pressing
its cap does not hold the node exactly at the eviction threshold (where one sample's noise would evict).

**A cap the kernel cannot meet by reclaim only throttles.**  memory.high makes the kernel reclaim the
cgroup down to it and, while it stays above, throttle every allocation of it -- page-cache charges
included.  Reclaim takes page cache only (no swap), so a cap below ``pinned`` is never met: BE stalls
on every read while the node is between L and T, where memoryEvict does nothing (measured in the
memory outcome benchmark: a page-cache-heavy BE pod read 0 MiB in 15 s where tick mode read 120-219).
So on v2 the cap leaves BE ``room`` of page cache over ``pinned`` (twice the write step below: 1 % of
capacity, at least 8 MiB), but rises over the budget for it only up to the ``ceiling``, the budget at
the midpoint of L and T (``capacity * (L + T) / 200 - non_be``)::

    target = max(budget, min(pinned + room, ceiling))

BE's anonymous memory between L and T is memoryEvict's business (level 3 evicts at T, judged as it
says), not a reason to stall BE's page cache; anonymous growth past the midpoint is still held by the
kernel, under T by the half band a throttled allocator may overrun memory.high by.  On v1 (a soft
limit, which never throttles) the target is the budget.

The decision, each tick:

1. **Engage** when ``used`` reaches ``L - 5`` % of capacity (BE then has what is left up to L before
   the kernel holds it, with no reaction delay); **lift** the cap (``max``) when ``used`` falls below
   ``L - 10`` % (the pressure ended), when the NodeSLO switches the thresholds off, or on a clean exit.
2. While engaged the cap is the target, page-aligned: it follows the budget as LS usage moves, and BE's
   usage only by the room over what BE cannot give back, never past the ceiling.  The kernel lets a
   throttled allocator pass memory.high (by a delay that grows with the overage, not a wall), so a cap
   raised to BE's whole usage whenever BE stood above it would be dragged up by any allocator faster
   than the tick, and the node would stay over the threshold until level 3 evicted anyway: the ceiling
   bounds that.
3. At start, a cap found in force **below BE's usage** (left by an agent killed with SIGKILL) is
   reconciled at the first tick: lifted when there is no pressure; under pressure raised to BE's
   usage and **never below it** from then on -- that floor only falls (with BE's usage, as BE frees
   memory or level 2 reclaims it) and is dropped once the target is above it.  Only that cap found
   in force gets the floor: the agent's own caps move with the target alone.
4. Writes are bounded: a new cap is written only when it moves by at least 0.5 % of capacity (and
   4 MiB), or when it reconciles a cap found in force below BE's usage.
5. Level 2: while engaged and ``be > target``, one ``memory.reclaim`` of ``min(32 MiB, be - target,
   be_lru)`` (only page cache can go) -- not in a tick that wrote a cap below BE's usage (that write has
   the kernel reclaim BE down to it already).  A kernel without the file (v1, before 5.19) is said once
   and level 2 stays off.

On cgroup v1 there is no memory.high (outside Anolis).  The nearest safe equivalent is
``memory.soft_limit_in_bytes`` on the BE QoS dir, at the same cap: when the node runs short the
kernel's reclaim takes from cgroups over their soft limit first, so BE's page cache goes before LS's,
and it never kills.  ``memory.limit_in_bytes`` was not chosen: BE reaching a hard limit is reclaimed
and then OOM-killed inside the memcg, a kill the kernel picks (not koordlet's victim order) -- exactly
what level 1 is to avoid.  A soft limit does not throttle BE's growth, so on v1 eviction stays the
backstop sooner than on v2.

All writes go through the executor (validated, owned, audited, ``--dry-run``); ``memory.reclaim`` is a
trigger, never compared, cached or kept as an original.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from qosmanager.eviction import memsnap
from qosmanager.executor.executor import Request, Write, WriteResult
from qosmanager.framework.context import Context
from qosmanager.framework.demand import NODE, Need
from qosmanager.framework.memlevel import LEVEL_CAP, LEVEL_NONE, LEVEL_RECLAIM, MemoryProtection
from qosmanager.framework.strategy import Strategy, register
from qosmanager.host import resources as res
from qosmanager.host.cgroups import KubeQoS
from qosmanager.strategies._eviction import is_feature_disabled
from qosmanager.strategies.memory_evict import check_common_config, memory_evict_lower_percent

if TYPE_CHECKING:
    from qosmanager.restore import Original

log = logging.getLogger(__name__)

GATE_HIGH = "BEMemoryHigh"
GATE_RECLAIM = "BEMemoryReclaim"
ENGAGE_BAND_PERCENT = 5  # engage at L - 5 % of capacity
RELEASE_BAND_PERCENT = 10  # lift below L - 10 %
MIN_STEP_PERCENT = 0.5  # a new cap is written when it moves by this much of capacity ...
MIN_STEP_BYTES = 4 << 20  # ... and at least this
RECLAIM_STEP_BYTES = 32 << 20  # koordinator #3189: at most 32 MiB per memory.reclaim
ROOM_STEPS = 2  # v2: page cache BE keeps over what it cannot give back, in write steps (more than one step)
LRU_KEYS = {2: ("active_file", "inactive_file"), 1: ("total_active_file", "total_inactive_file")}
PAGE = res.PAGE_SIZE


@register
class MemoryHigh(Strategy):
    name = "memoryHigh"
    gates = (GATE_HIGH,)
    interval_key = "memory_evict"

    def __init__(self, cfg, gates) -> None:  # type: ignore[no-untyped-def]
        super().__init__(cfg, gates)
        self.engaged = False
        self.reclaim_unsupported = False
        self.started = False  # the first tick (its reconciliation of a cap found in force) is done
        self.floor: int | None = None  # never below this: BE's usage over a cap found in force at start

    def needs(self, ctx: Context) -> Sequence[Need]:
        return (Need("node_memory_usage", NODE),)

    # ------------------------------------------------------------------ the files
    @staticmethod
    def cap_resource(ctx: Context) -> str:
        return "memory.high" if ctx.cgroup_version == 2 else "memory.soft_limit_in_bytes"

    @staticmethod
    def be_dir(ctx: Context) -> str:
        return ctx.qos_dir(KubeQoS.BESTEFFORT.value)

    def be_usage(self, ctx: Context) -> int | None:
        """BE's page counter now: memory.current (v2) / memory.usage_in_bytes (v1) of the BE QoS dir."""
        sub, name = ("", "memory.current") if ctx.cgroup_version == 2 else ("memory", "memory.usage_in_bytes")
        return _int(ctx.read_cgroup_counter(sub, self.be_dir(ctx), name))

    def be_lru(self, ctx: Context) -> int:
        """BE's file LRU pages, the page cache reclaim can take: ``memory.stat`` ``active_file +
        inactive_file`` (v2) / ``total_active_file + total_inactive_file`` (v1) of the BE QoS dir (0
        unread)."""
        keys = LRU_KEYS[2 if ctx.cgroup_version == 2 else 1]
        sub = "" if ctx.cgroup_version == 2 else "memory"
        text = ctx.read_cgroup_counter(sub, self.be_dir(ctx), "memory.stat")
        total = 0
        for line in (text or "").splitlines():
            k, _, value = line.partition(" ")
            if k in keys:
                total += max(0, _int(value) or 0)
        return total

    @staticmethod
    def node_used(ctx: Context) -> float | None:
        """The node's MemTotal - MemAvailable: read now where the host can be read (beside BE's counters),
        else (or when unreadable) the collector's sample."""
        if ctx.host_reads:
            now = memsnap.read_node_used(ctx.layout)
            if now is not None:
                return now
        return ctx.node_metric("node_memory_usage")

    def high_events(self, ctx: Context) -> int | None:
        """The BE QoS dir's memory.events ``high`` (v2; hierarchical: every BE pod's too)."""
        if ctx.cgroup_version != 2:
            return None
        text = ctx.read_cgroup_counter("", self.be_dir(ctx), "memory.events")
        for line in (text or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "high":
                return _int(value)
        return None

    @classmethod
    def cap_in_force(cls, ctx: Context) -> int | None:
        """The cap the BE QoS dir holds now; None when unlimited (or unreadable)."""
        text = ctx.read(cls.cap_resource(ctx), cls.be_dir(ctx))
        if text is None or text.strip() in res.UNLIMITED_TOKENS:
            return None
        v = _int(text)
        return None if v is None or v >= res.V1_MEMORY_UNLIMITED else v

    # ------------------------------------------------------------------ the algorithm
    def tick(self, ctx: Context) -> Sequence[Request]:
        prot = ctx.memory_protection
        events = self.high_events(ctx)
        prot.high_events_delta = (events - prot.high_events if events is not None and prot.high_events is not None
                                  and events >= prot.high_events else 0)
        prot.high_events = events
        prot.at, prot.reclaimed, prot.node_used = ctx.now, 0, None
        in_force = self.cap_in_force(ctx)
        first = not self.started
        off = self.switched_off(ctx)
        if off is not None:
            self.engaged, self.floor, self.started = False, None, True
            return self.lift(ctx, prot, in_force, off)
        node = ctx.node
        cfg = ctx.nodeslo.resource_used_threshold_with_be
        be = self.be_usage(ctx)
        lru = self.be_lru(ctx) if be is not None else 0
        used = self.node_used(ctx)
        if node is None or used is None or be is None:
            return []  # no fresh sample: keep what is in force (and reconcile it) until there is one
        self.started = True
        threshold = cfg.memory_evict_threshold_percent
        assert threshold is not None  # checked by switched_off
        lower = memory_evict_lower_percent(cfg, threshold)
        capacity = node.memory_capacity
        lru = min(lru, be)
        pinned = be - lru
        non_be = max(0, int(used) - pinned)
        budget = capacity * lower // 100 - non_be
        step = max(MIN_STEP_BYTES, int(capacity * MIN_STEP_PERCENT / 100))
        target, room_why = budget, ""
        if ctx.cgroup_version == 2:  # memory.high throttles: never a cap reclaim cannot meet (up to the ceiling)
            ceiling = capacity * (lower + threshold) // 200 - non_be
            room = ROOM_STEPS * step
            target = max(budget, min(pinned + room, ceiling))
            if target > budget:
                room_why = (f"; {target - budget} over the budget: BE cannot give back {pinned} bytes by reclaim"
                            f" (its usage less its file LRU) and keeps {room} of page cache over them, up to"
                            f" {ceiling}, the budget at {(lower + threshold) / 2:g}%")
        prot.budget, prot.be_usage, prot.node_used = budget, be, used
        pct = int(used) * 100 / capacity
        if not self.engaged and pct >= lower - ENGAGE_BAND_PERCENT:
            self.engaged = True
        elif self.engaged and pct < lower - RELEASE_BAND_PERCENT:
            self.engaged = False
        terms = (f"node memory {int(used)} of {capacity} bytes ({pct:.1f}%), BE {be} bytes ({pinned} "
                 f"without its file LRU), non-BE {non_be}; BE's budget at {lower}%: {budget}")
        if not self.engaged:
            self.floor = None
            return self.lift(ctx, prot, in_force, f"pressure ended: {terms}, below {lower - RELEASE_BAND_PERCENT}%"
                             if in_force is not None else "")
        out: list[Request] = []
        if first and in_force is not None:  # a cap found in force at start: never below BE's usage
            self.floor = _page_up(be)
        elif self.floor is not None:  # the floor only falls, with BE's usage
            self.floor = min(self.floor, _page_up(be))
        if self.floor is not None and self.floor <= target:
            self.floor = None  # the target is above it: the cap follows the target alone
        reconcile = first and in_force is not None and in_force < be
        cap = _page_up(max(target, self.floor or 0, 0))  # (LS alone past the line: 0, BE may not grow)
        below = False  # a cap written below BE's usage: the kernel reclaims BE down to it in that write
        if in_force is None or reconcile or abs(cap - in_force) >= step:
            below = cap < be
            why = (f"{terms}; cap BE at {cap}{room_why}"
                   + (f" (BE's usage, replacing {in_force}: a cap found in force at start is never set below it)"
                      if reconcile else " (BE's usage: a cap found in force at start is never set below it)"
                      if self.floor is not None else ""))
            out.append(self.write(self.cap_resource(ctx), self.be_dir(ctx), cap, why))
            prot.cap, prot.reason = cap, why
        else:
            prot.cap = in_force
        prot.level = LEVEL_CAP
        if (be > target and not below and self.gate(GATE_RECLAIM) and ctx.cgroup_version == 2
                and not self.reclaim_unsupported):
            amount = min(RECLAIM_STEP_BYTES, be - target, lru) // PAGE * PAGE  # only page cache can go
            if amount > 0:
                why = f"{terms}; BE is {be - target} bytes over its cap's target {target}: reclaim {amount}"
                out.append(Write(self.name, "memory.reclaim", str(amount), self.be_dir(ctx), reason=why,
                                 cacheable=False, compare=False))
                prot.level, prot.reclaimed, prot.reason = LEVEL_RECLAIM, amount, why
        return out

    def switched_off(self, ctx: Context) -> str | None:
        """Why the thresholds say nothing now (memoryEvict's switch and checks), or None."""
        if is_feature_disabled(ctx):
            return "resourceUsedThresholdWithBE is not enabled"
        problem = check_common_config(ctx.nodeslo.resource_used_threshold_with_be)
        if problem is not None:
            return problem
        if ctx.node is None or ctx.node.memory_capacity <= 0:
            return "the node's memory capacity is not known"
        return None

    def lift(self, ctx: Context, prot: MemoryProtection, in_force: int | None, why: str) -> list[Request]:
        prot.level, prot.cap = LEVEL_NONE, None
        if in_force is None:
            return []
        prot.reason = f"lift BE's memory cap: {why}"
        return [self.write(self.cap_resource(ctx), self.be_dir(ctx), _unlimited(ctx), prot.reason)]

    def after_apply(self, ctx: Context, results: Sequence[WriteResult]) -> None:
        for r in results:
            if r.write.resource == "memory.reclaim" and r.status in ("missing", "unsupported"):
                self.reclaim_unsupported = True
                log.warning("memoryHigh: this kernel has no memory.reclaim (%s): level 2 stays off", r.target)

    @classmethod
    def on_start_off(cls, ctx: Context, owned: Sequence[Original]) -> Sequence[Request]:
        """An agent that does not run memoryHigh lifts the cap an earlier agent left (killed with SIGKILL,
        so no clean exit lifted it), when the originals file says memoryHigh changed the file: it writes
        back what the file held before (``max`` / unlimited, unless someone else had set it).  A cap no
        record claims is left in force, and said once: the agent cannot tell it from an operator's."""
        in_force = cls.cap_in_force(ctx)
        if in_force is None:
            return ()
        key = (cls.cap_resource(ctx), cls.be_dir(ctx), "")
        mine = [o for o in owned if o.key == key and o.strategy == cls.name]
        if not mine:
            log.warning("memoryHigh is off and BE's %s holds %d, which no --originals-file record says an "
                        "agent set: left as it is", key[0], in_force)
            return ()
        o = mine[0]
        why = (f"memoryHigh is off: lift BE's memory cap {in_force}, left by an earlier agent that did not stop "
               f"cleanly (the originals file says memoryHigh changed it from {o.value.strip()!r})")
        return [Write(cls.name, o.resource, o.value, o.cgroup, reason=why, raw=o.raw, restore=True)]

    def on_exit(self, ctx: Context) -> Sequence[Request]:
        """A clean stop lifts the cap (the next agent decides again; a SIGKILL leaves it, and the next
        agent's first tick reconciles it)."""
        prot = ctx.memory_protection
        if self.cap_in_force(ctx) is None:
            return []
        prot.level, prot.cap, prot.reason = LEVEL_NONE, None, "lift BE's memory cap: the agent stops"
        return [self.write(self.cap_resource(ctx), self.be_dir(ctx), _unlimited(ctx), prot.reason)]


def _unlimited(ctx: Context) -> str:
    return "max" if ctx.cgroup_version == 2 else "-1"


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _page_up(v: int) -> int:
    return -(-v // PAGE) * PAGE
