"""Wiring of the agent: host detection, state, collector, executor, scheduler.

``qosmanager run`` builds an :class:`Agent` from its flags; ``simulate`` and the tests
build one directly.  Stopping (``--duration``, SIGTERM, SIGINT) leaves every file as it
is, so a restarted agent continues seamlessly: it re-reads what it finds and only
writes what differs.  SIGHUP is logged and, at the next collect, reopens the audit log (logrotate) and
has the state read again: the state files (standalone), or the pods, Node and NodeSLO listed afresh
(Kubernetes mode).

State comes from files (standalone: ``--pods-file``, ``--node-file``, ``--node-slo-file``) or
from the API server (Kubernetes mode: ``--kubeconfig``, or the in-cluster service account when
no ``--pods-file`` is given).  In Kubernetes mode evictions default to the Eviction API, every
eviction decision and BE-limit change is an Event, and the agent starts enforcing as soon as the
pods and the Node are known (a missing NodeSLO means the defaults).  The Kubernetes modules are
imported only in that mode.

``qosmanager run`` is strict at start and loud about what it does: :func:`check_startup` refuses a
configuration that would leave the node unprotected without saying so (no state source, a state
file missing or unusable, a ``--strategies`` entry that cannot run, an audit log that cannot be
opened) with one line naming the flag, and the agent logs one summary line of what it runs.  Later
(hot reload) a bad state file keeps the last good state instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

from qosmanager.api.decode import read_document_file
from qosmanager.api.node import node_meta
from qosmanager.api.nodeslo import parse_nodeslo
from qosmanager.api.pod import prune_pod_hook
from qosmanager.eviction.coordinator import ApiEvict, EvictionCoordinator
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor
from qosmanager.exporter import Exporter
from qosmanager.framework import plugins
from qosmanager.framework.beidle import GATE as BE_IDLE_GATE
from qosmanager.framework.beidle import BEIdle
from qosmanager.framework.context import Shared
from qosmanager.framework.demand import CONTAINER, NODE, POD, QOS, CollectPlan, Need, Planner
from qosmanager.framework.fastpath import REACT_FAST, FastPath
from qosmanager.framework.gates import FeatureGates, did_you_mean
from qosmanager.framework.manager import QoSManager, load_strategies
from qosmanager.framework.psi import memory_watchers
from qosmanager.framework.scheduler import LongRuns, Scheduler, StopEvent
from qosmanager.framework.strategy import QoSConfig
from qosmanager.host.cgroups import CgroupLayout, detect_driver, detect_version
from qosmanager.host.descriptors import DescriptorBudget
from qosmanager.host.kubelet_cpu import KubeletCPUSource
from qosmanager.host.roots import HostRoots
from qosmanager.host.sysfs import NodeCPUInfo, TopologyReader
from qosmanager.logfmt import RepeatLimiter
from qosmanager.metrics.cache import MetricCache, rows_for
from qosmanager.metrics.collector import COLLECT_DEMAND, Collector
from qosmanager.restore import OriginalsJournal
from qosmanager.states.files import BACKGROUND_BYTES, FileSource, check_big_pods_file
from qosmanager.states.store import StateStore
from qosmanager.steadyclock import SteadyClock
from qosmanager.strategies.cpu_suppress import CPUSuppress

if TYPE_CHECKING:
    from qosmanager.states.kube.client import KubeClient
    from qosmanager.states.kube.events import EventRecorder
    from qosmanager.states.kube.evictcheck import EvictionAPICheck
    from qosmanager.states.kube.source import KubeSource

log = logging.getLogger(__name__)

AUDIT_TAIL = 256  # audit records the agent keeps in memory (AuditLog.recent)


class StartupError(ValueError):
    """A configuration ``qosmanager run`` refuses to start with; the message names the flag."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message if flag in message else f"{flag}: {message}")
        self.flag = flag


