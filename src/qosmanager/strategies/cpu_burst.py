"""cpuBurst: let CPU-limited latency-sensitive containers burst (koordlet's CPUBurst, koordlet-qos §4.2).

Two mechanisms, chosen by ``cpuBurstStrategy.policy`` (``none`` | ``cpuBurstOnly`` |
``cfsQuotaBurstOnly`` | ``auto``), node-wide or per pod through the annotation
``koordinator.sh/cpuBurst`` (fields it sets override the node's):

* **static burst** -- ``cpu.cfs_burst_us`` (v2 ``cpu.max.burst``) of every container is
  ``limit x cpuBurstPercent% x period``, at most the container's quota (the kernel refuses more),
  and the pod's is the sum; 0 when the policy does not include it or the container has no CPU limit
  (which is how turning it off restores the default).
  Without a usable ``cpuBurstPercent`` (the NodeSLO's was dropped as invalid) the files of the
  containers with a limit, and their pod's, are left as they are, as koordlet's validator leaves
  them when it refuses the value a bad percentage gives.
* **dynamic CFS quota burst** -- a throttled container's quota is raised 20 % per tick up to
  ``limit x cfsQuotaBurstPercent%`` and lowered 20 % per tick back towards its limit when it may
  not burst.  Whether it may is decided by

  - the node's *share pool*: (node used - used by LSE/LSR/BE pods) / (#CPUs - requests of
    LSE/LSR pods); at or above ``sharePoolThresholdPercent`` the pool is OVERLOAD (scale down),
    within 90 % of it COOLING (hold), below IDLE; without a node metric UNKNOWN (hold);
  - a per-container token bucket (``cfsQuotaBurstPeriodSeconds`` set and >= 0): running above the
    limit spends tokens, running below 60 % of it earns them, and an empty bucket scales down.

  The pod's quota moves by the sum of its containers' changes, only when the pod is limited.
  Policies without the quota burst reset quotas to the limit.

Only pods whose raw QoS label is LS, SYSTEM or none burst (LSE, LSR and BE never do), and only
Pending or Running ones.  A pod whose annotation cannot be decoded is left as it is (a koordlet fix:
koordlet gives it the node's config), audited once per pod change (``action: "skip"``).

Cost on a dense node: the per-pod plan (which containers, their base and ceiling quotas, the static
burst values) is built once per pod-set or NodeSLO change, and decisions are made for all containers
at once with numpy.  The candidates' quotas are read in one batch when the plan is built and again once
per ``force_update_seconds`` (the executor's own re-check window); in between a tick reads only the
quotas it wrote on its last tick and the ones it could not read.  Nothing else writes a container's
quota between two pod changes: the kubelet writes it when it creates or resizes the container, which
changes the pods and so the plan; an outside change is found at the next full read.  Under a policy
that bursts no quota and keeps no token bucket (koordinator's default, ``none``, and ``cpuBurstOnly``)
every quota goes back to its limit, a decision from the quotas alone: after one that changed nothing, a
tick that read no quota decides nothing (it would change nothing again).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from qosmanager.api.nodeslo import (
    CFS_QUOTA_BURST_ONLY,
    CPU_BURST_AUTO,
    CPU_BURST_ONLY,
    CPUBurstConfig,
    CPUBurstStrategy,
    NodeSLOSpec,
    overlay_config,
)
from qosmanager.api.pod import (
    ANNOTATION_CPU_BURST,
    PHASE_PENDING,
    PHASE_RUNNING,
    QOS_BE,
    QOS_LSE,
    QOS_LSR,
    RESOURCE_CPU,
    PodMeta,
)
from qosmanager.executor.executor import Plan, Request, Write
from qosmanager.framework.context import Context
from qosmanager.framework.demand import CONTAINER, NODE, POD, QOS, Need
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.strategy import QoSConfig, Strategy, register
from qosmanager.host.resources import CFS_PERIOD_US, milli_cpu_to_quota
from qosmanager.strategies._annotations import InvalidAnnotations
from qosmanager.strategies._helpers import ClassSplit, class_split, class_usage

log = logging.getLogger(__name__)

CFS_INCREASE_STEP = 1.2
CFS_DECREASE_STEP = 0.8
SHARE_POOL_COOLING_THRESHOLD_RATIO = 0.9
LIMITER_CONSUME_PERCENT = 100  # at or above the limit a container spends tokens
LIMITER_SAVING_PERCENT = 60  # below 60 % of the limit it earns them
NODE_STATE_WINDOW_INTERVALS = 5
NODE_STATE_MAX_WINDOW = 10.0
CFS_BURST_US_MAX = 100_000_000  # the registry's valid range of cpu.cfs_burst_us
MIN_QUOTA = 1000

IDLE, COOLING, OVERLOAD, UNKNOWN = "idle", "cooling", "overload", "unknown"
OP_REMAIN, OP_UP, OP_DOWN, OP_RESET = 0, 1, 2, 3
OP_NAMES = ("remain", "scale up", "scale down", "reset")

# how a container's token bucket answers (from its config)
ALWAYS, NEVER, BUCKET = 0, 1, 2

BURST, QUOTA = "cpu.cfs_burst_us", "cpu.cfs_quota_us"
BURSTABLE_PHASES = (PHASE_PENDING, PHASE_RUNNING)


def pod_burstable(pod: PodMeta) -> bool:
    """``IsPodCPUBurstable`` (raw QoS LS, SYSTEM or none) and Pending or Running."""
    return pod.qos_raw not in (QOS_LSR, QOS_LSE, QOS_BE) and pod.phase in BURSTABLE_PHASES


def gen_pod_burst_config(pod: PodMeta, node_cfg: CPUBurstStrategy) -> CPUBurstConfig:
    """``genPodBurstConfig``: the pod annotation's fields over the node's (a pod whose annotation
    cannot be decoded is not planned at all: see :func:`build_plan`)."""
    if pod.cpu_burst is None:
        return node_cfg
    return overlay_config(node_cfg, pod.cpu_burst)


def static_burst_us(cfg: CPUBurstConfig, limit_milli: int) -> int | None:
    """``applyCPUBurst``'s value for one container, clamped to the knob's valid range and to the
    container's quota; None (leave the file as it is) when the policy needs ``cpuBurstPercent`` and
    there is none.

    koordlet fix: koordlet writes ``limit x cpuBurstPercent%`` (1000 % by default), but the kernel
    refuses a burst above the quota (EINVAL; seen on real v1 and v2 cgroups), so with the defaults
    every write failed on every tick and no container ever had a burst.  The quota from the limit is
    the largest burst the kernel accepts: the quota burst only raises the quota above it.
    """
    if cfg.policy not in (CPU_BURST_AUTO, CPU_BURST_ONLY) or limit_milli <= 0:
        return 0
    if cfg.cpu_burst_percent is None:
        return None
    value = int((limit_milli / 1000) * (cfg.cpu_burst_percent / 100) * CFS_PERIOD_US)
    return min(max(value, 0), CFS_BURST_US_MAX, milli_cpu_to_quota(limit_milli))


def ceil_quota(cfg: CPUBurstConfig, base: int) -> int:
    """The highest quota a container may burst to."""
    pct = cfg.cfs_quota_burst_percent
    if pct is not None and pct > 100:
        return int(base * pct / 100)
    return base


def limiter_mode(cfg: CPUBurstConfig) -> int:
    """``cfsBurstAllowedByLimiter`` before the bucket: no period -> always; no usable percent -> never."""
    period = cfg.cfs_quota_burst_period_seconds
    if period is None or period < 0:
        return ALWAYS
    pct = cfg.cfs_quota_burst_percent
    if pct is None or pct < 100:
        return NEVER
    return BUCKET


@dataclass
class _Plan:
    """Everything about the burstable containers that changes only with the pods or the NodeSLO."""

    generation: int
    nodeslo: NodeSLOSpec
    static: list[tuple[str, int]]  # (dir, cfs_burst_us) for containers then their pod
    # one entry per running container with a CPU limit (dynamic quota candidates)
    ids: list[str]
    dirs: list[str]
    names: list[str]  # "namespace/pod/container" for reasons
    pod_of: np.ndarray  # index into pod_dirs
    base: np.ndarray  # int64 quota at the limit
    ceil: np.ndarray  # int64 highest quota
    limit_cores: np.ndarray  # float64
    cfs_burst: np.ndarray  # bool: the policy includes the quota burst
    mode: np.ndarray  # int8: ALWAYS | NEVER | BUCKET
    period: np.ndarray  # int64 bucket period (BUCKET only)
    pct: np.ndarray  # int64 cfsQuotaBurstPercent (BUCKET only)
    pod_dirs: list[str]
    # share pool: #CPUs minus LSE/LSR requests (sequential, as koordlet subtracts), and whose usage
    # is taken out of the node's
    share_pool_requests: list[float]
    share_pool_excluded: list[str]
    # no candidate's policy bursts its quota and none has a token bucket: every quota goes back to its
    # limit, a decision from the quotas alone (nothing of the tick's metrics, no bucket to consult)
    reset_only: bool = False


_NONE = np.zeros(0, dtype=np.int64)


@dataclass
class _Quotas:
    """The candidates' quotas as last read (``plan.dirs`` order), and which to read again."""

    plan: _Plan
    cur: np.ndarray  # int64
    valid: np.ndarray  # bool
    read_at: float  # the last full read
    written: np.ndarray = field(default_factory=lambda: _NONE)  # indices written on the last tick
    settled: bool = False  # the last decision from these quotas changed none of them


