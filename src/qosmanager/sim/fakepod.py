"""A fake host's pods and containers: what :class:`~qosmanager.sim.fakehost.FakeHost` lays out, what
:func:`~qosmanager.sim.objects.pod_object` turns into a Pod object and what
:mod:`~qosmanager.sim.koordnode` reads a koordinator node's values from (re-exported by ``fakehost``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from qosmanager.host.cgroups import KubeQoS


@dataclass
class FakeContainer:
    name: str
    container_id: str  # "containerd://<64 hex>"
    pids: list[int] = field(default_factory=list)


@dataclass
class FakePod:
    uid: str
    namespace: str
    name: str
    qos: KubeQoS
    containers: list[FakeContainer]
    sandbox_id: str | None = None  # "<runtime>://<hash>" of the pause container: laid out like a container


__all__ = ["FakeContainer", "FakePod"]
