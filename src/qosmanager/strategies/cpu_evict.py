"""cpuEvict: evict pods to give CPU back (koordlet-qos §4.3).

Three features, always built in this order into eviction tasks that the shared coordinator runs
together (koordlet's ``KillAndEvictPods``, see :mod:`qosmanager.eviction.coordinator`):

* ``BECPUEvict`` -- the BE pods are starved: their CPU *satisfaction* (BE limit / BE request) fell
  below ``cpuEvictBESatisfactionLowerPercent`` while they use most of what they get.  Evict BE
  pods until enough batch-cpu request is gone to lift satisfaction to the upper percent.
* ``CPUAllocatableEvict`` -- low-priority pods request more than the node offers:
  Σ requests / allocatable of a batch or mid resource is above
  ``cpuAllocatableEvictThresholdPercent``.  Evict until it is back at the lower percent.
* ``CPUEvict`` -- the node's CPU usage is above ``cpuEvictThresholdPercent``.  Evict opted-in
  low-priority pods until their usage covers the excess over the lower percent.

Each feature is on when its feature gate is on and the NodeSLO's
``resourceUsedThresholdWithBE.enable`` is true (``IsFeatureDisabled``); a feature whose
thresholds fail their config check is skipped (the message is logged once) and the others run.
After a tick that evicted a new pod the strategy waits ``CPUEvictCoolTimeSeconds`` (20 s); the
wait also starts at the first tick, as koordlet starts it at construction.

Units: every CPU amount here is in milli-cores (batch-cpu and mid-cpu quantities already are);
node and pod usage metrics come in cores and the ``be_cpu_*`` series in milli-cores.

The tick itself (cool-down, gating, the coordinator) and the helpers both evictors use (feature
switch, once-only config logging, victim ordering, allocatable release) live in
:mod:`qosmanager.strategies._eviction`; :mod:`qosmanager.strategies.memory_evict` holds the memory
twins of these features.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from qosmanager.api.node import NodeMeta
from qosmanager.api.nodeslo import CPU_EVICT_POLICY_ALLOCATABLE, ResourceThresholdStrategy
from qosmanager.api.pod import BATCH_CPU, RESOURCE_CPU, PodMeta
from qosmanager.eviction.types import TARGET_POD_REQUEST, TARGET_POD_USED, EvictTask, Victim
from qosmanager.framework.context import Context
from qosmanager.framework.demand import NODE, POD, QOS, SLOW_SECONDS, STATE_SECONDS, Need
from qosmanager.framework.strategy import register
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
    release_by_used_threshold,
    sort_by_priority,
)
from qosmanager.strategies._helpers import go_div

BE_CPU_EVICT = "BECPUEvict"
CPU_ALLOCATABLE_EVICT = "CPUAllocatableEvict"
CPU_EVICT = "CPUEvict"

BE_CPU_SATISFACTION_LOW_PERCENT_MAX = 60
BE_CPU_SATISFACTION_UPPER_PERCENT_MAX = 100
BE_CPU_USAGE_THRESHOLD_PERCENT = 90  # cpuEvictBEUsageThresholdPercent when unset
DEFAULT_MIN_ALLOCATABLE_BATCH_MILLI_CPU = 1  # a node offering zero batch-cpu counts as offering this
CPU_RELEASE_BUFFER_PERCENT = 2  # cpuEvictLowerPercent when unset: threshold - 2

# the node_be series (milli-cores)
BE_CPU_USAGE, BE_CPU_REQUEST, BE_CPU_REAL_LIMIT = "be_cpu_usage", "be_cpu_request", "be_cpu_real_limit"


@register
class CPUEvict(EvictionStrategy):
    name = "cpuEvict"
    gates = (BE_CPU_EVICT, CPU_EVICT, CPU_ALLOCATABLE_EVICT)
    interval_key = "cpu_evict"
    features = (BE_CPU_EVICT, CPU_ALLOCATABLE_EVICT, CPU_EVICT)  # fixed order
    usage_metric = "pod_cpu_usage"  # cores
    quiet_start = True  # koordlet starts the cool-down at construction

    def cooling_down(self, ctx: Context, since: float) -> bool:
        return ctx.now - since < ctx.cfg.cpu_evict_cool_time

    # ------------------------------------------------------------------ what it reads
    def needs(self, ctx: Context) -> Sequence[Need]:
        return self.kept_needs(ctx, lambda: self.build_needs(ctx))

    def build_needs(self, ctx: Context) -> Sequence[Need]:
        """Node-level series always (BE usage from the BestEffort dir, request, real limit; node
        usage); every pod's usage at a slow cadence (the windows keep a history) and every tick
        while a trigger is near; BE containers' cpusets (the real limit: a state, carried between
        reads) every 30 s and every tick while a trigger is near."""
        if is_feature_disabled(ctx):
            return ()
        cfg = ctx.nodeslo.resource_used_threshold_with_be
        window = float(max(collect_seconds(ctx), cfg.cpu_evict_time_window_seconds or 0))
        out = [Need("pod_cpu_usage", POD, freshness=SLOW_SECONDS, window=window),
               Need("pod_cpu_usage", POD, near=self.proximity)]
        if self.gate(BE_CPU_EVICT):
            out += [Need("be_cpu_usage", QOS, window=window), Need("be_cpu_request", NODE, window=window),
                    Need("be_cpu_real_limit", NODE, freshness=STATE_SECONDS, window=window),
                    Need("be_cpu_real_limit", NODE, near=self.proximity)]
        if self.gate(CPU_EVICT):
            out.append(Need("node_cpu_usage", NODE, window=window))
        return out

    def proximity(self, ctx: Context) -> float | None:
        """How near a usage trigger is (1.0: there): BE satisfaction (limit / request down to the
        lower percent while BE uses its limit) and node usage against the threshold."""
        node = ctx.node
        if node is None or node.cpu_capacity_milli <= 0:
            return None
        cfg = ctx.nodeslo.resource_used_threshold_with_be
        window = float(max(collect_seconds(ctx), cfg.cpu_evict_time_window_seconds or 0))
        near: list[float] = []
        lower = cfg.cpu_evict_be_satisfaction_lower_percent
        if self.gate(BE_CPU_EVICT) and lower is not None and lower > 0:
            usage = ctx.node_metric(BE_CPU_USAGE, "avg", window) or 0.0
            request = ctx.node_metric(BE_CPU_REQUEST, "avg", window) or 0.0
            if cfg.cpu_evict_policy == CPU_EVICT_POLICY_ALLOCATABLE:
                limit = float(be_milli_allocatable(node))
            else:
                limit = ctx.node_metric(BE_CPU_REAL_LIMIT, "avg", window) or 0.0
            if request > 0 and limit > 0:
                satisfaction = (lower / 100) / (limit / request)
                pct = cfg.cpu_evict_be_usage_threshold_percent or BE_CPU_USAGE_THRESHOLD_PERCENT
                busy = 1.0 if limit < 1000 else (usage / limit) / (pct / 100)
                near.append(min(satisfaction, busy))
        threshold = cfg.cpu_evict_threshold_percent
        if self.gate(CPU_EVICT) and threshold:
            node_used = ctx.node_metric("node_cpu_usage", "avg", window)
            if node_used is not None:
                near.append(node_used * 1000 * 100 / node.cpu_capacity_milli / threshold)
        return max(near) if near else None

    def has_capacity(self, node: NodeMeta) -> bool:
        return node.cpu_capacity_milli > 0

    def task_builders(self) -> Mapping[str, TaskBuilder]:
        return {
            BE_CPU_EVICT: self.be_cpu_evict_task,
            CPU_ALLOCATABLE_EVICT: self.allocatable_evict_task,
            CPU_EVICT: self.cpu_evict_task,
        }

    # ------------------------------------------------------------------ BECPUEvict
    def be_cpu_evict_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                          usage: Lazy[dict[str, float]]) -> EvictTask | None:
        if self.problems.check(BE_CPU_EVICT, check_satisfaction_config(cfg)):
            return None
        release = calculate_milli_release_by_be_satisfaction(ctx, node, cfg)
        if release is None:
            return None
        amount, why = release

        def release_of(pod: PodMeta) -> dict[str, float]:
            return {BATCH_CPU: pod.batch_cpu_request}

        pods = self.per_pods.get(ctx, ("be", BE_CPU_EVICT), lambda: be_pods(ctx.pods.values(), BE_CPU_EVICT))
        used = usage()
        cands = []
        for pod in pods:
            milli_used = int(used.get(pod.uid, 0.0) * 1000)
            request = pod.batch_cpu_request
            cands.append(Candidate(pod, milli_used, request, milli_used / request if request > 0 else 0.0,
                                   be_sort_priority(pod)))
        victims = [Victim(c.pod, release_of(c.pod), cpu_details(c))
                   for c in be_order(cands, lambda c: c.usage_ratio)]
        return EvictTask(BE_CPU_EVICT, why, TARGET_POD_REQUEST, {BATCH_CPU: amount}, victims, release_of)

    # ------------------------------------------------------------------ CPUAllocatableEvict
    def allocatable_evict_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                               usage: Lazy[dict[str, float]]) -> EvictTask | None:
        return self.allocatable_task(
            ctx, node, cfg, usage, feature=CPU_ALLOCATABLE_EVICT, resource=RESOURCE_CPU,
            percents=(cfg.cpu_allocatable_evict_threshold_percent, cfg.cpu_allocatable_evict_lower_percent),
            formula=cpu_allocatable_formula, usage_scale=1000.0, details=cpu_details)

    # ------------------------------------------------------------------ CPUEvict
    def cpu_evict_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                       usage: Lazy[dict[str, float]]) -> EvictTask | None:
        if self.problems.check(CPU_EVICT, check_used_threshold_config(cfg)):
            return None
        release = calculate_milli_release_by_used_threshold_percent(ctx, node, cfg)
        if release is None:
            return None
        amount, why = release
        threshold = cfg.evict_enabled_priority_threshold
        assert threshold is not None  # checked above
        used = usage()

        def release_of(pod: PodMeta) -> dict[str, float]:
            return {RESOURCE_CPU: int(used.get(pod.uid, 0.0) * 1000)}

        cands = priority_candidates(self.per_pods, ctx, CPU_EVICT, threshold, used, 1000.0, RESOURCE_CPU)
        victims = [Victim(c.pod, {RESOURCE_CPU: c.used}, cpu_details(c))
                   for c in sort_by_priority(cands, lambda c: c.used)]
        return EvictTask(CPU_EVICT, why, TARGET_POD_USED, {RESOURCE_CPU: amount}, victims, release_of)


# --------------------------------------------------------------------------------------------
# Config checks (koordlet's messages, verbatim).  Each returns the problem, or None when valid.
# CPUAllocatableEvict's is shared with memory: :func:`~qosmanager.strategies._eviction.check_allocatable_config`.


def check_satisfaction_config(cfg: ResourceThresholdStrategy | None) -> str | None:
    """``isSatisfactionConfigValid`` (BECPUEvict)."""
    if cfg is None:
        return "ResourceThresholdStrategy not config"
    lower, upper = cfg.cpu_evict_be_satisfaction_lower_percent, cfg.cpu_evict_be_satisfaction_upper_percent
    if lower is None or upper is None:
        return "CPUEvictBESatisfactionLowerPercent or CPUEvictBESatisfactionUpperPercent not config"
    if lower > BE_CPU_SATISFACTION_LOW_PERCENT_MAX or lower <= 0:
        return f"CPUEvictBESatisfactionLowerPercent({lower}) is not valid! must (0,60]"
    if upper >= BE_CPU_SATISFACTION_UPPER_PERCENT_MAX or upper <= 0:
        return f"CPUEvictBESatisfactionUpperPercent({upper}) is not valid,must (0,100)"
    if upper < lower:
        return f"CPUEvictBESatisfactionUpperPercent({upper}) < CPUEvictBESatisfactionLowerPercent({lower})"
    return None


def check_used_threshold_config(cfg: ResourceThresholdStrategy | None) -> str | None:
    """``isUsedThresholdConfigValid`` (CPUEvict)."""
    if cfg is None:
        return "ResourceThresholdStrategy not config"
    threshold = cfg.cpu_evict_threshold_percent
    if threshold is None:
        return "CPUEvictThresholdPercent not config"
    if threshold < 0:
        return f"threshold percent({threshold}) should greater than 0"
    lower = cpu_evict_lower_percent(cfg, threshold)
    if lower >= threshold:
        return f"lower percent({lower}) should less than threshold percent({threshold})"
    if cfg.evict_enabled_priority_threshold is None:
        return "EvictEnabledPriorityThreshold not config"
    return None


def cpu_evict_lower_percent(cfg: ResourceThresholdStrategy, threshold: int) -> int:
    lower = cfg.cpu_evict_lower_percent
    return lower if lower is not None else threshold - CPU_RELEASE_BUFFER_PERCENT


# --------------------------------------------------------------------------------------------
# BECPUEvict release


def calculate_milli_release_by_be_satisfaction(ctx: Context, node: NodeMeta,
                                               cfg: ResourceThresholdStrategy) -> tuple[int, str] | None:
    """batch-cpu (milli) to release so BE satisfaction climbs back to the upper percent, or None.

    Two looks: the averages over the time window decide *whether* (enough samples, usage high
    enough, satisfaction below the lower percent), the current values cap *how much*.
    """
    collect = collect_seconds(ctx)
    window = max(collect, cfg.cpu_evict_time_window_seconds or 0)
    usage, c_usage = node_avg(ctx, BE_CPU_USAGE, window)
    request, c_request = node_avg(ctx, BE_CPU_REQUEST, window)
    real_limit, c_limit = node_avg(ctx, BE_CPU_REAL_LIMIT, window)
    by_allocatable = cfg.cpu_evict_policy == CPU_EVICT_POLICY_ALLOCATABLE
    alloc = be_milli_allocatable(node)
    limit = float(alloc) if by_allocatable else real_limit
    if min(c_usage, c_request, c_limit) * collect < window // 3:
        return None  # not enough samples in the window
    threshold = cfg.cpu_evict_be_usage_threshold_percent
    if not be_usage_high_enough(usage, limit, threshold):
        return None
    lower = cfg.cpu_evict_be_satisfaction_lower_percent
    upper = cfg.cpu_evict_be_satisfaction_upper_percent
    assert lower is not None and upper is not None  # config checked
    release = release_by_satisfaction(request, limit, lower, upper)
    if release <= 0:
        return None

    cur_usage = ctx.node_metric(BE_CPU_USAGE)
    cur_request = ctx.node_metric(BE_CPU_REQUEST)
    cur_real_limit = ctx.node_metric(BE_CPU_REAL_LIMIT)
    if cur_usage is None or cur_request is None or cur_real_limit is None:
        # koordlet fix: koordlet reads a missing current value as 0 and, with a BE limit under one
        # core (the usage check is then skipped), could still evict; no current data, no eviction.
        return None
    cur_limit = float(alloc) if by_allocatable else cur_real_limit
    if not be_usage_high_enough(cur_usage, cur_limit, threshold):
        return None
    why = (f"BE CPU satisfaction {limit:g}m limit / {request:g}m request is below "
           f"{lower}% (BE usage {usage:g}m, {window}s average, limit by "
           f"{'allocatable' if by_allocatable else 'real limit'})")
    if cur_request == request and cur_limit == limit:
        return release, f"{why}; release {release}m batch-cpu to reach {upper}%"
    release_now = release_by_satisfaction(cur_request, cur_limit, lower, upper)
    if release_now <= 0:
        return None
    amount = min(release, release_now)
    return amount, f"{why}; release {amount}m batch-cpu to reach {upper}% (now {cur_limit:g}m / {cur_request:g}m)"


def be_milli_allocatable(node: NodeMeta) -> int:
    """``getBEMilliAllocatable``: the node's batch-cpu allocatable; missing or negative -> -1, 0 -> 1."""
    alloc = node.batch_cpu_allocatable
    if alloc < 0:
        return -1
    return alloc if alloc > 0 else DEFAULT_MIN_ALLOCATABLE_BATCH_MILLI_CPU


