"""Prometheus ``/metrics`` and ``/healthz`` of the agent (``--metrics-addr``).

* :mod:`~qosmanager.exporter.registry`: counters, gauges and histograms with label sets as custom
  collectors on ``prometheus_client``'s registry, and its encoders (the text format 0.0.4 and
  OpenMetrics, negotiated per request);
* :mod:`~qosmanager.exporter.agent_metrics`: the agent's families (koordlet's names where koordlet
  has the metric, the standard ``process_*`` ones, ``qosmanager_`` for the rest) and the O(1)
  hooks that feed them;
* :mod:`~qosmanager.exporter.health`: the ``/healthz`` checks;
* :mod:`~qosmanager.exporter.server`: the HTTP server (one non-blocking thread no client can hold).

:class:`Exporter` puts them together for one agent, read through a narrow view
(:mod:`~qosmanager.exporter.view`): the exporter does not import the agent.
"""

from __future__ import annotations

import logging
from typing import Any

from qosmanager.exporter.agent_metrics import AgentMetrics
from qosmanager.exporter.health import Health, HealthBounds
from qosmanager.exporter.registry import Counter, Gauge, Histogram, Registry
from qosmanager.exporter.server import MAX_CLIENTS, MetricsServer, descriptor_reserve, parse_addr
from qosmanager.exporter.view import AgentView
from qosmanager.framework.memreaction import MemoryReactions

log = logging.getLogger(__name__)


class Exporter:
    """The metrics, the health checks and the server of one agent."""

    def __init__(self, addr: str, metrics: AgentMetrics, health: Health, *,
                 max_clients: int = MAX_CLIENTS) -> None:
        self.metrics = metrics
        self.health = health
        self.server = MetricsServer(addr, metrics.registry.expose, health.check, max_clients=max_clients)

    @classmethod
    def for_agent(cls, agent: AgentView, addr: str | None = None, *, bounds: HealthBounds | None = None,
                  **kw: Any) -> Exporter:
        """Bind to ``agent``'s parts (an :class:`~qosmanager.exporter.view.AgentView`); the address is
        checked now (a bad one is a ValueError), bound on :meth:`start`.  The Kubernetes source is
        looked up as ``agent.kube_source`` at every read."""
        cfg = agent.cfg

        def kube_source() -> object:
            return getattr(agent, "kube_source", None)

        metrics = AgentMetrics(node_name=cfg.node_name, clock=agent.clock,
                               collect_interval=cfg.collect_interval, layout=agent.layout, store=agent.store,
                               cache=agent.cache, collector=agent.collector, executor=agent.executor,
                               coordinator=agent.coordinator, manager=agent.manager,
                               scheduler=agent.scheduler, file_source=agent.source, kube_source=kube_source)
        if {"memoryHigh", "memoryEvict"} & set(agent.strategy_names):  # memory protection's reaction times
            metrics.memory_reactions = MemoryReactions.for_agent(agent, metrics.on_memory_reaction)
        metrics.psi = getattr(agent, "psi", None)  # the PSI watch's events and triggers (None: no watch)
        files = [(kind, path) for kind, path in (("node", cfg.node_file), ("pods", cfg.pods_file),
                                                 ("nodeslo", cfg.node_slo_file)) if path]
        # a plugin strategy that keeps failing is stopped and named in its plugin/<gate> condition
        # (degraded, 200): it must not fail the check and have the agent restarted over it
        builtins = [n for n in agent.strategy_names if not agent.manager.is_plugin(n)]
        health = Health(metrics, bounds or HealthBounds.for_interval(cfg.collect_interval),
                        clock=agent.clock, store=agent.store, manager=agent.manager, files=files,
                        strategies=builtins, kube_source=kube_source)
        return cls(cfg.metrics_addr if addr is None else addr, metrics, health, **kw)

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> bool:
        """Serve; False (logged) when the address cannot be bound: the agent's QoS work goes on."""
        self.metrics.started_at = self.metrics.clock()
        try:
            self.server.start()
        except OSError as e:
            log.error("cannot serve /metrics and /healthz on %s:%d: %s; running without them",
                      self.server.host, self.server.port, e)
            return False
        return True

    def stop(self) -> None:
        self.server.stop()


__all__ = ["AgentMetrics", "AgentView", "Counter", "Exporter", "Gauge", "Health", "HealthBounds", "Histogram",
           "MetricsServer", "Registry", "descriptor_reserve", "parse_addr"]
