"""Node view and GetNodeResourceReserved (qos §2.10); expected values computed by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qosmanager.api.node import ANNOTATION_NODE_RESERVATION, node_meta, parse_reservation

GI = 2**30
KI = 2**10


def make_node(
    capacity: dict[str, Any] | None = None,
    allocatable: dict[str, Any] | None = None,
    reservation: Any = None,
) -> dict[str, Any]:
    annotations: dict[str, Any] = {"node.alpha.kubernetes.io/ttl": "0"}
    if reservation is not None:
        annotations[ANNOTATION_NODE_RESERVATION] = (
            reservation if isinstance(reservation, str) else json.dumps(reservation)
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "node-1",
            "resourceVersion": "77",
            "labels": {"kubernetes.io/hostname": "node-1"},
            "annotations": annotations,
        },
        "status": {
            "capacity": capacity
            if capacity is not None
            else {"cpu": "8", "memory": "32863484Ki", "pods": "110"},
            "allocatable": allocatable
            if allocatable is not None
            else {
                "cpu": "7800m",
                "memory": "30768332Ki",
                "pods": "110",
                "kubernetes.io/batch-cpu": "3000",
                "kubernetes.io/batch-memory": "8Gi",
            },
        },
    }


def test_kubelet_node_amounts_and_kubelet_reservation() -> None:
    node = node_meta(make_node())
    assert (node.name, node.resource_version) == ("node-1", "77")
    assert (node.cpu_capacity_milli, node.cpu_capacity_cores, node.cpu_allocatable_milli) == (8000, 8, 7800)
    assert node.memory_capacity == 32863484 * KI and node.memory_allocatable == 30768332 * KI
    assert (node.batch_cpu_allocatable, node.batch_memory_allocatable) == (3000, 8 * GI)
    assert node.capacity["pods"] == 110
    # capacity - allocatable: cpu 8000 - 7800 = 200m; memory (32863484 - 30768332) Ki = 2095152 Ki.
    assert node.reserved_cpu_milli == 200
    assert node.reserved_memory == 2095152 * KI
    assert (node.reserved_cpus, node.reserved_cpu_ids, node.warnings) == ("", (), ())


def test_annotation_resources_win_where_larger() -> None:
    node = node_meta(make_node(reservation={"resources": {"cpu": "1", "memory": "1Gi"}}))
    assert node.reserved_cpu_milli == 1000  # max(200m, 1)
    assert node.reserved_memory == 2095152 * KI  # max(~2Gi kubelet, 1Gi annotation)


def test_reserved_cpus_override_the_annotation_cpu_amount() -> None:
    node = node_meta(make_node(reservation={"resources": {"cpu": "5"}, "reservedCPUs": "0-1,4"}))
    assert node.reserved_cpus == "0-1,4"
    assert node.reserved_cpu_ids == (0, 1, 4)
    assert node.reserved_cpu_milli == 3000  # three listed CPUs, not the 5 cores of resources.cpu
    small = node_meta(make_node(reservation={"reservedCPUs": "3"}))
    assert small.reserved_cpu_milli == 1000
    # With the list smaller than the kubelet's own reservation the kubelet's wins.
    big_kubelet = node_meta(
        make_node(allocatable={"cpu": "6", "memory": "32863484Ki"}, reservation={"reservedCPUs": "0"})
    )
    assert big_kubelet.reserved_cpu_milli == 2000 and big_kubelet.reserved_cpus == "0"


@pytest.mark.parametrize(
    ("annotation", "why"),
    [
        ("{not json", "not valid JSON"),
        ('["0-1"]', "not a JSON object"),
        ('{"reservedCPUs": "0-a"}', "bad CPU list"),
        ('{"reservedCPUs": "3-1", "resources": {"memory": "64Gi"}}', "reversed"),
        ('{"resources": {"cpu": "two"}}', "resources.cpu: invalid quantity"),
        ('{"reservedCPUs": 3}', "reservedCPUs: must be a string"),
    ],
)
def test_bad_annotations_are_ignored_whole_with_a_warning(annotation: str, why: str) -> None:
    node = node_meta(make_node(reservation=annotation))
    assert node.reserved_cpu_milli == 200 and node.reserved_memory == 2095152 * KI  # kubelet part only
    assert node.reserved_cpus == ""
    assert len(node.warnings) == 1
    assert node.warnings[0].startswith(f"annotation {ANNOTATION_NODE_RESERVATION}: ")
    assert why in node.warnings[0]


def test_missing_and_odd_amounts() -> None:
    # No allocatable at all: capacity - 0 is reserved (upstream Subtract semantics).
    node = node_meta(make_node(capacity={"cpu": "4", "memory": "8Gi"}, allocatable={}))
    assert (node.reserved_cpu_milli, node.reserved_memory) == (4000, 8 * GI)
    assert (node.batch_cpu_allocatable, node.batch_memory_allocatable) == (-1, -1)
    # Allocatable above capacity never makes the reservation negative.
    node = node_meta(make_node(capacity={"cpu": "4", "memory": "1Gi"},
                               allocatable={"cpu": "5", "memory": "2Gi"}))
    assert (node.reserved_cpu_milli, node.reserved_memory) == (0, 0)
    # Fractional cores: Value() rounds up.
    node = node_meta(make_node(capacity={"cpu": "7.5", "memory": "1Gi"}))
    assert (node.cpu_capacity_milli, node.cpu_capacity_cores) == (7500, 8)
    node = node_meta(make_node(capacity={"cpu": "8001m", "memory": "1Gi"}))
    assert node.cpu_capacity_cores == 9


@pytest.mark.parametrize(
    ("capacity", "message"),
    [
        (None, r"^status.capacity.cpu: required"),
        ({"memory": "8Gi"}, r"^status.capacity.cpu: required"),
        ({"cpu": "8"}, r"^status.capacity.memory: required"),
        ({"cpu": "0", "memory": "8Gi"}, r"^status.capacity.cpu: must be positive, got '0'$"),
        ({"cpu": "-2", "memory": "8Gi"}, r"^status.capacity.cpu: must be positive, got '-2'$"),
        ({"cpu": "8", "memory": 0}, r"^status.capacity.memory: must be positive, got 0$"),
        ({"cpu": "8", "memory": "1"},
         r"^status.capacity.memory: 1 bytes, less than 1Mi \(a unit left out\?\), got '1'$"),
        ({"cpu": "8", "memory": "1023Ki"}, r"less than 1Mi"),
        ({"cpu": "0.0001m", "memory": "1Mi"}, None),  # rounds up to 1 milli-core: positive, accepted
    ],
)
def test_a_node_without_a_positive_cpu_and_memory_capacity_is_refused(
    capacity: dict[str, Any] | None, message: str | None
) -> None:
    obj = {"metadata": {"name": "bare"}, "status": {} if capacity is None else {"capacity": capacity}}
    if message is None:
        assert node_meta(obj).cpu_capacity_milli == 1
        return
    with pytest.raises(ValueError, match=message):
        node_meta(obj)


def test_parse_reservation_directly() -> None:
    reservation = parse_reservation('{"resources": {"cpu": "1500m", "memory": "2Gi"}}')
    assert (reservation.cpu_milli, reservation.memory, reservation.reserved_cpus) == (1500, 2 * GI, "")
    assert parse_reservation(None).cpu_milli == 0
    assert parse_reservation("").reserved_cpu_ids == ()


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"kind": "Pod"}, "kind must be 'Node'"),
        ({"status": {"capacity": {"cpu": "eight"}}}, r"status.capacity.cpu: invalid quantity 'eight'"),
        ({"status": {"allocatable": []}}, "status.allocatable: must be an object"),
        ([], "Node: must be an object"),
    ],
)
def test_unusable_nodes_raise_clear_errors(obj: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        node_meta(obj)