def be_usage_high_enough(usage: float, limit: float, threshold_percent: int | None) -> bool:
    """BE uses most of its limit (only then is low satisfaction real starvation).

    A limit under one core always counts as "high enough" (koordlet skips the check there).
    """
    if limit <= 0:
        return False
    if limit < 1000:
        return True
    pct = threshold_percent if threshold_percent is not None else BE_CPU_USAGE_THRESHOLD_PERCENT
    return usage / limit >= pct / 100


def release_by_satisfaction(request: float, limit: float, lower_percent: int, upper_percent: int) -> int:
    """batch-cpu to release so that limit / request reaches the upper percent (0 when not below lower)."""
    if request <= 0:
        return 0
    rate = limit / request
    if rate > lower_percent / 100:
        return 0
    gap = upper_percent / 100 - rate
    if gap <= 0:
        return 0
    return int(request * gap)


# --------------------------------------------------------------------------------------------
# CPUEvict release


def calculate_milli_release_by_used_threshold_percent(ctx: Context, node: NodeMeta,
                                                      cfg: ResourceThresholdStrategy) -> tuple[int, str] | None:
    """CPU (milli) to release so node usage falls from above the threshold to the lower percent."""
    window = max(collect_seconds(ctx), cfg.cpu_evict_time_window_seconds or 0)
    node_used = ctx.node_metric("node_cpu_usage", "avg", window)
    if node_used is None:
        return None
    threshold = cfg.cpu_evict_threshold_percent
    assert threshold is not None  # config checked
    lower = cpu_evict_lower_percent(cfg, threshold)
    capacity = node.cpu_capacity_milli
    usage_pct = go_div(int(node_used * 1000) * 100, capacity)
    if usage_pct < threshold:
        return None
    amount = release_by_used_threshold(usage_pct, lower, capacity)
    why = (f"node CPU usage {usage_pct}% ({node_used:g} cores, {window}s average, of {capacity}m) is at or above "
           f"{threshold}%; release {amount}m of usage to reach {lower}%")
    return amount, why


# --------------------------------------------------------------------------------------------
# CPUAllocatableEvict release (the rest is shared with MemoryAllocatableEvict)


def cpu_allocatable_formula(requested: int, allocatable: int, lower_pct: int) -> int:
    return int(requested - lower_pct / 100 * allocatable)


# --------------------------------------------------------------------------------------------
# Metric reads and victim details


def collect_seconds(ctx: Context) -> int:
    """The collect interval in whole seconds (koordlet's QoS manager does not run under 1 s)."""
    return max(int(ctx.cfg.collect_interval), 1)


def node_avg(ctx: Context, name: str, window: float) -> tuple[float, int]:
    """(average, sample count) of a node series over the window; (0, 0) without samples."""
    value = ctx.node_metric(name, "avg", window)
    if value is None:
        return 0.0, 0
    return value, ctx.node_metric_count(name, window)


def cpu_details(c: Candidate) -> dict[str, object]:
    """The numbers a victim was ordered by; ``priority`` is the one its pool sorted on."""
    return {"usage": f"{c.used}m", "request": f"{c.request}m", "priority": c.priority}