@dataclass
class AgentConfig:
    roots: HostRoots = field(default_factory=HostRoots)
    cgroup_version: str = "auto"
    cgroup_driver: str = "auto"
    node_name: str = ""
    pods_file: str | None = None
    node_file: str | None = None
    node_slo_file: str | None = None
    kubeconfig: str | None = None
    evict_mode: str | None = None
    dry_run: bool = False
    audit_log: str | None = None
    originals_file: str | None = None  # qosmanager.restore: what each changed file held first
    metrics_addr: str = ""
    feature_gates: dict[str, bool] = field(default_factory=dict)
    collect_interval: float = 1.0
    collect_mode: str = "demand"  # "demand" (what the strategies need) | "all" (every file, each tick)
    react_mode: str = REACT_FAST  # "fast": the fast path lowers BE's CPU limit within 100 ms; "tick": koordlet's pace
    force_update_seconds: float = 60.0
    max_fds: int = -1
    qos: QoSConfig = field(default_factory=QoSConfig)
    strategies: list[str] | None = None  # None: every enabled strategy
    # the kubelet's root dir (its cpu_manager_state) and configuration file; None: not read
    kubelet_root_dir: str | None = None
    kubelet_config: str | None = None
    cpu_info_refresh: float = 60.0  # koordlet's NodeInfoCollector interval
    kube_events: bool = True  # Kubernetes mode: record Events (off under --dry-run)
    kube_watch_timeout: tuple[float, float] = (300.0, 600.0)  # seconds of one watch, drawn at random


EXPORTED_NEEDS = (Need("be_cpu_usage", QOS),)
"""What ``/metrics`` shows from the metric cache (the rest it takes from the strategies' last decisions)."""


def kubernetes_mode(cfg: AgentConfig) -> bool:
    """``--kubeconfig`` given, or the in-cluster service account present and no ``--pods-file``."""
    if cfg.kubeconfig:
        return True
    if cfg.pods_file:
        return False
    from qosmanager.states.kube.config import in_cluster_available

    return in_cluster_available()


