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

The helpers below the strategy that both evictors share (feature switch, once-only config
logging, victim ordering, allocatable release) are imported by
:mod:`qosmanager.strategies.memory_evict`, whose features are the memory twins of these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from qosmanager.api.node import NodeMeta
from qosmanager.api.nodeslo import CPU_EVICT_POLICY_ALLOCATABLE, ResourceThresholdStrategy
from qosmanager.api.pod import (
    BATCH_CPU,
    BATCH_MEMORY,
    MID_CPU,
    MID_MEMORY,
    PRIORITY_BATCH,
    PRIORITY_MID,
    RESOURCE_CPU,
    PodMeta,
)
from qosmanager.eviction.types import TARGET_POD_REQUEST, TARGET_POD_USED, EvictTask, Victim
from qosmanager.executor.executor import Write
from qosmanager.framework.context import Context
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy, register
from qosmanager.strategies._helpers import threshold_feature_disabled

log = logging.getLogger(__name__)

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

# ReverseResourceNameMap: the priority class whose pods are charged in a batch/mid resource
REVERSE_RESOURCE_NAME: Mapping[str, str] = {
    BATCH_CPU: PRIORITY_BATCH,
    BATCH_MEMORY: PRIORITY_BATCH,
    MID_CPU: PRIORITY_MID,
    MID_MEMORY: PRIORITY_MID,
}

PHASE_SUCCEEDED, PHASE_FAILED = "Succeeded", "Failed"

ReleaseOf = Callable[[PodMeta], dict[str, float]]


@register
class CPUEvict(Strategy):
    name = "cpuEvict"
    gates: ClassVar[tuple[str, ...]] = (BE_CPU_EVICT, CPU_EVICT, CPU_ALLOCATABLE_EVICT)
    interval_key = "cpu_evict"
    features: ClassVar[tuple[str, ...]] = (BE_CPU_EVICT, CPU_ALLOCATABLE_EVICT, CPU_EVICT)  # fixed order

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self.last_evict_time: float | None = None  # set by the first tick (koordlet: construction time)
        self.problems = ConfigProblems(self.name)
        self.per_pods = PerPodsGeneration()

    def tick(self, ctx: Context) -> list[Write]:
        if self.last_evict_time is None:
            self.last_evict_time = ctx.now
        if ctx.now - self.last_evict_time < ctx.cfg.cpu_evict_cool_time:
            return []
        node = ctx.node
        if node is None or node.cpu_capacity_milli <= 0:
            return []
        cfg = ctx.nodeslo.resource_used_threshold_with_be
        usage = Lazy(lambda: ctx.pod_metrics("pod_cpu_usage"))  # cores, read once per tick when needed
        builders = {
            BE_CPU_EVICT: self.be_cpu_evict_task,
            CPU_ALLOCATABLE_EVICT: self.allocatable_evict_task,
            CPU_EVICT: self.cpu_evict_task,
        }
        tasks: list[EvictTask] = []
        for feature in self.features:
            if not self.gate(feature) or is_feature_disabled(ctx):
                continue
            task = builders[feature](ctx, node, cfg, usage)
            if task is not None:
                tasks.append(task)
        if not tasks:
            return []
        result = ctx.evict(self.name, tasks)
        if result.newly_evicted:  # pods still pending release do not restart the cool-down
            self.last_evict_time = ctx.now
        return []

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
            cands.append(Candidate(pod, milli_used, request, milli_used / request if request > 0 else 0.0))
        victims = [Victim(c.pod, release_of(c.pod), cpu_details(c))
                   for c in be_order(cands, lambda c: c.usage_ratio)]
        return EvictTask(BE_CPU_EVICT, why, TARGET_POD_REQUEST, {BATCH_CPU: amount}, victims, release_of)

    # ------------------------------------------------------------------ CPUAllocatableEvict
    def allocatable_evict_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                               usage: Lazy[dict[str, float]]) -> EvictTask | None:
        if self.problems.check(CPU_ALLOCATABLE_EVICT, check_allocatable_config(cfg, "CPU")):
            return None
        threshold = cfg.allocatable_evict_priority_threshold
        t_pct, l_pct = cfg.cpu_allocatable_evict_threshold_percent, cfg.cpu_allocatable_evict_lower_percent
        assert threshold is not None and t_pct is not None and l_pct is not None  # checked above
        requested = self.per_pods.get(ctx, ("requested", RESOURCE_CPU, threshold),
                                      lambda: requested_by_priority(ctx.pods.values(), threshold, RESOURCE_CPU))
        overall = allocatable_release(requested, node.allocatable, t_pct, l_pct, cpu_allocatable_formula)
        if not overall:
            return None
        release_of = request_release_of(RESOURCE_CPU, overall)
        cands = priority_candidates(self.per_pods, ctx, CPU_ALLOCATABLE_EVICT, threshold, usage(), 1000.0,
                                    RESOURCE_CPU)
        victims = [Victim(c.pod, release_of(c.pod), cpu_details(c))
                   for c in sort_by_priority(cands, lambda c: c.request)]
        why = (f"pods with priority <= {threshold} request more than {t_pct}% of the node's allocatable "
               f"({describe_requested(requested, node.allocatable)}); release down to {l_pct}%: "
               f"{describe_amounts(overall)}")
        return EvictTask(CPU_ALLOCATABLE_EVICT, why, TARGET_POD_REQUEST, overall, victims, release_of)

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


