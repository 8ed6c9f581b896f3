"""The strategy API: every name a plugin strategy may import, in one module (``API_VERSION`` 1.0).

A plugin is a Python package with a :class:`Strategy` subclass, registered under the entry-point group
``qosmanager.strategies`` with its feature gate as the entry point's name (docs/strategies.md says how
to write, test, install and enable one).  Everything here keeps its name and meaning within a major
version of the API; a minor version only adds.  What this module does not export is internal to the
agent and may change in any release.

``python -m qosmanager.plugin`` lists the plugins this interpreter finds, with their package, version
and whether they load (exit status 1 when one does not).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from qosmanager.api.node import NodeMeta
from qosmanager.api.nodeslo import NodeSLOSpec
from qosmanager.api.pod import (
    QOS_BE,
    QOS_LS,
    QOS_LSE,
    QOS_LSR,
    QOS_NONE,
    QOS_SYSTEM,
    ContainerMeta,
    PodMeta,
)
from qosmanager.eviction.types import TARGET_POD_REQUEST, TARGET_POD_USED, EvictDecision, EvictResult, EvictTask, Victim
from qosmanager.executor.executor import MakeDir, Plan, PlanGroup, Request, Restore, Write, WriteResult
from qosmanager.framework.context import Context
from qosmanager.framework.demand import BE_CONTAINERS, CONTAINER, NODE, POD, QOS, Need
from qosmanager.framework.gates import FeatureGates
from qosmanager.framework.plugins import API_VERSION, GROUP
from qosmanager.framework.strategy import QoSConfig, Strategy
from qosmanager.host.cgroups import KubeQoS

if TYPE_CHECKING:
    from qosmanager.sim.harness import Harness

__all__ = [
    "API_VERSION", "BE_CONTAINERS", "CONTAINER", "GROUP", "NODE", "POD", "QOS", "QOS_BE", "QOS_LS", "QOS_LSE",
    "QOS_LSR", "QOS_NONE", "QOS_SYSTEM", "TARGET_POD_REQUEST", "TARGET_POD_USED",
    "ContainerMeta", "Context", "EvictDecision", "EvictResult", "EvictTask", "FeatureGates", "Harness", "KubeQoS",
    "MakeDir", "Need", "NodeMeta", "NodeSLOSpec", "Plan", "PlanGroup", "PodMeta", "QoSConfig", "Request",
    "Restore", "Strategy", "Victim", "Write", "WriteResult", "main",
]


def __getattr__(name: str) -> Any:
    # the fake-host harness for a plugin's tests, imported only when a test asks for it
    if name == "Harness":
        from qosmanager.sim.harness import Harness

        return Harness
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """List the plugins found (``python -m qosmanager.plugin``); 1 when one of them does not load."""
    from qosmanager.framework import plugins

    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        print("usage: python -m qosmanager.plugin  (lists the installed strategy plugins)", file=sys.stderr)
        return 2
    found = plugins.discovered()
    print(f"qosmanager strategy API {API_VERSION}; entry-point group {GROUP}: {len(found.plugins)} plugin(s)")
    for line in plugins.lines(found):
        print(f"  {line}")
    return 1 if any(p.status != plugins.LOADED for p in found.plugins) else 0


if __name__ == "__main__":
    raise SystemExit(main())
