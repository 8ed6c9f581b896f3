"""cpuSuppress: cap the CPU BestEffort pods may use so the rest stays under a node usage threshold
(koordlet's CPUSuppress, koordlet-qos §4.1).

Every tick the strategy computes how much CPU is left for BE once everything that must not be
squeezed is accounted for::

    suppress(BE) = capacity x cpuSuppressThresholdPercent%
                   - used(non-BE pods, and pods the agent does not know)
                   - used(non-BE host applications)
                   - max(node used - used(all pods) - used(all host apps), 0, node reservation)

floored at ``capacity x cpuSuppressMinPercent%`` when that is set, and enforces it with one of
two policies (``resourceUsedThresholdWithBE.cpuSuppressPolicy``):

* ``cpuset`` (default): give the BE QoS dir, its pods and containers (sandboxes included) that
  many whole CPUs, spread over NUMA nodes / sockets and preferring full hyper-thread pairs, never
  reserved, system-exclusive or LSE CPUs, nor the CPUs the kubelet's static CPU manager gave a
  container or reserved (``qosmanager.host.kubelet_cpu``); CPUs of LSR pods are shared in proportion.
  The kubelet's CPU manager policy (the flag, else its checkpoint, else its configuration file, else
  the topology annotation, else ``none``) decides where the BE cpuset is written.
* ``cfsQuota``: set the BE QoS dir's CFS quota (``cpu.max`` on cgroup v2).

**BE pods' own quotas (cgroup v1)**: before the BE dir's quota falls below a BE pod's or
container's own, that child is lowered first, and gets its own quota back when the budget rises
(:mod:`qosmanager.strategies._cpu_suppress_children`).  BE cpusets on cgroup v1 are never outside
their parent's, also where a plan writes some levels only (:mod:`qosmanager.strategies._cpu_suppress_cpusets`).

**Before the pods are known** (a big pods file decoded beside the ticks: ``ctx.pods_loading`` with no
pod yet) the cfsQuota policy decides the BE quota from the node and kube QoS-dir counters (the BE dir's
usage counted as BE, the rest of kubepods as not); the cpuset policy and the cpuset recovery wait for the
pods (their LSE CPUs are never BE's).  Koordlet does nothing without pods; its statesInformer has them
before its first tick, which at 100,000 pods is tens of seconds.  The cfsQuota policy's cpuset recovery
is applied as a batch of its own after the BE quota's, in the same run (:meth:`CPUSuppress.later`).

Growth is slowed (10 % of the node per tick), shrinking is immediate; quota changes under 1 % of the
node are skipped (not written, only read-compared, so the executor sees this agent's value in place
between two resets by another writer and never takes them for a fight), except from unlimited:
koordlet would keep BE unlimited whenever its budget is under 1 % of the node, and the kubelet's
systemd driver resets the BE slice to unlimited about once a minute (koordinator #1734). The policy
not in use is recovered (quota back to unlimited, cpuset back to every CPU BE may have), and both
are recovered when the NodeSLO switches suppression off. With the ``BECPUManager`` gate the BE
cpuset belongs to the runtime hooks and only recovery runs.

**Fail safe** (a departure from koordlet, which simply stops): when node CPU usage cannot be read
(``/proc/stat`` garbled or missing: no ``node_cpu_usage`` sample in the window), the strategy holds
the BE limit its last decision set and re-asserts it every tick until the data returns: the BE
quota goes back down to the held one when someone raised it or set it unlimited (a lower quota set
by someone else is kept: missing data never raises a limit), and the held BE cpuset is written
with a read-compare (not through the write cache), so an outside reset is undone on the next tick.
Nothing is recovered meanwhile.  With no decision yet (an agent started on a garbled
``/proc/stat``) nothing is invented: the BE cgroups are left as they are.  Either way the
``cpuSuppress/node-cpu`` degraded condition says so (``/healthz``, ``qosmanager_degraded``) and
is cleared once the strategy decides from data again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from qosmanager.api.node import NodeMeta
from qosmanager.api.nodeslo import (
    CPU_SUPPRESS_POLICY_CFS_QUOTA,
    CPU_SUPPRESS_POLICY_CPUSET,
    HostApplicationSpec,
)
from qosmanager.api.pod import KUBE_QOS_BESTEFFORT, QOS_LSE, QOS_LSR, PodMeta
from qosmanager.executor.executor import Plan, Request, Write, WriteResult
from qosmanager.framework.context import Context
from qosmanager.framework.demand import NODE, POD, QOS, Need
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy, register
from qosmanager.host.cpuset import format_cpu_list, parse_cpu_list
from qosmanager.host.kubelet_cpu import KubeletCPU
from qosmanager.host.resources import CFS_PERIOD_US
from qosmanager.host.sysfs import NodeCPUInfo, Processor
from qosmanager.strategies._cpu_suppress_children import BEChildQuotas, _int_or_none, _pod_dir
from qosmanager.strategies._cpu_suppress_cpusets import V1CPUSets
from qosmanager.strategies._cpu_suppress_pick import pick_be_cpus, pick_be_cpuset
from qosmanager.strategies._helpers import (
    AnnotationError,
    ClassSplit,
    FilteredUsage,
    calculate_filter_pods_used,
    class_split,
    class_usage,
    cpu_manager_policy,
    filter_used_from_qos_dirs,
    go_div,
    non_be_host_app_filter,
    non_be_pod_filter,
    reserved_cpus,
    system_qos_exclusive_cpus,
    threshold_feature_disabled,
)

log = logging.getLogger(__name__)

SUPPRESS_BYPASS_QUOTA_DELTA_RATIO = 0.01
BE_MIN_CPUSET_CORES = 2
BE_MIN_QUOTA = 2000
BE_MAX_INCREASE_CPU_PERCENT = 0.1
BE_UNSET_QUOTA = -1

POLICY_USING, POLICY_RECOVERED = "using", "recovered"
CPU_MANAGER_STATIC = "static"

# depth below the BE QoS dir: 0 the QoS dir, 1 pods, 2 containers (sandboxes included)
POD_DEPTH, CONTAINER_DEPTH = 1, 2

REASON = "AdjustBEByNodeCPUUsage"
QUOTA, CPUSET = "cpu.cfs_quota_us", "cpuset.cpus"
COND_NODE_CPU = "cpuSuppress/node-cpu"


@dataclass(frozen=True, slots=True)
class SuppressQuantity:
    """``calculateBESuppressCPU``: the BE budget in milli-cores and the terms it came from."""

    milli: int
    capacity_milli: int
    threshold_percent: int
    used: FilteredUsage
    min_milli: int | None


@dataclass(frozen=True, slots=True)
class _PodCPUSets:
    """What the pods' ``resource-status`` cpusets say, computed once per pod-set change."""

    generation: int
    owner_qos: Mapping[int, str]  # cpu -> raw QoS of the (last listed) pod whose cpuset holds it
    lse_cpus: frozenset[int]
    hook_pod_dirs: frozenset[str]  # pod dirs whose cpuset the BE cpuset hook manages (BECPUManager)