class Agent:
    def __init__(self, cfg: AgentConfig, *, clock: Callable[[], float] | None = None,
                 monotonic: Callable[[], float] = time.monotonic, monotonic_ns: Callable[[], int] | None = None,
                 seed: int | None = None) -> None:
        """``clock`` stamps samples and decisions (wall seconds); ``monotonic`` drives the scheduler;
        ``monotonic_ns`` (default: the native reader's clock) turns counters into rates.  Simulations
        inject all three; ``seed`` makes the scheduler's jitter reproducible."""
        self.cfg = cfg
        # wall-clock seconds that never jump (qosmanager.steadyclock): a stepped system clock moves
        # no cool-down, window or lease
        clock = self.clock = clock if clock is not None else SteadyClock(monotonic=monotonic)
        self.gates = plugins.feature_gates(cfg.feature_gates)
        cfg.qos.collect_interval = cfg.collect_interval
        cfg.qos.force_update_seconds = cfg.force_update_seconds
        roots = cfg.roots
        version = detect_version(roots.cgroup) if cfg.cgroup_version == "auto" else int(cfg.cgroup_version)
        driver = detect_driver(roots, version) if cfg.cgroup_driver == "auto" else cfg.cgroup_driver
        self.layout = CgroupLayout(roots, version, driver)
        check_cgroup_root(self.layout)
        self.store = StateStore()
        self.kube_client: KubeClient | None = None
        self.kube_source: KubeSource | None = None
        self._kube: KubeSource | None = None
        self.events: EventRecorder | None = None
        self.eviction_check: EvictionAPICheck | None = None  # Kubernetes mode, --evict-mode api
        self.source: FileSource | KubeSource
        self._reload_asked = False  # SIGHUP: acted on at the next collect (the handler takes no lock)
        if kubernetes_mode(cfg):
            self.source = self._kube_source(cfg, clock)
        else:
            # a big pods file is decoded beside the ticks: the BE limit never waits for it
            self.source = FileSource(self.store, pods_file=cfg.pods_file, node_file=cfg.node_file,
                                     node_slo_file=cfg.node_slo_file, background_bytes=BACKGROUND_BYTES)
        self.cache = MetricCache(**cache_rows(cfg))
        try:
            # the in-memory tail is for a look at recent actions, the file is the record: 256 of
            # them, not 4,096 (about 1 KB each: 4 MB once cpuBurst's first tick wrote every container)
            self.audit = AuditLog(cfg.audit_log, clock=clock, conditions=self.store.conditions,
                                  keep=AUDIT_TAIL)
        except OSError as e:
            raise StartupError("--audit-log", f"cannot open {cfg.audit_log}: {e.strerror or e}") from None
        # the collector's readers and the executor's writes share one descriptor budget, below the
        # reserves of the process and of the health server (qosmanager.host.descriptors)
        fds = self.fd_budget = (DescriptorBudget(cfg.max_fds) if cfg.max_fds >= 0
                                else DescriptorBudget.for_process())
        self.executor = Executor(self.layout, self.audit, dry_run=cfg.dry_run,
                                 force_seconds=cfg.force_update_seconds, budget=fds, clock=clock,
                                 conditions=self.store.conditions)
        self.originals: OriginalsJournal | None = None
        if cfg.originals_file and not cfg.dry_run:
            try:
                self.originals = OriginalsJournal(cfg.originals_file, self.executor, clock=clock)
            except OSError as e:
                raise StartupError("--originals-file",
                                   f"cannot keep {cfg.originals_file}: {e.strerror or e}") from None
            self.executor.on_write.append(self.originals.on_write)
        if monotonic_ns is None:
            self.collector = Collector(self.layout, self.cache, self.store, clock=clock, budget=fds,
                                       mode=cfg.collect_mode)
        else:
            self.collector = Collector(self.layout, self.cache, self.store, clock=clock, mono=monotonic_ns,
                                       budget=fds, mode=cfg.collect_mode)
        self.collector.on_pod_removed.append(self.executor.forget)
        evict_mode = cfg.evict_mode or ("api" if self.kube_client is not None else "none")
        self.evict_mode = evict_mode
        self.coordinator = EvictionCoordinator(self.store, self.layout, self.audit, mode=evict_mode,
                                               dry_run=cfg.dry_run, clock=clock,
                                               api=self._kube_evictor(evict_mode, clock),
                                               executor=self.executor)
        self._kube_events(cfg, clock)
        self._topology = TopologyReader(self.layout.roots)  # the per-CPU files read only when they can have changed
        self._cpu_info_at = float("-inf")
        self._cpu_info_errors = RepeatLimiter(600.0, clock=clock)
        self.kubelet_cpu: KubeletCPUSource | None = None
        if cfg.kubelet_root_dir or cfg.kubelet_config:
            self.kubelet_cpu = KubeletCPUSource(self.store.conditions, cfg.kubelet_root_dir,
                                                cfg.kubelet_config, flag=cfg.qos.cpu_manager_policy)
            self.kubelet_cpu.current()  # says at start-up which source decides the policy
        self.shared = Shared(store=self.store, layout=self.layout, cache=self.cache, executor=self.executor,
                             gates=self.gates, cfg=cfg.qos, evictor=self.coordinator.execute,
                             cpu_info=self.cpu_info,
                             kubelet_cpu=self.kubelet_cpu.current if self.kubelet_cpu is not None else None,
                             host_reads=True)
        self.manager = QoSManager(self.shared, only=cfg.strategies, clock=clock)
        # demand-driven collection: the collector reads what the enabled strategies (and the exported
        # BE usage) need, planned before every tick
        self.planner: Planner | None = None
        if cfg.collect_mode == COLLECT_DEMAND:
            self.planner = Planner(self.layout.version, cfg.collect_interval)
            self.shared.refresh = self.collector.refresh
        self.scheduler = Scheduler(wall=clock, monotonic=monotonic, seed=seed)
        self.scheduler.add("collect", cfg.collect_interval, self.collect, jitter=0.0)
        self.scheduler.on_run.append(LongRuns(self.store.conditions).on_run)  # agent/long-run
        # strategies start after the first samples exist (koordlet waits for the collectors too)
        self.strategy_names = self.manager.register(self.scheduler, first_delay=min(cfg.collect_interval, 1.0))
        if self.gates.enabled(BE_IDLE_GATE):  # BE as SCHED_IDLE (qosmanager.framework.beidle)
            idle = BEIdle(self.layout, self.executor)
            self.scheduler.add(idle.name, cfg.qos.reconcile_interval, idle.tick,
                               first_delay=min(cfg.collect_interval, 1.0))
        self.stop_event = StopEvent()  # the scheduler sleeps in one poll on it
        # the fast path (own thread, started by run()): BE's quota lowered within 100 ms of LS's rise; off in tick mode
        self.fastpath: FastPath | None = None
        suppress = self.manager.strategies.get("cpuSuppress")
        if cfg.react_mode == REACT_FAST and isinstance(suppress, CPUSuppress) and suppress.name in self.strategy_names:
            fastpath = self.fastpath = FastPath(self.layout, self.store, self.executor, suppress, clock=clock,
                                                monotonic=monotonic)
            # what the fast path's trigger level derives from moves with these jobs: the quota in force and
            # the tick's last decision (cpuSuppress), the Node and NodeSLO (read by the collect job)
            moving = {"collect", suppress.name}
            self.scheduler.on_run.append(lambda job, duration: fastpath.retrigger() if job.name in moving else None)
        self.memtrigger, self.psi = memory_watchers(self)  # memory levels woken by usage lines and by PSI
        # /metrics and /healthz (--metrics-addr; empty disables): address checked now, bound on run()
        self.exporter: Exporter | None = Exporter.for_agent(self) if cfg.metrics_addr else None
        if self.exporter is not None and self.fastpath is not None:
            self.fastpath.observe = self.exporter.metrics.be_limit_reaction.observe

    # ------------------------------------------------------------------ Kubernetes mode
    def _kube_source(self, cfg: AgentConfig, clock: Callable[[], float]) -> KubeSource:
        from qosmanager.states.kube.client import KubeClient
        from qosmanager.states.kube.config import load_config
        from qosmanager.states.kube.source import KubeSource

        if cfg.pods_file or cfg.node_file or cfg.node_slo_file:
            raise ValueError("--kubeconfig (Kubernetes mode) and --pods-file/--node-file/--node-slo-file "
                             "(standalone mode) exclude each other")
        if not cfg.node_name:
            raise ValueError("Kubernetes mode needs the node name: --node-name or $NODE_NAME")
        self.kube_client = KubeClient(load_config(cfg.kubeconfig))
        source = KubeSource(self.store, self.kube_client, cfg.node_name, clock=clock,
                            watch_timeout=cfg.kube_watch_timeout)
        # ``kube_source`` is the public, read-only face (the exporter reads its health); the agent
        # keeps its own reference to start and stop it
        self.kube_source = self._kube = source
        return source

    def _kube_evictor(self, evict_mode: str, clock: Callable[[], float]) -> ApiEvict | None:
        if evict_mode != "api" or self.kube_client is None:
            return None  # the coordinator refuses --evict-mode api without the API, with a clear message
        from qosmanager.states.kube.evict import KubeEvictor
        from qosmanager.states.kube.evictcheck import EvictionAPICheck

        evictor = KubeEvictor(self.kube_client, clock=clock, conditions=self.store.conditions)
        # whether evictions can work at all, asked at start and every 10 minutes, not only at the first
        self.eviction_check = EvictionAPICheck(self.kube_client, evictor)
        if self._kube is not None:  # a relist: the API server may have been replaced or upgraded
            for r in self._kube.reflectors.values():
                r.on_relist.append(self.eviction_check.poke)
        return evictor

    def _kube_events(self, cfg: AgentConfig, clock: Callable[[], float]) -> None:
        if self.kube_client is None or not cfg.kube_events or cfg.dry_run:
            return
        from qosmanager.host.cgroups import KubeQoS
        from qosmanager.states.kube.events import (
            BELimitEvents,
            EventRecorder,
            NodeSLOEvents,
            ObjectRef,
            WriteConflictEvents,
        )

        recorder = EventRecorder(self.kube_client, cfg.node_name, clock=clock)
        self.coordinator.on_decision.append(recorder.on_eviction)
        store = self.store

        def node_ref() -> ObjectRef:
            raw = store.node.raw if store.node is not None else {}
            uid = (raw.get("metadata") or {}).get("uid") or ""
            return ObjectRef("Node", cfg.node_name, uid=str(uid))

        be_limit = BELimitEvents(recorder, node_ref, self.layout.qos_dir(KubeQoS.BESTEFFORT), clock=clock)
        self.executor.on_write.append(be_limit.on_write)
        recorder.add_periodic(be_limit.flush)
        store.on_nodeslo.append(NodeSLOEvents(recorder, node_ref).on_nodeslo)
        conflicts = WriteConflictEvents(recorder, node_ref, clock=clock)
        self.executor.on_conflict.append(conflicts.on_conflict)
        recorder.add_periodic(conflicts.flush)
        self.events = recorder

    def wait_for_state(self, timeout: float | None = None) -> bool:
        """Kubernetes mode: start the watches and the event recorder and wait (``timeout`` seconds,
        None = until stopped) until the Node is known and the pods or ``pods_grace`` seconds passed (a big
        node's list is not waited for: the BE limit never waits on it); standalone: True at once."""
        if self._kube is None:
            return True
        if self.events is not None:
            self.events.start()
        log.info("waiting for Node %s from the API server", self.cfg.node_name)
        ok = self._kube.wait_synced(timeout, self.stop_event, pods=self._kube.pods_grace)
        if ok:
            pods = (f"{len(self.store.pods)} pods" if not self.store.pods_loading else
                    "the pods list still on its way (the BE limit is decided from the node and kube QoS-dir "
                    "counters until it is in)")
            log.info("state received: Node, %s, NodeSLO %s", pods,
                     "present" if self.store.nodeslo_present else "absent (defaults)")
            if self.eviction_check is not None:
                # before the first tick: a cluster that cannot evict shows at start, not under pressure
                verdict = self.eviction_check.check()
                self.eviction_check.start(None if verdict is not None else self.eviction_check.retry)
        return ok

    def cpu_info(self) -> NodeCPUInfo | None:
        """CPU topology, checked every ``cpu_info_refresh`` seconds (CPUs go on- and offline): TopologyReader."""
        now = self.clock()
        if self._topology.info is None or now - self._cpu_info_at >= self.cfg.cpu_info_refresh:
            try:
                self._topology.read()
                self._cpu_info_errors.clear("topology")
            except (OSError, ValueError) as e:
                rep = self._cpu_info_errors.hit("topology", type(e).__name__, now=now)
                if rep is not None:
                    log.warning("cannot read the CPU topology: %s%s", e,
                                "" if rep.first else f" (failed {rep.times()})")
            self._cpu_info_at = now
        return self._topology.info

    def collect(self, now: float) -> None:
        if self._reload_asked:
            self._reload_asked = False
            self._reload()
        self.source.poll(now)
        if self.planner is not None:
            self.collector.plan = self.plan(now)
        self.collector.collect(now)

    def plan(self, now: float) -> CollectPlan:
        """This tick's reads: the union of the enabled strategies' needs (and the exporter's)."""
        assert self.planner is not None
        ctx = self.manager.context(now)
        sources: list[tuple[str, Sequence[Need]]] = []
        for s in self.manager.enabled():
            try:
                sources.append((s.name, self.manager.needs_of(s, ctx)))
            except Exception as e:  # one strategy's declaration must not stop collection: read everything
                if self.manager.is_plugin(s.name):  # named in its condition; its metrics may be missing
                    self.manager.plugin_needs_failed(s, e)
                    continue
                log.exception("strategy %s: its needs could not be listed; collecting everything", s.name)
                sources.append((s.name, (Need("pod_cpu_usage", POD), Need("pod_memory_usage", POD),
                                         Need("container_cpu_throttled", CONTAINER),
                                         Need("node_cpu_usage", NODE), Need("node_memory_usage", NODE),
                                         Need("be_cpu_real_limit", NODE))))
        if self.cfg.metrics_addr:
            sources.append(("exporter", EXPORTED_NEEDS))
        return self.planner.plan(ctx, sources)

    def run(self, duration: float = 0.0) -> None:
        if self.exporter is not None:
            self.exporter.start()
        try:
            # what a strategy this agent does not run undoes of an earlier agent's (a memory cap a
            # SIGKILLed agent left while BEMemoryHigh was on), known by the originals file
            self.manager.start_writes(self.clock(), self.originals.kept if self.originals is not None else ())
            t0 = time.monotonic()
            if self.wait_for_state(duration if duration > 0 else None):
                left = duration - (time.monotonic() - t0) if duration > 0 else 0.0
                if duration <= 0 or left > 0:  # --duration counts the wait for the API server too
                    if self.fastpath is not None:
                        self.fastpath.start()
                    self.scheduler.run(self.stop_event, left)
        finally:
            self.close()

    def stop(self) -> None:
        self.stop_event.set()

    def reload(self) -> None:
        """SIGHUP (the signal handler): acted on at the next collect, on the agent's thread, since a
        handler that took the audit log's or the client's lock could wait forever on its own thread."""
        self._reload_asked = True

    def _reload(self) -> None:
        """What SIGHUP does: the audit log is opened afresh (after logrotate moved it away; the originals
        file is the agent's own, never rotated); standalone, every state file is read again now, changed
        or not; in Kubernetes mode the pods, the Node and the NodeSLO are listed afresh and watched on from
        there (a watch that missed a change is caught up)."""
        self.audit.reopen()
        audit = f"; audit log {self.cfg.audit_log} reopened" if self.cfg.audit_log else ""
        if isinstance(self.source, FileSource):
            self.source.reread()
            log.warning("received SIGHUP: reading the state files again now (%s)%s",
                        ", ".join(f.path for f in self.source.files), audit)
        else:
            self.source.relist()
            log.warning("received SIGHUP: listing the pods, the Node and the NodeSLO afresh from the API "
                        "server%s", audit)

    def startup_summary(self) -> tuple[str, dict[str, object]]:
        """What this agent runs, as one line and as fields (``--log-format json``)."""
        cfg, lay = self.cfg, self.layout
        if self.kube_client is not None:
            mode = "kubernetes"
            kc = self.kube_client.config
            sources = {"api_server": kc.server, "credentials": kc.origin}
            where = f"Kubernetes API {kc.server} ({kc.origin})"
        else:
            mode = "standalone"
            sources = {k: v for k, v in (("pods", cfg.pods_file), ("node", cfg.node_file),
                                         ("nodeslo", cfg.node_slo_file)) if v}
            where = ", ".join(f"--{flag} {path}" for flag, path in (
                ("pods-file", cfg.pods_file), ("node-file", cfg.node_file),
                ("node-slo-file", cfg.node_slo_file)) if path) or "no state files"
        kubepods = lay.abs_dir("cpu", lay.kubepods_dir())
        running = {n: [g for g in self.manager.strategies[n].gates if self.gates.enabled(g)]
                   for n in self.strategy_names}
        off = strategies_off(cfg, self.gates)
        metrics = cfg.metrics_addr or "off"
        plugs = plugin_summary(self.manager)
        fields: dict[str, object] = {
            "mode": mode, "node_name": cfg.node_name, "state_sources": sources,
            "cgroup_version": lay.version, "cgroup_driver": lay.driver, "kubepods": kubepods,
            "strategies": running, "strategies_off": off, "feature_gates": dict(cfg.feature_gates),
            "evict_mode": self.evict_mode, "dry_run": cfg.dry_run, "metrics_addr": metrics,
            "collect_interval": cfg.collect_interval, "audit_log": cfg.audit_log, "plugins": plugs,
            "react_mode": cfg.react_mode if self.fastpath is not None else "tick",
        }
        run = ", ".join(f"{n} ({'+'.join(g)})" for n, g in running.items()) or "none"
        by_reason: dict[str, list[str]] = {}
        for n, why in off.items():
            by_reason.setdefault(why, []).append(n)
        off_text = ", ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items())
        node = f", node {cfg.node_name}" if cfg.node_name else ""
        text = (f"starting: {mode} mode{node}, state from {where}; "
                f"cgroup v{lay.version} {lay.driver} driver, kubepods at {kubepods}; strategies {run}"
                + (f"; off: {off_text}" if off else "")
                + "".join(f"; plugin {p['gate']}: {p['strategy'] or '-'} from {p['package']} {p['version']} "
                          f"{p['state']}" for p in plugs)
                + f"; evict mode {self.evict_mode}; dry-run "
                + ("ON (nothing is written or evicted)" if cfg.dry_run else "off") + f"; metrics {metrics}; "
                f"collect every {cfg.collect_interval:g} s; react "
                + ("fast (BE's CPU limit lowered within 100 ms)" if self.fastpath is not None else "at the tick")
                + f"; audit log {cfg.audit_log or 'off'}")
        return text, fields

    def close(self) -> None:
        if self.fastpath is not None:
            self.fastpath.stop()
        self.manager.exit_writes(self.clock())
        if self.exporter is not None:
            self.exporter.stop()
        if self._kube is not None:
            self._kube.stop()
        if self.eviction_check is not None:
            self.eviction_check.stop()
        if self.events is not None:
            self.events.stop()
        if self.kube_client is not None:
            self.kube_client.close()
        self.collector.close()
        self.executor.close()
        if self.originals is not None:
            self.originals.close()
        self.audit.close()


