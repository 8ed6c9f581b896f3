"""The state store never lets one object stop the agent: a pod that cannot be read is skipped with
one log line naming it, every other pod is kept; a Node without capacity is refused; the collector
skips a pod whose slots cannot be built instead of freezing discovery."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.states.store import StateStore

DEEP = "[" * 1000 + "]" * 1000  # 2 KB that used to raise RecursionError out of the pod view


def pods(n: int = 4) -> list[dict[str, Any]]:
    return [pod_object(p) for p in FakeHost.make_pods(2 * n, containers_per_pod=2, seed=1)]


def named(obj: dict[str, Any], name: str, **meta: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(name=name, **meta)
    return obj


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]


def test_hostile_pods_are_skipped_one_line_each_and_every_other_pod_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = pods()
    hostile = named(good[0], "deep", uid="deep-uid")
    hostile["metadata"]["annotations"] = {"koordinator.sh/cpuBurst": DEEP, "koordinator.sh/blkioQOS": DEEP}
    bad_uid = named(good[0], "slashed", uid="x/y")
    newline_uid = named(good[0], "newline", uid="a\nb")
    store = StateStore()
    with caplog.at_level(logging.WARNING, logger="qosmanager.states.store"):
        assert store.set_pods([*good, hostile, bad_uid, "junk", newline_uid, {"metadata": None}])
    # the hostile annotation costs that pod its features only; the bad uids cost their pods
    assert sorted(store.pods) == sorted([p["metadata"]["uid"] for p in good] + ["deep-uid"])
    assert store.pods["deep-uid"].cpu_burst_invalid and store.pods["deep-uid"].blkio_qos_invalid
    lines = skipped_lines(caplog)
    assert len(lines) == 4, lines
    assert any(line.startswith("pod default/slashed skipped: ") and "'x/y'" in line for line in lines)
    assert any(line.startswith("pod default/newline skipped: ") for line in lines)
    assert all("\n" not in line for line in lines)
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pod default/deep: ")]
    assert len(warned) == 1
    assert "koordinator.sh/cpuBurst" in warned[0] and "koordinator.sh/blkioQOS" in warned[0]
    assert "4 pod(s) skipped" in store.errors["pods"]
    condition = store.conditions.get("state/pods")
    assert condition is not None and "default/slashed" in condition.message
    # the same input again: nothing new to say
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="qosmanager.states.store"):
        assert not store.set_pods([*good, hostile, bad_uid, "junk", newline_uid, {"metadata": None}])
    assert caplog.records == []
    # fixed: the condition and the error go
    assert store.set_pods(good)
    assert store.conditions.get("state/pods") is None and "pods" not in store.errors


def test_a_duplicate_uid_keeps_the_first_pod() -> None:
    good = pods()
    twin = named(good[0], "twin")
    store = StateStore()
    store.set_pods([*good, twin])
    assert store.pods[good[0]["metadata"]["uid"]].name == good[0]["metadata"]["name"]
    assert "default/twin" in store.errors["pods"] and "kept the first" in store.errors["pods"]


def test_a_watch_event_with_a_bad_pod_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    good = pods()
    store = StateStore()
    store.set_pods(good)
    gen = store.pods_generation
    deep = named(good[1], "deep-now")
    deep["metadata"]["annotations"] = {"koordinator.sh/memoryQOS": DEEP}
    assert store.upsert_pod(deep)  # the pod stays, its memoryQOS is invalid
    assert store.pods[good[1]["metadata"]["uid"]].memory_qos_invalid
    broken = copy.deepcopy(good[2])
    broken["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    with caplog.at_level(logging.ERROR, logger="qosmanager.states.store"):
        assert store.upsert_pod(broken)  # unreadable now: its old view leaves the set
        assert not store.upsert_pod(named(good[0], "new-bad", uid="../x"))  # never in the set
    uid = good[2]["metadata"]["uid"]
    assert uid not in store.pods and len(store.pods) == len(good) - 1
    assert store.pods_generation > gen
    assert len(skipped_lines(caplog)) == 2
    assert "2 pod(s) skipped" in store.errors["pods"]
    store.delete_pod(uid)
    assert "1 pod(s) skipped" in store.errors["pods"]
    assert store.upsert_pod(good[2])
    assert uid in store.pods


def test_a_node_without_capacity_is_refused_and_health_says_why(tmp_path: Path) -> None:
    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    good = node_object(host)
    zero = copy.deepcopy(good)
    zero["status"]["capacity"]["cpu"] = "0"
    store = StateStore()
    assert not store.set_node(zero)
    assert store.node is None
    assert "no Node is in force" in store.errors["node"] and "status.capacity.cpu" in store.errors["node"]
    assert store.set_node(good) and store.conditions.get("state/node") is None
    one = copy.deepcopy(good)
    one["status"]["capacity"]["memory"] = "-1"
    assert not store.set_node(one)
    assert store.node is not None and store.node.memory_capacity == host.memory_bytes  # the last good one
    condition = store.conditions.get("state/node")
    assert condition is not None and "keeping the last good one" in condition.message


def test_the_state_check_fails_while_no_usable_node_is_in_force(tmp_path: Path) -> None:
    from qosmanager.exporter.health import Health, HealthBounds

    class Metrics:
        started_at = 0.0

        def jobs(self) -> tuple[dict[str, float], dict[str, int]]:
            return {"collect": 0.0}, {}

    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    store = StateStore()
    health = Health(Metrics(), HealthBounds(), clock=lambda: 1.0, store=store)  # type: ignore[arg-type]
    missing = node_object(host)
    del missing["status"]["capacity"]["memory"]
    store.set_node(missing)
    ok, body = health.check()
    assert not ok
    assert "node: bad Node object" in body["checks"]["state"]["detail"]
    assert "status.capacity.memory: required" in body["checks"]["state"]["detail"]
    store.set_node(node_object(host))
    ok, body = health.check()
    assert ok, body


def test_the_collector_skips_a_pod_it_cannot_track_and_tracks_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = FakeHost(str(tmp_path / "host"), n_cpus=4)
    fakes = FakeHost.make_pods(6, containers_per_pod=2, seed=1)
    host.add_pods(fakes)
    store = StateStore()
    store.set_pods([pod_object(p) for p in fakes])
    col = Collector(host.layout, MetricCache(), store)
    try:
        # a view with a uid no cgroup can have, as a store without the uid check let through
        first = next(iter(store.pods.values()))
        bad = dataclasses.replace(first, uid="x/y")
        store.pods = {"x/y": bad, **store.pods}
        store.pods_generation += 1
        with caplog.at_level(logging.ERROR, logger="qosmanager.metrics.collector"):
            col.sync(1000.0)
            col.sync(1001.0)
        assert col.stats.pods == len(fakes)  # every other pod is tracked
        lines = [r.getMessage() for r in caplog.records if "is not sampled" in r.getMessage()]
        assert len(lines) == 1 and first.key in lines[0]
        # and discovery goes on: a new pod set is followed
        store.set_pods([pod_object(p) for p in fakes[1:]])
        col.sync(1002.0)
        assert col.stats.pods == len(fakes) - 1
    finally:
        col.close()


def test_a_changed_state_file_is_applied_once(tmp_path: Path) -> None:
    """One change of a file is one new NodeSLO (one generation, one report), not two."""
    from qosmanager.sim.objects import nodeslo_object
    from qosmanager.states.files import FileSource

    store = StateStore()
    path = tmp_path / "slo.json"
    path.write_text(json.dumps(nodeslo_object({"resourceUsedThresholdWithBE": {"enable": True}})))
    source = FileSource(store, node_slo_file=str(path))
    before = store.nodeslo_generation
    assert source.poll(1000.0) is True
    assert store.nodeslo_generation == before + 1
    assert source.poll(1001.0) is False and store.nodeslo_generation == before + 1


def test_the_store_holds_pods_only_as_far_as_it_reads_them() -> None:
    """A field the view does not read (managedFields, conditions) changing is no change: the view and
    the generation stay; the store's views hold no whole object."""
    store = StateStore()
    objs = pods(3)
    store.set_pods(objs, now=1.0)
    gen, views = store.pods_generation, dict(store.pods)
    touched = copy.deepcopy(objs)
    for o in touched:
        o["metadata"]["managedFields"] = [{"manager": "kubelet", "time": "2026-01-01T00:00:09Z"}]
        o["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert not store.set_pods(touched, now=2.0)
    assert store.pods_generation == gen and all(store.pods[u] is v for u, v in views.items())
    relabelled = copy.deepcopy(objs)
    relabelled[0]["metadata"]["labels"]["app"] = "renamed"
    assert store.set_pods(relabelled, now=3.0) and store.pods_generation == gen + 1


def test_a_batch_of_watch_events_is_one_rebuild_and_a_bad_pod_leaves_alone(
        caplog: pytest.LogCaptureFixture) -> None:
    store = StateStore()
    objs = pods(4)
    store.set_pods(objs[:3], now=1.0)
    gen = store.pods_generation
    uids = [o["metadata"]["uid"] for o in objs]
    bad = copy.deepcopy(objs[1])
    bad["spec"]["containers"] = "nope"
    renamed = named(objs[2], objs[2]["metadata"]["name"], labels={"app": "x"})
    untouched = copy.deepcopy(objs[0])
    untouched["status"]["conditions"] = [{"type": "Ready", "status": "False"}]  # not read: no change
    view0 = store.pods[uids[0]]
    with caplog.at_level(logging.ERROR):
        assert store.apply_pod_events({uids[0]: untouched, uids[1]: bad, uids[2]: renamed, uids[3]: objs[3]},
                                      now=2.0)
    assert store.pods_generation == gen + 1  # one rebuild for the batch
    assert set(store.pods) == {uids[0], uids[2], uids[3]} and store.pods[uids[0]] is view0
    assert store.pods[uids[2]].labels["app"] == "x"
    assert len(skipped_lines(caplog)) == 1 and store.conditions.get("state/pods") is not None
    # the bad pod deleted: its report goes; nothing else changed, no rebuild
    assert not store.apply_pod_events({uids[1]: None, uids[0]: untouched}, now=3.0)
    assert store.pods_generation == gen + 1 and store.conditions.get("state/pods") is None


def test_a_big_pods_file_that_is_not_json_keeps_the_last_pods_and_says_where_it_broke(tmp_path: Path) -> None:
    """A 5 MB pods file with one trailing comma went to the YAML parser (15 s, 298 MiB): it is refused
    at once with the JSON parser's place of the error, and the pods in force stay."""
    from qosmanager.states.files import FileSource

    store = StateStore()
    path = tmp_path / "pods.json"
    good = pods(2)
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"items": good}).encode())  # a BOM: still JSON
    source = FileSource(store, pods_file=str(path))
    assert source.poll(1.0) and len(store.pods) == len(good)
    filler = [{"metadata": {"name": f"f{i}", "namespace": "x" * 50}} for i in range(60_000)]
    text = json.dumps({"items": good + filler})
    path.write_text(text[:-2] + ",]}")
    assert not source.poll(2.0)
    assert len(store.pods) == len(good)
    cond = store.conditions.get("state/pods-file")
    assert cond is not None
    assert "not valid JSON (" in cond.message and "too large to be read as YAML" in cond.message
    assert "the last good pods stays in force" in cond.message
