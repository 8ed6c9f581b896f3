"""BEBurstCap on the agent's fake host: how a plugin author tests a strategy without a node.

:class:`qosmanager.plugin.Harness` lays out a fake host (a cgroup v1 or v2 tree, /proc, /sys) in a
temporary directory and runs the agent's real manager, executor and audit on it.  A test sets the
Node, the pods and metric samples, ticks the strategy at chosen times and reads the files back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from be_burst_cap import ANNOTATION_ENABLED, BEBurstCap

from qosmanager.plugin import Harness

NOW = 1000.0
LS_ID, BE_ID = "containerd://" + "b" * 64, "containerd://" + "a" * 64


def pod(uid: str, qos_class: str, container_id: str, qos_label: str | None = None) -> dict[str, Any]:
    labels = {"koordinator.sh/qosClass": qos_label} if qos_label else {}
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "qosClass": qos_class,
                       "containerStatuses": [{"name": "c", "containerID": container_id,
                                              "state": {"running": {}}}]}}


def node(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "node", "annotations": annotations or {}},
            "status": {"capacity": {"cpu": "8", "memory": "64Gi"}, "allocatable": {"cpu": "8", "memory": "64Gi"}}}


@pytest.fixture(params=[1, 2], ids=["cgroup-v1", "cgroup-v2"])
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    h = Harness(version=request.param, gates={"BEBurstCap": True}, strategies=["beBurstCap"])
    h.set_node(node())
    h.set_pods([pod("ls-1", "Burstable", LS_ID, "LS"), pod("be-1", "BestEffort", BE_ID, "BE")])
    yield h
    h.close()


def burst_files(h: Harness) -> list[str]:
    pod_dir = h.host.pod_dir("be-1")
    name = "cpu.cfs_burst_us" if h.host.version == 1 else "cpu.max.burst"
    return [h.cgroup_file("cpu", d, name) for d in (pod_dir, f"{pod_dir}/{'a' * 64}")]


def throttled(h: Harness, t: float, ratio: float) -> None:
    h.add_samples("container_throttled_ratio", [(t, ratio)], container=LS_ID)  # keyed by container id


def test_discovered_as_the_agent_finds_it(h: Harness) -> None:
    assert isinstance(h.strategy("beBurstCap"), BEBurstCap)
    info = {p.gate: p for p in h.manager.plugins}["BEBurstCap"]
    assert (info.strategy, info.package, info.status) == ("beBurstCap", "be-burst-cap", "loaded")


def test_caps_be_burst_while_ls_is_throttled_and_restores_it_after(h: Harness) -> None:
    files = burst_files(h)
    for f in files:
        h.write_file(f, "50000\n")  # what someone gave BE before
    throttled(h, NOW, 0.25)
    h.tick("beBurstCap", NOW)
    assert [(h.read_file(f) or "").strip() for f in files] == ["0", "0"]
    audit = [r for r in h.audit.recent if r["strategy"] == "beBurstCap" and r["executed"]]
    assert len(audit) == 2 and "throttled up to 25%" in audit[0]["reason"]
    # between the two thresholds the cap holds (hysteresis)
    throttled(h, NOW + 1, 0.07)
    h.tick("beBurstCap", NOW + 1)
    assert [(h.read_file(f) or "").strip() for f in files] == ["0", "0"]
    # below the release threshold every file gets back what it held
    throttled(h, NOW + 2, 0.01)
    h.tick("beBurstCap", NOW + 2)
    assert [(h.read_file(f) or "").strip() for f in files] == ["50000", "50000"]


def test_holds_without_a_throttling_sample_and_leaves_calm_nodes_alone(h: Harness) -> None:
    files = burst_files(h)
    before = [h.read_file(f) for f in files]
    assert h.tick("beBurstCap", NOW) == []  # no sample at all: nothing decided
    throttled(h, NOW + 1, 0.02)
    h.tick("beBurstCap", NOW + 1)
    assert [h.read_file(f) for f in files] == before


def test_the_node_annotation_switches_it_off_and_restores(h: Harness) -> None:
    files = burst_files(h)
    for f in files:
        h.write_file(f, "20000\n")
    throttled(h, NOW, 0.5)
    h.tick("beBurstCap", NOW)
    assert [(h.read_file(f) or "").strip() for f in files] == ["0", "0"]
    h.set_node(node({ANNOTATION_ENABLED: "false"}))
    throttled(h, NOW + 1, 0.5)
    h.tick("beBurstCap", NOW + 1)
    assert [(h.read_file(f) or "").strip() for f in files] == ["20000", "20000"]


def test_dry_run_decides_and_writes_nothing() -> None:
    h = Harness(gates={"BEBurstCap": True}, strategies=["beBurstCap"], dry_run=True)
    try:
        h.set_node(node())
        h.set_pods([pod("ls-1", "Burstable", LS_ID, "LS"), pod("be-1", "BestEffort", BE_ID, "BE")])
        for f in burst_files(h):
            h.write_file(f, "50000\n")
        throttled(h, NOW, 0.3)
        results = h.tick("beBurstCap", NOW)
        assert {r.status for r in results} == {"dry-run"}
        assert [h.read_file(f) for f in burst_files(h)] == ["50000\n", "50000\n"]
    finally:
        h.close()
