"""memoryHigh: hold BE under a memory cap before memoryEvict has to kill (graduated protection).

memoryEvict has one step, a kill.  This strategy adds two gentler ones in front of it, on the same
NodeSLO thresholds (``resourceUsedThresholdWithBE``: ``enable``, ``memoryEvictThresholdPercent`` T,
``memoryEvictLowerPercent`` L, default T - 2), every ``--memory-evict-interval-seconds``:

* **Level 1** (gate ``BEMemoryHigh``): cap BE.  The BE QoS dir (``kubepods/besteffort``) gets
  ``memory.high`` = BE's budget, so the kernel reclaims BE's page cache and then throttles BE's
  allocations at the cap: BE slows down, nothing is killed.
* **Level 2** (gate ``BEMemoryReclaim``, on top of level 1, cgroup v2 kernels with
  ``memory.reclaim``): while BE is above its budget, ask the kernel to reclaim
  ``min(32 MiB, usage - budget)`` of it per tick (koordinator's open #3189 steps of at most 32 MiB).
* Level 3 is memoryEvict's.  What this strategy has in force is published on
  ``ctx.memory_protection`` (:class:`~qosmanager.framework.memlevel.MemoryProtection`: the level, the
  cap, and whether the kernel is holding BE at it) and exported as
  ``qosmanager_memory_protection_level``.

The terms, in bytes, and why they are these:

* ``capacity``: the Node's memory capacity; ``used``: ``node_memory_usage`` (MemTotal - MemAvailable),
  both exactly memoryEvict's (it evicts when ``used`` reaches T % of ``capacity``).
* ``be``: the BE QoS dir's page counter read at the tick (``memory.current`` on v2,
  ``memory.usage_in_bytes`` on v1): the number the kernel compares memory.high with.
* ``be_file``: its page cache, read at the same tick (``memory.stat`` ``file`` on v2, ``total_cache`` on
  v1), and ``be_counted = be - be_file``: BE's part of ``used`` (MemAvailable counts page cache as
  available, so ``used`` holds BE's anonymous and kernel memory, not its cache).
* ``non_be = max(0, used - be_counted)`` and ``budget = capacity * L / 100 - non_be``.

The cap is compared by the kernel with the whole page counter, cache included, so a BE held at
``be <= budget`` has ``be_counted <= budget`` and keeps ``used <= capacity * L / 100``: under
memoryEvict's threshold, in memoryEvict's own terms.  The budget is at L, not T, so that a BE pressing
its cap does not hold the node exactly at the eviction threshold (where one sample's noise would evict).

The limit of level 1: when BE's page counter is already above its budget (page cache BE holds), the cap
can only be its usage (point 2 below), and BE's anonymous memory may still grow into the room its page
cache leaves as the kernel reclaims it; the node's usage then rises by up to that much.  Level 2
(reclaim) takes that cache back in bounded steps, and the cap follows BE's usage down.

The decision, each tick:

1. **Engage** when ``used`` reaches ``L - 5`` % of capacity (BE then has what is left up to L before
   the kernel holds it, with no reaction delay); **lift** the cap (``max``) when ``used`` falls below
   ``L - 10`` % (the pressure ended), when the NodeSLO switches the thresholds off, or on a clean exit.
2. While engaged the cap is ``max(budget, be)``, page-aligned: it follows the budget as LS usage moves,
   but is **never below BE's current usage** -- a memory.high below usage makes the writer reclaim
   synchronously and the kernel throttle BE hard; pushing BE down is level 2's job, in bounded steps.
3. Writes are bounded: a new cap is written only when it moves by at least 0.5 % of capacity (and
   4 MiB), or when the cap in force is below BE's usage (a cap left by an agent killed with SIGKILL:
   reconciled at the first tick, raised to the usage or lifted).
4. Level 2: while engaged and ``be > budget``, one ``memory.reclaim`` of ``min(32 MiB, be - budget)``.
   A kernel without the file (v1, before 5.19) is said once and level 2 stays off.

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

from qosmanager.executor.executor import Request, Write, WriteResult
from qosmanager.framework.context import Context
from qosmanager.framework.demand import NODE, Need
from qosmanager.framework.memlevel import LEVEL_CAP, LEVEL_NONE, LEVEL_RECLAIM, MemoryProtection
from qosmanager.framework.strategy import Strategy, register
from qosmanager.host import resources as res
from qosmanager.host.cgroups import KubeQoS
from qosmanager.strategies._eviction import is_feature_disabled
from qosmanager.strategies.memory_evict import check_common_config, memory_evict_lower_percent

log = logging.getLogger(__name__)

GATE_HIGH = "BEMemoryHigh"
GATE_RECLAIM = "BEMemoryReclaim"
ENGAGE_BAND_PERCENT = 5  # engage at L - 5 % of capacity
RELEASE_BAND_PERCENT = 10  # lift below L - 10 %
MIN_STEP_PERCENT = 0.5  # a new cap is written when it moves by this much of capacity ...
MIN_STEP_BYTES = 4 << 20  # ... and at least this
RECLAIM_STEP_BYTES = 32 << 20  # koordinator #3189: at most 32 MiB per memory.reclaim
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

    def be_file(self, ctx: Context) -> int:
        """BE's page cache: memory.stat ``file`` (v2) / ``total_cache`` (v1) of the BE QoS dir (0 unread)."""
        sub, key = ("", "file") if ctx.cgroup_version == 2 else ("memory", "total_cache")
        text = ctx.read_cgroup_counter(sub, self.be_dir(ctx), "memory.stat")
        for line in (text or "").splitlines():
            k, _, value = line.partition(" ")
            if k == key:
                return max(0, _int(value) or 0)
        return 0

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

    def cap_in_force(self, ctx: Context) -> int | None:
        """The cap the BE QoS dir holds now; None when unlimited (or unreadable)."""
        text = ctx.read(self.cap_resource(ctx), self.be_dir(ctx))
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
        prot.at, prot.reclaimed = ctx.now, 0
        in_force = self.cap_in_force(ctx)
        off = self.switched_off(ctx)
        if off is not None:
            self.engaged = False
            return self.lift(ctx, prot, in_force, off)
        node = ctx.node
        cfg = ctx.nodeslo.resource_used_threshold_with_be
        used = ctx.node_metric("node_memory_usage")
        be = self.be_usage(ctx)
        if node is None or used is None or be is None:
            return []  # no fresh sample: keep what is in force until there is one
        threshold = cfg.memory_evict_threshold_percent
        assert threshold is not None  # checked by switched_off
        lower = memory_evict_lower_percent(cfg, threshold)
        capacity = node.memory_capacity
        be_counted = max(0, be - self.be_file(ctx))
        non_be = max(0, int(used) - be_counted)
        budget = capacity * lower // 100 - non_be
        prot.budget, prot.be_usage = budget, be
        pct = int(used) * 100 / capacity
        if not self.engaged and pct >= lower - ENGAGE_BAND_PERCENT:
            self.engaged = True
        elif self.engaged and pct < lower - RELEASE_BAND_PERCENT:
            self.engaged = False
        terms = (f"node memory {int(used)} of {capacity} bytes ({pct:.1f}%), BE {be} bytes ({be_counted} "
                 f"without page cache), non-BE {non_be}; BE's budget at {lower}%: {budget}")
        if not self.engaged:
            return self.lift(ctx, prot, in_force, f"pressure ended: {terms}, below {lower - RELEASE_BAND_PERCENT}%"
                             if in_force is not None else "")
        out: list[Request] = []
        cap = _page_up(max(budget, be))
        step = max(MIN_STEP_BYTES, int(capacity * MIN_STEP_PERCENT / 100))
        if in_force is None or in_force < be or abs(cap - in_force) >= step:
            why = (f"{terms}; cap BE at {cap}" + (" (its usage: never below it)" if budget < be else "")
                   + (f", replacing {in_force} below BE's usage" if in_force is not None and in_force < be else ""))
            out.append(self.write(self.cap_resource(ctx), self.be_dir(ctx), cap, why))
            prot.cap, prot.reason = cap, why
        else:
            prot.cap = in_force
        prot.level = LEVEL_CAP
        if be > budget and self.gate(GATE_RECLAIM) and ctx.cgroup_version == 2 and not self.reclaim_unsupported:
            amount = min(RECLAIM_STEP_BYTES, be - budget) // PAGE * PAGE
            if amount > 0:
                why = f"{terms}; BE is {be - budget} bytes over its budget: reclaim {amount}"
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