CGROUP_ROOT_NEEDS = ("cpu", "cpuacct")  # cgroup v1: the hierarchies without which nothing is read


def check_cgroup_root(layout: CgroupLayout) -> None:
    """A ``--cgroup-root`` that holds no cgroup hierarchy is a :class:`StartupError` naming the flag,
    the path and what was expected there (one level off, the collector failed with "at least one
    file is needed"), with the neighbour that does hold one, if any."""
    if layout.version == 2:
        return  # detected by cgroup.controllers at the root, or asked for with --cgroup-version 2
    root = layout.roots.cgroup
    missing = [s for s in CGROUP_ROOT_NEEDS if not os.path.isdir(layout.abs_dir(s, ""))]
    if not missing:
        return
    message = (f"--cgroup-root {root}: no cgroup hierarchy there: expected the cgroup v2 mount "
               f"(cgroup.controllers at its top) or the cgroup v1 hierarchies, one directory per "
               f"controller ({', '.join(os.path.join(root, s) for s in missing)} missing)")
    parent = os.path.dirname(root.rstrip("/")) or "/"
    candidates = [parent, os.path.join(root, "cgroup")]
    for c in candidates:
        if os.path.realpath(c) != os.path.realpath(root) and (
                all(os.path.isdir(os.path.join(c, s)) for s in CGROUP_ROOT_NEEDS)
                or os.path.exists(os.path.join(c, "cgroup.controllers"))):
            message += f"; {c} holds one: is that the cgroup root?"
            break
    raise StartupError("--cgroup-root", message)


