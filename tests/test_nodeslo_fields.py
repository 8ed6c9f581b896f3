"""A bad NodeSLO field affects that field only, as in koordlet.

The NodeSLOs of the issue (each valid but for one field koordinator's CRD accepts) keep BE suppression
running; the dropped fields are reported in the ``nodeslo`` condition (so ``/healthz`` says
"degraded"), in ``qosmanager_nodeslo_invalid_fields{field}``, in one log line per problem and NodeSLO
change, and in one Warning Event on the Node per change; only a document that is not a NodeSLO at
all keeps the last good spec.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from promtext import parse
from qosmanager.api.nodeslo import parse_nodeslo
from qosmanager.exporter import AgentMetrics
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.states.kube.events import INVALID_NODESLO, WARNING, NodeSLOEvents, ObjectRef
from qosmanager.states.store import StateStore

NOW = 1000.0
BE_DIR = "kubepods/besteffort"
LS = FakePod("0a0a0a0a-0000-4000-8000-000000000001", "default", "ls-1", KubeQoS.BURSTABLE,
             [FakeContainer("c", "containerd://" + "1" * 64)])
BE = FakePod("0b0b0b0b-0000-4000-8000-000000000002", "default", "be-1", KubeQoS.BESTEFFORT,
             [FakeContainer("c", "containerd://" + "2" * 64)])
SUPPRESS = {"enable": True, "cpuSuppressPolicy": "cfsQuota"}

# koordinator's CRD accepts each of these; koordlet skips only what the bad value belongs to
ISSUE_EXAMPLES: dict[str, tuple[dict[str, Any], str | None]] = {
    "watermarkScaleFactor": ({"systemStrategy": {"watermarkScaleFactor": 500}},
                             "spec.systemStrategy.watermarkScaleFactor"),
    "cpuEvictBESatisfactionUpperPercent": ({"resourceUsedThresholdWithBE": {
        **SUPPRESS, "cpuEvictBESatisfactionUpperPercent": 120}},
        "spec.resourceUsedThresholdWithBE.cpuEvictBESatisfactionUpperPercent"),
    "cpuBurstPercent": ({"cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": -7}},
                        "spec.cpuBurstStrategy.cpuBurstPercent"),
    "cpuSuppressPolicy": ({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cpuSet"}},
                          "spec.resourceUsedThresholdWithBE.cpuSuppressPolicy"),  # koordlet's cpuset, reported
}


def issue_spec(name: str) -> dict[str, Any]:
    extra, _ = ISSUE_EXAMPLES[name]
    return {"resourceUsedThresholdWithBE": dict(SUPPRESS), **extra}


def suppressing_node(spec: dict[str, Any]) -> Harness:
    """8 CPUs; node 4.0 cores busy, LS 2.0, BE 1.5; BE quota unlimited; one cpuSuppress tick."""
    h = Harness(strategies=["cpuSuppress"], n_cpus=8, now=NOW)
    h.set_node(node_object(h.host))
    h.host.add_pods([LS, BE])
    h.set_pods([pod_object(LS), pod_object(BE)])
    h.set_nodeslo(spec)
    h.add_samples("node_cpu_usage", [(NOW, 4.0)])
    h.add_samples("pod_cpu_usage", [(NOW, 2.0)], pod=LS.uid)
    h.add_samples("pod_cpu_usage", [(NOW, 1.5)], pod=BE.uid)
    h.tick("cpuSuppress", NOW)
    return h


@pytest.mark.parametrize("name", sorted(ISSUE_EXAMPLES))
def test_the_issue_examples_keep_be_suppression_running(name: str) -> None:
    h = suppressing_node(issue_spec(name))
    quota = (h.read_file(h.cgroup_file("cpu", BE_DIR, "cpu.cfs_quota_us")) or "").strip()
    if name == "cpuSuppressPolicy":
        # "cpuSet" is not "cfsQuota": koordlet's cpuset policy, 2.7 cores -> 3 CPUs for BE
        cpus = (h.read_file(h.cgroup_file("cpuset", BE_DIR, "cpuset.cpus")) or "").strip()
        assert quota == "-1" and cpus not in ("", "0-7")
    else:
        # suppress = 8000 x 65 // 100 - 2000 (LS) - 500 (system: 4.0 - 3.5) = 2700 m -> 270000 us
        # (on the defaults, suppression is off: no write at all)
        assert quota == "270000"
    _, dropped = ISSUE_EXAMPLES[name]
    assert [p for p, _ in h.store.nodeslo.invalid_fields] == ([dropped] if dropped else [])


def test_dropped_fields_are_a_condition_a_gauge_and_one_log_line_per_change(
        caplog: pytest.LogCaptureFixture) -> None:
    store = StateStore()
    metrics = AgentMetrics(store=store, process=False)
    bad = {"metadata": {"resourceVersion": "7"}, "spec": {
        "resourceUsedThresholdWithBE": {**SUPPRESS, "cpuEvictBESatisfactionUpperPercent": 120},
        "systemStrategy": {"watermarkScaleFactor": 500}}}
    caplog.set_level(logging.WARNING, logger="qosmanager.states.store")
    assert store.set_nodeslo(bad, now=NOW)
    assert store.nodeslo.resource_used_threshold_with_be.enable is True  # the rest applies
    condition = store.conditions.get("nodeslo")
    assert condition is not None
    message = condition.message
    assert "spec.systemStrategy.watermarkScaleFactor: must be an integer in [1, 400], got 500" in message
    assert "spec.resourceUsedThresholdWithBE.cpuEvictBESatisfactionUpperPercent" in condition.message
    gauge = parse(metrics.registry.render())["qosmanager_nodeslo_invalid_fields"]
    assert gauge.series() == {
        (("field", "spec.resourceUsedThresholdWithBE.cpuEvictBESatisfactionUpperPercent"),): 1.0,
        (("field", "spec.systemStrategy.watermarkScaleFactor"),): 1.0,
    }
    logged = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(logged) == 2 and all(m.startswith("NodeSLO: spec.") for m in logged)
    # the same NodeSLO again (a file touched, a re-list): nothing logged again
    caplog.clear()
    assert store.set_nodeslo(bad, now=NOW + 1)
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]
    # a change that keeps one bad field: that one logged once more, the condition updated
    fixed = {"spec": {"resourceUsedThresholdWithBE": dict(SUPPRESS),
                      "systemStrategy": {"watermarkScaleFactor": 500}}}
    assert store.set_nodeslo(fixed, now=NOW + 2)
    assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] == [
        "NodeSLO: spec.systemStrategy.watermarkScaleFactor dropped: must be an integer in [1, 400], got 500; "
        "left unset, as if not written"]
    condition = store.conditions.get("nodeslo")
    assert condition is not None and "cpuEvictBESatisfactionUpperPercent" not in condition.message
    # all fixed: the condition and the gauge's series go
    assert store.set_nodeslo({"spec": {"resourceUsedThresholdWithBE": dict(SUPPRESS)}}, now=NOW + 3)
    assert store.conditions.get("nodeslo") is None
    assert parse(metrics.registry.render())["qosmanager_nodeslo_invalid_fields"].series() == {}


def test_a_document_that_is_not_a_nodeslo_keeps_the_last_good_spec() -> None:
    store = StateStore()
    assert not store.set_nodeslo({"kind": "Node"})  # before any NodeSLO: the defaults stay
    condition = store.conditions.get("nodeslo")
    assert condition is not None and "koordlet's defaults stay" in condition.message
    assert store.set_nodeslo({"spec": {"resourceUsedThresholdWithBE": {**SUPPRESS,
                                                                       "cpuSuppressThresholdPercent": 40}}})
    good = store.nodeslo
    for bad in ({"kind": "Node", "spec": {}}, {"apiVersion": "v1"}, {"spec": [1, 2]}, {"metadata": "x"}):
        assert not store.set_nodeslo(bad)
        assert store.nodeslo is good and "nodeslo" in store.errors
        condition = store.conditions.get("nodeslo")
        assert condition is not None and "the last good one stays in force" in condition.message
    assert store.set_nodeslo({"spec": {}})  # a good one again
    assert "nodeslo" not in store.errors and store.conditions.get("nodeslo") is None


def test_listeners_hear_each_nodeslo_change_once() -> None:
    store = StateStore()
    heard: list[Any] = []
    store.on_nodeslo.append(heard.append)
    store.on_nodeslo.append(lambda spec: 1 / 0)  # a failing listener costs nothing
    spec = {"spec": {"systemStrategy": {"watermarkScaleFactor": 500}}}
    assert store.set_nodeslo(spec) and store.set_nodeslo(spec)
    assert len(heard) == 1 and heard[0].invalid_fields
    assert store.set_nodeslo({"spec": {"systemStrategy": {"watermarkScaleFactor": 600}}})
    assert len(heard) == 2


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[ObjectRef, str, str, str, str]] = []

    def record(self, ref: ObjectRef, type_: str, reason: str, message: str, action: str = "") -> bool:
        self.events.append((ref, type_, reason, message, action))
        return True


def test_a_nodeslo_with_dropped_fields_is_a_warning_event_on_the_node() -> None:
    recorder = Recorder()
    node = ObjectRef("Node", "node-1", uid="u-1")
    events = NodeSLOEvents(recorder, lambda: node)  # type: ignore[arg-type]
    events.on_nodeslo(parse_nodeslo({"spec": {}}))
    assert recorder.events == []  # nothing dropped, no Event
    events.on_nodeslo(parse_nodeslo({"metadata": {"resourceVersion": "12"},
                                     "spec": {"systemStrategy": {"watermarkScaleFactor": 500}}}))
    [(ref, type_, reason, message, _)] = recorder.events
    assert (ref, type_, reason) == (node, WARNING, INVALID_NODESLO)
    assert message.startswith("NodeSLO (resourceVersion 12): 1 NodeSLO field dropped, everything else "
                              "applies: spec.systemStrategy.watermarkScaleFactor: must be an integer in "
                              "[1, 400], got 500")


def test_a_misspelt_key_and_a_reinterpreted_enum_reach_healthz_the_gauge_the_log_and_the_event(
        caplog: pytest.LogCaptureFixture) -> None:
    """cpuSuppressPolicy: cfsquota (koordlet: cpuset) and cpuSuppressThresholdPercnt: 65 (koordlet: the
    default) changed behaviour silently; koordlet's reading applies, and each is reported as invalid."""
    store = StateStore()
    metrics = AgentMetrics(store=store, process=False)
    recorder = Recorder()
    store.on_nodeslo.append(NodeSLOEvents(recorder, lambda: ObjectRef("Node", "n"),  # type: ignore[arg-type]
                                          ).on_nodeslo)
    caplog.set_level(logging.WARNING, logger="qosmanager.states.store")
    key = "cpuSuppressThresholdPercnt\x1b[2K\r2026-01-01 00:00:00,000 ERROR forged"
    assert store.set_nodeslo({"spec": {"resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressPolicy": "cfsquota", "cpuSuppressThresholdPercnt": 40, key: 1}}}, now=NOW)
    thr = store.nodeslo.resource_used_threshold_with_be
    assert (thr.enable, thr.cpu_suppress_policy, thr.cpu_suppress_threshold_percent) == (True, "cpuset", 65)
    condition = store.conditions.get("nodeslo")  # /healthz: degraded
    assert condition is not None
    assert 'cpuSuppressPolicy: unknown value "cfsquota": koordlet reads it as "cpuset"' in condition.message
    assert "cpuSuppressThresholdPercnt: unknown field: koordlet ignores it" in condition.message
    fields = {labels[0][1] for labels in
              parse(metrics.registry.render())["qosmanager_nodeslo_invalid_fields"].series()}
    escaped = "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercnt\\x1b[2K\\r2026-01-01 00:00:00,000 ER..."
    assert fields == {"spec.resourceUsedThresholdWithBE.cpuSuppressPolicy",
                      "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercnt", escaped}
    [(_, type_, reason, message, _)] = recorder.events
    assert (type_, reason) == (WARNING, INVALID_NODESLO) and "cfsquota" in message and "Percnt" in message
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3 and all("\x1b" not in m and "\r" not in m for m in logged)