def check_allocatable_config(cfg: ResourceThresholdStrategy | None, resource: str) -> str | None:
    """``isAllocatableThresholdConfigValid``; ``resource`` is ``"CPU"`` or ``"Memory"``.

    The two evictors word two messages differently (koordlet's strings, kept verbatim).
    """
    if cfg is None:
        return "ResourceThresholdStrategy not config"
    if resource == "CPU":
        threshold = cfg.cpu_allocatable_evict_threshold_percent
        lower = cfg.cpu_allocatable_evict_lower_percent
        negative = "should equal or greater than 0"
    else:
        threshold = cfg.memory_allocatable_evict_threshold_percent
        lower = cfg.memory_allocatable_evict_lower_percent
        negative = "should greater than 0"
    if threshold is None:
        return f"{resource}AllocatableEvictThresholdPercent not config"
    if threshold < 0:
        return f"threshold percent({threshold}) {negative}"
    if lower is None:
        return f"{resource}AllocatableEvictLowerPercent not config"
    if lower >= threshold:
        return f"lower percent({lower}) should less than threshold percent({threshold})"
    priority = cfg.allocatable_evict_priority_threshold
    if priority is None:
        return "AllocatableEvictPriorityThreshold not config"
    if priority > 7999:
        return f"priorityThresholdPercent({priority}) should less than 7999, koor-prod pods should not be killed"
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
    amount = milli_release_by_used_threshold(usage_pct, lower, capacity)
    why = (f"node CPU usage {usage_pct}% ({node_used:g} cores, {window}s average, of {capacity}m) is at or above "
           f"{threshold}%; release {amount}m of usage to reach {lower}%")
    return amount, why


def milli_release_by_used_threshold(usage_pct: int, lower_pct: int, capacity: int) -> int:
    return go_div(capacity * (usage_pct - lower_pct), 100)


# --------------------------------------------------------------------------------------------
# Shared by both evictors


def is_feature_disabled(ctx: Context) -> bool:
    """``IsFeatureDisabled``: the evict features run only while the NodeSLO's
    ``resourceUsedThresholdWithBE.enable`` is explicitly true (an error -- no NodeSLO, enable
    unset -- skips the feature as "disabled" does: an evictor has nothing to recover)."""
    return threshold_feature_disabled(ctx.nodeslo, ctx.nodeslo_present) is not False


def collect_seconds(ctx: Context) -> int:
    """The collect interval in whole seconds (koordlet's QoS manager does not run under 1 s)."""
    return max(int(ctx.cfg.collect_interval), 1)


