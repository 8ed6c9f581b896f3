"""cgroupReconcile: memory QoS knobs at QoS, pod and container level (koordlet-qos §4.5).

From the NodeSLO's ``resourceQOSStrategy`` (and a pod's ``koordinator.sh/memoryQOS`` override) this
strategy computes, for every Pending or Running pod, the memcg QoS knobs of its containers and of the
pod, sums the pods' protections per Kubernetes QoS class, and writes them all:

* ``memory.min`` / ``memory.low`` -- a percentage of the memory request (``minLimitPercent`` /
  ``lowLimitPercent``); the QoS dirs hold the sum over their pods, and the Guaranteed dir (the pods
  root, ancestor of the other two) the sum over all three classes;
* ``memory.high`` (containers) -- ``throttlingPercent`` of the way from the request to the limit
  (or to the node's allocatable memory when unlimited), rounded down to whole pages;
* ``memory.wmark_*``, ``memory.priority``, ``memory.use_priority_oom``, ``memory.oom.group``
  (Anolis kernels) and the page-cache limit knobs (cgroup v2 Alinux kernels, pod level only).

The writes go out in any order: the executor raises ``memory.min/low/high`` parents first and lowers
them children first, so a parent never holds less protection than a child.

**What switching it off does.**  A class whose ``memoryQOS.enable`` is false carries koordlet's
"None" values after the NodeSLO merge (0 protection, no throttling, default watermarks), so this
strategy writes those values back, as koordlet does: disabling memory QoS is itself a reconcile to
the kernel-neutral values, not a restore of whatever the files held before.

**Cost on a dense node.**  A node with a thousand pods has tens of thousands of knobs.  The desired
value of each is computed only when its inputs change (the pod view, the NodeSLO, the node's
allocatable memory).  Each pod's knobs, and the QoS dirs', are one executor
:class:`~qosmanager.executor.executor.Plan` whose version is its table of knobs, all of them handed
over as one :class:`~qosmanager.executor.executor.PlanGroup`: the executor skips the group in one
step while nothing changed, sends only the knobs that changed when a pod changes, and re-checks every
knob once per ``force_update_seconds`` (koordlet's forced re-check that corrects outside changes), the
plans' windows staggered so no single tick carries them all.

**A pod whose annotation cannot be decoded** (a koordlet fix): koordlet gives it the class config,
which resets what its annotation had set; here its pod and container files are left as they are
(audited once per pod change, ``action: "skip"``) and it counts in its class's sums by the class
config.

**Support checks.**  On cgroup v1 the Anolis files are checked once, in the kubepods dir (koordlet's
``WithCheckOnce``); on cgroup v2 memory.min/low/high are native and the others are used wherever the
file exists in that very directory: a file the executor reports missing in an existing directory is
not sent there again.
"""

from __future__ import annotations

import logging
import mmap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from qosmanager.api.nodeslo import (
    MemoryQOS,
    MemoryQOSCfg,
    ResourceQOS,
    default_memory_qos,
    overlay_config,
)
from qosmanager.api.pod import (
    ANNOTATION_MEMORY_QOS,
    BATCH_MEMORY,
    KUBE_QOS_BESTEFFORT,
    KUBE_QOS_BURSTABLE,
    KUBE_QOS_GUARANTEED,
    RESOURCE_MEMORY,
    ContainerMeta,
    PodMeta,
)
from qosmanager.executor.executor import Plan, PlanGroup, Write, WriteResult
from qosmanager.framework.context import Context
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy, register
from qosmanager.host import resources as res
from qosmanager.strategies._annotations import InvalidAnnotations
from qosmanager.strategies._helpers import go_div

log = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE
MAX_INT64 = res.INT64_MAX
KUBE_QOS_ORDER = (KUBE_QOS_GUARANTEED, KUBE_QOS_BURSTABLE, KUBE_QOS_BESTEFFORT)

# koordlet's makeCgroupResources order (resource names are the registry's canonical names)
MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH = "memory.min", "memory.low", "memory.high"
WMARK_RATIO, WMARK_SCALE_FACTOR, WMARK_MIN_ADJ = (
    "memory.wmark_ratio", "memory.wmark_scale_factor", "memory.wmark_min_adj")