class BurstLimiters:
    """koordlet's per-container ``burstLimiter`` token buckets, held in arrays (one slot each).

    A bucket of capacity ``period x (pct - 100)`` starts with a random fill in [0, capacity/2)
    (seeded from the container id and the time, so replays repeat); each consultation moves it
    by ``(usage% - 100) x seconds`` down when at or above the limit, ``(100 - usage%) x seconds``
    up when under 60 %, clamped to +-capacity; bursting is allowed while it is positive.
    """

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.ids: list[str | None] = []
        self.capacity = np.zeros(0, dtype=np.int64)
        self.token = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.float64)
        self.seen = np.zeros(0, dtype=np.float64)
        self.expire = np.zeros(0, dtype=np.float64)
        self.live = np.zeros(0, dtype=bool)
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self.index)

    def _grow(self) -> None:
        n = max(16, 2 * len(self.ids))
        extra = n - len(self.ids)
        self.capacity = np.concatenate([self.capacity, np.zeros(extra, dtype=np.int64)])
        self.token = np.concatenate([self.token, np.zeros(extra, dtype=np.int64)])
        self.last = np.concatenate([self.last, np.zeros(extra)])
        self.seen = np.concatenate([self.seen, np.zeros(extra)])
        self.expire = np.concatenate([self.expire, np.zeros(extra)])
        self.live = np.concatenate([self.live, np.zeros(extra, dtype=bool)])
        self._free.extend(range(n - 1, len(self.ids) - 1, -1))
        self.ids.extend([None] * extra)

    def _init(self, slot: int, cid: str, period: int, pct: int, now: float) -> None:
        capacity = period * (pct - 100)
        rng = random.Random(f"{cid}@{now!r}")
        self.capacity[slot] = capacity
        self.token[slot] = int(capacity * (rng.random() * 0.5))
        self.last[slot] = now
        self.seen[slot] = now
        self.expire[slot] = 2.0 * period

    def slots(self, ids: Sequence[str], period: np.ndarray, pct: np.ndarray, now: float) -> np.ndarray:
        """Slots of the containers' buckets, created (or re-created when the capacity changed,
        koordlet's ``UpdateIfChanged``) as needed."""
        out = np.empty(len(ids), dtype=np.int64)
        for k, cid in enumerate(ids):
            slot = self.index.get(cid)
            if slot is None:
                if not self._free:
                    self._grow()
                slot = self._free.pop()
                self.index[cid] = slot
                self.ids[slot] = cid
                self.live[slot] = True
                self._init(slot, cid, int(period[k]), int(pct[k]), now)
            out[k] = slot
        changed = np.flatnonzero(self.capacity[out] != period * (pct - 100))
        for k in changed.tolist():
            self._init(int(out[k]), ids[k], int(period[k]), int(pct[k]), now)
        return out

    def allow(self, slots: np.ndarray, now: float, usage_percent: np.ndarray) -> np.ndarray:
        """koordlet's ``Allow`` for many buckets at once: whether each may burst now."""
        last = self.last[slots]
        dt = np.trunc(np.maximum(now - last, 0.0))  # whole seconds, truncated as koordlet does
        dti = dt.astype(np.int64)
        p = usage_percent
        token = self.token[slots]
        token = np.where(p >= LIMITER_CONSUME_PERCENT, token - (p - 100) * dti,
                         np.where(p < LIMITER_SAVING_PERCENT, token + (100 - p) * dti, token))
        cap = self.capacity[slots]
        token = np.minimum(np.maximum(token, -cap), cap)
        self.token[slots] = token
        # koordlet fix: koordlet sets last = now after counting only the whole seconds, so the
        # fraction is lost on every tick; with sub-second intervals or a jittered schedule (0.95 s)
        # the bucket would never move.  We keep the fraction for the next tick (identical for
        # whole-second tick spacing).
        self.last[slots] = np.where(now < last, now, last + dt)
        self.seen[slots] = now
        return token > 0

    def recycle(self, now: float) -> int:
        """Drop buckets not consulted for longer than twice their period; returns how many."""
        if not self.index:
            return 0
        dead = np.flatnonzero(self.live & ((now - self.seen) > self.expire))
        for slot in dead.tolist():
            cid = self.ids[slot]
            if cid is not None:
                del self.index[cid]
            self.ids[slot] = None
            self.live[slot] = False
            self._free.append(slot)
        return int(dead.size)


