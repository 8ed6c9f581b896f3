"""The framework's shared settings: :class:`QoSConfig`, the QoS manager's flags.

A module of its own so that the context, the strategies and the agent can all import it without
importing each other (:mod:`~qosmanager.framework.strategy` keeps exporting it too).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class QoSConfig:
    """The QoS manager's flags (koordlet-qos §2.1), in seconds."""

    collect_interval: float = 1.0
    reconcile_interval: float = 1.0
    cpu_suppress_interval: float = 1.0
    cpu_evict_interval: float = 1.0
    memory_evict_interval: float = 1.0
    memory_evict_cool_time: float = 4.0
    cpu_evict_cool_time: float = 20.0
    force_update_seconds: float = 60.0
    # the kubelet's CPU manager policy when given ("none" | "static"); None: read from the node
    # (qosmanager.host.kubelet_cpu), else the topology annotation, else "none"
    cpu_manager_policy: str | None = None

    def interval(self, key: str) -> float:
        return float(getattr(self, f"{key}_interval"))
