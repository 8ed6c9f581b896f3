"""blkioReconcile (koordlet-qos §4.8): BE class, cgroup root and pod annotations; v1 files as koordlet,
v2 io.max / io.weight.

The fake node's disks: sdb 8:16 (partition sdb1 8:17), vdc 252:32 holding VG "vgdata" (LV dm-0 253:0).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from qosmanager.api.nodeslo import IOCfg
from qosmanager.host import resources as res
from qosmanager.host.blockdev import csi_volume_mount_path
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object
from qosmanager.strategies.blkio_reconcile import (
    device_removals,
    device_updates,
    disk_config_updates,
    io_weight,
    recorded_devices,
)

NAME = "blkioReconcile"
THROTTLE = ("blkio.throttle.read_iops_device", "blkio.throttle.read_bps_device",
            "blkio.throttle.write_iops_device", "blkio.throttle.write_bps_device")


def cid(n: int) -> str:
    return f"containerd://{n:064x}"


def harness(version: int = 1, *, anolis: bool = True) -> Harness:
    h = Harness(version=version, gates={"BlkIOReconcile": True}, strategies=[NAME])
    h.set_node(node_object(h.host))
    for rel, text in {"block/sdb/dev": "8:16\n", "block/sdb/sdb1/dev": "8:17\n", "block/sdb/sdb1/partition": "1\n",
                      "block/vdc/dev": "252:32\n", "block/dm-0/dev": "253:0\n", "block/dm-0/dm/name": "vgdata-lv0\n",
                      "block/dm-0/dm/uuid": "LVM-0123\n", "block/dm-0/slaves/vdc/dev": "252:32\n"}.items():
        h.write_file("sys/" + rel, text)
    if anolis and version == 1:
        for d in (h.layout.kubepods_dir(), h.layout.qos_dir("BestEffort")):
            h.write_file(h.cgroup_file("blkio", d, "blkio.cost.weight"), "")
        for f in ("blkio.cost.qos", "blkio.cost.model"):
            h.write_file(h.cgroup_file("blkio", "", f), "")
    return h


def be_slo(blocks: list[dict[str, Any]], enable: bool = True) -> dict[str, Any]:
    return {"resourceQOSStrategy": {"beClass": {"blkioQOS": {"enable": enable, "blocks": blocks}}}}


def be_file(h: Harness, name: str) -> str | None:
    v = h.read_file(h.cgroup_file("blkio", h.layout.qos_dir("BestEffort"), name))
    return None if v is None else v.strip()


def writes(h: Harness) -> list[tuple[str, str]]:
    return [(w["file"].rsplit("/", 1)[1], w["value"]) for w in h.recorded.writes if w["strategy"] == NAME]


# ------------------------------------------------------------------------------------------------
# values
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("percent", "weight"), [
    (1, 1), (10, 910), (50, 4950), (60, 5960), (100, 10000),   # 1 + (p-1)*9999//99
])
def test_io_weight_mapping(percent: int, weight: int) -> None:
    assert io_weight(percent) == weight


def test_device_values_v1_and_v2() -> None:
    io = IOCfg(read_iops=1000, write_bps=1 << 20, io_weight_percent=60)
    assert device_updates(io, "8:16", 1) == [
        ("blkio.throttle.read_iops_device", "8:16", "8:16 1000"), ("blkio.throttle.read_bps_device", "8:16", "8:16 0"),
        ("blkio.throttle.write_iops_device", "8:16", "8:16 0"),
        ("blkio.throttle.write_bps_device", "8:16", "8:16 1048576"), ("blkio.cost.weight", "8:16", "8:16 60")]
    assert device_updates(IOCfg(), "8:16", 2) == [
        ("io.max", "8:16", "8:16 rbps=max wbps=max riops=max wiops=max"), ("io.weight", "8:16", "8:16 10000")]
    assert device_updates(io, "8:16", 2)[0][2] == "8:16 rbps=max wbps=1048576 riops=1000 wiops=max"
    assert [v for _, _, v in device_removals("8:16", 1)] == ["8:16 0"] * 4 + ["8:16 100"]
    assert [v for _, _, v in device_removals("8:16", 2)] == ["8:16 rbps=max wbps=max riops=max wiops=max",
                                                             "8:16 default"]


def test_disk_config_values() -> None:
    changes, problem = disk_config_updates(IOCfg(read_latency=2000, write_latency_percent=90), "8:16")
    assert changes == [("blkio.cost.qos", "8:16", "8:16 enable=1 ctrl=user rpct=95 rlat=2000 wpct=90 wlat=3000"),
                       ("blkio.cost.model", "8:16", "8:16 ctrl=auto")] and problem is None
    full = IOCfg(enable_user_model=True, model_read_bps=1, model_read_seq_iops=2, model_read_rand_iops=3,
                 model_write_bps=4, model_write_seq_iops=5, model_write_rand_iops=6)
    changes, problem = disk_config_updates(full, "8:16")
    assert changes[1][2] == "8:16 ctrl=user rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6"
    changes, problem = disk_config_updates(IOCfg(enable_user_model=True, model_read_bps=5), "8:16")
    assert [c[0] for c in changes] == ["blkio.cost.qos"] and "rseqiops" in str(problem)


def test_recorded_devices() -> None:
    assert recorded_devices(["8:16 100\n8:32 5\n", None, "default 100\n8:16 50\n253:0 rbps=1"]) == [
        "8:16", "8:32", "253:0"]


def test_registry_accepts_a_device_reset_in_io_weight() -> None:
    r = res.get("io.weight")
    assert r.validate("8:16 default") is None and r.validate("8:16 0") is not None
    assert r.equal("default 100\n", "8:16 default", 2)
    assert not r.equal("default 100\n8:16 500\n", "8:16 default", 2)
    assert r.equal("default 100\n8:16 500\n", "8:16 500", 2)


# ------------------------------------------------------------------------------------------------
# BE class, v1
# ------------------------------------------------------------------------------------------------
SDB = {"name": "/dev/sdb", "type": "device", "ioCfg": {"readIOPS": 1000, "writeBPS": 1048576, "ioWeightPercent": 60}}


def test_v1_be_class_throttles_and_weight() -> None:
    h = harness()
    h.set_nodeslo(be_slo([SDB]))
    h.tick(NAME, 1000.0)
    # "8:16 0" asks to remove a device that no file lists: nothing to write for read_bps and write_iops
    assert writes(h) == [("blkio.throttle.read_iops_device", "8:16 1000"),
                         ("blkio.throttle.write_bps_device", "8:16 1048576"), ("blkio.cost.weight", "8:16 60")]
    assert be_file(h, "blkio.throttle.read_iops_device") == "8:16 1000"
    h.recorded.writes.clear()
    h.tick(NAME, 1001.0)
    assert writes(h) == []


@pytest.mark.parametrize(("block", "dn"), [
    ({"name": "sdb1", "type": "device"}, "8:16"),            # a partition throttles its disk
    ({"name": "vgdata", "type": "volumegroup"}, "252:32"),   # a VG's disk
])
def test_partitions_and_volume_groups_resolve_to_their_disk(block: dict[str, Any], dn: str) -> None:
    h = harness()
    h.set_nodeslo(be_slo([{**block, "ioCfg": {"readBPS": 5000}}]))
    h.tick(NAME, 1000.0)
    assert be_file(h, "blkio.throttle.read_bps_device") == f"{dn} 5000"


def test_disks_no_longer_configured_are_reset_and_disabling_resets_everything() -> None:
    h = harness()
    h.write_file(h.cgroup_file("blkio", h.layout.qos_dir("BestEffort"), "blkio.throttle.write_iops_device"),
                 "252:32 700\n")  # configured earlier, not any more
    h.set_nodeslo(be_slo([SDB]))
    h.tick(NAME, 1000.0)
    # the stale disk's reset: "252:32 0" deletes the throttle entry; in the weight file the reset is the
    # value 100, written because no line equals it (koordlet's write-if-needed rule)
    assert writes(h)[3:] == [("blkio.throttle.write_iops_device", "252:32 0"), ("blkio.cost.weight", "252:32 100")]
    # 8:16's read_bps and write_iops are "8:16 0" deletes of entries no file lists: nothing to write
    assert len(writes(h)) == 5
    h.recorded.writes.clear()
    h.set_nodeslo(be_slo([SDB], enable=False))
    h.tick(NAME, 1001.0)
    # every file listing 8:16 gets its reset; weight back to 100
    assert sorted(writes(h)) == [("blkio.cost.weight", "8:16 100"), ("blkio.throttle.read_iops_device", "8:16 0"),
                                 ("blkio.throttle.write_bps_device", "8:16 0")]


def test_an_unknown_disk_leaves_the_whole_target_alone() -> None:
    h = harness()
    h.set_nodeslo(be_slo([SDB, {"name": "/dev/sdz", "type": "device", "ioCfg": {"readIOPS": 1}}]))
    assert h.tick(NAME, 1000.0) == []
    assert h.manager.stats[NAME].errors == 0


def test_vanilla_v1_kernel_skips_the_anolis_weight_file() -> None:
    h = harness(anolis=False)
    h.set_nodeslo(be_slo([SDB]))
    res_ = h.tick(NAME, 1000.0)
    assert {r.write.resource for r in res_} == set(THROTTLE)  # no blkio.cost.weight at all, not even tried
    assert be_file(h, "blkio.throttle.read_iops_device") == "8:16 1000"


# ------------------------------------------------------------------------------------------------
# cgroup root
# ------------------------------------------------------------------------------------------------
def test_v1_root_iocost_qos_and_model() -> None:
    h = harness()
    h.set_nodeslo({"resourceQOSStrategy": {"cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [
        {"name": "/dev/sdb", "type": "device", "ioCfg": {"readLatency": 2000}},
        {"name": "vgdata", "type": "volumegroup", "ioCfg": {"enableUserModel": True, "modelReadBPS": 100}},
    ]}}}})
    h.tick(NAME, 1000.0)
    assert writes(h) == [("blkio.cost.qos", "8:16 enable=1 ctrl=user rpct=95 rlat=2000 wpct=95 wlat=3000"),
                         ("blkio.cost.model", "8:16 ctrl=auto"),
                         ("blkio.cost.qos", "252:32 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000")]
    # (vdc's user model lacks five fields: not written, logged)
    h.write_file(h.cgroup_file("blkio", "", "blkio.cost.qos"), "8:16 enable=1 ctrl=user rpct=95.00 rlat=2000\n")
    h.recorded.writes.clear()
    h.set_nodeslo({"resourceQOSStrategy": {"cgroupRoot": {"blkioQOS": {"enable": False}}}})
    h.tick(NAME, 1001.0)
    assert writes(h) == [("blkio.cost.qos", "8:16 enable=0")]


def test_v2_root_is_skipped() -> None:
    h = harness(2)
    h.set_nodeslo({"resourceQOSStrategy": {"cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [SDB]}}}})
    assert h.tick(NAME, 1000.0) == []


# ------------------------------------------------------------------------------------------------
# cgroup v2
# ------------------------------------------------------------------------------------------------
def test_v2_io_max_and_io_weight() -> None:
    h = harness(2)
    h.set_nodeslo(be_slo([SDB]))
    h.tick(NAME, 1000.0)
    # readIOPS 1000, writeBPS 1 MiB, the rest unlimited; weight 60 % -> 1 + 59*9999//99 = 5960
    assert be_file(h, "io.max") == "8:16 rbps=max wbps=1048576 riops=1000 wiops=max"
    # the file keeps the kernel's table: the cgroup's default line and the device's own weight
    assert be_file(h, "io.weight") == "default 100\n8:16 5960"
    assert not any(f.startswith("blkio.") for f, _ in writes(h))
    h.recorded.writes.clear()
    h.set_nodeslo(be_slo([SDB], enable=False))
    h.tick(NAME, 1001.0)
    assert writes(h) == [("io.max", "8:16 rbps=max wbps=max riops=max wiops=max"), ("io.weight", "8:16 default")]


# ------------------------------------------------------------------------------------------------
# pods
# ------------------------------------------------------------------------------------------------
def pod(uid: str, annotation: str | None, *, label: str | None = "LS", phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "ns",
                     "labels": {"koordinator.sh/qosClass": label} if label else {},
                     "annotations": {"koordinator.sh/blkioQOS": annotation} if annotation is not None else {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}]},
        "status": {"phase": phase, "qosClass": "Burstable",
                   "containerStatuses": [{"name": "c", "containerID": cid(sum(map(ord, uid))),
                                          "state": {"running": {}}}]},
    }


def pod_file(h: Harness, uid: str, name: str) -> str | None:
    v = h.read_file(h.cgroup_file("blkio", h.layout.pod_dir("Burstable", uid), name))
    return None if v is None else v.strip()


ANN = json.dumps({"blocks": [{"name": "/dev/sdb", "type": "device", "ioCfg": {"readBPS": 2097152}}]})


def test_annotated_running_labelled_pods_only() -> None:
    h = harness()
    h.set_nodeslo(be_slo([]))
    h.set_pods([pod("a", ANN), pod("nolabel", ANN, label=None), pod("pending", ANN, phase="Pending"),
                pod("bad", "{not json"), pod("plain", None)])
    h.tick(NAME, 1000.0)
    assert pod_file(h, "a", "blkio.throttle.read_bps_device") == "8:16 2097152"
    for uid in ("nolabel", "pending", "bad", "plain"):
        assert pod_file(h, uid, "blkio.throttle.read_bps_device") == ""
    assert all(w["uid"] == "a" for w in h.audit.recent if w["action"] == "write")


def test_a_removed_annotation_resets_the_pods_disks() -> None:
    h = harness()
    h.set_nodeslo(be_slo([]))
    h.set_pods([pod("a", ANN)])
    h.tick(NAME, 1000.0)
    h.recorded.writes.clear()
    h.set_pods([pod("a", None)])  # koordlet would leave the throttle in place
    h.tick(NAME, 1001.0)
    assert writes(h) == [("blkio.throttle.read_bps_device", "8:16 0")]
    # an empty annotation means "no blocks": every listed disk is reset too
    h2 = harness()
    h2.set_nodeslo(be_slo([]))
    h2.set_pods([pod("a", "")])
    h2.write_file(h2.cgroup_file("blkio", h2.layout.pod_dir("Burstable", "a"), "blkio.throttle.read_iops_device"),
                  "8:16 10\n")
    h2.tick(NAME, 1000.0)
    assert writes(h2) == [("blkio.throttle.read_iops_device", "8:16 0")]


def iops_ann(key: str = "ioCfg", **extra: Any) -> str:
    return json.dumps({"blocks": [{"name": "/dev/sdb", "type": "device", key: {"readIOPS": 2048, **extra}}]})


def test_a_pod_whose_annotation_becomes_garbled_keeps_its_io_limit() -> None:
    h = harness()
    h.set_nodeslo(be_slo([]))
    h.set_pods([pod("a", iops_ann()), pod("b", iops_ann())])
    h.tick(NAME, 1000.0)
    assert pod_file(h, "a", "blkio.throttle.read_iops_device") == "8:16 2048"
    h.recorded.writes.clear()
    # garbled (and a wrong type): the pod's throttle stays, the other pod is still handled
    h.set_pods([pod("a", "{" * 500 + "}" * 500), pod("b", iops_ann(writeIOPS=10))])
    h.tick(NAME, 1001.0)
    h.set_pods([pod("a", iops_ann(readBPS="lots")), pod("b", iops_ann(writeIOPS=10))])
    h.tick(NAME, 1002.0)
    h.tick(NAME, 1003.0)
    assert pod_file(h, "a", "blkio.throttle.read_iops_device") == "8:16 2048"
    assert writes(h) == [("blkio.throttle.write_iops_device", "8:16 10")]  # pod b only
    skips = [(r["target"], r["uid"]) for r in h.audit.recent if r["action"] == "skip"]
    assert skips == [("ns/a", "a"), ("ns/a", "a")]  # once per change of the annotation
    assert all(r["strategy"] == NAME and "koordinator.sh/blkioQOS" in r["reason"] and not r["executed"]
               for r in h.audit.recent if r["action"] == "skip")


def test_koordinators_lowercase_iocfg_keeps_and_gets_the_limit() -> None:
    """Go's encoding/json matches keys ignoring case, and koordinator's own fixtures write ``iocfg``:
    read so, the pod keeps its 2048-IOPS throttle (read strictly, the unknown key left an empty
    ioCfg and the throttle was reset to unlimited)."""
    h = harness()
    h.set_nodeslo(be_slo([]))
    h.set_pods([pod("a", iops_ann())])
    h.tick(NAME, 1000.0)
    assert pod_file(h, "a", "blkio.throttle.read_iops_device") == "8:16 2048"
    h.recorded.writes.clear()
    h.set_pods([pod("a", iops_ann("iocfg")), pod("c", iops_ann("IOCFG"))])
    h.tick(NAME, 1001.0)
    assert pod_file(h, "a", "blkio.throttle.read_iops_device") == "8:16 2048"
    assert pod_file(h, "c", "blkio.throttle.read_iops_device") == "8:16 2048"
    assert not [w for w in h.recorded.writes if "/poda/" in w["file"] or w["file"].endswith("poda")]
    assert not [r for r in h.audit.recent if r["action"] == "skip"]


def test_pod_volume_resolves_through_its_csi_mount() -> None:
    h = harness()
    h.set_nodeslo(be_slo([]))
    ann = json.dumps({"blocks": [{"name": "data", "type": "podvolume", "ioCfg": {"readIOPS": 200}}]})
    missing = json.dumps({"blocks": [{"name": "other", "type": "podvolume", "ioCfg": {"readIOPS": 200}}]})
    h.set_pods([pod("a", ann), pod("b", missing)])
    mount = csi_volume_mount_path("a", "data")
    h.write_file("proc/1/mountinfo", f"22 1 8:17 / / rw - ext4 /dev/sdb1 rw\n40 22 253:0 / {mount} rw - xfs "
                                     "/dev/mapper/vgdata-lv0 rw\n")
    h.tick(NAME, 1000.0)
    # the LV dm-0 (253:0) belongs to VG vgdata on vdc: 252:32
    assert pod_file(h, "a", "blkio.throttle.read_iops_device") == "252:32 200"
    assert pod_file(h, "b", "blkio.throttle.read_iops_device") == ""  # no such mount: pod left alone


def test_nothing_without_a_nodeslo() -> None:
    h = harness()
    h.write_file(h.cgroup_file("blkio", h.layout.qos_dir("BestEffort"), "blkio.throttle.read_iops_device"),
                 "8:16 10\n")
    assert h.tick(NAME, 1000.0) == []


# ------------------------------------------------------------------------------------------------
# a per-disk io.weight the kernel refuses (no iocost on the disk: EOPNOTSUPP)
# ------------------------------------------------------------------------------------------------
def test_v2_io_weight_refused_as_unsupported_is_reported_once_and_not_sent_again(monkeypatch) -> None:
    import errno

    from faultinject import IOFaults
    from qosmanager.strategies.blkio_reconcile import REFUSED_RETRY_SECONDS

    faults = IOFaults(monkeypatch)
    faults.fail("/io.weight", errno.EOPNOTSUPP)
    h = harness(2)
    h.set_nodeslo(be_slo([SDB]))
    for t in range(30):  # half a minute of reconcile rounds
        h.tick(NAME, 1000.0 + t)
    def sent() -> list[str]:  # the disk's entry in each attempt (a fake file is given the whole table)
        return [line for p in faults.written("/io.weight") for line in p.decode().splitlines()
                if line.startswith("8:16")]

    assert sent() == ["8:16 5960"]  # tried once, then left alone
    refused = [r for r in h.audit.recent if r["target"].endswith("/io.weight") and not r["executed"]]
    assert len(refused) == 1 and refused[0]["error"].startswith("ENOTSUP"), refused
    # io.max of the same disk is written and kept as usual
    assert be_file(h, "io.max") == "8:16 rbps=max wbps=1048576 riops=1000 wiops=max"
    assert be_file(h, "io.weight") == "default 100"
    # another wanted value is news: sent once (refused again), then left alone again
    h.set_nodeslo(be_slo([{**SDB, "ioCfg": {**SDB["ioCfg"], "ioWeightPercent": 50}}]))
    for t in range(30, 40):
        h.tick(NAME, 1000.0 + t)
    assert sent() == ["8:16 5960", "8:16 4950"]
    # the kernel takes it later (iocost enabled meanwhile): offered again after the retry interval
    faults.clear()
    h.tick(NAME, 1039.0 + REFUSED_RETRY_SECONDS)
    assert sent() == ["8:16 5960", "8:16 4950", "8:16 4950"]
    assert be_file(h, "io.weight") == "default 100\n8:16 4950"
    h.tick(NAME, 1040.0 + REFUSED_RETRY_SECONDS)
    assert len(sent()) == 3  # written: the executor's cache holds it now


def test_v2_io_weight_failing_otherwise_is_retried_every_round(monkeypatch) -> None:
    """Only "not supported" is remembered: a transient failure (EBUSY) is tried again next round."""
    import errno

    from faultinject import IOFaults

    faults = IOFaults(monkeypatch)
    faults.fail("/io.weight", errno.EBUSY, times=2)
    h = harness(2)
    h.set_nodeslo(be_slo([SDB]))
    for t in range(4):
        h.tick(NAME, 1000.0 + t)
    assert len(faults.written("/io.weight")) == 3
    assert be_file(h, "io.weight") == "default 100\n8:16 5960"