@register
class CPUBurst(Strategy):
    """Static CFS burst and dynamic CFS quota burst (see the module docstring)."""

    name = "cpuBurst"
    gates = ("CPUBurst",)
    interval_key = "reconcile"

    def __init__(self, cfg: QoSConfig, gates: FeatureGates) -> None:
        super().__init__(cfg, gates)
        self.limiters = BurstLimiters()
        self.node_state = UNKNOWN
        self._plan: _Plan | None = None
        self._ran = False  # a NodeSLO was seen: if it goes away, the defaults (no burst) restore
        self._invalid = InvalidAnnotations(self.name, ANNOTATION_CPU_BURST, "CPU burst and quota files")
        self._keys: tuple[_Plan, ClassSplit, frozenset[str], frozenset[str]] | None = None
        self._quotas: _Quotas | None = None

    # ------------------------------------------------------------------ what it reads
    def _plan_keys(self, ctx: Context, plan: _Plan) -> tuple[ClassSplit, frozenset[str], frozenset[str]]:
        """The share pool's pods against the BestEffort dir, the containers whose policy bursts (their
        throttling) and those with a token bucket (their usage), kept with the plan."""
        if self._keys is None or self._keys[0] is not plan:
            split = class_split(ctx.pods, lambda p: p.qos_raw in (QOS_LSE, QOS_LSR, QOS_BE))
            burst = frozenset(plan.ids[k] for k in np.flatnonzero(plan.cfs_burst).tolist())
            bucket = frozenset(plan.ids[k] for k in np.flatnonzero(plan.mode == BUCKET).tolist())
            self._keys = (plan, split, burst, bucket)
        return self._keys[1], self._keys[2], self._keys[3]

    def needs(self, ctx: Context) -> Sequence[Need]:
        return self.kept_needs(ctx, lambda: self.build_needs(ctx))

    def build_needs(self, ctx: Context) -> Sequence[Need]:
        """The share pool (node usage less the LSE/LSR/BE pods: the BestEffort dir's sum corrected by
        the pods whose class differs from their dir) while some policy bursts quotas; the throttling
        of the containers that may burst; the usage of those with a token bucket."""
        if not ctx.nodeslo_present and not self._ran:
            return ()
        plan = self._plan_for(ctx)
        if not plan.ids:
            return ()
        split, burst, bucket = self._plan_keys(ctx, plan)
        out: list[Need] = []
        if burst:
            window = min(NODE_STATE_WINDOW_INTERVALS * ctx.cfg.reconcile_interval, NODE_STATE_MAX_WINDOW)
            out += [Need("node_cpu_usage", NODE, window=window),
                    Need("besteffort_cpu_usage", QOS, window=window),
                    Need("pod_cpu_usage", POD, window=window, keys=split.corrections),
                    Need("container_cpu_throttled", CONTAINER, keys=burst)]
        if bucket:
            out.append(Need("container_cpu_usage", CONTAINER, keys=bucket))
        return out

    # ------------------------------------------------------------------ the tick (start)
    def tick(self, ctx: Context) -> list[Request]:
        if not ctx.nodeslo_present and not self._ran:
            return []  # koordlet: no NodeSLO, nothing to do
        # Once a NodeSLO has been seen, its disappearance means the defaults (policy "none"):
        # burst 0 and quotas back to the limit, instead of leaving the last bursts in place.
        self._ran = True
        plan = self._plan_for(ctx)
        # the share pool only changes ups and remains, which only quota-burst policies produce
        self.node_state = self._node_state(ctx, plan) if plan.cfs_burst.any() else UNKNOWN
        writes: list[Request] = [self._static_burst(plan)]
        writes += self._cfs_quota_burst(ctx, plan)
        self.limiters.recycle(ctx.now)
        return writes

    # ------------------------------------------------------------------ node state
    def _node_state(self, ctx: Context, plan: _Plan) -> str:
        """``getNodeStateForBurst``: how loaded the share pool is (averages over a short window)."""
        window = min(NODE_STATE_WINDOW_INTERVALS * ctx.cfg.reconcile_interval, NODE_STATE_MAX_WINDOW)
        node_used = ctx.node_metric("node_cpu_usage", "avg", window)
        cpu_info = ctx.cpu_info
        if node_used is None or cpu_info is None:
            return UNKNOWN
        total = float(len(cpu_info.processors))
        for request in plan.share_pool_requests:
            total -= request
        usage = node_used
        be_dir = ctx.node_metric("besteffort_cpu_usage", "avg", window)
        if be_dir is not None:  # the kernel's sum (demand-driven collection)
            split = self._plan_keys(ctx, plan)[0]
            usage -= class_usage(be_dir, split, ctx.pod_metrics("pod_cpu_usage", "avg", window,
                                                                keys=split.corrections))
        else:
            pod_used = ctx.pod_metrics("pod_cpu_usage", "avg", window)
            for uid in plan.share_pool_excluded:
                used = pod_used.get(uid)
                if used is not None:
                    usage -= used
        ratio = usage / total if total > 0 else 1.0
        threshold = (ctx.nodeslo.cpu_burst_strategy.share_pool_threshold_percent or 0) / 100
        if ratio >= threshold:
            return OVERLOAD
        if ratio >= threshold * SHARE_POOL_COOLING_THRESHOLD_RATIO:
            return COOLING
        return IDLE

    # ------------------------------------------------------------------ static burst
    def _static_burst(self, plan: _Plan) -> Plan:
        """``applyCPUBurst`` for every burstable pod: containers' values and the pod's sum, as one plan
        whose version is the list of values (the executor skips it while it is unchanged)."""
        static = plan.static

        def build() -> list[Write]:
            return [self.write(BURST, d, v, "cpuBurst: CFS burst from the CPU limit") for d, v in static]

        return Plan(self.name, "static-burst", static, build)

    # ------------------------------------------------------------------ dynamic quota burst
    def _cfs_quota_burst(self, ctx: Context, plan: _Plan) -> list[Write]:
        """``applyCFSQuotaBurst`` for all candidate containers at once."""
        if not plan.ids:
            return []
        cur, valid, fresh = self._current_quotas(ctx, plan)
        q = self._quotas
        assert q is not None
        if plan.reset_only and q.settled and not fresh:
            # the same quotas as the last decision, which changed none of them, and a decision from the
            # quotas alone: it would change none again (koordinator's default policy, every tick)
            return []
        allowed = np.ones(len(plan.ids), dtype=bool)
        allowed[plan.mode == NEVER] = False
        # the bucket is consulted first, for every readable container, whatever the policy
        # (koordlet does so; it keeps the bucket's account of usage current)
        bucket = np.flatnonzero(valid & (plan.mode == BUCKET))
        if bucket.size:
            allowed[bucket] = self._consult_buckets(ctx, plan, bucket)
        ops = np.full(len(plan.ids), OP_RESET, dtype=np.int8)
        burst = plan.cfs_burst
        ops[burst & ~allowed] = OP_DOWN
        want = burst & allowed
        if want.any():
            throttled = ctx.container_metrics("container_cpu_throttled")
            thr = np.fromiter((throttled.get(cid, math.nan) for cid in plan.ids), dtype=np.float64,
                              count=len(plan.ids))
            ops[want] = np.where(thr[want] > 0, OP_UP, OP_REMAIN)  # NaN (no metric) -> remain
        ops = change_operation_by_node(self.node_state, ops)
        target = np.select(
            [ops == OP_UP, ops == OP_DOWN, ops == OP_RESET],
            [np.trunc(cur * CFS_INCREASE_STEP).astype(np.int64), np.trunc(cur * CFS_DECREASE_STEP).astype(np.int64),
             plan.base],
            default=cur,
        )
        target = np.maximum(plan.base, np.minimum(target, plan.ceil))
        changed = np.flatnonzero(valid & (target != cur))
        q.settled = not changed.size
        if not changed.size:
            return []
        q.written = changed  # what the executor made of them is read next tick
        return self._apply_quota_changes(ctx, plan, changed, cur, target, ops)

    def _current_quotas(self, ctx: Context, plan: _Plan) -> tuple[np.ndarray, np.ndarray, bool]:
        """The candidates' quotas: all of them read when the plan is new or the last full read is
        ``force_update_seconds`` old, else the kept ones with those written last tick and those
        unreadable last time read again; and whether any was read now."""
        q = self._quotas
        if (q is None or q.plan is not plan or not 0 <= ctx.now - q.read_at < self.cfg.force_update_seconds):
            cur, valid = _parse_quotas(ctx.read_many(QUOTA, plan.dirs))
            self._quotas = _Quotas(plan, cur, valid, ctx.now)
            return cur, valid, True
        # written or unreadable, in order: a mask, not np.union1d (whose np.unique imports numpy.ma,
        # some 1 MiB of the agent's resident memory, for this one line)
        again_mask = ~q.valid
        again_mask[q.written] = True
        again = np.flatnonzero(again_mask)
        q.written = _NONE
        if again.size:
            cur, valid = _parse_quotas(ctx.read_many(QUOTA, [plan.dirs[k] for k in again.tolist()]))
            q.cur[again] = cur
            q.valid[again] = valid
        return q.cur, q.valid, bool(again.size)

    def _consult_buckets(self, ctx: Context, plan: _Plan, idx: np.ndarray) -> np.ndarray:
        usage_by_id = ctx.container_metrics("container_cpu_usage")
        ids = [plan.ids[k] for k in idx.tolist()]
        limit = plan.limit_cores[idx]
        usage = np.fromiter((usage_by_id.get(cid, math.nan) for cid in ids), dtype=np.float64, count=len(ids))
        usage = np.where(np.isnan(usage), limit, usage)  # no metric: taken as running at the limit
        percent = np.trunc(usage / limit * 100).astype(np.int64)
        slots = self.limiters.slots(ids, plan.period[idx], plan.pct[idx], ctx.now)
        return self.limiters.allow(slots, ctx.now, percent)

    def _apply_quota_changes(self, ctx: Context, plan: _Plan, changed: np.ndarray, cur: np.ndarray,
                             target: np.ndarray, ops: np.ndarray) -> list[Write]:
        """``applyContainerCFSQuota``: containers to their target, each limited pod by the sum of its
        containers' changes (the executor orders parents and children)."""
        delta = target[changed] - cur[changed]
        pods = plan.pod_of[changed]
        pod_ids, inverse = np.unique(pods, return_inverse=True)
        pod_delta = np.zeros(len(pod_ids), dtype=np.int64)
        np.add.at(pod_delta, inverse, delta)
        pod_dirs = [plan.pod_dirs[p] for p in pod_ids.tolist()]
        pod_cur, pod_valid = _parse_quotas(ctx.read_many(QUOTA, pod_dirs))
        state = self.node_state
        writes: list[Write] = []
        for k, p in enumerate(pod_ids.tolist()):
            if not pod_valid[k] or pod_cur[k] <= 0 or pod_delta[k] == 0:
                continue  # unreadable, or unlimited (stays so), or nothing to move
            value = max(int(pod_cur[k] + pod_delta[k]), MIN_QUOTA)
            writes.append(self.write(QUOTA, plan.pod_dirs[p], value,
                                     f"cpuBurst: pod quota {int(pod_cur[k])} -> {value} with its containers "
                                     f"(share pool {state})"))
        skip = {int(pod_ids[k]) for k in np.flatnonzero(~pod_valid).tolist()}
        for k in changed.tolist():
            if int(plan.pod_of[k]) in skip:
                continue  # koordlet gives up on a container whose pod quota cannot be read
            writes.append(self.write(QUOTA, plan.dirs[k], int(target[k]),
                                     f"cpuBurst: {OP_NAMES[ops[k]]} quota of {plan.names[k]} {int(cur[k])} -> "
                                     f"{int(target[k])} (share pool {state})"))
        return writes

    # ------------------------------------------------------------------ the per-pod plan
    def _plan_for(self, ctx: Context) -> _Plan:
        plan = self._plan
        if plan is not None and plan.generation == ctx.pods_generation and plan.nodeslo is ctx.nodeslo:
            return plan
        skipped: list[PodMeta] = []
        plan = build_plan(ctx, ctx.nodeslo, skipped)
        self._invalid.forget_gone(ctx.pods)
        for pod in skipped:
            self._invalid.skip(ctx, pod)
        self._plan = plan
        return plan


