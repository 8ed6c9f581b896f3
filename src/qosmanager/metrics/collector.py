"""The collector: joins pods to the cgroup tree and samples them every tick.

One :class:`~qosmanager._native.StatReader` per kind of cgroup (pods, containers, the
three kube QoS dirs, host applications) holds a descriptor for every stat file; a
reader *slot* is the same number as the metric-cache *column* of that series, so a tick
is:

1. ``read()`` of each reader (native, no Python per container),
2. a handful of numpy reductions for the node-level series (system usage, BE usage,
   request and real limit),
3. one ``append_row`` per series group.

Discovery is incremental.  The pod set is diffed only when the state store's
generation changes; a new pod or container opens its files, a removed one closes them
and frees its column, a container whose ID changed (a restart) is swapped.  A cgroup
that does not exist yet (the pod was just admitted) is retried with exponential
backoff, and one that vanishes while its pod is still listed is reopened the same way.
With 5 % of containers replaced per minute a tick therefore costs reads plus work in
proportion to what changed, never a walk of the tree.

A cgroup is tracked as soon as one of its files exists: a pod missing from one
hierarchy (a kernel booted with ``cgroup_disable=memory`` beside a mounted memory dir,
a ``memory.stat`` that vanished) still yields the numbers of the files that exist, and
the missing files are retried with the same backoff.  The kube QoS cgroups are retried
every pass; those still missing after :data:`QOS_GRACE_PASSES` passes are named in the
``collector/qos-cgroups`` degraded condition.  One pass starts the readers of at most
:data:`TRACK_PER_PASS` new pods; a bigger pod set is taken over several passes
(``collector/pod-backlog``), the node and kube QoS-dir counters being read from the first.

Map of the file (:class:`Collector`, top to bottom) and its rooms:

* the kube QoS dirs and the BE quota files (which stat files a slot reads: ``slots``);
* discovery: ``sync()`` diffs pods and host applications into tracked slots; the
  open / close / retry machinery of those slots is :mod:`qosmanager.metrics.slots`;
* the tick: ``collect()`` reads, reaps and stores; demand mode's reads
  (``_read_planned``, ``refresh``), the slot selection itself being
  :mod:`qosmanager.metrics.selection`;
* the node-level series (``_store_node``) from the readers, the BE real limit, and the
  node's own ``/proc`` counters (:mod:`qosmanager.metrics.nodecounters`: ``/proc/stat`` and
  ``/proc/meminfo``, each file standing alone, samples that go backwards or stand still).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import numpy as np

from qosmanager._native import STATE_FREE, STATE_LIVE, NodeReader, StatReader, monotonic_ns, sysio
from qosmanager.api.pod import PodMeta
from qosmanager.framework.demand import CONTAINER, F_CPUSET, POD, CollectPlan, files_of
from qosmanager.host.cgroups import CgroupLayout, KubeQoS
from qosmanager.host.descriptors import DescriptorBudget
from qosmanager.host.procfs import clock_ticks
from qosmanager.metrics import cache as mc
from qosmanager.metrics.nodecounters import (  # noqa: F401  (re-exported: the collector's conditions)
    COND_PROC_MEMINFO,
    COND_PROC_STAT,
    COND_PROC_STAT_BACKWARDS,
    COND_PROC_STAT_FROZEN,
    PROC_STAT_BACKWARDS_RESET,
    PROC_STAT_FROZEN_SECONDS,
    NodeCounters,
)
from qosmanager.metrics.selection import Selections
from qosmanager.metrics.slots import (  # noqa: F401  (re-exported)
    FILE_KEYS,
    MAX_BACKOFF,
    CollectorStats,
    Slots,
    Tracked,
    TrackedPod,
    probe_controllers,
    stat_paths,
)
from qosmanager.states.store import StateStore

log = logging.getLogger(__name__)

QOS_DIRS = (KubeQoS.GUARANTEED, KubeQoS.BURSTABLE, KubeQoS.BESTEFFORT)  # slot 0 = the kubepods root
BE_SLOT = 2
TERMINAL_PHASES = ("Succeeded", "Failed")
# collector passes the kube QoS cgroups get to appear before the condition names them
QOS_GRACE_PASSES = 5
# v1 hierarchy of each file
FILE_HIERARCHY = {"usage": "cpuacct", "cpu_stat": "cpu", "memory_stat": "memory", "cpuset": "cpuset"}
COND_QOS = "collector/qos-cgroups"
# New pods whose readers one pass opens at most: at 100,000 pods the first pass took 8.7 s and no BE
# limit was decided for 28 s.  The rest wait for the next passes (``collector/pod-backlog``); the
# node and kube QoS-dir counters, which the BE limit is decided from, are read every pass meanwhile.
TRACK_PER_PASS = 2000
COND_POD_BACKLOG = "collector/pod-backlog"
COLLECT_ALL, COLLECT_DEMAND = "all", "demand"
COLLECT_MODES = (COLLECT_ALL, COLLECT_DEMAND)


class Collector:
    """Samples node, pod, container, BE and host-application series into the metric cache."""

    def __init__(self, layout: CgroupLayout, cache: mc.MetricCache, store: StateStore, *,
                 clock: Callable[[], float] = time.time, mono: Callable[[], int] = monotonic_ns,
                 max_fds: int = -1, max_gap_seconds: float = 20.0,
                 budget: DescriptorBudget | None = None, mode: str = COLLECT_ALL) -> None:
        """``budget``: the descriptor budget shared with the executor; without one, ``max_fds``
        (when >= 0) or the process's limit less the reserves (:mod:`qosmanager.host.descriptors`).
        ``mode``: ``all`` reads every file of every tracked cgroup each tick; ``demand`` reads what
        :attr:`plan` (set before each tick from the strategies' needs) asks for, and everything
        while no plan is set."""
        if mode not in COLLECT_MODES:
            raise ValueError(f"collect mode must be one of {', '.join(COLLECT_MODES)}, got {mode!r}")
        self.mode = mode
        self.plan: CollectPlan | None = None
        self.layout = layout
        self.cache = cache
        self.store = store
        self.clock = clock
        self.mono = mono
        # an injected clock (tests, simulate) also stamps the reader's samples
        self._reader_clock = mono is not monotonic_ns
        self.version = layout.version
        self.stats = CollectorStats()
        self.on_pod_removed: list[Callable[[list[str]], None]] = []
        self._files = probe_controllers(layout)
        gap = int(max_gap_seconds * 1e9)
        # one descriptor budget for the readers and the executor; files beyond it are read in reopen
        # mode (the three kube QoS dirs are few and always kept open: the budget's base reserve)
        if budget is None:
            budget = DescriptorBudget(max_fds) if max_fds >= 0 else DescriptorBudget.for_process()
        self.budget = budget
        self.pod_reader = StatReader(cache.pods.cols, self.version, gap, budget.total)
        self.ctr_reader = StatReader(cache.containers.cols, self.version, gap, budget.total)
        self.qos_reader = StatReader(len(QOS_DIRS), self.version, gap)
        self.app_reader = StatReader(cache.hostapps.cols, self.version, gap, budget.total)
        budget.add_holder(self._held_fds)
        self.node_reader = NodeReader(layout.roots.proc_path("stat"), layout.roots.proc_path("meminfo"))
        self.node = NodeCounters(self.node_reader, layout.roots, store.conditions, clock_ticks(), clock)
        self._backlog = 0  # new pods left for the next pass (TRACK_PER_PASS)
        self._pods: dict[str, TrackedPod] = {}
        self._failed: dict[str, str] = {}  # pods that could not be tracked: uid -> why (logged once)
        self._apps: dict[str, Tracked] = {}
        self.slots = Slots({"pod": self.pod_reader, "container": self.ctr_reader, "app": self.app_reader},
                           budget, self.stats, self.files, self._opened)
        self._pods_gen = -1
        self._slo_gen = -1
        self._be_cpu_request = 0.0
        self._be_ctr_mask = np.zeros(0, dtype=bool)
        self._quota_fds: np.ndarray | None = None
        self._qos_paths = [stat_paths(layout, self._files, layout.qos_dir(q), cpuset=(slot == BE_SLOT))
                           for slot, q in enumerate(QOS_DIRS)]
        self._qos_seen = False  # every kube QoS dir has been seen in every hierarchy read
        self._open_qos_dirs()
        # demand mode: the files each pod slot got in the last tick, the last cpuset count read of
        # each container (cpusets are states, not rates: carried between reads), the key masks
        self._pod_files_read = np.zeros(0, dtype=np.uint8)
        self._ctr_cpuset_known = np.zeros(0, dtype=np.int32)
        self._track_gen = 0
        self._ctr_rates_read = False
        self._selections = Selections()

    # ------------------------------------------------------------------
    # the kube QoS dirs and the BE quota files (which stat files exist: slots.probe_controllers)
    # ------------------------------------------------------------------
    def _open_qos_dirs(self) -> None:
        """Open (or complete) the kube QoS slots and the BE quota files; cheap enough for every pass
        while something is missing (three slots)."""
        qr = self.qos_reader
        for slot, files in enumerate(self._qos_paths):
            if qr.state[slot] != STATE_LIVE:
                if qr.state[slot] != STATE_FREE:
                    qr.close(slot)
                qr.open(slot, **files)
            elif qr.missing[slot]:
                for f, key in enumerate(FILE_KEYS):
                    path = files[key]
                    if qr.missing[slot] & (1 << f) and path is not None:
                        qr.open_file(slot, f, path)
        if self._quota_fds is None:
            be = self.layout.qos_dir(KubeQoS.BESTEFFORT)
            if self.version == 1:
                paths = [self.layout.file("cpu", be, "cpu.cfs_quota_us"),
                         self.layout.file("cpu", be, "cpu.cfs_period_us")]
            else:
                paths = [self.layout.file("", be, "cpu.max")]
            fds = sysio.open_batch(paths, os.O_RDONLY)
            self._quota_fds = fds if (fds >= 0).all() else None
            if self._quota_fds is None:
                sysio.close_batch(fds[fds >= 0])

    def _missing_qos_dirs(self) -> list[str]:
        """The kube QoS dirs absent from a hierarchy the collector reads (relative to the cgroup root)."""
        lay = self.layout
        if self.version == 1:
            subsystems = sorted({FILE_HIERARCHY[k] for k, on in self._files.items() if on})
        else:
            subsystems = [""]
        out = []
        for sub in subsystems:
            for q in QOS_DIRS:
                d = lay.abs_dir(sub, lay.qos_dir(q))
                if not os.path.isdir(d):
                    out.append(os.path.relpath(d, lay.roots.cgroup))
        return out

    def _check_qos_dirs(self) -> None:
        """Retry what is missing of the kube QoS cgroups (every pass: three slots, no syscall when
        all is there); until every QoS dir has been seen, name the missing ones past the grace period."""
        qr = self.qos_reader
        if self._quota_fds is None or not all(qr.state[s] == STATE_LIVE and not qr.missing[s]
                                              for s in range(len(QOS_DIRS))):
            self._open_qos_dirs()
        if self._qos_seen:
            return
        missing = self._missing_qos_dirs()
        conditions = self.store.conditions
        if not missing:
            self._qos_seen = True
            if conditions.clear(COND_QOS):
                log.info("the kube QoS cgroups are all present now")
            return
        if self.stats.ticks + 1 < QOS_GRACE_PASSES:
            return
        message = (f"kube QoS cgroups missing after {QOS_GRACE_PASSES} collector passes: "
                   f"{', '.join(missing)}; the metrics of pods under them are incomplete (check "
                   f"--cgroup-driver, --kubelet-cgroup-root and the kubelet's cgroup settings)")
        if conditions.set(COND_QOS, message):
            log.warning("%s", message)

    # ------------------------------------------------------------------
    # discovery
    # ------------------------------------------------------------------
    def sync(self, now: float | None = None) -> None:
        """Follow changes of the pod set and the host applications; retry pending opens."""
        t0 = time.perf_counter()
        now = self.clock() if now is None else now
        if self.store.pods_generation != self._pods_gen or self._backlog:
            self._pods_gen = self.store.pods_generation
            self._sync_pods(self.store.pods, now)
        if self.store.nodeslo_generation != self._slo_gen:
            self._slo_gen = self.store.nodeslo_generation
            self._sync_apps(now)
        if self.slots.pending:
            self.slots.retry(now)
        if self.slots.partial:
            self.slots.retry_files(now)
        self.stats.pending = len(self.slots.pending)
        self.stats.partial = len(self.slots.partial)
        self.stats.last_sync_seconds = time.perf_counter() - t0

    def _sync_pods(self, pods: dict[str, PodMeta], now: float) -> None:
        removed = [uid for uid in self._pods if uid not in pods]
        for uid in [u for u in self._failed if u not in pods]:
            del self._failed[uid]
        gone_dirs: list[str] = []
        for uid in removed:
            gone_dirs.append(self._untrack_pod(uid))
        started = backlog = 0
        for uid, meta in pods.items():
            tp = self._pods.get(uid)
            if meta.phase in TERMINAL_PHASES:
                if tp is not None:
                    gone_dirs.append(self._untrack_pod(uid))
                continue
            if tp is not None and tp.meta is meta:
                continue
            if tp is None:
                if started >= TRACK_PER_PASS:
                    backlog += 1  # the next pass starts it
                    continue
                started += 1
            try:
                if tp is None:
                    self._track_pod(meta, now)
                else:
                    self._update_pod(tp, meta, now)
                self._failed.pop(uid, None)
            except Exception as e:  # one pod's slots must never freeze the discovery of the others
                self._skip_pod(meta, e)
        self._note_backlog(backlog, len(pods))
        self._be_cpu_request = float(sum(p.batch_cpu_request for p in pods.values()
                                         if p.is_be() and p.phase not in TERMINAL_PHASES))
        self._refresh_be_mask()
        self._track_gen += 1
        self.stats.pods = len(self._pods)
        self.stats.containers = sum(len(tp.containers) for tp in self._pods.values())
        if gone_dirs:
            for cb in self.on_pod_removed:
                cb(gone_dirs)

    @property
    def backlog(self) -> int:
        """New pods left for the next passes (at most :data:`TRACK_PER_PASS` start per pass)."""
        return self._backlog

    def _note_backlog(self, backlog: int, total: int) -> None:
        """``collector/pod-backlog`` while pods wait for their readers; logged when it starts and ends."""
        if backlog:
            message = (f"{backlog} of {total} pods not sampled yet: the node has more new pods than the "
                       f"agent starts reading in one pass ({TRACK_PER_PASS}); they follow in the next "
                       "passes, and the BE limit is decided from the node and kube QoS-dir counters meanwhile")
            self.store.conditions.set(COND_POD_BACKLOG, message)
            if not self._backlog:
                log.warning("%s", message)
        elif self._backlog:
            self.store.conditions.clear(COND_POD_BACKLOG)
            log.info("every pod is sampled now (%d)", total)
        self._backlog = backlog

    def _skip_pod(self, meta: PodMeta, e: Exception) -> None:
        """Leave a pod untracked (it is tried again when it changes); logged once per reason."""
        why = f"{type(e).__name__}: {e}"
        if self._failed.get(meta.uid) != why:
            self._failed[meta.uid] = why
            log.error("collector: pod %s is not sampled: %s", meta.key, why)
        if meta.uid in self._pods:
            try:
                self._untrack_pod(meta.uid)
            except Exception:  # what was opened stays until the pod is gone; the loop goes on
                self._pods.pop(meta.uid, None)
                log.exception("collector: cleaning up pod %s failed", meta.key)

    def _track_pod(self, meta: PodMeta, now: float) -> None:
        rel = self.layout.pod_dir(meta.kube_qos, meta.uid)
        col = self.cache.pods.column(meta.uid)
        self._ensure_capacity(self.pod_reader, self.cache.pods.cols)
        cg = Tracked(meta.uid, col, rel)
        tp = TrackedPod(meta, cg)
        self._pods[meta.uid] = tp
        self.slots.open(cg, "pod", now)
        self._track_containers(tp, meta, now)

    def _track_containers(self, tp: TrackedPod, meta: PodMeta, now: float) -> None:
        be = meta.kube_qos == KubeQoS.BESTEFFORT.value
        for c in meta.containers:
            if not c.container_id or c.container_id in tp.containers:
                continue
            try:
                rel = self.layout.container_dir(tp.cg.rel, c.container_id)
            except ValueError as e:
                log.warning("pod %s container %s: %s", meta.key, c.name, e)
                continue
            col = self.cache.containers.column(c.container_id)
            self._ensure_capacity(self.ctr_reader, self.cache.containers.cols)
            tr = Tracked(c.container_id, col, rel, cpuset=be)
            tp.containers[c.container_id] = tr
            self.slots.open(tr, "container", now)

    def _update_pod(self, tp: TrackedPod, meta: PodMeta, now: float) -> None:
        new_rel = self.layout.pod_dir(meta.kube_qos, meta.uid)
        if new_rel != tp.cg.rel:  # kube QoS changed (in-place resize): a different cgroup
            self._untrack_pod(meta.uid)
            self._track_pod(meta, now)
            return
        ids = {c.container_id for c in meta.containers if c.container_id}
        for cid in [cid for cid in tp.containers if cid not in ids]:
            self.slots.close(self.cache.containers, tp.containers.pop(cid), "container")
        tp.meta = meta
        self._track_containers(tp, meta, now)

    def _untrack_pod(self, uid: str) -> str:
        tp = self._pods.pop(uid)
        for tr in tp.containers.values():
            self.slots.close(self.cache.containers, tr, "container")
        self.slots.close(self.cache.pods, tp.cg, "pod")
        return tp.cg.rel

    def _sync_apps(self, now: float) -> None:
        apps = {a["name"]: a for a in self.store.nodeslo.merged.get("hostApplications") or []
                if isinstance(a, dict) and a.get("name")}
        for name in [n for n in self._apps if n not in apps]:
            self.slots.close(self.cache.hostapps, self._apps.pop(name), "app")
        for name, app in apps.items():
            try:
                rel = self.layout.host_app_dir(app)
            except ValueError as e:
                log.warning("%s", e)
                continue
            tr = self._apps.get(name)
            if tr is not None and tr.rel == rel:
                continue
            if tr is not None:
                self.slots.close(self.cache.hostapps, tr, "app")
            col = self.cache.hostapps.column(name)
            self._ensure_capacity(self.app_reader, self.cache.hostapps.cols)
            tr = Tracked(name, col, rel)
            self._apps[name] = tr
            self.slots.open(tr, "app", now)

    # ------------------------------------------------------------------
    # slots
    # ------------------------------------------------------------------
    @staticmethod
    def _ensure_capacity(reader: StatReader, cols: int) -> None:
        if reader.capacity < cols:
            reader.resize(cols)

    @property
    def fd_budget(self) -> int:
        return self.budget.total

    def _held_fds(self) -> int:
        return self.pod_reader.open_fds + self.ctr_reader.open_fds + self.app_reader.open_fds

    def files(self, tr: Tracked) -> dict[str, str | None]:
        """The stat files of a tracked cgroup, by the readers' keys (None: not read on this host)."""
        return stat_paths(self.layout, self._files, tr.rel, tr.cpuset)

    def _opened(self, kind: str, col: int) -> None:
        """A slot was (re)opened: a container's last cpuset count read (demand mode) is unknown."""
        if kind == "container" and col < len(self._ctr_cpuset_known):
            self._ctr_cpuset_known[col] = -1

    def _refresh_be_mask(self) -> None:
        mask = np.zeros(self.ctr_reader.capacity, dtype=bool)
        for tp in self._pods.values():
            if tp.meta.kube_qos == KubeQoS.BESTEFFORT.value:
                for tr in tp.containers.values():
                    mask[tr.col] = True
        self._be_ctr_mask = mask

    # ------------------------------------------------------------------
    # the tick
    # ------------------------------------------------------------------
    def collect(self, now: float | None = None) -> None:
        """Sample once and store it in the metric cache at time ``now``: everything (mode ``all``, or
        no plan yet), else what :attr:`plan` asks for."""
        t0 = time.perf_counter()
        now = self.clock() if now is None else now
        self.sync(now)
        plan = self.plan if self.mode == COLLECT_DEMAND else None
        pr, cr, qr, ar = self.pod_reader, self.ctr_reader, self.qos_reader, self.app_reader
        t_ns = self.mono() if self._reader_clock else -1
        if plan is None:
            pr.read(t_ns)
            cr.read(t_ns)
            qr.read(t_ns)
            self.stats.pod_reads, self.stats.container_reads = pr.high_water, cr.high_water
        else:
            self._read_planned(plan, t_ns)
        if self._apps:
            ar.read(t_ns)
        if pr.died.any() or cr.died.any() or ar.died.any():
            self._reap_all(now)
        if pr.vanished.any() or cr.vanished.any() or ar.vanished.any():
            self._note_vanished(now)
        self._check_qos_dirs()
        # demand mode: a group none of whose series was read this tick gets no (empty) row
        if plan is None or self.stats.pod_reads:
            self._store_group(self.cache.pods, pr, now)
        if plan is None or self._ctr_rates_read:
            self._store_group(self.cache.containers, cr, now)
        if self._apps:
            self._store_group(self.cache.hostapps, ar, now, throttle=False)
        self._store_node(now, plan)
        self.stats.ticks += 1
        self.stats.read_errors = int(np.count_nonzero(pr.errors[: pr.high_water])
                                     + np.count_nonzero(cr.errors[: cr.high_water]))
        self.stats.last_tick_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------
    # demand mode
    # ------------------------------------------------------------------
    def _qos_usable(self) -> bool:
        """The kubepods and BestEffort dirs give their CPU usage (else pods are read one by one)."""
        qr = self.qos_reader
        cpu = 1 << (0 if self.version == 1 else 1)
        return all(qr.state[s] == STATE_LIVE and not (int(qr.missing[s]) & cpu) for s in (0, BE_SLOT))

    def _read_planned(self, plan: CollectPlan, t_ns: int) -> None:
        pr, cr, qr = self.pod_reader, self.ctr_reader, self.qos_reader
        if plan.qos or not self._qos_usable():
            qr.read(t_ns)
        pslots, pfiles = self._selection(POD, plan)
        if plan.qos and not self._qos_usable():
            # no aggregate from the kernel: every pod's CPU, as the read-everything mode has it
            cpu = 1 if self.version == 1 else 2
            hw = pr.high_water
            files = np.zeros(hw, dtype=np.uint8)
            files[pslots] = pfiles
            files |= cpu
            pslots = np.flatnonzero(files)
            pfiles = files[pslots]
        cslots, cfiles = self._selection(CONTAINER, plan)
        pr.read_some(pslots, pfiles, t_ns)
        cr.read_some(cslots, cfiles, t_ns)
        if len(self._pod_files_read) < pr.capacity:
            self._pod_files_read = np.zeros(pr.capacity, dtype=np.uint8)
        self._pod_files_read[:] = 0
        self._pod_files_read[pslots] = pfiles
        if plan.be_real_limit:
            known = self._ctr_cpuset_known
            if len(known) < cr.capacity:
                grown = np.full(cr.capacity, -1, dtype=np.int32)
                grown[: len(known)] = known
                self._ctr_cpuset_known = known = grown
            got = cslots[(cfiles & F_CPUSET) != 0]
            counts = cr.cpuset_count[got]
            known[got[counts >= 0]] = counts[counts >= 0]
        self.stats.pod_reads, self.stats.container_reads = int(pslots.size), int(cslots.size)
        self._ctr_rates_read = bool((cfiles & (15 ^ F_CPUSET)).any())  # more than cpusets (not cached)

    def _selection(self, kind: str, plan: CollectPlan) -> tuple[np.ndarray, np.ndarray]:
        """The slots of ``kind`` this tick reads and the files of each (bits)."""
        reader = self.pod_reader if kind == POD else self.ctr_reader
        return self._selections.select(kind, plan, reader.high_water, self.stats.ticks, self._track_gen,
                                       self._be_ctr_mask, self._pods)

    def refresh(self, metric: str, now: float | None = None) -> int:
        """Read now, for a strategy about to act on it, a pod metric the last tick did not read
        (demand mode; e.g. the victims' memory when memory eviction triggers).  Memory is a level,
        CPU a rate since the pod's previous read.  Returns the number of pods read."""
        if self.mode != COLLECT_DEMAND or self.plan is None:
            return 0
        kind, m = mc.METRIC_NAMES[metric]
        if kind != POD:
            return 0
        now = self.clock() if now is None else now
        pr = self.pod_reader
        hw = pr.high_water
        bits = files_of(metric, self.version)
        if len(self._pod_files_read) < hw:
            return 0
        slots = np.flatnonzero((pr.state[:hw] == STATE_LIVE) & ((self._pod_files_read[:hw] & bits) == 0))
        if not slots.size:
            return 0
        pr.read_some(slots, bits, self.mono() if self._reader_clock else -1)
        self._pod_files_read[slots] |= bits
        if m == mc.CPU_USAGE:
            values = {mc.CPU_USAGE: pr.cpu_cores}
        elif m == mc.CPU_THROTTLED_RATIO:
            values = {mc.CPU_THROTTLED_RATIO: pr.throttled_ratio}
        else:
            values = {mc.MEMORY_USAGE: pr.memory_usage,
                      mc.MEMORY_USAGE_WITH_PAGE_CACHE: pr.memory_usage_with_cache}
        self.cache.pods.append_row(now, values)
        if pr.died.any():
            self._reap_all(now)
        self.stats.refreshed += int(slots.size)
        return int(slots.size)

    def _indexes(self) -> tuple[dict[int, Tracked], dict[int, Tracked], dict[int, Tracked]]:
        pods = {tp.cg.col: tp.cg for tp in self._pods.values()}
        ctrs = {tr.col: tr for tp in self._pods.values() for tr in tp.containers.values()}
        return pods, ctrs, {t.col: t for t in self._apps.values()}

    def _reap_all(self, now: float) -> None:
        pods, ctrs, apps = self._indexes()
        self.slots.reap_dead("pod", pods, now)
        self.slots.reap_dead("container", ctrs, now)
        self.slots.reap_dead("app", apps, now)

    def _note_vanished(self, now: float) -> None:
        pods, ctrs, apps = self._indexes()
        self.slots.note_vanished_files("pod", pods, now)
        self.slots.note_vanished_files("container", ctrs, now)
        self.slots.note_vanished_files("app", apps, now)
        self.stats.partial = len(self.slots.partial)

    @staticmethod
    def _store_group(group: mc.SeriesGroup, reader: StatReader, now: float, throttle: bool = True) -> None:
        values = {
            mc.CPU_USAGE: reader.cpu_cores,
            mc.MEMORY_USAGE: reader.memory_usage,
            mc.MEMORY_USAGE_WITH_PAGE_CACHE: reader.memory_usage_with_cache,
        }
        if throttle:
            values[mc.CPU_THROTTLED_RATIO] = reader.throttled_ratio
        group.append_row(now, values)

    def _store_node(self, now: float, plan: CollectPlan | None = None) -> None:
        """The node-level series.  ``plan`` (demand mode): only what it asks for, and the pods' sums
        from the kube QoS cgroups (the kernel's own sums) instead of every pod's files."""
        row: dict[str, float] = {}

        def put(name: str, v: float) -> None:
            row[name] = v

        # node CPU from /proc/stat ticks, memory from /proc/meminfo: each file (and each
        # field) feeds only its own series
        node_cpu = float("nan")
        busy = self.node.busy_ticks() if plan is None or plan.node_cpu else None
        if busy is not None:
            node_cpu = self.node.cpu_cores(busy, int(self.node_reader.total_ticks), self.mono())
            put("node_cpu_usage", node_cpu)
        node_mem = float("nan")
        total_kb, free_kb, avail_kb = (self.node.memory_kib() if plan is None or plan.node_memory
                                       else (-1, -1, -1))
        if total_kb >= 0 and avail_kb >= 0:
            node_mem = float(max(total_kb - avail_kb, 0) * 1024)
            put("node_memory_usage", node_mem)
        if total_kb >= 0 and free_kb >= 0:
            put("node_memory_usage_with_page_cache", float(max(total_kb - free_kb, 0) * 1024))
        # system usage = node - pods - host apps (only when every part was sampled now)
        pr, ar, qr = self.pod_reader, self.app_reader, self.qos_reader
        apps_cpu = np.nansum(ar.cpu_cores[: ar.high_water]) if self._apps else 0.0
        apps_mem = np.nansum(ar.memory_usage[: ar.high_water]) if self._apps else 0.0
        if plan is None:
            pods_cpu = np.nansum(pr.cpu_cores[: pr.high_water])
            pods_mem = np.nansum(pr.memory_usage[: pr.high_water])
        else:  # the kubepods cgroup's own counters sum every pod beneath it
            pods_cpu, pods_mem = float(qr.cpu_cores[0]), float(qr.memory_usage[0])
        if plan is None or plan.qos:
            # the kube QoS dirs' sums in both modes: a cgroup under besteffort that the pods list does
            # not hold (a pod during churn) is BE usage, under the BE limit, in both, not "system" in
            # one of them (read-everything decided 137,700 us where demand decided 297,200)
            names = ("kubepods_cpu_usage", "burstable_cpu_usage", "besteffort_cpu_usage")
            for slot, name in enumerate(names):
                if not np.isnan(qr.cpu_cores[slot]):
                    put(name, float(qr.cpu_cores[slot]))
        if not np.isnan(node_cpu) and not np.isnan(pods_cpu):
            put("sys_cpu_usage", max(node_cpu - pods_cpu - apps_cpu, 0.0))
        if not np.isnan(node_mem) and not np.isnan(pods_mem):
            put("sys_memory_usage", max(node_mem - pods_mem - apps_mem, 0.0))
        # BE: usage of the BE QoS dir, request of BE pods, real limit from cpusets and quota
        be_cores = qr.cpu_cores[BE_SLOT]
        if not np.isnan(be_cores) and (plan is None or plan.qos):
            put("be_cpu_usage", float(int(be_cores * 1000)))
        put("be_cpu_request", self._be_cpu_request)
        if plan is None or plan.be_real_limit:
            limit = self._be_real_limit(None if plan is None else self._ctr_cpuset_known)
            if limit is not None:
                put("be_cpu_real_limit", limit)
        self.cache.node.append_values(now, mc.NODE_KEY, row)

    def _be_real_limit(self, known: np.ndarray | None = None) -> float | None:
        """min(CPUs of the BE QoS dir and of every BE container) * 1000, capped by the BE quota.
        ``known``: the containers' last counts read (demand mode) instead of this tick's."""
        counts = [int(self.qos_reader.cpuset_count[BE_SLOT])]
        cr = self.ctr_reader
        hw = min(cr.high_water, len(self._be_ctr_mask))
        if known is not None:
            hw = min(hw, len(known))
        cpusets = cr.cpuset_count if known is None else known
        if hw:
            mask = self._be_ctr_mask[:hw] & (cr.state[:hw] == STATE_LIVE) & (cpusets[:hw] >= 0)
            if mask.any():
                counts.append(int(cpusets[:hw][mask].min()))
        valid = [c for c in counts if c >= 0]
        if not valid:
            return None
        limit = float(min(valid) * 1000)
        quota = self._be_quota()
        if quota is not None and quota[0] != -1 and quota[1] > 0:
            limit = min(limit, float(quota[0] * 1000 // quota[1]))
        return limit

    def _be_quota(self) -> tuple[int, int] | None:
        if self._quota_fds is None:
            return None
        data = sysio.pread_batch(self._quota_fds, 64)
        if any(isinstance(d, int) for d in data):
            return None
        try:
            if self.version == 1:
                return int(data[0]), int(data[1])
            q, p = data[0].split()
            return (-1 if q == b"max" else int(q)), int(p)
        except ValueError:
            return None

    # ------------------------------------------------------------------
    def tracked_pods(self) -> dict[str, TrackedPod]:
        return self._pods

    def close(self) -> None:
        for tp in list(self._pods):
            self._untrack_pod(tp)
        if self._quota_fds is not None:
            sysio.close_batch(self._quota_fds)
            self._quota_fds = None

