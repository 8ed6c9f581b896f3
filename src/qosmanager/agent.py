"""Wiring of the agent: host detection, state, collector, executor, scheduler.

``qosmanager run`` builds an :class:`Agent` from its flags; ``simulate`` and the tests
build one directly.  Stopping (``--duration``, SIGTERM, SIGINT) leaves every file as it
is, so a restarted agent continues seamlessly: it re-reads what it finds and only
writes what differs.

State comes from files (standalone: ``--pods-file``, ``--node-file``, ``--node-slo-file``) or
from the API server (Kubernetes mode: ``--kubeconfig``, or the in-cluster service account when
no ``--pods-file`` is given).  In Kubernetes mode evictions default to the Eviction API, every
eviction decision and BE-limit change is an Event, and the agent starts enforcing as soon as the
pods and the Node are known (a missing NodeSLO means the defaults).  The Kubernetes modules are
imported only in that mode.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

from qosmanager.eviction.coordinator import ApiEvict, EvictionCoordinator
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor
from qosmanager.exporter import Exporter
from qosmanager.framework.context import Shared
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.manager import QoSManager
from qosmanager.framework.scheduler import Scheduler
from qosmanager.framework.strategy import QoSConfig
from qosmanager.host.cgroups import CgroupLayout, detect_driver, detect_version
from qosmanager.host.descriptors import DescriptorBudget
from qosmanager.host.roots import HostRoots
from qosmanager.host.sysfs import NodeCPUInfo, read_node_cpu_info
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.states.files import FileSource
from qosmanager.states.store import StateStore

if TYPE_CHECKING:
    from qosmanager.states.kube.client import KubeClient
    from qosmanager.states.kube.events import EventRecorder
    from qosmanager.states.kube.source import KubeSource

log = logging.getLogger(__name__)


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
    metrics_addr: str = ""
    feature_gates: dict[str, bool] = field(default_factory=dict)
    collect_interval: float = 1.0
    force_update_seconds: float = 60.0
    max_fds: int = -1
    qos: QoSConfig = field(default_factory=QoSConfig)
    strategies: list[str] | None = None  # None: every enabled strategy
    cpu_info_refresh: float = 60.0  # koordlet's NodeInfoCollector interval
    kube_events: bool = True  # Kubernetes mode: record Events (off under --dry-run)
    kube_watch_timeout: tuple[float, float] = (300.0, 600.0)  # seconds of one watch, drawn at random


def kubernetes_mode(cfg: AgentConfig) -> bool:
    """``--kubeconfig`` given, or the in-cluster service account present and no ``--pods-file``."""
    if cfg.kubeconfig:
        return True
    if cfg.pods_file:
        return False
    from qosmanager.states.kube.config import in_cluster_available

    return in_cluster_available()


class Agent:
    def __init__(self, cfg: AgentConfig, *, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, monotonic_ns: Callable[[], int] | None = None,
                 seed: int | None = None) -> None:
        """``clock`` stamps samples and decisions (wall seconds); ``monotonic`` drives the scheduler;
        ``monotonic_ns`` (default: the native reader's clock) turns counters into rates.  Simulations
        inject all three; ``seed`` makes the scheduler's jitter reproducible."""
        self.cfg = cfg
        self.clock = clock
        self.gates = FeatureGates.from_overrides(cfg.feature_gates)
        cfg.qos.collect_interval = cfg.collect_interval
        cfg.qos.force_update_seconds = cfg.force_update_seconds
        roots = cfg.roots
        version = detect_version(roots.cgroup) if cfg.cgroup_version == "auto" else int(cfg.cgroup_version)
        driver = detect_driver(roots, version) if cfg.cgroup_driver == "auto" else cfg.cgroup_driver
        self.layout = CgroupLayout(roots, version, driver)
        log.info("cgroup v%d, %s driver, kubepods at %s", version, driver, self.layout.kubepods_dir())
        self.store = StateStore()
        self.kube_client: KubeClient | None = None
        self.kube_source: KubeSource | None = None
        self._kube: KubeSource | None = None
        self.events: EventRecorder | None = None
        self.source: FileSource | KubeSource
        if kubernetes_mode(cfg):
            self.source = self._kube_source(cfg, clock)
        else:
            self.source = FileSource(self.store, pods_file=cfg.pods_file, node_file=cfg.node_file,
                                     node_slo_file=cfg.node_slo_file)
        self.cache = MetricCache()
        self.audit = AuditLog(cfg.audit_log, clock=clock)
        # the collector's readers and the executor's writes share one descriptor budget, below the
        # reserves of the process and of the health server (qosmanager.host.descriptors)
        fds = self.fd_budget = (DescriptorBudget(cfg.max_fds) if cfg.max_fds >= 0
                                else DescriptorBudget.for_process())
        self.executor = Executor(self.layout, self.audit, dry_run=cfg.dry_run,
                                 force_seconds=cfg.force_update_seconds, budget=fds, clock=clock)
        if monotonic_ns is None:
            self.collector = Collector(self.layout, self.cache, self.store, clock=clock, budget=fds)
        else:
            self.collector = Collector(self.layout, self.cache, self.store, clock=clock, mono=monotonic_ns,
                                       budget=fds)
        self.collector.on_pod_removed.append(self.executor.forget)
        evict_mode = cfg.evict_mode or ("api" if self.kube_client is not None else "none")
        self.coordinator = EvictionCoordinator(self.store, self.layout, self.audit, mode=evict_mode,
                                               dry_run=cfg.dry_run, clock=clock,
                                               api=self._kube_evictor(evict_mode, clock))
        self._kube_events(cfg, clock)
        self._cpu_info: NodeCPUInfo | None = None
        self._cpu_info_at = float("-inf")
        self.shared = Shared(store=self.store, layout=self.layout, cache=self.cache, executor=self.executor,
                             gates=self.gates, cfg=cfg.qos, evictor=self.coordinator.execute,
                             cpu_info=self.cpu_info)
        self.manager = QoSManager(self.shared, only=cfg.strategies, clock=clock)
        self.scheduler = Scheduler(wall=clock, monotonic=monotonic, seed=seed)
        self.scheduler.add("collect", cfg.collect_interval, self.collect, jitter=0.0)
        # strategies start after the first samples exist (koordlet waits for the collectors too)
        self.strategy_names = self.manager.register(self.scheduler, first_delay=min(cfg.collect_interval, 1.0))
        log.info("strategies: %s", ", ".join(self.strategy_names) or "none enabled")
        self.stop_event = threading.Event()
        # /metrics and /healthz (--metrics-addr; empty disables): address checked now, bound on run()
        self.exporter: Exporter | None = Exporter.for_agent(self) if cfg.metrics_addr else None

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
        log.info("Kubernetes mode: node %s, API server %s (%s)", cfg.node_name,
                 self.kube_client.config.server, self.kube_client.config.origin)
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

        return KubeEvictor(self.kube_client, clock=clock)

    def _kube_events(self, cfg: AgentConfig, clock: Callable[[], float]) -> None:
        if self.kube_client is None or not cfg.kube_events or cfg.dry_run:
            return
        from qosmanager.host.cgroups import KubeQoS
        from qosmanager.states.kube.events import BELimitEvents, EventRecorder, ObjectRef

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
        self.events = recorder

    def wait_for_state(self, timeout: float | None = None) -> bool:
        """Kubernetes mode: start the watches and the event recorder and wait (``timeout`` seconds,
        None = until stopped) until the pods and the Node are known; standalone: True at once."""
        if self._kube is None:
            return True
        if self.events is not None:
            self.events.start()
        log.info("waiting for the pods and Node %s from the API server", self.cfg.node_name)
        ok = self._kube.wait_synced(timeout, self.stop_event)
        if ok:
            log.info("state received: %d pods, NodeSLO %s", len(self.store.pods),
                     "present" if self.store.nodeslo_present else "absent (defaults)")
        return ok

    def cpu_info(self) -> NodeCPUInfo | None:
        """CPU topology, re-read every ``cpu_info_refresh`` seconds (CPUs go on- and offline)."""
        now = self.clock()
        if self._cpu_info is None or now - self._cpu_info_at >= self.cfg.cpu_info_refresh:
            try:
                self._cpu_info = read_node_cpu_info(self.layout.roots)
            except (OSError, ValueError) as e:
                log.warning("cannot read the CPU topology: %s", e)
            self._cpu_info_at = now
        return self._cpu_info

    def collect(self, now: float) -> None:
        self.source.poll(now)
        self.collector.collect(now)

    def run(self, duration: float = 0.0) -> None:
        if self.exporter is not None:
            self.exporter.start()
        try:
            t0 = time.monotonic()
            if self.wait_for_state(duration if duration > 0 else None):
                left = duration - (time.monotonic() - t0) if duration > 0 else 0.0
                if duration <= 0 or left > 0:  # --duration counts the wait for the API server too
                    self.scheduler.run(self.stop_event, left)
        finally:
            self.close()

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        if self.exporter is not None:
            self.exporter.stop()
        if self._kube is not None:
            self._kube.stop()
        if self.events is not None:
            self.events.stop()
        if self.kube_client is not None:
            self.kube_client.close()
        self.collector.close()
        self.executor.close()
        self.audit.close()


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
        metrics_addr=args.metrics_addr,
        feature_gates=args.feature_gates,
        collect_interval=args.collect_interval,
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
    )


def run_from_args(args: argparse.Namespace) -> int:
    try:
        agent = Agent(config_from_args(args))
    except (ValueError, FileNotFoundError) as e:
        log.error("%s", e)
        print(f"qosmanager: {e}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.warning("received %s, stopping", signal.Signals(signum).name)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.run(args.duration)
    return 0