def change_operation_by_node(state: str, ops: np.ndarray) -> np.ndarray:
    """``changeOperationByNode``: OVERLOAD turns up/remain into down; COOLING and UNKNOWN hold ups."""
    out = ops.copy()
    if state == OVERLOAD:
        out[(ops == OP_UP) | (ops == OP_REMAIN)] = OP_DOWN
    elif state in (COOLING, UNKNOWN):
        out[ops == OP_UP] = OP_REMAIN
    return out


def build_plan(ctx: Context, nodeslo: NodeSLOSpec, skipped: list[PodMeta] | None = None) -> _Plan:
    """Per-pod data for the ticks until the pods or the NodeSLO change.

    A burstable pod whose ``koordinator.sh/cpuBurst`` cannot be decoded is left out (koordlet fix:
    koordlet applies the node's config to it, resetting what its annotation set): its burst and
    quota files stay as they are.  Such pods are appended to ``skipped``.
    """
    node_cfg = nodeslo.cpu_burst_strategy
    static: list[tuple[str, int]] = []
    ids: list[str] = []
    dirs: list[str] = []
    names: list[str] = []
    pod_of: list[int] = []
    base: list[int] = []
    ceil: list[int] = []
    limit: list[float] = []
    cfs_burst: list[bool] = []
    mode: list[int] = []
    period: list[int] = []
    pct: list[int] = []
    pod_dirs: list[str] = []
    requests: list[float] = []
    excluded: list[str] = []
    for pod in ctx.pods.values():
        if pod.qos_raw in (QOS_LSE, QOS_LSR):
            requests.append(pod.cpu_request_milli / 1000)
        if pod.qos_raw in (QOS_LSE, QOS_LSR, QOS_BE):
            excluded.append(pod.uid)
        if not pod_burstable(pod):
            continue
        if pod.cpu_burst_invalid:
            if skipped is not None:
                skipped.append(pod)
            continue
        try:
            pod_dir = ctx.pod_dir(pod)
        except ValueError as e:
            log.warning("cpuBurst: pod %s skipped: %s", pod.key, e)
            continue
        cfg = gen_pod_burst_config(pod, node_cfg)
        pod_index = len(pod_dirs)
        pod_dirs.append(pod_dir)
        pod_sum: int | None = 0
        cfs = cfg.policy in (CPU_BURST_AUTO, CFS_QUOTA_BURST_ONLY)
        m = limiter_mode(cfg)
        for c in pod.containers:
            cdir = ctx.container_dir(pod, c)
            if cdir is None:
                continue  # not started (no container id) yet
            limit_milli = c.limits.get(RESOURCE_CPU, 0)
            value = static_burst_us(cfg, limit_milli)
            if value is None:
                pod_sum = None  # the pod's sum is not known either
            else:
                static.append((cdir, value))
                if pod_sum is not None:
                    pod_sum += value
            b = milli_cpu_to_quota(limit_milli)
            if not c.running or b <= 0:
                continue  # no CPU limit: nothing to burst from
            ids.append(c.container_id)
            dirs.append(cdir)
            names.append(f"{pod.key}/{c.name}")
            pod_of.append(pod_index)
            base.append(b)
            ceil.append(ceil_quota(cfg, b))
            limit.append(limit_milli / 1000)
            cfs_burst.append(cfs)
            mode.append(m)
            period.append(cfg.cfs_quota_burst_period_seconds or 0)
            pct.append(cfg.cfs_quota_burst_percent or 0)
        if pod_sum is not None:
            static.append((pod_dir, min(pod_sum, CFS_BURST_US_MAX)))
    return _Plan(
        reset_only=not any(cfs_burst) and BUCKET not in mode,
        generation=ctx.pods_generation, nodeslo=nodeslo, static=static, ids=ids, dirs=dirs, names=names,
        pod_of=np.array(pod_of, dtype=np.int64), base=np.array(base, dtype=np.int64),
        ceil=np.array(ceil, dtype=np.int64), limit_cores=np.array(limit, dtype=np.float64),
        cfs_burst=np.array(cfs_burst, dtype=bool), mode=np.array(mode, dtype=np.int8),
        period=np.array(period, dtype=np.int64), pct=np.array(pct, dtype=np.int64), pod_dirs=pod_dirs,
        share_pool_requests=requests, share_pool_excluded=excluded,
    )


def _parse_quotas(values: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray]:
    """Canonical quota strings -> (int64 values, readable mask); unreadable entries read 0."""
    n = len(values)
    texts = np.array([v.strip() if v is not None else "" for v in values], dtype=str) if n else np.zeros(0, str)
    valid = texts != ""
    out = np.zeros(n, dtype=np.int64)
    try:
        out[valid] = texts[valid].astype(np.int64)
    except ValueError:  # a garbled file: parse one by one, losing only that entry
        for k in np.flatnonzero(valid).tolist():
            try:
                out[k] = int(texts[k])
            except ValueError:
                valid[k] = False
    return out, valid


__all__ = ["BurstLimiters", "CPUBurst", "build_plan", "change_operation_by_node", "gen_pod_burst_config",
           "static_burst_us"]