def node_avg(ctx: Context, name: str, window: float) -> tuple[float, int]:
    """(average, sample count) of a node series over the window; (0, 0) without samples."""
    value = ctx.node_metric(name, "avg", window)
    if value is None:
        return 0.0, 0
    return value, ctx.node_metric_count(name, window)


def go_div(a: int, b: int) -> int:
    """Go's int64 division: truncates toward zero (Python's ``//`` floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


class ConfigProblems:
    """Config-check failures: the feature is skipped, the message logged once per distinct text
    (koordlet logs it every tick)."""

    def __init__(self, strategy: str) -> None:
        self.strategy = strategy
        self.seen: set[tuple[str, str]] = set()

    def check(self, feature: str, problem: str | None) -> bool:
        """True when ``problem`` is set (the caller skips the feature)."""
        if problem is None:
            return False
        if (feature, problem) not in self.seen:
            self.seen.add((feature, problem))
            log.warning("%s: feature %s skipped, invalid config: %s", self.strategy, feature, problem)
        return True


T = TypeVar("T")


class Lazy(Generic[T]):
    """A value computed on first use (a per-tick metric read that only some features need)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn: Callable[[], T] | None = fn
        self._value: T | None = None

    def __call__(self) -> T:
        if self._fn is not None:
            self._value = self._fn()
            self._fn = None
        return self._value  # type: ignore[return-value]


class PerPodsGeneration:
    """Per-pod derivations that depend only on the pod list, rebuilt when it changes."""

    def __init__(self) -> None:
        self.generation = -1
        self.values: dict[object, object] = {}

    def get(self, ctx: Context, key: object, build: Callable[[], T]) -> T:
        if ctx.pods_generation != self.generation:
            self.values.clear()
            self.generation = ctx.pods_generation
        if key not in self.values:
            self.values[key] = build()
        return self.values[key]  # type: ignore[return-value]


@dataclass(slots=True)
class Candidate:
    """koordlet's ``PodEvictInfo``: a possible victim with the numbers that order it."""

    pod: PodMeta
    used: int  # milli-cores or bytes
    request: int  # milli-cores (batch/mid/cpu) or bytes
    usage_ratio: float = 0.0  # BE CPU: used / request
    priority: int = 0  # priority value with default
    label_priority: int = 0
    eviction_priority: int = 0


def be_pods(pods: Iterable[PodMeta], feature: str) -> list[PodMeta]:
    """BE victims' pool: labelled BE and allowed by their eviction policy (any phase)."""
    return [p for p in pods if p.is_be() and p.eviction_allowed(feature)]


def be_order(cands: Sequence[Candidate], usage: Callable[[Candidate], float]) -> list[Candidate]:
    """BE victims first to last: ``spec.priority`` ascending, usage descending, name descending.

    koordlet fix: koordlet's comparator compares priorities only when both pods set one, which is
    no order at all once some pod lacks it (and Go's sort is unstable past 12 pods).  A missing
    ``spec.priority`` is taken as 0 (what the Priority admission plugin sets); the result equals
    koordlet's whenever every pod has a priority.
    """
    by_name = sorted(cands, key=lambda c: (c.pod.name, c.pod.namespace, c.pod.uid), reverse=True)
    return sorted(by_name, key=lambda c: (c.pod.priority or 0, -usage(c)))


def priority_pods(pods: Iterable[PodMeta], feature: str) -> list[PodMeta]:
    """Priority victims' pool: Pending or Running, allowed by policy, opted in with the
    ``koordinator.sh/eviction-enabled: "true"`` label (the priority threshold is applied per tick)."""
    return [p for p in pods if p.active and p.eviction_allowed(feature) and p.eviction_enabled]