def plugin_summary(manager: QoSManager) -> list[dict[str, str]]:
    """Every plugin found at start: gate, strategy, package, version and its state (on: it runs; off:
    its gate is off; failed, with the error)."""
    out = []
    for p in manager.plugins:
        state = manager.plugin_state(p)
        out.append({"gate": p.gate, "strategy": p.strategy, "package": p.package, "version": p.version,
                    "state": state if not p.error else f"{state} ({p.error})"})
    return out


def cache_rows(cfg: AgentConfig) -> dict[str, int]:
    """The pod and container rings sized to the windows the strategies read them over: a pod's CPU
    usage averaged over cpuBurst's node-state window (5 reconcile intervals, at most 10 s), every
    other pod and container series only as ``last`` (two collect intervals).  The defaults (120 and
    60 rows) kept 7.9 MB at 2,000 containers where this keeps under 1 MB; node and host-application
    series keep their 30 minutes (NodeMetric's longest window, a column each)."""
    from qosmanager.strategies.cpu_burst import NODE_STATE_MAX_WINDOW, NODE_STATE_WINDOW_INTERVALS

    collect = cfg.collect_interval
    last = 2.0 * collect
    burst = min(NODE_STATE_WINDOW_INTERVALS * cfg.qos.reconcile_interval, NODE_STATE_MAX_WINDOW)
    return {"pod_rows": rows_for(max(last, burst), collect), "container_rows": rows_for(last, collect)}


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    return AgentConfig(
        roots=HostRoots(cgroup=args.cgroup_root, proc=args.proc_root, sys=args.sys_root,
                        kubelet_cgroup_root=args.kubelet_cgroup_root),
        cgroup_version=args.cgroup_version,
        cgroup_driver=args.cgroup_driver,
        node_name=args.node_name,
        pods_file=args.pods_file,
        node_file=args.node_file,
        node_slo_file=args.node_slo_file,
        kubeconfig=args.kubeconfig,
        evict_mode=args.evict_mode,
        dry_run=args.dry_run,
        audit_log=args.audit_log,
        originals_file=args.originals_file,
        metrics_addr=args.metrics_addr,
        feature_gates=args.feature_gates,
        collect_interval=args.collect_interval,
        collect_mode=args.collect_mode,
        react_mode=args.react_mode,
        force_update_seconds=args.force_update_seconds,
        qos=QoSConfig(
            reconcile_interval=args.reconcile_interval_seconds,
            cpu_suppress_interval=args.cpu_suppress_interval_seconds,
            cpu_evict_interval=args.cpu_evict_interval_seconds,
            memory_evict_interval=args.memory_evict_interval_seconds,
            memory_evict_cool_time=args.memory_evict_cool_time_seconds,
            cpu_evict_cool_time=args.cpu_evict_cool_time_seconds,
            cpu_manager_policy=args.kubelet_cpu_manager_policy,
        ),
        strategies=[s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else None,
        kubelet_root_dir=args.kubelet_root_dir or None,
        kubelet_config=args.kubelet_config or None,
    )


def one_line(e: BaseException) -> str:
    """An error as one line (YAML errors span several; an OSError names its file)."""
    if isinstance(e, OSError) and e.strerror:
        text = f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    else:
        text = str(e) or type(e).__name__
    return " ".join(text.split())


def _interval_flag(key: str) -> str:
    return "--collect-interval" if key == "collect" else f"--{key.replace('_', '-')}-interval-seconds"


def strategies_off(cfg: AgentConfig, gates: FeatureGates) -> dict[str, str]:
    """Strategies that will not run, each with the reason (for the start-up summary)."""
    out: dict[str, str] = {}
    for name, cls in load_strategies().items():
        if cfg.strategies is not None and name not in cfg.strategies:
            out[name] = "not in --strategies"
        elif not any(gates.enabled(g) for g in cls.gates):
            out[name] = f"gate{'s' if len(cls.gates) > 1 else ''} {', '.join(cls.gates)} off"
        elif cfg.qos.interval(cls.interval_key) <= 0:
            out[name] = f"{_interval_flag(cls.interval_key)} 0"
    return out


def _check_state_file(flag: str, path: str, kind: str) -> None:
    """The file exists and holds what the agent would accept for ``kind`` (pods, node, nodeslo); a big
    pods file only as far as :func:`qosmanager.states.files.check_big_pods_file` looks."""
    try:
        if kind == "pods" and check_big_pods_file(path, BACKGROUND_BYTES):
            return
    except OSError as e:
        raise StartupError(flag, f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise StartupError(flag, str(e)) from None
    try:
        # what the file source reads: bounded in size and depth, pods pruned as they are decoded
        obj = read_document_file(path, object_hook=prune_pod_hook if kind == "pods" else None)
    except OSError as e:
        raise StartupError(flag, f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise StartupError(flag, str(e)) from None
    try:
        if kind == "pods":
            if not isinstance(obj.get("items"), list):
                raise ValueError(f"{path}: not a PodList (no items list)")
        elif kind == "node":
            node_meta(obj)
        else:
            parse_nodeslo(obj)
    except (ValueError, TypeError, KeyError) as e:
        what = {"pods": "a PodList", "node": "a Node", "nodeslo": "a NodeSLO"}[kind]
        detail = str(e)
        if not detail.startswith(path):
            detail = f"{path} is not {what}: {detail}"
        raise StartupError(flag, detail) from None


def check_startup(cfg: AgentConfig) -> None:
    """What ``qosmanager run`` refuses to start with (a :class:`StartupError` naming the flag): an
    unknown feature gate; ``--strategies`` naming a strategy that is unknown or cannot run (its
    gates off, its interval 0); standalone mode without ``--pods-file``; a state file that is
    missing or that the agent would refuse.  (An ``--audit-log`` that cannot be opened is refused
    when the agent opens it.)"""
    try:
        gates = plugins.feature_gates(cfg.feature_gates)
    except ValueError as e:
        raise StartupError("--feature-gates", str(e)) from None
    if cfg.strategies is not None:
        classes = load_strategies()
        if not cfg.strategies:
            raise StartupError("--strategies", f"names no strategy; known: {', '.join(classes)}")
        for name in cfg.strategies:
            cls = classes.get(name)
            if cls is None:
                near = did_you_mean(name, classes)
                hint = f" (did you mean {near}?)" if near else ""
                raise StartupError("--strategies", f"--strategies {name}: unknown strategy{hint}; known: "
                                   f"{', '.join(classes)}")
            if not any(gates.enabled(g) for g in cls.gates):
                if len(cls.gates) == 1:
                    gate = cls.gates[0]
                    why = f"its gate {gate} is off; enable it with --feature-gates {gate}=true"
                else:
                    why = f"its gates {', '.join(cls.gates)} are all off; enable one with --feature-gates"
                raise StartupError("--strategies", f"--strategies {name}: {why}")
            if cfg.qos.interval(cls.interval_key) <= 0:
                flag = _interval_flag(cls.interval_key)
                raise StartupError("--strategies", f"--strategies {name}: {flag} is 0, which switches it off")
    if kubernetes_mode(cfg):
        return  # the Kubernetes source reports its own configuration errors
    if not cfg.pods_file:
        raise StartupError("--pods-file", "no state source: standalone mode needs --pods-file (with "
                           "--node-file and --node-slo-file); Kubernetes mode needs --kubeconfig or the "
                           "in-cluster service account")
    for flag, path, kind in (("--pods-file", cfg.pods_file, "pods"), ("--node-file", cfg.node_file, "node"),
                             ("--node-slo-file", cfg.node_slo_file, "nodeslo")):
        if path:
            _check_state_file(flag, path, kind)


def run_from_args(args: argparse.Namespace) -> int:
    """``qosmanager run``: 2 with one line on stderr when the configuration is refused."""
    cfg = config_from_args(args)
    try:
        check_startup(cfg)
        agent = Agent(cfg)
    except (ValueError, OSError) as e:
        print(f"qosmanager run: {one_line(e)}", file=sys.stderr)  # once: not logged as well
        return 2

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.warning("received %s, stopping", signal.Signals(signum).name)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, lambda signum, frame: agent.reload())  # default: die without a word
    text, fields = agent.startup_summary()  # said once the signals are handled
    log.info("%s", text, extra=fields)
    agent.run(args.duration)
    return 0
