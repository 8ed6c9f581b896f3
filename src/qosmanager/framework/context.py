"""What a strategy sees on a tick: state, metrics, the host's layout, and the two ways to act.

A :class:`Context` is built for every strategy tick from long-lived shared parts
(:class:`Shared`).  Everything on it is read-only for strategies:

* ``now`` (wall-clock seconds: strategies never call ``time.time()``, so replay is exact),
  ``node``, ``pods`` (uid -> :class:`~qosmanager.api.pod.PodMeta`), ``nodeslo`` (merged with the
  defaults and validated), ``gates``, ``cfg``, ``cpu_info`` (topology), ``layout``;
* metric queries with koordlet's windows, vectorised over every pod/container at once:
  :meth:`Context.pod_metrics` returns ``{uid: value}`` for the pods that have data;
* current cgroup values through the executor (:meth:`read`, :meth:`read_many`: served from the
  write cache when fresh, else one native batch read);
* :meth:`evict`: hand eviction tasks to the shared coordinator;
* :meth:`mkdir`: have the executor make a directory (audited, honours ``--dry-run``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from qosmanager.api.node import NodeMeta
from qosmanager.api.nodeslo import NodeSLOSpec
from qosmanager.api.pod import ContainerMeta, PodMeta
from qosmanager.eviction.types import EvictResult, EvictTask
from qosmanager.executor.executor import Executor, MakeDir
from qosmanager.framework.config import QoSConfig
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.memlevel import MemoryProtection
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.kubelet_cpu import SOURCE_FLAG, KubeletCPU
from qosmanager.host.sysfs import NodeCPUInfo
from qosmanager.metrics import cache as mc
from qosmanager.states.store import StateStore

Evictor = Callable[[str, Sequence[EvictTask], float], EvictResult]


@dataclass
class Shared:
    """The long-lived parts every context points to."""

    store: StateStore
    layout: CgroupLayout
    cache: mc.MetricCache
    executor: Executor
    gates: FeatureGates
    cfg: QoSConfig
    evictor: Evictor
    cpu_info: Callable[[], NodeCPUInfo | None]
    # extra topology annotations (koordlet reads them from NodeResourceTopology); standalone and
    # replay take them from the Node object's annotations
    topology_annotations: Callable[[], Mapping[str, str]] | None = None
    # the kubelet's CPU manager read from the node (qosmanager.host.kubelet_cpu); None: only the
    # configured policy (cfg.cpu_manager_policy) is known
    kubelet_cpu: Callable[[], KubeletCPU] | None = None
    # demand-driven collection: read a pod metric now that the last collector tick left out
    # (metric name, now); None: everything is collected (read-everything mode, replay)
    refresh: Callable[[str, float], object] | None = None
    # the memory protection level memoryHigh has in force (qosmanager.framework.memlevel)
    memory_protection: MemoryProtection = field(default_factory=MemoryProtection)
    # the host's files are the node's present state (the agent), so a decision may read them now;
    # False: replay and harnesses, which decide from the samples they were given
    host_reads: bool = False
    _walks: dict[tuple[str, str, int], tuple[int, list[str]]] = field(default_factory=dict)


class Context:
    def __init__(self, shared: Shared, now: float) -> None:
        self._s = shared
        store = shared.store
        self.now = now
        self.node: NodeMeta | None = store.node
        self.pods: Mapping[str, PodMeta] = store.pods
        self.pods_generation = store.pods_generation
        self.pods_loading = store.pods_loading  # a pods list on its way: no pods is not yet "none"
        self.nodeslo: NodeSLOSpec = store.nodeslo
        self.nodeslo_present = store.nodeslo_present
        self.gates: FeatureGates = shared.gates
        self.cfg: QoSConfig = shared.cfg
        self.layout: CgroupLayout = shared.layout
        self.cache: mc.MetricCache = shared.cache
        # degraded conditions a strategy reports (set / clear; see framework.conditions)
        self.conditions = store.conditions

    # ------------------------------------------------------------------ topology
    @property
    def cpu_info(self) -> NodeCPUInfo | None:
        return self._s.cpu_info()

    @property
    def topology_annotations(self) -> Mapping[str, str]:
        if self._s.topology_annotations is not None:
            return self._s.topology_annotations()
        return self.node.annotations if self.node is not None else {}

    @property
    def kubelet_cpu(self) -> KubeletCPU:
        """The kubelet's CPU manager: its policy (None: not known), exclusive and reserved CPUs."""
        if self._s.kubelet_cpu is not None:
            return self._s.kubelet_cpu()
        policy = self.cfg.cpu_manager_policy
        return KubeletCPU() if policy is None else KubeletCPU(policy, SOURCE_FLAG)

    @property
    def cgroup_version(self) -> int:
        return self.layout.version

    # ------------------------------------------------------------------ metric windows
    @property
    def last_window(self) -> float:
        """koordlet's ``*Last`` queries look back two collect intervals (older data is stale)."""
        return 2.0 * self.cfg.collect_interval

    def _span(self, window: float | None) -> tuple[float, float]:
        w = self.last_window if window is None else window
        return self.now - w, self.now

    def node_metric(self, name: str, agg: str = "last", window: float | None = None) -> float | None:
        """A node-level series (node_*, sys_*, be_*): None when there is no sample in the window."""
        lo, hi = self._span(window)
        return self.cache.query(name, lo, hi, agg)

    def node_metric_count(self, name: str, window: float | None = None) -> int:
        lo, hi = self._span(window)
        v = self.cache.query(name, lo, hi, "count")
        return int(v or 0)

    def _group_metrics(self, group: mc.SeriesGroup, metric: str, agg: str, window: float | None,
                       keys: Iterable[str] | None = None) -> dict[str, float]:
        lo, hi = self._span(window)
        if keys is not None:  # only these series: reduce over their columns alone
            pairs = [(k, c) for k in keys if (c := group.lookup(k)) is not None]
            if not pairs:
                return {}
            vals = group.aggregate_cols(metric, np.fromiter((c for _, c in pairs), dtype=np.int64,
                                                            count=len(pairs)), lo, hi, agg)
            return {pairs[i][0]: float(vals[i]) for i in np.flatnonzero(~np.isnan(vals)).tolist()}
        names, cols = group.key_columns()
        if not names:
            return {}  # no series (no host application configured): no reduction to run
        values = group.aggregate_all(metric, lo, hi, agg)  # after the keys: it covers every one of them
        vals = values[cols]
        ok = ~np.isnan(vals)
        listed = vals.tolist()
        if ok.all():
            return dict(zip(names, listed))
        return {names[i]: listed[i] for i in np.flatnonzero(ok).tolist()}

    def refresh(self, name: str) -> None:
        """Have the collector read ``name`` (a pod metric) now for every pod its last tick did not
        read it for: a strategy calls this when it is about to act on the pods' values (the victims'
        usage when an eviction triggers).  A no-op where everything is collected anyway."""
        if self._s.refresh is not None:
            self._s.refresh(name, self.now)

    @property
    def host_reads(self) -> bool:
        """Whether a strategy may read the host's files for the present state (see :class:`Shared`)."""
        return self._s.host_reads

    def pod_metrics(self, name: str, agg: str = "last", window: float | None = None,
                    keys: Iterable[str] | None = None) -> dict[str, float]:
        """``{pod uid: value}`` of ``pod_cpu_usage`` / ``pod_memory_usage`` / ... for every pod with data
        (koordlet's CollectAllPodMetrics), in one vectorised pass; ``keys``: only those pods."""
        group, metric = self.cache.group_of(name)
        return self._group_metrics(group, metric, agg, window, keys)

    def container_metrics(self, name: str, agg: str = "last", window: float | None = None) -> dict[str, float]:
        """``{container id: value}`` of ``container_cpu_usage`` / ``container_throttled_ratio`` / ..."""
        group, metric = self.cache.group_of(name)
        return self._group_metrics(group, metric, agg, window)

    def hostapp_metrics(self, name: str, agg: str = "last", window: float | None = None) -> dict[str, float]:
        group, metric = self.cache.group_of(name)
        return self._group_metrics(group, metric, agg, window)

    # ------------------------------------------------------------------ cgroup layout
    def pod_dir(self, pod: PodMeta) -> str:
        return self.layout.pod_dir(pod.kube_qos, pod.uid)

    def container_dir(self, pod: PodMeta, container: ContainerMeta) -> str | None:
        """The container's cgroup dir, or None when it has no (valid) container ID yet."""
        if not container.container_id:
            return None
        try:
            return self.layout.container_dir(self.pod_dir(pod), container.container_id)
        except ValueError:
            return None

    def qos_dir(self, kube_qos: str) -> str:
        return self.layout.qos_dir(kube_qos)

    def cgroup_dirs(self, subsystem: str, parent: str, max_depth: int) -> list[str]:
        """Dirs under ``parent`` up to ``max_depth`` (parent first, then walk order), relative to the
        cgroup root.  The walk is redone only when the pod set changed (it finds sandbox containers
        that the pod list does not name)."""
        key = (subsystem, parent, max_depth)
        hit = self._s._walks.get(key)
        if hit is None or hit[0] != self.pods_generation:
            hit = (self.pods_generation, self.layout.dirs_up_to_depth(subsystem, parent, max_depth))
            self._s._walks[key] = hit
        return hit[1]

    def cgroup_exists(self, subsystem: str, rel: str) -> bool:
        return os.path.isdir(self.layout.abs_dir(subsystem, rel))

    # ------------------------------------------------------------------ current values
    def read(self, resource: str, cgroup: str = "") -> str | None:
        return self._s.executor.read(resource, cgroup)

    def read_many(self, resource: str, cgroups: Sequence[str]) -> list[str | None]:
        return self._s.executor.read_many(resource, cgroups)

    @property
    def memory_protection(self) -> MemoryProtection:
        """The memory protection level in force (memoryHigh writes it; others only read it)."""
        return self._s.memory_protection

    def read_cgroup_counter(self, subsystem: str, rel: str, name: str) -> str | None:
        """A cgroup statistics file read now, never from a cache (``memory.current``,
        ``memory.usage_in_bytes``, ``memory.events``): the exact counters a decision is made on.
        None when it is missing or unreadable."""
        try:
            with open(self.layout.file(subsystem, rel, name)) as f:
                return f.read()
        except OSError:
            return None

    def read_file(self, root: str, rel: str) -> str | None:
        """A non-knob host file (``root`` is "proc" or "sys"), e.g. ``sys/kernel/debug/sched_features``."""
        roots = self.layout.roots
        path = roots.proc_path(rel) if root == "proc" else roots.sys_path(rel)
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return None

    # ------------------------------------------------------------------ acting
    def evict(self, strategy: str, tasks: Sequence[EvictTask]) -> EvictResult:
        return self._s.evictor(strategy, tasks, self.now)

    def audit_skip(self, strategy: str, target: str, reason: str, *, uid: str | None = None) -> None:
        """Audit a decision to leave something as it is (``action: "skip"``, nothing executed)."""
        self._s.executor.audit.record(strategy=strategy, action="skip", target=target, reason=reason,
                                      executed=False, uid=uid, ts=self.now)

    def mkdir(self, d: MakeDir) -> str:
        """A directory through the executor: ``"exists"``, ``"created"``, ``"dry-run"`` or ``"failed"``."""
        return self._s.executor.mkdir(d, self.now)

    def __repr__(self) -> str:
        return f"Context(now={self.now}, pods={len(self.pods)})"