PRIORITY, USE_PRIORITY_OOM, OOM_GROUP = "memory.priority", "memory.use_priority_oom", "memory.oom.group"
PAGECACHE_ENABLE, PAGECACHE_SIZE, PAGECACHE_SYNC = (
    "memory.pagecache_limit.enable", "memory.pagecache_limit.size", "memory.pagecache_limit.sync")
RESOURCES = (MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH, WMARK_RATIO, WMARK_SCALE_FACTOR, WMARK_MIN_ADJ, PRIORITY,
             USE_PRIORITY_OOM, OOM_GROUP, PAGECACHE_ENABLE, PAGECACHE_SIZE, PAGECACHE_SYNC)
# files only Anolis kernels have on cgroup v1: checked once in the kubepods dir there
V1_CHECK_ONCE = (MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH, WMARK_RATIO, WMARK_SCALE_FACTOR, WMARK_MIN_ADJ,
                 PRIORITY, USE_PRIORITY_OOM, OOM_GROUP)

# koordlet's NoneMemoryQOS (§3.2): what a pod with the annotation policy "none" gets
NONE_MEMORY_QOS = MemoryQOSCfg(
    enable=False, min_limit_percent=0, low_limit_percent=0, throttling_percent=0, wmark_ratio=0,
    wmark_scale_permill=50, wmark_min_adj=0, priority_enable=0, priority=0, oom_kill_group=0,
)

Key = tuple[str, str]  # (resource, cgroup dir)


# ---------------------------------------------------------------------------------------------
# knobs of one directory
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Knobs:
    """The memcg knobs of one cgroup dir; ``None`` = not set (not written)."""

    min: int | None = None
    low: int | None = None
    high: int | None = None
    wmark_ratio: int | None = None
    wmark_scale_factor: int | None = None
    wmark_min_adj: int | None = None
    priority: int | None = None
    use_priority_oom: int | None = None
    oom_group: int | None = None
    pagecache_enable: int | None = None
    pagecache_size: int | None = None
    pagecache_sync: int | None = None

    def items(self) -> Iterator[tuple[str, int]]:
        """(resource, value) in koordlet's makeCgroupResources order, skipping unset knobs."""
        values = (self.min, self.low, self.high, self.wmark_ratio, self.wmark_scale_factor,
                  self.wmark_min_adj, self.priority, self.use_priority_oom, self.oom_group,
                  self.pagecache_enable, self.pagecache_size, self.pagecache_sync)
        for name, value in zip(RESOURCES, values):
            if value is not None:
                yield name, value

    def set_qos_fields(self, mq: MemoryQOS, *, watermarks: bool) -> None:
        """The knobs copied as they are from the memory QoS config."""
        if watermarks:
            self.wmark_ratio = mq.wmark_ratio
            self.wmark_scale_factor = mq.wmark_scale_permill
            self.wmark_min_adj = mq.wmark_min_adj
        self.priority = mq.priority
        self.use_priority_oom = mq.priority_enable
        self.oom_group = mq.oom_kill_group


# ---------------------------------------------------------------------------------------------
# formulas (§4.5)
# ---------------------------------------------------------------------------------------------
def percent_of(value: int, percent: int) -> int:
    """``value * percent / 100`` in Go integers."""
    return go_div(value * percent, 100)


def memory_request(pod: PodMeta) -> int:
    """``memReq``: a BE pod (by its raw label, §6b item 4) counts its containers' batch-memory requests
    (unset ones ignored); any other pod its standard memory request."""
    if pod.is_be():
        return sum(max(c.requests.get(BATCH_MEMORY, 0), 0) for c in pod.containers)
    return pod.memory_request


def pod_memory_limit(pod: PodMeta) -> int:
    """The pod's memory limit for the page-cache knobs; -1 when unlimited.

    Non-BE: the upstream ``PodLimits`` (the limits that are set; -1 only if no container sets one).
    BE: the containers' batch-memory limits, -1 when any container lacks a positive one (§6b item 4).
    """
    return pod.batch_memory_limit if pod.is_be() else pod.memory_limit


