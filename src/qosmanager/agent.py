"""Wiring of the agent: host detection, state, collector, executor, scheduler.

``qosmanager run`` builds an :class:`Agent` from its flags; ``simulate`` and the tests
build one directly.  Stopping (``--duration``, SIGTERM, SIGINT) leaves every file as it
is, so a restarted agent continues seamlessly: it re-reads what it finds and only
writes what differs.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor
from qosmanager.framework.scheduler import Scheduler
from qosmanager.host.cgroups import CgroupLayout, detect_driver, detect_version
from qosmanager.host.roots import HostRoots
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.states.files import FileSource
from qosmanager.states.store import StateStore

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


class Agent:
    def __init__(self, cfg: AgentConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.clock = clock
        roots = cfg.roots
        version = detect_version(roots.cgroup) if cfg.cgroup_version == "auto" else int(cfg.cgroup_version)
        driver = detect_driver(roots, version) if cfg.cgroup_driver == "auto" else cfg.cgroup_driver
        self.layout = CgroupLayout(roots, version, driver)
        log.info("cgroup v%d, %s driver, kubepods at %s", version, driver, self.layout.kubepods_dir())
        self.store = StateStore()
        self.source = FileSource(self.store, pods_file=cfg.pods_file, node_file=cfg.node_file,
                                 node_slo_file=cfg.node_slo_file)
        self.cache = MetricCache()
        self.audit = AuditLog(cfg.audit_log, clock=clock)
        self.executor = Executor(self.layout, self.audit, dry_run=cfg.dry_run,
                                 force_seconds=cfg.force_update_seconds, clock=clock)
        self.collector = Collector(self.layout, self.cache, self.store, clock=clock, max_fds=cfg.max_fds)
        self.collector.on_pod_removed.append(self.executor.forget)
        self.scheduler = Scheduler(wall=clock)
        self.scheduler.add("collect", cfg.collect_interval, self.collect, jitter=0.0)
        self.stop_event = threading.Event()

    def collect(self, now: float) -> None:
        self.source.poll(now)
        self.collector.collect(now)

    def run(self, duration: float = 0.0) -> None:
        try:
            self.scheduler.run(self.stop_event, duration)
        finally:
            self.close()

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
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
    )


def run_from_args(args: argparse.Namespace) -> int:
    agent = Agent(config_from_args(args))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.warning("received %s, stopping", signal.Signals(signum).name)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent.run(args.duration)
    return 0
