"""A whole agent on a fake host, driven tick by tick: the engine of ``replay`` and of strategy tests.

:class:`Harness` lays out a fake host (cgroup tree of the chosen version, procfs, sysfs), keeps
a state store, a metric cache, the executor (with an in-memory audit), the eviction coordinator
(mode ``none`` by default: decisions are recorded, nothing is signalled) and the QoS manager.
Tests and scenarios then set the node, pods and NodeSLO, inject metric samples straight into
the cache, and run strategy ticks at chosen times; every write that hit a file and every
eviction decision is recorded in order.

The fake host is a koordinator node (``koordinator=False`` opts out): every pod set is laid out with
the cgroup values koordlet's batch-resource hook and the kubelet write (:mod:`qosmanager.sim.koordnode`:
BE pods' quotas, shares and memory limits from their batch resources, other pods' from their limits
and requests, Burstable shares from requests, the BestEffort QoS dir's shares 2).  ``replay`` and the
tests get it by default, as ``simulate`` and the real-kernel test nodes do.

Nothing here is test-only logic: the strategies, executor and coordinator are the ones ``run``
uses, on files in a directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from qosmanager.api.pod import PodMeta
from qosmanager.eviction.coordinator import EvictionCoordinator
from qosmanager.eviction.types import EvictDecision
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, WriteResult
from qosmanager.framework import plugins
from qosmanager.framework.context import Context, Shared
from qosmanager.framework.manager import QoSManager
from qosmanager.framework.strategy import QoSConfig, Strategy
from qosmanager.host.cgroups import KubeQoS
from qosmanager.host.sysfs import NodeCPUInfo, Processor, read_node_cpu_info
from qosmanager.metrics.cache import MetricCache
from qosmanager.sim import koordnode
from qosmanager.sim.fakehost import FakeHost
from qosmanager.states.store import StateStore


@dataclass
class Recorded:
    writes: list[dict[str, Any]] = field(default_factory=list)  # {"strategy", "file", "value", "old"}
    evictions: list[dict[str, Any]] = field(default_factory=list)  # {"strategy", "pod", "uid", "reason", ...}


class Harness:
    # whether a Harness lays out a koordinator node when not told
    koordinator_default = True

    def __init__(self, *, version: int = 1, driver: str = "cgroupfs", root: str | None = None, n_cpus: int = 8,
                 memory_bytes: int = 64 << 30, gates: Mapping[str, bool] | None = None,
                 cfg: QoSConfig | None = None, strategies: Iterable[str] | None = None,
                 processors: Sequence[Processor] | None = None, evict_mode: str = "none", dry_run: bool = False,
                 now: float = 1000.0, koordinator: bool | None = None, **host_kw: Any) -> None:
        self.root = root or tempfile.mkdtemp(prefix="qosm-harness-")
        if root is None:  # a directory of its own goes with the harness (each holds hundreds of inodes)
            weakref.finalize(self, shutil.rmtree, self.root, True)
        self.koordinator = self.koordinator_default if koordinator is None else koordinator
        self.host = FakeHost(os.path.join(self.root, "host"), version=version, driver=driver, n_cpus=n_cpus,
                             memory_bytes=memory_bytes, koordinator=self.koordinator, **host_kw)
        self.layout = self.host.layout
        self._koordinated: set[str] = set()  # pods whose koordinator values are laid out
        self.now = now
        self.store = StateStore()
        self.cache = MetricCache()
        self.audit = AuditLog(None, clock=lambda: self.now)
        self.cfg = cfg or QoSConfig()
        self.gates = plugins.feature_gates(gates)
        self.executor = Executor(self.layout, self.audit, clock=lambda: self.now,
                                 force_seconds=self.cfg.force_update_seconds, dry_run=dry_run,
                                 conditions=self.store.conditions)
        self.coordinator = EvictionCoordinator(self.store, self.layout, self.audit, mode=evict_mode,
                                               dry_run=dry_run, clock=lambda: self.now,
                                               executor=self.executor)
        self._cpu_info: NodeCPUInfo | None = None
        self._processors = list(processors) if processors is not None else None
        self.shared = Shared(store=self.store, layout=self.layout, cache=self.cache, executor=self.executor,
                             gates=self.gates, cfg=self.cfg, evictor=self.coordinator.execute,
                             cpu_info=self.cpu_info)
        self.manager = QoSManager(self.shared, only=strategies, clock=lambda: self.now)
        self.recorded = Recorded()
        self.audit.add_sink(self._record)

    # ------------------------------------------------------------------ host and state
    def cpu_info(self) -> NodeCPUInfo | None:
        if self._cpu_info is None:
            info = read_node_cpu_info(self.host.roots)
            if self._processors is not None:
                info = NodeCPUInfo(**{**{f: getattr(info, f) for f in info.__dataclass_fields__},
                                      "processors": list(self._processors)})
            self._cpu_info = info
        return self._cpu_info

    def set_node(self, obj: Mapping[str, Any]) -> None:
        self.store.set_node(obj, now=self.now)

    def set_nodeslo(self, obj_or_spec: Mapping[str, Any] | None) -> None:
        """A whole NodeSLO object, or just its ``spec``."""
        obj = obj_or_spec
        if obj is not None and "spec" not in obj:
            obj = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "node"},
                   "spec": dict(obj)}
        if not self.store.set_nodeslo(obj, now=self.now):
            raise ValueError(self.store.errors.get("nodeslo", "bad NodeSLO"))

    def set_pods(self, objs: Iterable[Mapping[str, Any]], *, layout_cgroups: bool = True) -> None:
        objs = list(objs)
        self.store.set_pods(objs, now=self.now)
        if layout_cgroups:
            for meta in self.store.pods.values():
                self.ensure_pod_cgroups(meta)
            if self.koordinator:
                koordnode.lay_out_qos_dirs(self.host, self.store.pods.values())

    def ensure_pod_cgroups(self, meta: PodMeta) -> None:
        """Create the pod's cgroup dirs (and its containers') with kernel defaults, if missing; on a
        koordinator node the hooks' and the kubelet's values are written the first time a pod is seen
        (also into dirs a test laid out itself)."""
        from qosmanager.sim.fakehost import FakeContainer, FakePod

        if meta.uid not in self.host.pods:
            containers = [FakeContainer(c.name, c.container_id) for c in meta.containers if c.container_id]
            self.host.add_pod(FakePod(meta.uid, meta.namespace, meta.name, KubeQoS(meta.kube_qos), containers),
                              meta)  # laid out from its object on a koordinator node
            self._koordinated.add(meta.uid)
        if self.koordinator and meta.uid not in self._koordinated:
            self._koordinated.add(meta.uid)
            koordnode.lay_out_pod(self.host, meta)

    # ------------------------------------------------------------------ files
    def path(self, rel: str) -> str:
        """A file named relative to the cgroup root, or prefixed ``proc/`` / ``sys/``."""
        if rel.startswith("proc/"):
            return self.host.roots.proc_path(rel[5:])
        if rel.startswith("sys/"):
            return self.host.roots.sys_path(rel[4:])
        return os.path.join(self.host.roots.cgroup, rel)

    def write_file(self, rel: str, content: str) -> None:
        """Lay out a file as the scenario or test says (not a kernel write: no rule applies); a tasks file
        names processes that then exist for the fake kernel."""
        self.host.write(os.path.relpath(self.path(rel), self.host.root), content)

    def read_file(self, rel: str) -> str | None:
        try:
            with open(self.path(rel)) as f:
                return f.read()
        except OSError:
            return None

    def cgroup_file(self, subsystem: str, rel_dir: str, name: str) -> str:
        """The display path (relative to the cgroup root) of a cgroup file."""
        return os.path.relpath(self.layout.file(subsystem, rel_dir, name), self.host.roots.cgroup)

    # ------------------------------------------------------------------ metrics
    def add_samples(self, name: str, samples: Iterable[tuple[float, float]], **labels: str) -> None:
        for ts, value in samples:
            self.cache.add_sample(name, float(ts), float(value), **labels)

    # ------------------------------------------------------------------ running
    def context(self, now: float | None = None) -> Context:
        return self.manager.context(self.now if now is None else now)

    def strategy(self, name: str) -> Strategy:
        return self.manager.strategies[name]

    def tick(self, name: str, now: float | None = None) -> list[WriteResult]:
        if now is not None:
            self.now = now
        s = self.manager.strategies[name]
        return self.manager.run_strategy(s, self.now)

    def run(self, names: Iterable[str] | None = None, *, ticks: int = 1, start: float | None = None,
            between: Callable[[float, float], None] | None = None) -> None:
        """``ticks`` ticks of each strategy, strategy i's k-th at start + k * its interval; ``between(t0,
        t1)`` runs after the ticks at t0, before those at the next time t1 (the fast path in replay)."""
        start = self.now if start is None else start
        chosen = [self.manager.strategies[n] for n in names] if names is not None else self.manager.enabled()
        events = sorted(((start + k * s.interval, order, s) for order, s in enumerate(chosen)
                         for k in range(ticks)), key=lambda e: (e[0], e[1]))
        for i, (t, _, s) in enumerate(events):
            self.now = t
            self.manager.run_strategy(s, t)
            if between is not None and i + 1 < len(events) and events[i + 1][0] > t:
                between(t, events[i + 1][0])

    def _record(self, rec: dict[str, Any]) -> None:
        if rec["action"] == "write" and rec["executed"]:
            self.recorded.writes.append({"strategy": rec["strategy"], "file": rec["target"],
                                         "value": rec["value"], "old": rec["old"]})
        elif rec["action"] == "evict" and rec.get("target"):
            self.recorded.evictions.append({"strategy": rec["strategy"], "pod": rec["target"], "uid": rec["uid"],
                                            "feature": rec.get("feature"), "reason": rec["reason"],
                                            "executed": rec["executed"], "error": rec.get("error")})

    def decisions(self) -> list[EvictDecision]:
        return list(self.coordinator.history)

    def close(self) -> None:
        self.executor.close()