def container_request_limit(pod: PodMeta, c: ContainerMeta) -> tuple[int, int]:
    """(request, limit) of a container in bytes; limit -1 when unlimited."""
    if pod.is_be():
        req = c.requests.get(BATCH_MEMORY, -1)
        limit = c.limits.get(BATCH_MEMORY, -1)
    else:
        req = c.requests.get(RESOURCE_MEMORY, 0)
        limit = c.limits.get(RESOURCE_MEMORY, -1)
    return max(req, 0), (limit if limit > 0 else -1)


def throttling_high(req: int, limit: int, node_allocatable: int, throttling_percent: int) -> int:
    """memory.high of a container: ``throttlingPercent`` 0 means unlimited; otherwise
    ``req + (limit - req) * tp / 100`` (the node's allocatable memory standing in for an unlimited
    limit), rounded down to whole pages."""
    if throttling_percent == 0:
        return MAX_INT64
    ceiling = limit if limit > 0 else node_allocatable
    high = req + percent_of(ceiling - req, throttling_percent)
    return go_div(high, PAGE_SIZE) * PAGE_SIZE


def merged_memory_qos(pod: PodMeta, cfg: ResourceQOS) -> MemoryQOS:
    """``mergePodResourceQoSForMemoryQoS``: the pod's memory QoS after its annotation.

    No annotation: the class config (a pod whose annotation cannot be decoded is not written at all:
    see the strategy).  Policy ``none``: koordlet's None values.
    Policy ``auto``: the built-in template of the pod's QoS class, overlaid with the pod's fields.
    Policy ``default`` (or empty): the class config, overlaid with the pod's fields.
    """
    node_cfg: MemoryQOS = cfg.memory_qos if cfg.memory_qos is not None else MemoryQOSCfg()
    pod_cfg = pod.memory_qos
    if pod_cfg is None:
        return node_cfg
    if pod_cfg.policy == "none":
        return NONE_MEMORY_QOS
    base: MemoryQOS = node_cfg
    if pod_cfg.policy == "auto":
        base = default_memory_qos(pod.qos) or node_cfg
    return overlay_config(base, pod_cfg)


def raise_to_min(value: int | None, minimum: int | None) -> int | None:
    """koordlet's rule: a low (or high) between 0 and min is raised to min."""
    if value is not None and minimum is not None and 0 < value < minimum:
        return minimum
    return value


def pod_knobs(pod: PodMeta, mq: MemoryQOS, mem_req: int) -> Knobs:
    """``calculatePodResources``: watermarks, priority, oom group, min/low and the page-cache limit."""
    k = Knobs()
    k.set_qos_fields(mq, watermarks=True)
    if mq.min_limit_percent is not None:
        k.min = percent_of(mem_req, mq.min_limit_percent)
    if mq.low_limit_percent is not None:
        k.low = percent_of(mem_req, mq.low_limit_percent)
    k.low = raise_to_min(k.low, k.min)
    set_page_cache(k, mq, pod_memory_limit(pod))
    return k


def set_page_cache(k: Knobs, mq: MemoryQOS, pod_limit: int) -> None:
    """The pod-level page-cache limit: an explicit size (capped at the pod's limit) or a percentage
    of the limit; size > 0 enables it (with reclaim sync 1 only when asked), size <= 0 disables it;
    an explicit ``pageCacheEnable`` has the last word on ``enable``."""
    size: int | None = None
    if mq.page_cache_limit_size is not None:
        size = mq.page_cache_limit_size
        if pod_limit > 0:
            size = min(size, pod_limit)
    elif mq.page_cache_limit_percent is not None and pod_limit > 0:
        size = percent_of(pod_limit, mq.page_cache_limit_percent)
    if size is not None:
        if size > 0:
            k.pagecache_enable, k.pagecache_size = 1, size
            k.pagecache_sync = 1 if mq.page_cache_reclaim_sync else 0
        else:
            k.pagecache_enable, k.pagecache_size = 0, 0
    if mq.page_cache_enable is not None:
        k.pagecache_enable = 1 if mq.page_cache_enable else 0


