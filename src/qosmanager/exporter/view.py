"""What the exporter reads of the agent: a narrow view, so the exporter does not import the agent.

:class:`AgentView` names the parts :meth:`Exporter.for_agent <qosmanager.exporter.Exporter.for_agent>`
binds its metrics and health checks to; :class:`~qosmanager.agent.Agent` is one (checked by mypy
where the agent builds its exporter).  Read-only properties, so any object holding these parts
(a test's hand-made agent included) fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from qosmanager.eviction.coordinator import EvictionCoordinator
    from qosmanager.executor.executor import Executor
    from qosmanager.framework.manager import QoSManager
    from qosmanager.framework.scheduler import Scheduler
    from qosmanager.host.cgroups import CgroupLayout
    from qosmanager.metrics.cache import MetricCache
    from qosmanager.metrics.collector import Collector
    from qosmanager.states.store import StateStore


class AgentConfigView(Protocol):
    """The settings the exporter reports on."""

    @property
    def node_name(self) -> str: ...
    @property
    def collect_interval(self) -> float: ...
    @property
    def metrics_addr(self) -> str: ...
    @property
    def node_file(self) -> str | None: ...
    @property
    def pods_file(self) -> str | None: ...
    @property
    def node_slo_file(self) -> str | None: ...


class AgentView(Protocol):
    """The agent's parts the exporter reads (the Kubernetes source is looked up as ``kube_source`` at
    every read, where there is one)."""

    @property
    def cfg(self) -> AgentConfigView: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def layout(self) -> CgroupLayout: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def cache(self) -> MetricCache: ...
    @property
    def collector(self) -> Collector: ...
    @property
    def executor(self) -> Executor: ...
    @property
    def coordinator(self) -> EvictionCoordinator: ...
    @property
    def manager(self) -> QoSManager: ...
    @property
    def scheduler(self) -> Scheduler: ...
    @property
    def source(self) -> object: ...
    @property
    def strategy_names(self) -> Sequence[str]: ...