def priority_candidates(per_pods: PerPodsGeneration, ctx: Context, feature: str, threshold: int,
                        usage: Mapping[str, float], scale: float, resource: str) -> list[Candidate]:
    """``getPodEvictInfoAndSortByPriority``'s pool: pods at or under the priority threshold that
    have a usage sample (``usage`` in cores or bytes, times ``scale``); request in the pod's charge
    resource."""
    pool = per_pods.get(ctx, ("priority", feature), lambda: priority_pods(ctx.pods.values(), feature))
    out = []
    for pod in pool:
        priority = pod.priority_value
        if priority > threshold:
            continue
        used = usage.get(pod.uid)
        if used is None:
            continue  # no recent usage sample: koordlet skips the pod
        label = pod.label_priority if pod.label_priority is not None else priority
        out.append(Candidate(pod, int(used * scale), pod.request_for(resource)[1], 0.0, priority, label,
                             pod.eviction_priority))
    return out


def sort_by_priority(cands: Sequence[Candidate], sub: Callable[[Candidate], float]) -> list[Candidate]:
    """Eviction priority, priority value and label priority ascending, then ``sub`` descending.

    Equal keys keep the pod-list order (Python's sort is stable, as Go's is on the short lists
    koordlet's tests use).
    """
    return sorted(cands, key=lambda c: (c.eviction_priority, c.priority, c.label_priority, -sub(c)))


def requested_by_priority(pods: Iterable[PodMeta], threshold: int, resource: str) -> dict[str, int]:
    """Σ ``GetRequestFromPod(pod, resource)`` over pods with priority value <= threshold.

    koordlet fix: koordlet sums every pod in the list, including Succeeded and Failed ones (a
    finished batch job keeps its object for a while); those hold no node resources, so they are
    left out here.
    """
    total: dict[str, int] = {}
    for pod in pods:
        if pod.phase in (PHASE_SUCCEEDED, PHASE_FAILED) or pod.priority_value > threshold:
            continue
        name, amount = pod.request_for(resource)
        total[name] = total.get(name, 0) + amount
    return total


def cpu_allocatable_formula(requested: int, allocatable: int, lower_pct: int) -> int:
    return int(requested - lower_pct / 100 * allocatable)


def allocatable_release(requested: Mapping[str, int], allocatable: Mapping[str, int], threshold_pct: int,
                        lower_pct: int, formula: Callable[[int, int, int], int]) -> dict[str, float]:
    """Per requested resource, what to release to go from above the threshold to the lower percent
    of the node's allocatable; a resource the node does not offer is released whole.

    Amounts: cpu in milli-cores (koordlet stores this one as whole cores; no victim ever releases
    plain ``cpu``, so the coordinator only audits it), everything else as integers.
    """
    if threshold_pct < 0:
        return {}
    out: dict[str, float] = {}
    for name, amount in requested.items():
        offered = allocatable.get(name, 0)
        if offered == 0:
            release = amount
        elif amount / offered > threshold_pct / 100:
            release = formula(amount, offered, lower_pct)
        else:
            continue
        if release > 0:
            out[name] = release
    return out


def request_release_of(resource: str, overall: Mapping[str, float]) -> ReleaseOf:
    """What evicting a pod releases for an allocatable task: its request, if it is charged in one
    of the batch/mid resources being released."""
    classes = {REVERSE_RESOURCE_NAME[r] for r in overall if r in REVERSE_RESOURCE_NAME}

    def release_of(pod: PodMeta) -> dict[str, float]:
        if pod.priority_class not in classes:
            return {}
        name, amount = pod.request_for(resource)
        return {name: amount}

    return release_of


def describe_amounts(amounts: Mapping[str, float]) -> str:
    return ", ".join(f"{r}={int(q) if float(q).is_integer() else q}" for r, q in amounts.items())


def describe_requested(requested: Mapping[str, int], allocatable: Mapping[str, int]) -> str:
    return ", ".join(f"{r} {q} of {allocatable.get(r, 0)}" for r, q in requested.items())


def cpu_details(c: Candidate) -> dict[str, object]:
    return {"usage": f"{c.used}m", "request": f"{c.request}m", "priority": c.pod.priority_value}