def container_knobs(req: int, limit: int, node_allocatable: int, mq: MemoryQOS) -> Knobs:
    """``calculateContainerResources``: min/low of the request, high from throttling, and the rest."""
    k = Knobs()
    if mq.min_limit_percent is not None:
        k.min = percent_of(req, mq.min_limit_percent)
    if mq.low_limit_percent is not None:
        k.low = percent_of(req, mq.low_limit_percent)
    if mq.throttling_percent is not None:
        high = throttling_high(req, limit, node_allocatable, mq.throttling_percent)
        # Safety (not in koordlet): a high of 0 or less (a tiny limit, or a BE request above the node's
        # allocatable memory) would throttle the container to a standstill; leave the knob alone.
        k.high = high if high > 0 else None
    k.low = raise_to_min(k.low, k.min)
    k.high = raise_to_min(k.high, k.min)
    k.set_qos_fields(mq, watermarks=True)
    return k


def qos_knobs(total_min: int | None, total_low: int | None, qcfg: ResourceQOS) -> Knobs:
    """``calculateQoSResources``: the summed protections plus priority and oom group of the class."""
    k = Knobs(min=total_min, low=total_low)
    if qcfg.memory_qos is not None:
        k.set_qos_fields(qcfg.memory_qos, watermarks=False)
    return k


def add_optional(total: int | None, value: int | None) -> int | None:
    """Sum where ``None`` means "not defined" (the result is defined once any term is)."""
    if value is None:
        return total
    return value if total is None else total + value


# ---------------------------------------------------------------------------------------------
# per-pod plan (kept while the pod view, the NodeSLO and the node's allocatable memory are unchanged)
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Entry:
    value: str
    reason: str
    uid: str | None


@dataclass(slots=True)
class _PodPlan:
    pod: PodMeta
    summary_min: int | None  # this pod's contribution to its QoS class's memory.min
    summary_low: int | None
    entries: dict[Key, _Entry]  # pod level, then containers
    request: Plan | None = None  # the entries as an executor plan (made once, by the strategy)


def plan_pod(ctx: Context, pod: PodMeta, cfg: ResourceQOS, allocatable: int,
             usable: frozenset[str]) -> _PodPlan:
    """The QoS-summary contribution and the pod- and container-level knobs of one pod."""
    mq = merged_memory_qos(pod, cfg)
    mem_req = memory_request(pod)
    summary_min = percent_of(mem_req, mq.min_limit_percent) if mq.min_limit_percent is not None else None
    summary_low = percent_of(mem_req, mq.low_limit_percent) if mq.low_limit_percent is not None else None
    entries: dict[Key, _Entry] = {}
    uid, pod_dir = pod.uid, ctx.pod_dir(pod)
    reason = f"memory QoS of pod {pod.key}"
    for name, v in pod_knobs(pod, mq, mem_req).items():
        if name in usable:
            entries[(name, pod_dir)] = _Entry(str(v), reason, uid)
    for c in pod.containers:
        cdir = ctx.container_dir(pod, c)
        if cdir is None:  # not started yet (no container ID): nothing to write
            continue
        req, limit = container_request_limit(pod, c)
        creason = f"memory QoS of container {pod.key}/{c.name}"
        for name, v in container_knobs(req, limit, allocatable, mq).items():
            if name in usable:
                entries[(name, cdir)] = _Entry(str(v), creason, uid)
    return _PodPlan(pod, summary_min, summary_low, entries)


