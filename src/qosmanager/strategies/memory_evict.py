"""memoryEvict: evict pods to give memory back (koordlet-qos §4.4).

The memory twin of :mod:`qosmanager.strategies.cpu_evict`, three features in this order:

* ``BEMemoryEvict`` -- node memory usage is at or above ``memoryEvictThresholdPercent``: evict BE
  pods, largest users first, until their usage covers the excess over the lower percent.
* ``MemoryAllocatableEvict`` -- low-priority pods request more than
  ``memoryAllocatableEvictThresholdPercent`` of a batch/mid memory resource the node offers:
  evict by request until it is back at the lower percent.
* ``MemoryEvict`` -- the same usage trigger as ``BEMemoryEvict``, but the victims are opted-in
  low-priority pods (``koordinator.sh/eviction-enabled: "true"``) in priority order.

Gating, config checks (logged once, the other features keep running) and the coordinator
are as for CPU: the tick and every helper both evictors use live in
:mod:`qosmanager.strategies._eviction`.  The cool-down (``MemoryEvictCoolTimeSeconds``, 4 s) starts
only after a tick that evicted a new pod: there is no quiet start, unlike cpuEvict.

Units: bytes throughout (pod and node memory usage metrics are bytes).

koordlet fix: the usage features decide on readings taken together (:mod:`qosmanager.eviction.memsnap`): the
collector's node sample is only the trigger; the agent then reads the node and every candidate
at that moment and counts each victim's release in the node's terms (its page counter minus its
file LRU), so a round never evicts a second pod to cover a difference in accounting or in age.
Replay and the harness, which have samples but no live host, decide from the samples as koordlet
does.

Graduated mode (gate ``BEMemoryHigh`` on: memoryHigh caps BE first, levels 1 and 2, see
:mod:`qosmanager.strategies.memory_high`): the usage features are level 3 and evict, with koordlet's
victim order and release accounting, only when BE keeps the node over the threshold or stalls LS:

* **LS stalls**: an LS class spent at least 1 % of the time since the last tick stalled on memory
  (PSI: ``memory.pressure`` of the Burstable dir and the Guaranteed pods on v2, else
  ``/proc/pressure/memory`` ``full``; :mod:`qosmanager.eviction.stall`) -- evict at once;
* **BE keeps the node over the threshold**: the node has stayed at or over it for one cool-down
  (``--memory-evict-cool-time-seconds``, 4 s) in spite of the cap -- time for the kernel to reclaim BE's
  page cache and throttle its growth (the BE dir's ``memory.events`` ``high`` count, which says whether
  the kernel is holding BE at its cap, is given in the reason).

Until then the round holds back (said once per spell over the threshold, as a ``skip`` audit record):
a transient spike, or BE held at its cap while it gives page cache back, evicts nothing.  Plain mode
(the gate off) is koordlet's: evict at the first tick over the threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from qosmanager.api.node import NodeMeta
from qosmanager.api.nodeslo import ResourceThresholdStrategy
from qosmanager.api.pod import RESOURCE_MEMORY, PodMeta
from qosmanager.eviction import memsnap
from qosmanager.eviction.stall import LSStallWatch, Stall
from qosmanager.eviction.types import TARGET_POD_USED, EvictTask, Victim
from qosmanager.executor.executor import Write
from qosmanager.framework.context import Context
from qosmanager.framework.demand import NODE, POD, Need
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, register
from qosmanager.strategies._eviction import (
    Candidate,
    EvictionStrategy,
    Lazy,
    TaskBuilder,
    be_order,
    be_pods,
    be_sort_priority,
    is_feature_disabled,
    priority_candidates,
    priority_pods,
    release_by_used_threshold,
    sort_by_priority,
)
from qosmanager.strategies._helpers import go_div

BE_MEMORY_EVICT = "BEMemoryEvict"
MEMORY_ALLOCATABLE_EVICT = "MemoryAllocatableEvict"
MEMORY_EVICT = "MemoryEvict"

MEMORY_RELEASE_BUFFER_PERCENT = 2  # memoryEvictLowerPercent when unset: threshold - 2
GRADUATED_GATE = "BEMemoryHigh"  # graduated protection: memoryHigh caps BE, memoryEvict is level 3


@register
class MemoryEvict(EvictionStrategy):
    name = "memoryEvict"
    gates = (BE_MEMORY_EVICT, MEMORY_EVICT, MEMORY_ALLOCATABLE_EVICT)
    interval_key = "memory_evict"
    features = (BE_MEMORY_EVICT, MEMORY_ALLOCATABLE_EVICT, MEMORY_EVICT)  # fixed order
    usage_metric = "pod_memory_usage"  # bytes
    quiet_start = False  # the cool-down counts from time zero

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self._snapshot: tuple[float, memsnap.MemorySnapshot | None] | None = None
        # graduated mode (level 3): LS stalls, and since when the node is over the threshold
        self._stall_watch: LSStallWatch | None = None
        self.stall: Stall | None = None
        self.over_since: float | None = None
        self._held_back_said = False

    def graduated(self) -> bool:
        return self.gate(GRADUATED_GATE)

    def tick(self, ctx: Context) -> list[Write]:
        if self.graduated():
            self.watch(ctx)
        return super().tick(ctx)

    def watch(self, ctx: Context) -> None:
        """Graduated mode, every tick (cool-down included): sample LS's memory stalls, and note since
        when the collector's node sample is at or over the threshold."""
        if self._stall_watch is None or self._stall_watch.layout is not ctx.layout:
            self._stall_watch = LSStallWatch(ctx.layout)
        self.stall = self._stall_watch.sample(ctx.pods.values(), ctx.now)
        node, cfg = ctx.node, ctx.nodeslo.resource_used_threshold_with_be
        over = (node is not None and node.memory_capacity > 0 and not is_feature_disabled(ctx)
                and check_common_config(cfg) is None and calculate_release_by_used_threshold(ctx, node, cfg)
                is not None)
        if not over:
            self.over_since = None
            self._held_back_said = False
        elif self.over_since is None:
            self.over_since = ctx.now

    def level3(self, ctx: Context) -> tuple[bool, str]:
        """Graduated mode, the node over the threshold now: whether to evict, and why (or why not)."""
        prot = ctx.memory_protection
        events = (f", BE's memory.high events +{prot.high_events_delta} at memoryHigh's last tick"
                  if prot.high_events is not None else "")
        level = f"protection level {prot.level}{events}"
        stall = self.stall
        if stall is not None and stall.stalled:
            return True, (f"level 3: LS stalled on memory {stall.share:.1%} of the time since the last tick "
                          f"({stall.source}; {level})")
        since = self.over_since if self.over_since is not None else ctx.now
        grace = ctx.cfg.memory_evict_cool_time
        if ctx.now - since >= grace:
            return True, (f"level 3: BE keeps the node over the threshold for {ctx.now - since:.1f} s "
                          f"(>= {grace:g} s) with {level}")
        psi = ("no memory PSI on this kernel" if stall is None
               else f"LS stalled {stall.share:.1%} of the time (< 1 %)")
        return False, (f"level 3 holds back: over the threshold for {ctx.now - since:.1f} s (< {grace:g} s), "
                       f"{psi}, {level}")

    def cooling_down(self, ctx: Context, since: float) -> bool:
        return ctx.now < since + ctx.cfg.memory_evict_cool_time

    # ------------------------------------------------------------------ what it reads
    def needs(self, ctx: Context) -> Sequence[Need]:
        return self.kept_needs(ctx, lambda: self.build_needs(ctx))

    def build_needs(self, ctx: Context) -> Sequence[Need]:
        """Node memory always; every pod's memory only while node usage nears the threshold (and,
        through :meth:`victims_usage`, read on the spot when a task needs its victims')."""
        if is_feature_disabled(ctx):
            return ()
        return (Need("node_memory_usage", NODE), Need("pod_memory_usage", POD, near=self.proximity))

    def proximity(self, ctx: Context) -> float | None:
        """Node memory usage over the threshold (1.0: at it)."""
        node = ctx.node
        threshold = ctx.nodeslo.resource_used_threshold_with_be.memory_evict_threshold_percent
        used = ctx.node_metric("node_memory_usage")
        if node is None or node.memory_capacity <= 0 or not threshold or used is None:
            return None
        return used * 100 / node.memory_capacity / threshold

    def has_capacity(self, node: NodeMeta) -> bool:
        return node.memory_capacity > 0

    def snapshot(self, ctx: Context) -> memsnap.MemorySnapshot | None:
        """The node and the candidates read now, once per tick (None without a live host: decide
        from the samples)."""
        if not ctx.host_reads:
            return None
        if self._snapshot is None or self._snapshot[0] != ctx.now:
            pods: dict[str, PodMeta] = {}
            if self.gate(BE_MEMORY_EVICT):
                pods.update((p.uid, p) for p in self.per_pods.get(
                    ctx, ("be", BE_MEMORY_EVICT), lambda: be_pods(ctx.pods.values(), BE_MEMORY_EVICT)))
            if self.gate(MEMORY_EVICT):
                pods.update((p.uid, p) for p in self.per_pods.get(
                    ctx, ("priority", MEMORY_EVICT), lambda: priority_pods(ctx.pods.values(), MEMORY_EVICT)))
            self._snapshot = (ctx.now, memsnap.take(ctx.layout, pods.values()))
        return self._snapshot[1]

    def usage_and_release(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                          usage: Lazy[dict[str, float]]
                          ) -> tuple[tuple[int, str], dict[str, float], dict[str, float]] | None:
        """What to release and why, the pods' usage (orders them) and their release, all from one
        moment: the snapshot where the host can be read (None: the node is below the threshold by
        then), else the samples.  None also while graduated mode's level 3 holds back."""
        release = calculate_release_by_used_threshold(ctx, node, cfg)
        if release is None:
            return None
        level3 = ""
        if self.graduated():  # judged before the snapshot: a spell held back reads no pod
            go, level3 = self.level3(ctx)
            if not go:
                if not self._held_back_said:
                    self._held_back_said = True
                    ctx.audit_skip(self.name, "", f"{release[1]}; {level3}")
                return None
        snap = self.snapshot(ctx)
        if snap is not None:
            release = calculate_release_by_used_threshold(ctx, node, cfg, node_used=snap.node_used)
            if release is None:
                return None
        if level3:
            release = (release[0], f"{release[1]}; {level3}")
        if snap is None:
            used = usage()
            return release, used, used
        return (release, {uid: float(m.usage) for uid, m in snap.pods.items()},
                {uid: float(m.release) for uid, m in snap.pods.items()})

    def task_builders(self) -> Mapping[str, TaskBuilder]:
        return {
            BE_MEMORY_EVICT: self.be_memory_evict_task,
            MEMORY_ALLOCATABLE_EVICT: self.allocatable_evict_task,
            MEMORY_EVICT: self.memory_evict_task,
        }

    # ------------------------------------------------------------------ BEMemoryEvict
    def be_memory_evict_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                             usage: Lazy[dict[str, float]]) -> EvictTask | None:
        if self.problems.check(BE_MEMORY_EVICT, check_common_config(cfg)):
            return None
        measured = self.usage_and_release(ctx, node, cfg, usage)
        if measured is None:
            return None
        (amount, why), used, released = measured
        release_of = used_release_of(released)
        pods = self.per_pods.get(ctx, ("be", BE_MEMORY_EVICT),
                                 lambda: be_pods(ctx.pods.values(), BE_MEMORY_EVICT))
        cands = [Candidate(pod, int(used.get(pod.uid, 0.0)), pod.request_for(RESOURCE_MEMORY)[1],
                           priority=be_sort_priority(pod)) for pod in pods]
        victims = [Victim(c.pod, release_of(c.pod), memory_details(c))
                   for c in be_order(cands, lambda c: c.used)]
        return EvictTask(BE_MEMORY_EVICT, why, TARGET_POD_USED, {RESOURCE_MEMORY: amount}, victims, release_of)

    # ------------------------------------------------------------------ MemoryAllocatableEvict
    def allocatable_evict_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                               usage: Lazy[dict[str, float]]) -> EvictTask | None:
        return self.allocatable_task(
            ctx, node, cfg, usage, feature=MEMORY_ALLOCATABLE_EVICT, resource=RESOURCE_MEMORY,
            percents=(cfg.memory_allocatable_evict_threshold_percent, cfg.memory_allocatable_evict_lower_percent),
            formula=memory_allocatable_formula, usage_scale=1.0, details=memory_details)

    # ------------------------------------------------------------------ MemoryEvict
    def memory_evict_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                          usage: Lazy[dict[str, float]]) -> EvictTask | None:
        problem = check_common_config(cfg)
        if problem is None and cfg.evict_enabled_priority_threshold is None:
            problem = "EvictEnabledPriorityThreshold not config"
        if self.problems.check(MEMORY_EVICT, problem):
            return None
        measured = self.usage_and_release(ctx, node, cfg, usage)
        if measured is None:
            return None
        (amount, why), used, released = measured
        threshold = cfg.evict_enabled_priority_threshold
        assert threshold is not None  # checked above
        release_of = used_release_of(released)
        # koordlet fix: koordlet stores these victims' usage as bytes x 1000 (a copy of the CPU
        # milli-core conversion), so a victim seemed to release 1000 times its memory and this
        # feature (and any podUsed task in the same round) stopped after the first eviction.
        cands = priority_candidates(self.per_pods, ctx, MEMORY_EVICT, threshold, used, 1.0, RESOURCE_MEMORY)
        victims = [Victim(c.pod, release_of(c.pod), memory_details(c))
                   for c in sort_by_priority(cands, lambda c: c.used)]
        return EvictTask(MEMORY_EVICT, why, TARGET_POD_USED, {RESOURCE_MEMORY: amount}, victims, release_of)


