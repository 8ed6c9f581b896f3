"""What the two evictors share (koordlet-qos §4.3 cpuEvict, §4.4 memoryEvict).

cpuEvict and memoryEvict are twins: three features each, built in a fixed order into eviction
tasks that the shared coordinator runs together (:mod:`qosmanager.eviction.coordinator`).  This
module holds everything that is the same on both sides, so each strategy's file keeps only its
spec section:

* :class:`EvictionStrategy` -- the tick both run: cool-down, node check, gate + NodeSLO switch per
  feature, tasks to the coordinator, cool-down refreshed only by a new eviction.  Subclasses fill
  in named hooks for what differs.
* Per-tick plumbing: the feature switch (:func:`is_feature_disabled`), once-only logging of an
  invalid config (:class:`ConfigProblems`), a lazily read usage series (:class:`Lazy`), per-pod
  derivations kept while the pod list is unchanged (:class:`PerPodsGeneration`).
* Victims: the BE pool and its order, the opted-in priority pool and its order.
* The allocatable features (``CPUAllocatableEvict``, ``MemoryAllocatableEvict``): config check,
  requested sums, release per resource and per victim.
* Go arithmetic (:func:`go_div`) and the used-threshold release both usage features compute.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from qosmanager.api.node import NodeMeta
from qosmanager.api.nodeslo import ResourceThresholdStrategy
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
from qosmanager.eviction.types import TARGET_POD_REQUEST, EvictTask, Victim
from qosmanager.executor.executor import Write
from qosmanager.framework.context import Context
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy
from qosmanager.strategies._helpers import go_div, threshold_feature_disabled

# ReverseResourceNameMap: the priority class whose pods are charged in a batch/mid resource
REVERSE_RESOURCE_NAME: Mapping[str, str] = {
    BATCH_CPU: PRIORITY_BATCH,
    BATCH_MEMORY: PRIORITY_BATCH,
    MID_CPU: PRIORITY_MID,
    MID_MEMORY: PRIORITY_MID,
}

PHASE_SUCCEEDED, PHASE_FAILED = "Succeeded", "Failed"

ReleaseOf = Callable[[PodMeta], dict[str, float]]

T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# Per-tick plumbing


def is_feature_disabled(ctx: Context) -> bool:
    """``IsFeatureDisabled``: the evict features run only while the NodeSLO's
    ``resourceUsedThresholdWithBE.enable`` is explicitly true (an error -- no NodeSLO, enable
    unset -- skips the feature as "disabled" does: an evictor has nothing to recover)."""
    return threshold_feature_disabled(ctx.nodeslo, ctx.nodeslo_present) is not False


class ConfigProblems:
    """Config-check failures: the feature is skipped, the message logged once per distinct text
    (koordlet logs it every tick)."""

    def __init__(self, strategy: str, log: logging.Logger) -> None:
        self.strategy = strategy
        self.log = log
        self.seen: set[tuple[str, str]] = set()

    def check(self, feature: str, problem: str | None) -> bool:
        """True when ``problem`` is set (the caller skips the feature)."""
        if problem is None:
            return False
        if (feature, problem) not in self.seen:
            self.seen.add((feature, problem))
            self.log.warning("%s: feature %s skipped, invalid config: %s", self.strategy, feature, problem)
        return True


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


# --------------------------------------------------------------------------------------------
# The shared tick

# builds one feature's task: None when there is nothing to release or the feature's config is invalid
TaskBuilder = Callable[[Context, NodeMeta, ResourceThresholdStrategy, Lazy[dict[str, float]]], EvictTask | None]


class EvictionStrategy(Strategy):
    """The tick of cpuEvict and memoryEvict (the "Tick" blocks of koordlet-qos §4.3 and §4.4).

    One tick: return while :meth:`cooling_down`; return without a node or when
    :meth:`has_capacity` says the node reports none of the resource; for each of ``features`` in
    order whose gate is on and whose NodeSLO switch is on (:func:`is_feature_disabled`), build its
    task; hand all tasks to the coordinator together (``ctx.evict``); restart the cool-down only
    when a pod was newly evicted (pods still pending release do not restart it).  It never returns
    writes: evictions go through the coordinator.

    Hooks a subclass fills in:

    * ``features`` -- the features, in the order their tasks are built and run;
    * ``usage_metric`` -- the per-pod usage series the builders share, read at most once a tick and
      only when a builder needs it;
    * ``quiet_start`` -- True: the cool-down also starts at the first tick (cpuEvict; koordlet starts
      it at construction); False: it counts from time zero, so the first tick may evict (memoryEvict);
    * :meth:`cooling_down` -- whether the wait since the last eviction is still on;
    * :meth:`has_capacity` -- whether the node reports a capacity of the strategy's resource;
    * :meth:`task_builders` -- the builder of each feature's task.

    State: ``last_evict_time`` (``None`` until a quiet-start strategy's first tick), ``problems``
    (config problems logged once, through the subclass's module logger) and ``per_pods``.
    """

    features: ClassVar[tuple[str, ...]]
    usage_metric: ClassVar[str]
    quiet_start: ClassVar[bool]

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self.last_evict_time: float | None = None if self.quiet_start else 0.0
        self.problems = ConfigProblems(self.name, logging.getLogger(type(self).__module__))
        self.per_pods = PerPodsGeneration()

    def tick(self, ctx: Context) -> list[Write]:
        if self.last_evict_time is None:  # quiet start
            self.last_evict_time = ctx.now
        if self.cooling_down(ctx, self.last_evict_time):
            return []
        node = ctx.node
        if node is None or not self.has_capacity(node):
            return []
        cfg = ctx.nodeslo.resource_used_threshold_with_be
        usage = Lazy(lambda: self.victims_usage(ctx))
        builders = self.task_builders()
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

    def victims_usage(self, ctx: Context) -> dict[str, float]:
        """The pods' usage when a task needs it: read now for the pods the collector left out."""
        ctx.refresh(self.usage_metric)
        return ctx.pod_metrics(self.usage_metric)

    def allocatable_task(self, ctx: Context, node: NodeMeta, cfg: ResourceThresholdStrategy,
                         usage: Lazy[dict[str, float]], *, feature: str, resource: str,
                         percents: tuple[int | None, int | None], formula: Callable[[int, int, int], int],
                         usage_scale: float, details: Callable[[Candidate], dict[str, object]]) -> EvictTask | None:
        """The task of an allocatable feature (CPUAllocatableEvict, MemoryAllocatableEvict): when the
        pods at or below the priority threshold request more than ``percents[0]`` % of the node's
        allocatable ``resource``, release their requests down to ``percents[1]`` % (``formula``),
        taking pods lowest priority first."""
        label = "CPU" if resource == RESOURCE_CPU else "Memory"
        if self.problems.check(feature, check_allocatable_config(cfg, label)):
            return None
        threshold = cfg.allocatable_evict_priority_threshold
        t_pct, l_pct = percents
        assert threshold is not None and t_pct is not None and l_pct is not None  # checked above
        requested = self.per_pods.get(ctx, ("requested", resource, threshold),
                                      lambda: requested_by_priority(ctx.pods.values(), threshold, resource))
        overall = allocatable_release(requested, node.allocatable, t_pct, l_pct, formula)
        if not overall:
            return None
        release_of = request_release_of(resource, overall)
        cands = priority_candidates(self.per_pods, ctx, feature, threshold, usage(), usage_scale, resource)
        victims = [Victim(c.pod, release_of(c.pod), details(c))
                   for c in sort_by_priority(cands, lambda c: c.request)]
        why = (f"pods with priority <= {threshold} request more than {t_pct}% of the node's allocatable "
               f"({describe_requested(requested, node.allocatable)}); release down to {l_pct}%: "
               f"{describe_amounts(overall)}")
        return EvictTask(feature, why, TARGET_POD_REQUEST, overall, victims, release_of)

    @abc.abstractmethod
    def cooling_down(self, ctx: Context, since: float) -> bool:
        """Whether the cool-down after ``since`` (the last new eviction, or its start) still runs."""

    @abc.abstractmethod
    def has_capacity(self, node: NodeMeta) -> bool:
        """Whether the node reports a positive capacity of the resource this strategy gives back."""

    @abc.abstractmethod
    def task_builders(self) -> Mapping[str, TaskBuilder]:
        """Each of ``features`` -> the builder of its task."""


# --------------------------------------------------------------------------------------------
# Victims


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


def be_sort_priority(pod: PodMeta) -> int:
    """The priority the BE pool sorts on: ``spec.priority``, 0 where unset (see :func:`be_order`)."""
    return pod.priority or 0


def be_order(cands: Sequence[Candidate], usage: Callable[[Candidate], float]) -> list[Candidate]:
    """BE victims first to last: ``spec.priority`` ascending, usage descending, name descending.

    koordlet fix: koordlet's comparator compares priorities only when both pods set one, which is
    no order at all once some pod lacks it (and Go's sort is unstable past 12 pods).  A missing
    ``spec.priority`` is taken as 0 (what the Priority admission plugin sets); the result equals
    koordlet's whenever every pod has a priority.
    """
    by_name = sorted(cands, key=lambda c: (c.pod.name, c.pod.namespace, c.pod.uid), reverse=True)
    return sorted(by_name, key=lambda c: (be_sort_priority(c.pod), -usage(c)))


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


# --------------------------------------------------------------------------------------------
# Used-threshold release (CPUEvict, BEMemoryEvict, MemoryEvict)


def release_by_used_threshold(usage_pct: int, lower_pct: int, capacity: int) -> int:
    """What to release (milli-cores or bytes) so usage falls from ``usage_pct`` to ``lower_pct`` of
    ``capacity``, in Go's integer arithmetic."""
    return go_div(capacity * (usage_pct - lower_pct), 100)


# --------------------------------------------------------------------------------------------
# Allocatable release (CPUAllocatableEvict, MemoryAllocatableEvict)


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
