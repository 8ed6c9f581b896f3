"""Pod views on kubelet-shaped /pods items; expected numbers are worked out by hand in comments."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from qosmanager.api.nodeslo import BlkIOQOS
from qosmanager.api.pod import (
    BATCH_CPU,
    BATCH_MEMORY,
    MID_CPU,
    MID_MEMORY,
    PodMeta,
    PrunedPod,
    parse_int32,
    pod_digest,
    pod_list,
    pod_meta,
    prune_pod,
    prune_pod_hook,
)

MI = 2**20
GI = 2**30

# A trimmed but faithful item of the kubelet's /pods answer (a Deployment's LS pod).
KUBELET_ITEM: dict[str, Any] = {
    "metadata": {
        "name": "web-7d4b9c6f5-x2x9k",
        "generateName": "web-7d4b9c6f5-",
        "namespace": "shop",
        "uid": "6c1e0b34-2f0d-4c1e-9a67-0d3b9e7e1a11",
        "resourceVersion": "981234",
        "creationTimestamp": "2024-05-01T10:00:00Z",
        "labels": {"app": "web", "pod-template-hash": "7d4b9c6f5", "koordinator.sh/qosClass": "LS"},
        "annotations": {
            "kubernetes.io/config.seen": "2024-05-01T10:00:01.5Z",
            "kubernetes.io/config.source": "api",
        },
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c6f5", "uid": "r1"}
        ],
    },
    "spec": {
        "volumes": [{"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": []}}],
        "containers": [
            {
                "name": "app",
                "image": "registry.example/web:1.2",
                "resources": {
                    "limits": {"cpu": "2", "memory": "4Gi"},
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                },
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            },
            {
                "name": "log-shipper",
                "image": "registry.example/shipper:3",
                "resources": {"limits": {"cpu": "200m", "memory": "256Mi"}, "requests": {"cpu": "100m"}},
            },
        ],
        "restartPolicy": "Always",
        "nodeName": "node-1",
        "priority": 0,
        "priorityClassName": "default",
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
    },
    "status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "hostIP": "10.0.0.5",
        "podIP": "10.244.1.17",
        "startTime": "2024-05-01T10:00:02Z",
        "containerStatuses": [
            {
                "name": "app",
                "state": {"running": {"startedAt": "2024-05-01T10:00:05Z"}},
                "ready": True,
                "restartCount": 0,
                "image": "registry.example/web:1.2",
                "containerID": "containerd://aaaa1111",
            },
            {
                "name": "log-shipper",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "ready": False,
                "restartCount": 4,
                "containerID": "containerd://bbbb2222",
            },
        ],
        "qosClass": "Burstable",
    },
}


def make_pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    labels: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    priority: int | None = None,
    qos_class: str | None = None,
    overhead: dict[str, Any] | None = None,
    name: str = "p",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if priority is not None:
        spec["priority"] = priority
    if overhead is not None:
        spec["overhead"] = overhead
    status: dict[str, Any] = {"phase": "Running"}
    if qos_class is not None:
        status["qosClass"] = qos_class
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": status,
    }


def ctr(
    name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources, **extra}


# ---------------------------------------------------------------------------------------------
# A realistic kubelet item


def test_kubelet_item_view() -> None:
    pod = pod_meta(KUBELET_ITEM)
    assert (pod.uid, pod.namespace, pod.name, pod.key) == (
        "6c1e0b34-2f0d-4c1e-9a67-0d3b9e7e1a11",
        "shop",
        "web-7d4b9c6f5-x2x9k",
        "shop/web-7d4b9c6f5-x2x9k",
    )
    assert pod.resource_version == "981234" and pod.phase == "Running" and pod.active
    assert (pod.kube_qos, pod.qos_raw, pod.qos) == ("Burstable", "LS", "LS")
    # spec.priority 0 is in no range -> raw none; LS defaults to koord-prod, value 9500 (0 does not count).
    assert (pod.priority, pod.priority_class_raw, pod.priority_class, pod.priority_value) == (
        0,
        "",
        "koord-prod",
        9500,
    )
    app, shipper = pod.containers
    assert (app.name, app.container_id, app.running) == ("app", "containerd://aaaa1111", True)
    assert (shipper.container_id, shipper.running) == ("containerd://bbbb2222", False)
    assert dict(app.requests) == {"cpu": 500, "memory": GI}
    assert dict(app.limits) == {"cpu": 2000, "memory": 4 * GI}
    # log-shipper has no memory request: it defaults to its 256Mi limit, as the apiserver would store it.
    assert dict(shipper.requests) == {"cpu": 100, "memory": 256 * MI}
    assert pod.cpu_request_milli == 600 and pod.memory_request == GI + 256 * MI
    assert pod.cpu_limit_milli == 2200 and pod.memory_limit == 4 * GI + 256 * MI
    assert (pod.batch_cpu_request, pod.batch_cpu_limit) == (0, -1)  # no batch resources: unlimited
    assert not pod.is_be() and not pod.eviction_enabled and pod.eviction_allowed("CPUEvict")
    assert pod.warnings == ()
    # the view keeps no object, only the digest of what it read
    assert pod.digest == pod_digest(KUBELET_ITEM) and isinstance(pod.digest, int)
    assert not any(isinstance(getattr(pod, f), dict) and "metadata" in getattr(pod, f) for f in PodMeta.__slots__)


# ---------------------------------------------------------------------------------------------
# Kubernetes QoS computation (no status.qosClass)


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([ctr("a")], None, "BestEffort"),
        ([ctr("a", limits={"cpu": "0", "memory": "0"})], None, "BestEffort"),  # zero amounts do not count
        ([ctr("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], None, "Guaranteed"),
        ([ctr("a", limits={"cpu": "1", "memory": "1Gi"})], None, "Guaranteed"),  # requests default to limits
        ([ctr("a", {"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})], None, "Guaranteed"),
        ([ctr("a", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], None, "Burstable"),
        ([ctr("a", limits={"cpu": "1"})], None, "Burstable"),  # memory not limited
        # An explicit zero cpu request is not a request: cpu is limited but not requested.
        ([ctr("a", {"cpu": "0", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], None, "Burstable"),
        ([ctr("a", {"memory": "1Gi"})], None, "Burstable"),
        (
            [ctr("a", limits={"cpu": "1", "memory": "1Gi"}), ctr("b", {"cpu": "1"})],
            None,
            "Burstable",
        ),
        # Init containers count: an unlimited init container makes a limited pod Burstable.
        ([ctr("a", limits={"cpu": "1", "memory": "1Gi"})], [ctr("i", {"cpu": "100m"})], "Burstable"),
        (
            [ctr("a", limits={"cpu": "1", "memory": "1Gi"})],
            [ctr("i", limits={"cpu": "2", "memory": "2Gi"})],
            "Guaranteed",
        ),
        # Extended resources do not decide the QoS: a batch-only pod is BestEffort.
        ([ctr("a", {BATCH_CPU: "1000"}, {BATCH_CPU: "1000"})], None, "BestEffort"),
    ],
)
def test_kube_qos_is_computed_when_status_lacks_it(
    containers: list[dict], init: list[dict] | None, expected: str
) -> None:
    pod = pod_meta(make_pod(containers, init=init))
    assert pod.kube_qos == expected
    assert pod.qos == {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}[expected]


def test_status_qos_class_wins_and_a_bogus_one_is_recomputed() -> None:
    limited = [ctr("a", limits={"cpu": "1", "memory": "1Gi"})]
    assert pod_meta(make_pod(limited, qos_class="Burstable")).kube_qos == "Burstable"
    pod = pod_meta(make_pod(limited, qos_class="Platinum"))
    assert pod.kube_qos == "Guaranteed"
    assert any("Platinum" in w for w in pod.warnings)


def test_koordinator_qos_label() -> None:
    best_effort = [ctr("a")]
    assert pod_meta(make_pod(best_effort, labels={"koordinator.sh/qosClass": "LSE"})).qos == "LSE"
    pod = pod_meta(make_pod(best_effort, labels={"koordinator.sh/qosClass": "GOLD"}))
    assert (pod.qos_raw, pod.qos) == ("", "BE")  # unknown label -> none -> from kube QoS
    be = pod_meta(make_pod(best_effort, labels={"koordinator.sh/qosClass": "BE"}))
    assert be.is_be()
    assert not pod.is_be()  # BE by default only, not labelled BE


# ---------------------------------------------------------------------------------------------
# Pod requests and limits with init containers, sidecars and overhead


def test_pod_requests_and_limits_with_init_sidecars_and_overhead() -> None:
    containers = [
        ctr("a", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"}),
        ctr("b", {"cpu": "250m", "memory": "512Mi"}),
    ]
    init = [
        ctr("init-1", {"cpu": "2", "memory": "256Mi"}, {"memory": "512Mi"}),
        ctr("s1", {"cpu": "100m", "memory": "128Mi"}, {"cpu": "200m"}, restartPolicy="Always"),
        ctr("init-2", {"cpu": "1", "memory": "3Gi"}),
    ]
    pod = pod_meta(make_pod(containers, init=init, overhead={"cpu": "50m", "memory": "64Mi"}))
    # Requests: regular 750m/1536Mi, + sidecar s1 -> 850m/1664Mi.  Init steps: init-1 alone 2000m/256Mi;
    # s1's cumulative sidecars 100m/128Mi; init-2 next to s1 1100m/3200Mi.  Peak 2000m/3200Mi beats
    # the running set, then + overhead 50m/64Mi.
    assert pod.cpu_request_milli == 2050
    assert pod.memory_request == 3264 * MI
    # Limits: regular cpu 1000m, mem 2048Mi; s1 adds cpu 200m -> 1200m.  Init steps: init-1 mem 512Mi,
    # s1 cpu 200m, init-2 (no limits) + sidecars cpu 200m.  Max -> 1200m / 2048Mi; overhead is added to
    # both since both exist -> 1250m / 2112Mi.  But container b has no cpu limit -> cpu unlimited.
    assert pod.cpu_limit_milli == -1
    assert pod.memory_limit == 2112 * MI
    sidecar = pod.init_containers[1]
    assert (sidecar.init, sidecar.sidecar) == (True, True)
    assert (pod.init_containers[0].init, pod.init_containers[0].sidecar) == (True, False)
    assert [c.name for c in pod.containers] == ["a", "b"]


def test_pod_cpu_limit_when_every_long_running_container_is_limited() -> None:
    containers = [ctr("a", limits={"cpu": "1500m"}), ctr("b", limits={"cpu": "500m", "memory": "1Gi"})]
    init = [ctr("i", limits={"cpu": "4"}), ctr("s", limits={"cpu": "250m"}, restartPolicy="Always")]
    pod = pod_meta(make_pod(containers, init=init, overhead={"cpu": "100m", "memory": "10Mi"}))
    # Running: 1500 + 500 + sidecar 250 = 2250m; init step i alone: 4000m (s starts after it).
    # max(2250, 4000) + overhead 100 = 4100m.  Memory: only b limits it: 1Gi + overhead 10Mi.
    assert pod.cpu_limit_milli == 4100
    assert pod.memory_limit == GI + 10 * MI
    # A sidecar without a cpu limit leaves the pod without a CFS quota.
    init[1] = ctr("s", requests={"cpu": "250m"}, restartPolicy="Always")
    assert pod_meta(make_pod(containers, init=init)).cpu_limit_milli == -1


def test_memory_limit_absent_everywhere_is_minus_one_and_overhead_is_not_added() -> None:
    pod = pod_meta(make_pod([ctr("a", limits={"cpu": "1"})], overhead={"memory": "64Mi", "cpu": "10m"}))
    assert pod.memory_limit == -1
    assert pod.cpu_limit_milli == 1010
    assert pod.memory_request == 64 * MI  # requests do get the overhead


def test_sums_are_exact_before_rounding() -> None:
    # Three 0.5m requests: upstream sums the quantities (1.5m) and rounds once -> 2, not 3.
    pod = pod_meta(make_pod([ctr(n, {"cpu": "0.0005"}) for n in "abc"]))
    assert pod.cpu_request_milli == 2
    assert [c.requests["cpu"] for c in pod.containers] == [1, 1, 1]


# ---------------------------------------------------------------------------------------------
# Batch and mid resources (infra §7.3)


def test_batch_resources_over_regular_and_sidecar_containers() -> None:
    containers = [
        ctr("c1", {BATCH_CPU: "1000", BATCH_MEMORY: "1Gi"}, {BATCH_CPU: "2000", BATCH_MEMORY: "2Gi"}),
        ctr("c2", {BATCH_CPU: "0", BATCH_MEMORY: "512Mi"}, {BATCH_MEMORY: "1Gi"}),  # no batch-cpu limit
        ctr(
            "c3", {BATCH_CPU: "-500"}, {BATCH_CPU: "1000", BATCH_MEMORY: "0"}
        ),  # negative request, zero limit
    ]
    init = [
        ctr("plain-init", {BATCH_CPU: "5000", BATCH_MEMORY: "8Gi"}),  # ordinary init: ignored
        ctr(
            "s",
            {BATCH_CPU: "300", BATCH_MEMORY: "256Mi"},
            {BATCH_CPU: "300", BATCH_MEMORY: "256Mi"},
            restartPolicy="Always",
        ),
    ]
    pod = pod_meta(make_pod(containers, init=init, labels={"koordinator.sh/qosClass": "BE"}))
    # c3's batch-memory request defaults to its "0" limit.
    assert pod.batch_cpu_request == 1000 + 0 + 0 + 300
    assert pod.batch_cpu_limit == -1  # c2 has none
    assert pod.batch_memory_request == GI + 512 * MI + 0 + 256 * MI
    assert pod.batch_memory_limit == -1  # c3's is 0 (unlimited)
    c1 = pod.containers[0]
    assert (c1.requests[BATCH_CPU], c1.limits[BATCH_MEMORY]) == (1000, 2 * GI)


def test_batch_limits_sum_when_every_container_has_one() -> None:
    containers = [
        ctr("a", {BATCH_CPU: "1000"}, {BATCH_CPU: "1500", BATCH_MEMORY: "1Gi"}),
        ctr("b", limits={BATCH_CPU: "500", BATCH_MEMORY: "2Gi"}),
    ]
    pod = pod_meta(make_pod(containers))
    assert (pod.batch_cpu_limit, pod.batch_memory_limit) == (2000, 3 * GI)
    assert pod.batch_cpu_request == 1000 + 500  # b's request defaults to its limit
    assert pod.batch_memory_request == GI + 2 * GI


def test_request_for_follows_the_priority_class() -> None:
    mid = pod_meta(
        make_pod(
            [
                ctr("a", {MID_CPU: "1500", MID_MEMORY: "3Gi", "cpu": "100m", "memory": "1Gi"}),
                ctr("b", {MID_CPU: "-1"}),
            ],
            labels={"koordinator.sh/priority-class": "koord-mid"},
        )
    )
    assert mid.request_for("cpu") == (MID_CPU, 1500)
    assert mid.request_for("memory") == (MID_MEMORY, 3 * GI)
    batch = pod_meta(
        make_pod([ctr("a", {BATCH_CPU: "2000", BATCH_MEMORY: "1Gi", "cpu": "1"})], priority=5100)
    )
    assert batch.priority_class == "koord-batch"
    assert batch.request_for("cpu") == (BATCH_CPU, 2000)
    assert batch.request_for("memory") == (BATCH_MEMORY, GI)
    prod = pod_meta(make_pod([ctr("a", {"cpu": "1500m", "memory": "2Gi"})], priority=9100))
    assert prod.request_for("cpu") == ("cpu", 1500)
    assert prod.request_for("memory") == ("memory", 2 * GI)
    with pytest.raises(ValueError, match="'cpu' or 'memory'"):
        prod.request_for("gpu")


# ---------------------------------------------------------------------------------------------
# Priority (qos §1.2)


@pytest.mark.parametrize(
    ("labels", "priority", "containers", "raw", "klass", "value"),
    [
        (
            {"koordinator.sh/priority-class": "koord-batch"},
            9500,
            [ctr("a")],
            "koord-batch",
            "koord-batch",
            9500,
        ),
        ({"koordinator.sh/priority-class": "koord-mid"}, None, [ctr("a")], "koord-mid", "koord-mid", 7500),
        # An unknown label means none; it does not fall back to spec.priority.  QoS default: BE -> batch.
        ({"koordinator.sh/priority-class": "koord-gold"}, 9500, [ctr("a")], "", "koord-batch", 9500),
        ({}, 7000, [ctr("a")], "koord-mid", "koord-mid", 7000),
        ({}, 7999, [ctr("a")], "koord-mid", "koord-mid", 7999),
        ({}, 3000, [ctr("a")], "koord-free", "koord-free", 3000),
        ({}, 6500, [ctr("a")], "", "koord-batch", 6500),  # between ranges: none -> BE default batch
        ({}, None, [ctr("a", {"cpu": "1"})], "", "koord-prod", 9500),  # Burstable -> LS -> prod
        ({}, 0, [ctr("a")], "", "koord-batch", 5500),  # priority 0 -> class default value
        ({"koordinator.sh/qosClass": "SYSTEM"}, None, [ctr("a")], "", "koord-prod", 9500),
    ],
)
def test_priority_class_and_value(
    labels: dict, priority: int | None, containers: list[dict], raw: str, klass: str, value: int
) -> None:
    pod = pod_meta(make_pod(containers, labels=labels, priority=priority))
    assert (pod.priority_class_raw, pod.priority_class, pod.priority_value) == (raw, klass, value)


def test_bad_spec_priority_is_ignored_with_a_warning() -> None:
    pod = pod_meta(make_pod([ctr("a")], priority=2**40))
    assert pod.priority is None and pod.priority_value == 5500
    assert any("spec.priority" in w for w in pod.warnings)


# ---------------------------------------------------------------------------------------------
# Labels and annotations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", 7),
        ("+7", 7),
        ("-12", -12),
        ("2147483647", 2**31 - 1),
        ("2147483648", None),
        ("-2147483649", None),
        (" 7", None),
        ("7 ", None),
        ("1_000", None),
        ("1e3", None),
        ("\uff13", None),  # FULLWIDTH DIGIT THREE: Python's int() would take it
        ("", None),
        ("0x10", None),
        (None, None),
    ],
)
def test_parse_int32_is_as_strict_as_go(text: str | None, expected: int | None) -> None:
    assert parse_int32(text) == expected


def test_label_priority_and_eviction_labels() -> None:
    pod = pod_meta(
        make_pod(
            [ctr("a")],
            labels={"koordinator.sh/priority": "-5", "koordinator.sh/eviction-enabled": "true"},
            annotations={"koordinator.sh/eviction-priority": "100"},
        )
    )
    assert (pod.label_priority, pod.eviction_enabled, pod.eviction_priority) == (-5, True, 100)
    odd = pod_meta(
        make_pod(
            [ctr("a")],
            labels={"koordinator.sh/priority": "1_0", "koordinator.sh/eviction-enabled": "True"},
            annotations={"koordinator.sh/eviction-priority": "99999999999"},
        )
    )
    assert (odd.label_priority, odd.eviction_enabled, odd.eviction_priority) == (None, False, 0)
    assert len(odd.warnings) == 2


@pytest.mark.parametrize(
    ("annotation", "allowed_be", "allowed_cpu", "invalid"),
    [
        (None, True, True, False),
        ('["BECPUEvict", "BEMemoryEvict"]', True, False, False),
        ("[]", False, False, False),
        ("", False, False, True),
        ("not json", False, False, True),
        ('{"BECPUEvict": true}', False, False, True),
        ("[1, 2]", False, False, True),
        # as Go decodes a []string: null is an empty list, a null element an empty string
        ("null", False, False, False),
        ('["BECPUEvict", null]', True, False, False),
        ("[" * 1000 + "]" * 1000, False, False, True),
    ],
)
def test_eviction_policy(annotation: str | None, allowed_be: bool, allowed_cpu: bool, invalid: bool) -> None:
    annotations = {} if annotation is None else {"koordinator.sh/eviction-policy": annotation}
    pod = pod_meta(make_pod([ctr("a")], annotations=annotations))
    assert pod.eviction_allowed("BECPUEvict") is allowed_be
    assert pod.eviction_allowed("CPUEvict") is allowed_cpu
    assert pod.eviction_policy_invalid is invalid
    assert pod.eviction_policy == (
        None
        if annotation is None
        else (() if invalid else tuple(x or "" for x in json.loads(annotation) or ()))
    )


@pytest.mark.parametrize(
    ("annotation", "cpuset", "numa"),
    [
        ('{"cpuset": "0-3,8", "numaNodeResources": [{"node": 0, "resources": {"cpu": "4"}}]}', "0-3,8", True),
        ('{"cpuset": "2", "numaNodeResources": []}', "2", False),
        ('{"numaNodeResources": [{"node": 1}]}', "", True),
        ("{bad", "", False),
        ('{"cpuset": 5}', "", False),
        ("", "", False),
        # keys match ignoring case, unknown keys are ignored, null leaves a field unset (Go)
        ('{"CPUSet": "0-3", "NUMANodeResources": [{"Node": 0, "Resources": {"cpu": 4}}], "x": 1}', "0-3",
         True),
        ('{"cpuset": null, "numaNodeResources": null}', "", False),
        ("null", "", False),
        # a value of the wrong type fails the whole annotation, as Go's Unmarshal does
        ('{"cpuset": "0-3", "numaNodeResources": [{"node": "zero"}]}', "", False),
        ('{"cpuset": "0-3", "numaNodeResources": [{"node": 0, "resources": {"cpu": "lots"}}]}', "", False),
        ('{"cpuset": "0-3", "numaNodeResources": {"node": 0}}', "", False),
        ('{"cpuset": "0-3", "x": ' + "[" * 1000 + "]" * 1000 + "}", "", False),
    ],
)
def test_resource_status(annotation: str, cpuset: str, numa: bool) -> None:
    pod = pod_meta(
        make_pod([ctr("a")], annotations={"scheduling.koordinator.sh/resource-status": annotation})
    )
    assert (pod.resource_status_cpuset, pod.resource_status_numa) == (cpuset, numa)


def test_nodeslo_shaped_annotations_are_parsed_once() -> None:
    pod = pod_meta(
        make_pod(
            [ctr("a")],
            annotations={
                "koordinator.sh/cpuBurst": '{"policy": "auto", "cpuBurstPercent": 200}',
                "koordinator.sh/memoryQOS": '{"policy": "none"}',
                "koordinator.sh/blkioQOS": "",
                "node.koordinator.sh/resctrl": "{}",
            },
        )
    )
    assert pod.cpu_burst is not None and (pod.cpu_burst.policy, pod.cpu_burst.cpu_burst_percent) == (
        "auto",
        200,
    )
    assert pod.memory_qos is not None and pod.memory_qos.policy == "none"
    assert pod.blkio_qos == BlkIOQOS() and not pod.blkio_qos_invalid
    assert pod.resctrl_managed
    bad = pod_meta(
        make_pod(
            [ctr("a")],
            annotations={
                "koordinator.sh/cpuBurst": '{"cpuBurstPercent": 20000}',
                "koordinator.sh/memoryQOS": "",
                "koordinator.sh/blkioQOS": "[",
            },
        )
    )
    assert (bad.cpu_burst, bad.cpu_burst_invalid) == (None, True)
    assert (bad.memory_qos, bad.memory_qos_invalid) == (None, True)
    assert (bad.blkio_qos, bad.blkio_qos_invalid) == (None, True)
    assert any("cpuBurstPercent" in w for w in bad.warnings)
    plain = pod_meta(make_pod([ctr("a")]))
    assert (plain.cpu_burst, plain.cpu_burst_invalid, plain.blkio_qos, plain.resctrl_managed) == (
        None,
        False,
        None,
        False,
    )


@pytest.mark.parametrize(
    "key",
    ["koordinator.sh/cpuBurst", "koordinator.sh/memoryQOS", "koordinator.sh/blkioQOS",
     "koordinator.sh/eviction-policy", "scheduling.koordinator.sh/resource-status"],
)
@pytest.mark.parametrize(
    "text",
    ["[" * 1000 + "]" * 1000, '{"a": ' * 3000 + "1" + "}" * 3000, "[" * 200_000,
     '"' + "x" * (300 << 10) + '"'],
)
def test_no_annotation_can_break_the_pod_view(key: str, text: str) -> None:
    """Deep, unclosed or oversized JSON in an annotation: that feature of the pod only, never an
    exception out of the view (a RecursionError here used to stop the agent)."""
    pod = pod_meta(make_pod([ctr("a", {"cpu": "1"})], annotations={key: text}))
    assert pod.cpu_request_milli == 1000
    assert any(w.startswith(f"annotation {key}: ") for w in pod.warnings)
    invalid = {
        "koordinator.sh/cpuBurst": pod.cpu_burst_invalid,
        "koordinator.sh/memoryQOS": pod.memory_qos_invalid,
        "koordinator.sh/blkioQOS": pod.blkio_qos_invalid,
        "koordinator.sh/eviction-policy": pod.eviction_policy_invalid,
    }
    assert invalid.get(key, True)
    assert (pod.resource_status_cpuset, pod.resource_status_numa) == ("", False)


@pytest.mark.parametrize(
    "uid",
    ["x/y", "..", "../../etc", "a\x00b", "a\nb", "caf\u00e9", "\u0661\u0662", "-ab", "a" * 65, "a b", "a_b",
     "a.b"],
)
def test_a_uid_that_is_not_a_kubernetes_uid_is_refused(uid: str) -> None:
    uid = uid.encode().decode("unicode_escape")
    obj = make_pod([ctr("a")])
    obj["metadata"]["uid"] = uid
    with pytest.raises(ValueError, match=r"^pod default/p: metadata.uid .* is not a Kubernetes uid"):
        pod_meta(obj)


@pytest.mark.parametrize(
    "uid",
    ["6c1e0b34-2f0d-4c1e-9a67-0d3b9e7e1a11", "3cb1c6e1b3b0a1f5c3c0d7d0b3f2b9c4", "uid-p", "A", "a" * 64],
)
def test_kubernetes_and_static_pod_uids_are_accepted(uid: str) -> None:
    obj = make_pod([ctr("a")])
    obj["metadata"]["uid"] = uid
    assert pod_meta(obj).uid == uid


def test_non_string_label_values_from_yaml_are_read_as_json_text() -> None:
    pod = pod_meta(make_pod([ctr("a")], labels={"koordinator.sh/eviction-enabled": True, "n": 3}))
    assert pod.eviction_enabled
    assert pod.labels["n"] == "3"
    assert len(pod.warnings) == 2


def test_views_are_read_only() -> None:
    pod = pod_meta(make_pod([ctr("a", {"cpu": "1"})], labels={"x": "y"}))
    with pytest.raises(TypeError):
        pod.labels["x"] = "z"  # type: ignore[index]
    with pytest.raises(TypeError):
        pod.containers[0].requests["cpu"] = 5  # type: ignore[index]
    with pytest.raises(AttributeError):
        pod.phase = "Failed"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# Errors and lists


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p: p["metadata"].pop("uid"), r"^pod 'p': metadata.uid: required$"),
        (lambda p: p["metadata"].pop("name"), r"^metadata.name: required$"),
        (
            lambda p: p["spec"]["containers"][0]["resources"].update(requests={"cpu": "lots"}),
            r"^pod default/p: spec.containers\[0\].resources.requests.cpu: invalid quantity 'lots'$",
        ),
        (lambda p: p["spec"].update(containers={"a": 1}), r"^pod default/p: spec.containers: must be a list"),
        (
            lambda p: p["spec"]["containers"][0].pop("name"),
            r"^pod default/p: spec.containers\[0\].name: required$",
        ),
    ],
)
def test_unusable_pods_raise_clear_errors(mutate: Any, message: str) -> None:
    obj = make_pod([ctr("a", {"cpu": "1"})])
    mutate(obj)
    with pytest.raises(ValueError, match=message):
        pod_meta(obj)


def test_pod_list_keeps_good_items_when_some_are_bad() -> None:
    good_a = make_pod([ctr("a")], name="a")
    good_b = make_pod([ctr("a")], name="b")
    broken = make_pod([ctr("a", {"memory": "1 Gi"})], name="broken")
    twin = copy.deepcopy(good_a)
    twin["metadata"]["name"] = "a-twin"
    obj = {"kind": "PodList", "apiVersion": "v1", "items": [good_a, broken, "junk", good_b, twin]}
    pods, errors = pod_list(obj)
    assert [p.name for p in pods] == ["a", "b"]
    assert len(errors) == 3
    assert errors[0].startswith("items[1]: pod default/broken: spec.containers[0].resources.requests.memory")
    assert errors[1].startswith("items[2]: pod: must be an object")
    assert errors[2] == "items[4]: pod default/a-twin: duplicate uid uid-a; kept the first"
    assert all(isinstance(p, PodMeta) for p in pods)


def test_pod_list_shapes() -> None:
    assert pod_list({"kind": "PodList", "items": None}) == ([], [])
    assert pod_list({"items": []}) == ([], [])
    with pytest.raises(ValueError, match="kind must be 'PodList'"):
        pod_list({"kind": "Pod"})
    with pytest.raises(ValueError, match="items must be a list"):
        pod_list({"items": {}})


def test_a_thousand_pods_build_quickly_enough_to_be_per_change_work() -> None:
    items = []
    for i in range(1000):
        item = copy.deepcopy(KUBELET_ITEM)
        item["metadata"]["uid"] = f"uid-{i}"
        item["metadata"]["name"] = f"web-{i}"
        items.append(item)
    pods, errors = pod_list({"kind": "PodList", "items": items})
    assert len(pods) == 1000 and errors == []
    assert sum(p.cpu_request_milli for p in pods) == 600 * 1000


# ---------------------------------------------------------------------------------------------
# Pruning: only what the view reads is kept


def test_prune_keeps_exactly_what_the_view_reads() -> None:
    pruned = prune_pod(KUBELET_ITEM)
    assert pruned == {
        "metadata": {k: KUBELET_ITEM["metadata"][k]
                     for k in ("uid", "name", "namespace", "labels", "annotations", "resourceVersion")},
        "spec": {"containers": [{"name": c["name"], "resources": c["resources"]}
                                for c in KUBELET_ITEM["spec"]["containers"]], "priority": 0},
        "status": {"phase": "Running", "qosClass": "Burstable",
                   "containerStatuses": [{k: c[k] for k in ("name", "state", "containerID")}
                                         for c in KUBELET_ITEM["status"]["containerStatuses"]]},
    }
    assert prune_pod(pruned) == pruned  # idempotent
    assert len(json.dumps(pruned)) < 0.6 * len(json.dumps(KUBELET_ITEM))
    assert pod_meta(pruned) == pod_meta(KUBELET_ITEM)


def test_pruned_and_whole_objects_give_the_same_view_for_every_kind_of_pod() -> None:
    from qosmanager.sim.fakehost import FakeHost
    from qosmanager.sim.objects import pod_object

    sidecar = make_pod([ctr("a", {"cpu": "1"})], init=[dict(ctr("s", {"cpu": "1"}), restartPolicy="Always")])
    sidecar["spec"]["overhead"] = {"cpu": "100m"}
    sidecar["status"]["initContainerStatuses"] = [{"name": "s", "containerID": "containerd://s1",
                                                   "state": {"running": {}}, "ready": True}]
    objs = [KUBELET_ITEM, sidecar] + [pod_object(p, annotations={"koordinator.sh/cpuBurst": '{"policy":"auto"}'})
                                       for p in FakeHost.make_pods(12, seed=3)]
    for obj in objs:
        whole, pruned = pod_meta(obj), pod_meta(prune_pod(obj))
        assert whole == pruned and whole.digest == pod_digest(prune_pod(obj))
        assert len(json.dumps(prune_pod(obj))) < len(json.dumps(obj))


@pytest.mark.parametrize("bad", [
    {"metadata": "x"},
    {"metadata": {"name": "p", "uid": "u1"}, "spec": ["not", "an", "object"]},
    {"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": {"name": "a"}}},
    {"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": ["a"]}},
    {"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": []}, "status": {"containerStatuses": 3}},
])
def test_a_malformed_pod_is_refused_the_same_way_after_pruning(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as whole:
        pod_meta(bad)
    with pytest.raises(ValueError) as pruned:
        pod_meta(prune_pod(bad))
    assert str(pruned.value) == str(whole.value)


def test_a_pod_list_is_pruned_pod_by_pod_while_it_is_decoded() -> None:
    text = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"},
                       "items": [KUBELET_ITEM, dict(KUBELET_ITEM, kind="Pod")]})
    decoded = json.loads(text, object_hook=prune_pod_hook)
    assert decoded["kind"] == "PodList" and decoded["metadata"] == {"resourceVersion": "7"}
    # each pod one string: its pruned object's canonical text, with its uid beside
    assert all(isinstance(p, PrunedPod) for p in decoded["items"])
    assert [p.object() for p in decoded["items"]] == [prune_pod(KUBELET_ITEM)] * 2
    assert decoded["items"][0].uid == KUBELET_ITEM["metadata"]["uid"]
    assert decoded["items"][0].digest == pod_digest(KUBELET_ITEM)
    assert pod_meta(decoded["items"][0]) == pod_meta(KUBELET_ITEM)
    # an object of another kind with metadata and spec is left alone
    node = {"kind": "Node", "metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.0.0/24"}}
    assert json.loads(json.dumps(node), object_hook=prune_pod_hook) == node


def test_the_digest_tells_a_read_field_changing_from_any_other() -> None:
    base = pod_digest(KUBELET_ITEM)
    other = copy.deepcopy(KUBELET_ITEM)
    other["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    other["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    assert pod_digest(other) == base
    for path, value in ((("metadata", "labels", "app"), "api"), (("spec", "priority"), 5),
                        (("status", "phase"), "Succeeded"), (("metadata", "annotations", "a"), "b")):
        changed = copy.deepcopy(KUBELET_ITEM)
        node = changed
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert pod_digest(changed) != base, path
    changed = copy.deepcopy(KUBELET_ITEM)
    changed["spec"]["containers"][1]["resources"]["limits"]["cpu"] = "300m"
    assert pod_digest(changed) != base
    # a YAML date where a string belongs still has a digest (the view warns about the value itself)
    import datetime
    dated = copy.deepcopy(KUBELET_ITEM)
    dated["metadata"]["labels"]["day"] = datetime.date(2024, 5, 1)
    assert pod_digest(dated) != base


def test_views_share_repeated_strings_and_empty_maps() -> None:
    """Each pod's text is decoded on its own; the views of two pods still hold one object for what
    repeats between them (namespace, phase, QoS class, label keys and values, container and
    resource names) and one empty map for every empty one.  Long values are not shared, and the
    views compare as before."""
    def item(uid: str, name: str) -> dict[str, Any]:
        obj = copy.deepcopy(KUBELET_ITEM)
        obj["metadata"].update(uid=uid, name=name, annotations={})
        obj["metadata"]["labels"]["note"] = "x" * 100
        obj["spec"]["containers"][0]["resources"].pop("limits", None)
        return obj

    texts = [PrunedPod.of(item(u, n)) for u, n in (("6c1e0b34-0000-4000-8000-000000000001", "web-a"),
                                                  ("6c1e0b34-0000-4000-8000-000000000002", "web-b"))]
    a, b = (pod_meta(t) for t in texts)
    assert a.name != b.name and a.namespace == b.namespace == "shop"
    for field in ("namespace", "phase", "kube_qos"):
        assert getattr(a, field) is getattr(b, field), field
    assert a.labels == b.labels and a.labels is not b.labels
    for (ka, va), (kb, vb) in zip(a.labels.items(), b.labels.items()):
        assert ka is kb and (va is vb) == (len(va) <= 64)  # a long value is left alone
    assert a.annotations == {} and a.annotations is b.annotations
    ca, cb = a.containers[0], b.containers[0]
    assert ca.name is cb.name and ca.limits == {} and ca.limits is cb.limits
    assert [k for k in ca.requests] == [k for k in cb.requests]
    assert all(x is y for x, y in zip(ca.requests, cb.requests))
    assert pod_meta(texts[0]) == a and a != b