# --------------------------------------------------------------------------------------------
# Config checks (koordlet's messages, verbatim)


def check_common_config(cfg: ResourceThresholdStrategy | None) -> str | None:
    """The check BEMemoryEvict and MemoryEvict share (koordlet spells this "resourceThresholdStrategy")."""
    if cfg is None:
        return "resourceThresholdStrategy not config"
    threshold = cfg.memory_evict_threshold_percent
    if threshold is None:
        return "threshold percent is nil"
    if threshold < 0:
        return f"threshold percent({threshold}) should equal or greater than 0"
    lower = memory_evict_lower_percent(cfg, threshold)
    if lower >= threshold:
        return f"lower percent({lower}) should less than threshold percent({threshold})"
    return None


def memory_evict_lower_percent(cfg: ResourceThresholdStrategy, threshold: int) -> int:
    lower = cfg.memory_evict_lower_percent
    return lower if lower is not None else threshold - MEMORY_RELEASE_BUFFER_PERCENT


# --------------------------------------------------------------------------------------------
# Release computations


def calculate_release_by_used_threshold(ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                                        node_used: float | None = None) -> tuple[int, str] | None:
    """Bytes to release so node memory usage falls from the threshold to the lower percent; the node's
    usage is ``node_used`` or else its last sample within 2 x collect interval."""
    if node_used is None:
        node_used = ctx.node_metric("node_memory_usage")
    if node_used is None:
        return None
    threshold = cfg.memory_evict_threshold_percent
    assert threshold is not None  # config checked
    capacity = node.memory_capacity
    usage_pct = go_div(int(node_used) * 100, capacity)
    if usage_pct < threshold:
        return None
    lower = memory_evict_lower_percent(cfg, threshold)
    amount = release_by_used_threshold(usage_pct, lower, capacity)
    why = (f"node memory usage {usage_pct}% ({int(node_used)} of {capacity} bytes) is at or above {threshold}%; "
           f"release {amount} bytes of usage to reach {lower}%")
    return amount, why


def memory_allocatable_formula(requested: int, allocatable: int, lower_pct: int) -> int:
    """Memory's float order differs from CPU's ``rq - L/100*sv``: e.g. 50Gi of 100Gi with L=40 gives
    10737418239, not 10737418240 (koordlet's result, reproduced)."""
    return int((requested / allocatable - lower_pct / 100) * allocatable)


def used_release_of(used: dict[str, float]) -> Callable[[PodMeta], dict[str, float]]:
    """An evicted pod gives back its memory in bytes: its release in the node's terms where the host
    was read, else its last usage sample (0 without either)."""

    def release_of(pod: PodMeta) -> dict[str, float]:
        return {RESOURCE_MEMORY: int(used.get(pod.uid, 0.0))}

    return release_of


def memory_details(c: Candidate) -> dict[str, object]:
    """The numbers a victim was ordered by; ``priority`` is the one its pool sorted on."""
    return {"usage": c.used, "request": c.request, "priority": c.priority}