@dataclass(frozen=True, slots=True)
class CPUSetBasis:
    """What the last cpuset decision picked from and wrote to, for the fast path
    (:mod:`qosmanager.framework.fastpath`) to narrow BE's cpuset between ticks with the same picks."""

    lsr: tuple[Processor, ...]  # CPUs shared with LSR pods
    ls: tuple[Processor, ...]  # the rest BE may have
    dirs: tuple[str, ...]  # where the BE cpuset is written (containers only with a static CPU manager)
    containers_only: bool


@register
class CPUSuppress(Strategy):
    """BE CPU suppression by cpuset or CFS quota (see the module docstring)."""

    name = "cpuSuppress"
    gates = ("BECPUSuppress",)
    interval_key = "cpu_suppress"

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        # koordlet's suppressPolicyStatuses: policy -> "using" | "recovered" (empty at start)
        self.policy_status: dict[str, str] = {}
        self.last_suppress: SuppressQuantity | None = None
        self._quota_recovery: Write | None = None
        self._pod_cpusets: _PodCPUSets | None = None
        # the last BE cpuset computed: (topology, annotations, kubelet CPU manager, pod CPU sets, value)
        self._be_cpuset: tuple[NodeCPUInfo, dict[str, str], KubeletCPU, _PodCPUSets, str | None] | None = None
        self._depth_split: tuple[list[str], dict[int, list[str]]] | None = None
        # what the last decision left in force, re-asserted while node CPU usage cannot be read:
        # the BE quota (cfsQuota) and the BE cpuset with whether only containers carry it (static)
        self.held_quota: int | None = None
        self.held_cpuset: tuple[str, bool] | None = None
        self._holding = False
        self._first_tick: float | None = None  # the start: node CPU has no rate before two samples
        self._split: tuple[int, ClassSplit] | None = None
        # cgroup v1, cfsQuota: BE pods' and containers' own quotas (dir -> quota, -1 unlimited) and
        # the quotas this strategy lowered some of them to (see the module docstring)
        self.children = BEChildQuotas(self.write, REASON)
        # the fast path lowers children from its own thread, under the same lock, with the same maps
        self.child_own, self.child_lowered = self.children.own, self.children.lowered
        self.children_lock = self.children.lock
        # the fast path's latest BE quota (qosmanager.framework.fastpath): the tick never sets a higher one
        self.quota_cap: Callable[[], int | None] | None = None
        self.cpuset_basis: CPUSetBasis | None = None  # the last cpuset decision's pools and dirs
        # cgroup v1: BE cpusets never outside their parent's (qosmanager.strategies._cpu_suppress_cpusets)
        self.cpusets = V1CPUSets()
        self._later: list[Request] = []  # this tick's batch after the BE limit's (later())

    @property
    def last_split(self) -> ClassSplit | None:
        """The BE split of the last tick (None before the first)."""
        return self._split[1] if self._split is not None else None

    @property
    def holding(self) -> bool:
        """Whether the last tick held the BE limit (node CPU usage could not be read)."""
        return self._holding

    # ------------------------------------------------------------------ what it reads
    def be_split(self, ctx: Context) -> ClassSplit:
        """BE by ``NonBEPodFilter`` against the BestEffort dir (kept until the pods change)."""
        if self._split is None or self._split[0] != ctx.pods_generation:
            self._split = (ctx.pods_generation, class_split(ctx.pods, lambda p: not non_be_pod_filter(p)))
        return self._split[1]

    def needs(self, ctx: Context) -> Sequence[Need]:
        return self.kept_needs(ctx, lambda: self.build_needs(ctx))

    def build_needs(self, ctx: Context) -> Sequence[Need]:
        """The node's usage, the kubepods and BestEffort dirs' sums, the pods whose class differs from
        their kube QoS dir, the host applications: no other per-pod read."""
        if threshold_feature_disabled(ctx.nodeslo, ctx.nodeslo_present) is not False:
            return ()
        if self.gate("BECPUSuppress") and self.gate("BECPUManager"):
            return ()
        return (Need("node_cpu_usage", NODE), Need("kubepods_cpu_usage", QOS),
                Need("besteffort_cpu_usage", QOS),
                Need("pod_cpu_usage", POD, keys=self.be_split(ctx).corrections),
                Need("hostapp_cpu_usage", NODE))

    # ------------------------------------------------------------------ the tick (suppressBECPU)
    def tick(self, ctx: Context) -> list[Request]:
        self._quota_recovery = None
        self._holding = False
        self._later = []
        if self._first_tick is None:
            self._first_tick = ctx.now
        writes = self._suppress(ctx)
        if not self._holding and ctx.conditions.clear(COND_NODE_CPU):
            log.info("cpuSuppress: no longer holding the BE limit")
        return writes

    def _suppress(self, ctx: Context) -> list[Request]:
        disabled = threshold_feature_disabled(ctx.nodeslo, ctx.nodeslo_present)
        if disabled is None:
            return []  # no NodeSLO (or no enable flag): koordlet does nothing, not even recovery
        if self.gate("BECPUSuppress") and self.gate("BECPUManager"):
            # the BE cpuset hook owns BE cpusets: only undo what suppression did
            return self._recover_cfs_quota(ctx) + self._recover_cpuset_for_be_cpu_manager(ctx)
        if disabled:
            return self._recover_cfs_quota(ctx) + self._recover_cpuset(ctx, CONTAINER_DEPTH)
        node = ctx.node
        if node is None:
            return []
        if not ctx.pods and not (ctx.pods_loading and ctx.nodeslo.resource_used_threshold_with_be.cpu_suppress_policy
                                             == CPU_SUPPRESS_POLICY_CFS_QUOTA):
            return []  # no pods (koordlet does nothing); pods on their way: the quota from the QoS dirs
        kubepods = ctx.node_metric("kubepods_cpu_usage")
        be_dir = ctx.node_metric("besteffort_cpu_usage")
        by_dirs = kubepods is not None and be_dir is not None  # the kernel's sums (demand-driven)
        # with the kube QoS dirs' sums only the pods whose class differs from their dir count
        pod_used = ctx.pod_metrics("pod_cpu_usage", keys=self.be_split(ctx).corrections if by_dirs else None)
        node_used = ctx.node_metric("node_cpu_usage")
        if node_used is None:
            # no sample within 2 x collect interval: never act on stale data, never let go either
            return self._hold(ctx)
        host_used = ctx.hostapp_metrics("hostapp_cpu_usage")
        thr = ctx.nodeslo.resource_used_threshold_with_be
        if thr.cpu_suppress_threshold_percent is None:
            return []
        used = None
        if kubepods is not None and be_dir is not None:
            used = filter_used_from_qos_dirs(node_used, node.reserved_cpu_milli / 1000, kubepods,
                                             class_usage(be_dir, self.be_split(ctx), pod_used),
                                             ctx.nodeslo.host_applications, host_used, non_be_host_app_filter)
        q = calculate_be_suppress_cpu(node, node_used, pod_used, ctx.pods, ctx.nodeslo.host_applications,
                                      host_used, thr.cpu_suppress_threshold_percent,
                                      thr.cpu_suppress_min_percent, used)
        self.last_suppress = q
        cpu_info = ctx.cpu_info
        if cpu_info is None:
            return []
        if thr.cpu_suppress_policy == CPU_SUPPRESS_POLICY_CFS_QUOTA:
            writes = self._adjust_by_cfs_quota(ctx, q, node)
            self.policy_status[CPU_SUPPRESS_POLICY_CFS_QUOTA] = POLICY_USING
            # the cpuset recovery reads every BE cgroup's cpuset: a batch of its own after the quota's
            # (later()), and only once the pods are known (their LSE CPUs are never given to BE)
            self._later = self._recover_cpuset(ctx, CONTAINER_DEPTH) if ctx.pods else []
            return writes
        writes = self._adjust_by_cpuset(ctx, q, cpu_info)  # "cpuset", "" or anything else
        self.policy_status[CPU_SUPPRESS_POLICY_CPUSET] = POLICY_USING
        return writes + self._recover_cfs_quota(ctx)

    def later(self, ctx: Context) -> list[Request]:
        """The cfsQuota policy's cpuset recovery, a batch of its own once the BE quota is written: it
        read-compares every BE pod's and container's cpuset (100,000 files on a big node)."""
        later, self._later = self._later, []
        return later

    def after_apply(self, ctx: Context, results: Sequence[WriteResult]) -> None:
        if ctx.cgroup_version == 1 and any(r.write.resource == CPUSET and r.status == "failed" for r in results):
            self.cpusets.forget()  # a child kept as it is may have changed: read them again
        if self.held_quota is not None and ctx.cgroup_version == 1:
            be_dir = ctx.qos_dir(KUBE_QOS_BESTEFFORT)
            for r in results:
                if r.write.resource == QUOTA and r.write.cgroup == be_dir and r.status == "failed":
                    self.children.refused = True  # v1: a child above it, maybe one not read yet
        if self._quota_recovery is not None:
            for r in results:
                if r.write is self._quota_recovery:
                    # a missing BE dir counts as done, as koordlet's executor ignores "dir not exist"
                    if r.status in ("written", "unchanged", "cached", "missing", "dry-run"):
                        self.policy_status[CPU_SUPPRESS_POLICY_CFS_QUOTA] = POLICY_RECOVERED
                    break

    # ------------------------------------------------------------------ cfsQuota policy
    def _adjust_by_cfs_quota(self, ctx: Context, q: SuppressQuantity, node: NodeMeta) -> list[Request]:
        """``adjustByCfsQuota``: the BE QoS dir's quota, with the bypass and the step limit."""
        be_dir = ctx.qos_dir(KUBE_QOS_BESTEFFORT)
        new_quota = max(go_div(q.milli * CFS_PERIOD_US, 1000), BE_MIN_QUOTA)
        cap = self.quota_cap() if self.quota_cap is not None else None
        if cap is not None and cap < new_quota:
            new_quota = cap  # the fast path saw more non-BE load in the last 100 ms than this window shows
        current = _int_or_none(ctx.read(QUOTA, be_dir))
        if current is None:
            return []  # unreadable: koordlet gives up for this tick
        cores = node.cpu_capacity_cores  # Quantity.Value(): fractional capacity rounds up
        min_delta = cores * CFS_PERIOD_US * SUPPRESS_BYPASS_QUOTA_DELTA_RATIO
        if abs(new_quota - current) < min_delta and new_quota != BE_MIN_QUOTA and current != BE_UNSET_QUOTA:
            self.held_quota = current  # the decision: keep what is there
            # a change under 1 % of the node is not worth a write; BE children still fit under it.  The
            # quota is still sent (read-compared, nothing written): the executor then sees this agent's
            # value in place, so resets by another writer far apart (the kubelet's, once a minute) are
            # never counted as checks in a row of a fight
            return [*self.fit_children(ctx, be_dir, current, current),
                    self.write(QUOTA, be_dir, current, f"{REASON}: keep the BE quota {current} "
                               f"(under 1 % of the node from {new_quota})", cacheable=False)]
        max_increase = cores * CFS_PERIOD_US * BE_MAX_INCREASE_CPU_PERCENT
        if new_quota - current > max_increase and current != BE_UNSET_QUOTA:
            new_quota = current + int(max_increase)  # scale up slowly; down at once; none from unlimited
        reason = f"{REASON}: BE quota {new_quota} ({_explain(q)})"
        self.held_quota = new_quota
        return [*self.fit_children(ctx, be_dir, current, new_quota),
                self.write(QUOTA, be_dir, new_quota, reason, cacheable=False)]

    def _recover_cfs_quota(self, ctx: Context) -> list[Request]:
        """``recoverCFSQuotaIfNeed``: BE quota back to unlimited, once (until the policy is used again)."""
        self.held_quota = None
        be_dir = ctx.qos_dir(KUBE_QOS_BESTEFFORT)
        # children lowered under the BE quota get their own back (parents first: the executor
        # writes rising limits in that order, the BE dir's -1 before them)
        children = self.fit_children(ctx, be_dir, None, BE_UNSET_QUOTA) if self.child_lowered else []
        if self.policy_status.get(CPU_SUPPRESS_POLICY_CFS_QUOTA) == POLICY_RECOVERED:
            return children
        w = self.write(QUOTA, be_dir, BE_UNSET_QUOTA,
                       "recover the BE CFS quota: quota suppression is not in use", cacheable=False)
        self._quota_recovery = w
        return [w, *children]

    def fit_children(self, ctx: Context, be_dir: str, be_now: int | None, budget: int) -> list[Request]:
        """cgroup v1: the BE children's quotas under the BE dir's next quota ``budget``
        (:meth:`BEChildQuotas.fit`, under :attr:`children_lock`)."""
        return self.children.fit(ctx, be_dir, be_now, budget)

    # ------------------------------------------------------------------ cpuset policy
    def _adjust_by_cpuset(self, ctx: Context, q: SuppressQuantity, cpu_info: NodeCPUInfo) -> list[Request]:
        """``adjustByCPUSet``: how many CPUs BE gets, which ones, and where they are written."""
        be_dir = ctx.qos_dir(KUBE_QOS_BESTEFFORT)
        old = self._read_be_cpuset(ctx, be_dir, cpu_info)
        if old is None:
            return []
        pod_sets = self._pod_sets(ctx)
        annotations = ctx.topology_annotations
        kubelet = ctx.kubelet_cpu
        excluded = (reserved_cpus(annotations) | system_qos_exclusive_cpus(annotations)
                    | kubelet.exclusive_cpus | kubelet.reserved_cpus)
        lsr: list[Processor] = []
        ls: list[Processor] = []
        for p in cpu_info.processors:
            if p.cpu in excluded:
                continue
            owner = pod_sets.owner_qos.get(p.cpu)
            if owner == QOS_LSR:
                lsr.append(p)
            elif owner != QOS_LSE:  # LSE CPUs are never given to BE
                ls.append(p)
        milli = q.milli
        cap = self.quota_cap() if self.quota_cap is not None else None
        if cap is not None:  # the fast path saw more non-BE load in the last 100 ms than this window shows
            milli = min(milli, cap * 1000 // CFS_PERIOD_US)
        n = max(math.ceil(milli / 1000), BE_MIN_CPUSET_CORES)
        max_increase = math.ceil(len(cpu_info.processors) * BE_MAX_INCREASE_CPU_PERCENT)
        if n - len(old) > max_increase:
            n = len(old) + max_increase  # scale up slowly, down at once
        if not lsr and not ls:
            # koordlet fix: koordlet divides by len(lsr) + len(ls) here and panics when every CPU is
            # reserved, system-exclusive or LSE; there is simply no CPU to give BE, so leave it be.
            log.warning("cpuSuppress: no CPU is available to BE pods (all reserved, system-exclusive or LSE)")
            return []
        be = pick_be_cpuset(n, lsr, ls)
        return self._apply_be_cpuset(ctx, be_dir, be, q, (tuple(lsr), tuple(ls)))

    def _apply_be_cpuset(self, ctx: Context, be_dir: str, be: list[int], q: SuppressQuantity,
                         pools: tuple[tuple[Processor, ...], tuple[Processor, ...]]) -> list[Request]:
        """``applyBESuppressCPUSet``: with a static kubelet CPU manager only containers are narrowed
        (the QoS and pod dirs keep every BE CPU); otherwise the QoS dir, pods and containers all get
        the BE cpuset.  The executor widens parents first and narrows children first."""
        try:
            policy = ctx.kubelet_cpu.policy or cpu_manager_policy(ctx.topology_annotations, "none")
        except AnnotationError as e:
            log.warning("cpuSuppress: BE cpuset not applied: %s", e)
            return []
        # An empty BE cpuset (a pool had fewer CPUs than wanted) is never written: the kernel refuses
        # it (v1) or reads it as "all CPUs" (v2); koordlet writes nothing then either.
        value = format_cpu_list(be)
        reason = f"{REASON}: BE cpuset {value or 'not changed'} ({_explain(q)})"
        if policy == CPU_MANAGER_STATIC:
            full = self._be_cpuset_value(ctx)
            if full is None:
                return []
            split = self._split_by_depth(ctx, be_dir)
            plan = [(split[0] + split[POD_DEPTH], self._parents_value(ctx, full))]  # recoverCPUSetIfNeed(1)
            if value:
                plan.append((split[CONTAINER_DEPTH], value))
                self.held_cpuset = (value, True)
                self.cpuset_basis = CPUSetBasis(*pools, tuple(split[CONTAINER_DEPTH]), True)
            self.policy_status[CPU_SUPPRESS_POLICY_CPUSET] = POLICY_RECOVERED
            return self._emit_cpuset(ctx, plan, reason)
        if not value:
            return []
        self.held_cpuset = (value, False)
        paths = ctx.cgroup_dirs("cpuset", be_dir, CONTAINER_DEPTH)
        self.cpuset_basis = CPUSetBasis(*pools, tuple(paths), False)
        return self._emit_cpuset(ctx, [(paths, value)], reason)

    def _read_be_cpuset(self, ctx: Context, be_dir: str, cpu_info: NodeCPUInfo) -> list[int] | None:
        """The BE QoS dir's current CPUs; None when unreadable.

        On cgroup v2 koordlet reads ``cpuset.cpus.effective``: an empty ``cpuset.cpus`` there
        means "inherit the parent's", so the nearest ancestor that sets one decides, and with none
        the BE dir has every online CPU.
        """
        dirs = [be_dir]
        if ctx.cgroup_version == 2:
            parts = be_dir.split("/")
            dirs += ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
        values = ctx.read_many(CPUSET, dirs)
        if values[0] is None:
            return None
        for text in values:
            if text is None:
                break
            try:
                cpus = parse_cpu_list(text)
            except ValueError as e:
                log.warning("cpuSuppress: BE cpuset unreadable: %s", e)
                return None
            if cpus or ctx.cgroup_version == 1:
                return cpus
        return sorted(p.cpu for p in cpu_info.processors)

    # ------------------------------------------------------------------ recovery
    def _be_cpuset_value(self, ctx: Context) -> str | None:
        """``calcBECPUSet``: every CPU - system-exclusive - reserved - LSE pods' CPUs (LSR CPUs stay)
        - the kubelet's exclusive and reserved CPUs."""
        cpu_info = ctx.cpu_info
        if cpu_info is None:
            return None
        annotations = ctx.topology_annotations
        kubelet = ctx.kubelet_cpu
        pod_sets = self._pod_sets(ctx)
        last = self._be_cpuset
        if (last is not None and last[0] is cpu_info and last[3] is pod_sets and last[1] == annotations
                and last[2] == kubelet):
            return last[4]  # every tick of the cfsQuota policy asks: the same inputs, the same set
        excluded = (system_qos_exclusive_cpus(annotations) | reserved_cpus(annotations)
                    | pod_sets.lse_cpus | kubelet.exclusive_cpus | kubelet.reserved_cpus)
        cpus = [p.cpu for p in cpu_info.processors if p.cpu not in excluded]
        value = format_cpu_list(cpus) if cpus else None
        self._be_cpuset = (cpu_info, dict(annotations), kubelet, pod_sets, value)
        if value is None:
            log.warning("cpuSuppress: no CPU left for BE pods to recover to; BE cpusets left as they are")
        return value

    def _recover_cpuset(self, ctx: Context, max_depth: int) -> list[Request]:
        """``recoverCPUSetIfNeed``: every BE dir down to ``max_depth`` gets the whole BE cpuset."""
        self.held_cpuset = self.cpuset_basis = None
        full = self._be_cpuset_value(ctx)
        if full is None:
            return []
        self.policy_status[CPU_SUPPRESS_POLICY_CPUSET] = POLICY_RECOVERED
        be_dir = ctx.qos_dir(KUBE_QOS_BESTEFFORT)
        paths = ctx.cgroup_dirs("cpuset", be_dir, max_depth)
        parents = self._parents_value(ctx, full)
        plan = [(paths, full)]
        if parents != full and max_depth == CONTAINER_DEPTH:
            split = self._split_by_depth(ctx, be_dir)
            plan = [(split[0] + split[POD_DEPTH], parents), (split[CONTAINER_DEPTH], full)]
        return self._emit_cpuset(ctx, plan, "recover the BE cpuset: cpuset suppression is not in use")

    def _recover_cpuset_for_be_cpu_manager(self, ctx: Context) -> list[Request]:
        """``recoverCPUSetForBECPUManager``: like the recovery, but containers of pods whose cpuset
        the BE cpuset hook manages (``resource-status`` with a cpuset or NUMA resources) are left alone."""
        self.held_cpuset = self.cpuset_basis = None
        full = self._be_cpuset_value(ctx)
        if full is None:
            return []
        be_dir = ctx.qos_dir(KUBE_QOS_BESTEFFORT)
        split = self._split_by_depth(ctx, be_dir)
        hook = self._pod_sets(ctx).hook_pod_dirs
        containers = [d for d in split[CONTAINER_DEPTH] if d.rpartition("/")[0] not in hook]
        self.policy_status[CPU_SUPPRESS_POLICY_CPUSET] = POLICY_RECOVERED
        parents = self._parents_value(ctx, full)
        plan = [(split[0] + split[POD_DEPTH], parents), (containers, full)] if parents != full else [
            (split[0] + split[POD_DEPTH] + containers, full)]
        return self._emit_cpuset(ctx, plan, "recover the BE cpuset: the BE CPU manager owns BE cpusets")

    def _parents_value(self, ctx: Context, full: str) -> str:
        """What the BE QoS and pod dirs get where the plan gives BE ``full``: on cgroup v1 under a static
        kubelet CPU manager, ``full`` and the kubelet's shared pool (its checkpoint's ``defaultCpuSet``).
        The kubelet creates and updates every BE container with that pool (the runtime writes it to the
        container's cpuset), and v1 refuses a container cpuset outside its pod dir's (EACCES): a pod dir
        without the pool's CPUs (its reserved CPUs, which BE never gets) would fail the creation of the
        pod's next container.  Under a static CPU manager the containers carry BE's set: the QoS and pod
        dirs are no limit there, so BE gains no CPU by it.  v2 takes such a write and clamps it."""
        if ctx.cgroup_version != 1:
            return full
        kubelet = ctx.kubelet_cpu
        cpu_info = ctx.cpu_info
        if not kubelet.shared_cpus or cpu_info is None:
            return full
        try:
            policy = kubelet.policy or cpu_manager_policy(ctx.topology_annotations, "none")
        except AnnotationError:
            return full
        if policy != CPU_MANAGER_STATIC:
            return full
        pool = kubelet.shared_cpus & {p.cpu for p in cpu_info.processors}
        cpus = set(parse_cpu_list(full))
        return full if pool <= cpus else format_cpu_list(cpus | pool)

    # ------------------------------------------------------------------ fail safe
    def _hold(self, ctx: Context) -> list[Request]:
        """Node CPU usage cannot be read: re-assert the BE limit of the last decision, never raise it.

        The quota is written only when the file holds a looser one (higher, or unlimited); the
        cpuset writes bypass the write cache (read-compare every tick), so a reset by someone
        else is corrected at once.  Without a decision yet, nothing is written.
        """
        self._holding = True
        be_dir = ctx.qos_dir(KUBE_QOS_BESTEFFORT)
        writes: list[Request] = []
        held: list[str] = []
        quota = self.held_quota
        if quota == BE_UNSET_QUOTA:
            held.append("BE quota unlimited")  # the last decision left it so (a bypassed change)
        elif quota is not None:
            held.append(f"BE quota {quota}")
            current = _int_or_none(ctx.read(QUOTA, be_dir))
            if current is None or current == BE_UNSET_QUOTA or current > quota:
                writes += self.fit_children(ctx, be_dir, current, quota)
                writes.append(self.write(QUOTA, be_dir, quota, f"{REASON}: hold BE quota {quota}: node CPU "
                                         "usage cannot be read", cacheable=False))
            else:
                writes += self.fit_children(ctx, be_dir, current, current)
        if self.held_cpuset is not None:
            value, containers_only = self.held_cpuset
            held.append(f"BE cpuset {value}" + (" (containers)" if containers_only else ""))
            if containers_only:
                # the pod dirs are not held: on v1 a container stays within its pod dir's set
                pairs = self.cpusets.clip(ctx, self._split_by_depth(ctx, be_dir)[CONTAINER_DEPTH], value)
            else:
                pairs = [(d, value) for d in ctx.cgroup_dirs("cpuset", be_dir, CONTAINER_DEPTH)]
            reason = f"{REASON}: hold BE cpuset {value}: node CPU usage cannot be read"
            writes += [self.write(CPUSET, d, v, reason if v == value else f"{reason} (within its pod dir's "
                                  "set: cgroup v1 refuses a cpuset outside its parent's)", cacheable=False)
                       for d, v in pairs]
        what = (f"holding the last BE limit ({', '.join(held)}) until it returns" if held
                else "no BE limit decided yet: the BE cgroups are left as they are")
        message = (f"node CPU usage cannot be read (no node_cpu_usage sample in the last "
                   f"{ctx.last_window:g} s); {what}")
        first = self._first_tick if self._first_tick is not None else ctx.now
        if not held and ctx.now - first <= ctx.last_window + self.interval:
            # the start: a rate needs two samples of /proc/stat, so the first ticks have none yet
            log.debug("cpuSuppress: no node CPU rate yet (starting); the BE cgroups are left as they are")
            return writes
        if ctx.conditions.set(COND_NODE_CPU, message):
            log.warning("cpuSuppress: %s", message)
        return writes

    # ------------------------------------------------------------------ plumbing
    def _emit_cpuset(self, ctx: Context, plan: list[tuple[list[str], str]], reason: str) -> list[Request]:
        """A cpuset plan ``[(dirs, value), ...]`` as one executor plan whose version is the plan itself:
        the executor skips it while it is unchanged within the force-update interval, sends only what
        changed when it changes, and again what did not land.

        On cgroup v1 a dir written over children the plan leaves alone is widened by their CPUs first,
        and after a hold that clipped containers to pod dirs someone else narrowed, the plan is sent
        whole outside the write cache (pod dirs widened back before their containers: one batch)."""
        asked = {value for _, value in plan}
        walk = ctx.cgroup_dirs("cpuset", ctx.qos_dir(KUBE_QOS_BESTEFFORT), CONTAINER_DEPTH)
        plan = self.cpusets.cover(ctx, walk, plan)
        widened = (f"{reason} (widened by the CPUs of children left as they are: cgroup v1 refuses a "
                   "parent cpuset without a child's CPUs)")

        def build(cacheable: bool = True) -> list[Write]:
            return [self.write(CPUSET, d, value, reason if value in asked else widened, cacheable=cacheable)
                    for dirs, value in plan for d in dirs]

        if self.cpusets.clipped:
            self.cpusets.clipped.clear()
            return list(build(cacheable=False))
        return [Plan(self.name, "be-cpuset", plan, build)]

    def _split_by_depth(self, ctx: Context, be_dir: str) -> dict[int, list[str]]:
        """BE cpuset dirs (the cached walk) by depth below the BE QoS dir."""
        walk = ctx.cgroup_dirs("cpuset", be_dir, CONTAINER_DEPTH)
        if self._depth_split is not None and self._depth_split[0] is walk:
            return self._depth_split[1]
        base = be_dir.count("/")
        split: dict[int, list[str]] = {0: [], POD_DEPTH: [], CONTAINER_DEPTH: []}
        for d in walk:
            split[d.count("/") - base].append(d)
        self._depth_split = (walk, split)
        return split

    def _pod_sets(self, ctx: Context) -> _PodCPUSets:
        cached = self._pod_cpusets
        if cached is not None and cached.generation == ctx.pods_generation:
            return cached
        owner: dict[int, str] = {}
        lse: set[int] = set()
        hook: set[str] = set()
        for pod in ctx.pods.values():
            if pod.resource_status_cpuset or pod.resource_status_numa:
                d = _pod_dir(ctx, pod)
                if d is not None:
                    hook.add(d)
            if not pod.resource_status_cpuset:
                continue
            try:
                cpus = parse_cpu_list(pod.resource_status_cpuset)
            except ValueError as e:
                log.warning("cpuSuppress: pod %s: resource-status cpuset ignored: %s", pod.key, e)
                continue
            for c in cpus:
                owner[c] = pod.qos_raw
            if pod.qos_raw == QOS_LSE:
                lse.update(cpus)
        self._pod_cpusets = _PodCPUSets(ctx.pods_generation, owner, frozenset(lse), frozenset(hook))
        return self._pod_cpusets


# ---------------------------------------------------------------------------------------------
# formulas


def calculate_be_suppress_cpu(node: NodeMeta, node_used: float, pod_used: Mapping[str, float],
                              pods: Mapping[str, PodMeta], host_apps: Sequence[HostApplicationSpec],
                              host_used: Mapping[str, float], threshold_percent: int,
                              min_percent: int | None, used: FilteredUsage | None = None) -> SuppressQuantity:
    """``calculateBESuppressCPU``: the BE budget in milli-cores (may be negative), int64 arithmetic.

    Node *capacity* is the base; each usage term is truncated to milli-cores on its own.  ``used``:
    the non-BE, host and system terms when already known (from the kube QoS dirs' sums).
    """
    if used is None:
        reserved = node.reserved_cpu_milli / 1000
        used = calculate_filter_pods_used(node_used, reserved, pods, pod_used, host_apps, host_used,
                                          non_be_pod_filter, non_be_host_app_filter)
    capacity = node.cpu_capacity_milli
    milli = (capacity * threshold_percent // 100 - int(used.pods * 1000) - int(used.host_apps * 1000)
             - int(used.system * 1000))
    min_milli = None
    if min_percent is not None:
        min_milli = capacity * min_percent // 100
        milli = max(milli, min_milli)
    return SuppressQuantity(milli, capacity, threshold_percent, used, min_milli)


def _explain(q: SuppressQuantity) -> str:
    u = q.used
    text = (f"capacity {q.capacity_milli}m x {q.threshold_percent}% - non-BE pods {u.pods:.3f} - "
            f"non-BE host apps {u.host_apps:.3f} - system {u.system:.3f} cores = {q.milli}m")
    if q.min_milli is not None:
        text += f", at least {q.min_milli}m"
    return text


__all__ = ["CPUSetBasis", "CPUSuppress", "SuppressQuantity", "calculate_be_suppress_cpu", "pick_be_cpus",
           "pick_be_cpuset"]