# ---------------------------------------------------------------------------------------------
# the strategy
# ---------------------------------------------------------------------------------------------
@register
class CgroupReconcile(Strategy):
    """Memory QoS of every pod, container and QoS class (see the module docstring)."""

    name = "cgroupReconcile"
    gates = ("CgroupReconcile",)
    interval_key = "reconcile"

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        # (pods generation, NodeSLO, allocatable memory, usable knobs) of the last plan
        self._inputs: tuple[object, ...] | None = None
        self._plans: dict[str, _PodPlan] = {}
        self._qos_entries: dict[Key, _Entry] = {}
        self._qos_request: Plan | None = None
        self._requests = PlanGroup(self.name, "memory-qos", ())  # a new sequence when any plan changes
        self._absent: set[Key] = set()  # file missing in an existing dir: unsupported there
        self._v1_support: dict[str, bool] = {}
        self._warned: set[str] = set()
        self._invalid = InvalidAnnotations(self.name, ANNOTATION_MEMORY_QOS, "memory files")

    # -- tick ----------------------------------------------------------------------------------
    @property
    def _desired(self) -> dict[Key, _Entry]:
        """Every knob this strategy wants now (pods' and QoS dirs'), for inspection."""
        out = dict(self._qos_entries)
        for plan in self._plans.values():
            out.update(plan.entries)
        return out

    def tick(self, ctx: Context) -> list[PlanGroup]:
        strategy = ctx.nodeslo.resource_qos_strategy if ctx.nodeslo_present else None
        node = ctx.node
        if strategy is None or node is None or not node.allocatable:
            return []
        usable = self._usable_resources(ctx)
        inputs = (ctx.pods_generation, ctx.nodeslo, node.memory_allocatable, usable)
        if inputs != self._inputs:
            # a new NodeSLO, allocatable memory or set of knobs changes every pod's plan
            replan_all = self._inputs is None or inputs[1:] != self._inputs[1:]
            self._inputs = inputs
            self._sync(ctx, node.memory_allocatable, usable, replan_all)
            plans = [self._request(f"pod/{uid}", plan) for uid, plan in self._plans.items()]
            if self._qos_request is None:
                self._qos_request = self._make_request("qos", self._qos_entries)
            plans.append(self._qos_request)
            self._requests = PlanGroup(self.name, "memory-qos", plans)
        return [self._requests]

    def _request(self, key: str, plan: _PodPlan) -> Plan:
        if plan.request is None:
            plan.request = self._make_request(key, plan.entries)
        return plan.request

    def _make_request(self, key: str, entries: dict[Key, _Entry]) -> Plan:
        """Knobs as an executor plan; its version is the table itself (a new table when they change)."""
        absent = self._absent

        def build() -> list[Write]:
            return [self.write(k[0], k[1], e.value, e.reason, uid=e.uid) for k, e in entries.items()
                    if k not in absent]

        return Plan(self.name, key, entries, build, spread=True)

    def after_apply(self, ctx: Context, results: Sequence[WriteResult]) -> None:
        """Remember which files do not exist (the executor retries failures itself)."""
        dir_exists: dict[str, bool] = {}
        for r in results:
            w = r.write
            key = (w.resource, w.cgroup)
            status = r.status
            if status == "unsupported":
                self._absent.add(key)
            elif status == "missing":
                exists = dir_exists.get(w.cgroup)
                if exists is None:
                    exists = dir_exists[w.cgroup] = ctx.cgroup_exists("memory", w.cgroup)
                if exists:  # the dir is there, the file is not: this kernel has no such knob here
                    self._absent.add(key)
                # else the cgroup is not created yet (or already gone): sent again on the next change

    # -- support -------------------------------------------------------------------------------
    def _usable_resources(self, ctx: Context) -> frozenset[str]:
        """The knobs this host has: v2 all (checked per directory by the executor), v1 the Anolis files
        found in the kubepods dir (checked once), never the page-cache knobs on v1."""
        version = ctx.cgroup_version
        names = [n for n in RESOURCES if res.supported(n, version)]
        if version != 1:
            return frozenset(names)
        kubepods = ctx.layout.kubepods_dir()
        for n in V1_CHECK_ONCE:
            if n in self._v1_support:
                continue
            # koordlet fix: koordlet caches "unsupported" forever when kubepods does not exist yet at the
            # first check; we decide only once the kubepods dir is there.
            if not ctx.cgroup_exists("memory", kubepods):
                break
            self._v1_support[n] = ctx.read(n, kubepods) is not None
            if not self._v1_support[n]:
                log.info("cgroupReconcile: %s not found in %s, not supported on this kernel", n, kubepods)
        return frozenset(n for n in names if self._v1_support.get(n, n not in V1_CHECK_ONCE))

    # -- planning ------------------------------------------------------------------------------
    def _sync(self, ctx: Context, allocatable: int, usable: frozenset[str], replan_all: bool) -> None:
        """Bring the desired knobs up to date: re-plan the pods whose view changed (all of them when
        ``replan_all``), drop the pods that left, recompute the QoS sums."""
        mins: dict[str, int | None] = dict.fromkeys(KUBE_QOS_ORDER)
        lows: dict[str, int | None] = dict.fromkeys(KUBE_QOS_ORDER)
        old_plans, plans = self._plans, {}
        for pod in ctx.pods.values():
            if not pod.active:
                continue
            plan = old_plans.get(pod.uid)
            if replan_all or plan is None or plan.pod is not pod:
                plan = self._plan(ctx, pod, allocatable, usable)
            plans[pod.uid] = plan
            if pod.kube_qos in mins:
                mins[pod.kube_qos] = add_optional(mins[pod.kube_qos], plan.summary_min)
                lows[pod.kube_qos] = add_optional(lows[pod.kube_qos], plan.summary_low)
        self._plans = plans  # a pod gone, or no longer Pending/Running, has no plan any more
        self._invalid.forget_gone(ctx.pods)
        for kq in KUBE_QOS_ORDER:
            # koordlet fix: a class whose last pod left has an undefined sum and koordlet leaves its QoS
            # dir's old protection in place; the sum over no pods is 0, so we write that.
            qcfg = ctx.nodeslo.kube_class_qos(kq)
            mq = qcfg.memory_qos if qcfg is not None else None
            if mq is not None and mins[kq] is None and mq.min_limit_percent is not None:
                mins[kq] = 0
            if mq is not None and lows[kq] is None and mq.low_limit_percent is not None:
                lows[kq] = 0
        # completeCgroupSummaryForQoS: the Guaranteed dir is the pods root, parent of the other two
        total_min: int | None = None
        total_low: int | None = None
        for kq in KUBE_QOS_ORDER:
            total_min = add_optional(total_min, mins[kq])
            total_low = add_optional(total_low, lows[kq])
        mins[KUBE_QOS_GUARANTEED], lows[KUBE_QOS_GUARANTEED] = total_min, total_low
        qos_entries: dict[Key, _Entry] = {}
        for kq in KUBE_QOS_ORDER:
            qcfg = ctx.nodeslo.kube_class_qos(kq)
            if qcfg is None:
                self._warn(f"kube:{kq}", "cgroupReconcile: no resourceQOSStrategy config for %s; its QoS dir "
                           "is skipped", kq)
                continue
            qdir, reason = ctx.qos_dir(kq), f"memory QoS of the {kq} QoS class"
            for name, v in qos_knobs(mins[kq], lows[kq], qcfg).items():
                if name in usable:
                    qos_entries[(name, qdir)] = _Entry(str(v), reason, None)
        if qos_entries != self._qos_entries:
            self._qos_entries, self._qos_request = qos_entries, None

    def _plan(self, ctx: Context, pod: PodMeta, allocatable: int, usable: frozenset[str]) -> _PodPlan:
        cfg = ctx.nodeslo.class_qos(pod.qos)
        if cfg is None:
            # koordlet fix: a nil class config makes koordlet panic (§6b item 5); we skip its pods
            self._warn(f"class:{pod.qos}", "cgroupReconcile: no resourceQOSStrategy config for class %r; its "
                       "pods are skipped", pod.qos)
            return _PodPlan(pod, None, None, {})
        try:
            plan = plan_pod(ctx, pod, cfg, allocatable, usable)
        except ValueError as e:  # one odd pod (e.g. an unusable cgroup name) never stops the others
            self._warn(f"pod:{pod.uid}", "cgroupReconcile: pod %s skipped: %s", pod.key, e)
            return _PodPlan(pod, None, None, {})
        if pod.memory_qos_invalid:
            # koordlet fix: koordlet gives a pod whose annotation does not parse the class config,
            # resetting what the annotation had set; we leave the pod's and its containers' files as
            # they are and count it in its class's sums by the class config
            self._invalid.skip(ctx, pod)
            return _PodPlan(pod, plan.summary_min, plan.summary_low, {})
        return plan

    def _warn(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)


__all__ = [
    "NONE_MEMORY_QOS",
    "CgroupReconcile",
    "Knobs",
    "container_knobs",
    "container_request_limit",
    "memory_request",
    "merged_memory_qos",
    "plan_pod",
    "pod_knobs",
    "pod_memory_limit",
    "qos_knobs",
    "throttling_high",
]
