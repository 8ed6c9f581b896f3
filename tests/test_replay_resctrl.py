"""``replay`` of every node's first start with resctrl: mounted, the LSR/LS/BE groups not made yet.

The agent makes the groups; the kernel fills each with ``schemata`` (the root group's lines) and
``tasks``; the agent then writes both schemata and moves the pods' threads.  Before the fake kernel,
the fake filesystem left the new groups empty and the replay showed no write at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.replay import parse_scenario, run_scenario

LS_UID = "1a1a1a1a-0000-4000-8000-000000000001"
BE_UID = "1c1c1c1c-0000-4000-8000-000000000003"
LS_CID = "aaaa" + "0" * 59 + "1"
BE_CID = "aaaa" + "0" * 59 + "3"


def _pod(name: str, uid: str, qos_class: str, kube_qos: str, cid: str, requests: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": qos_class}},
        "spec": {"containers": [{"name": "app", "resources": {"requests": requests, "limits": requests}}]},
        "status": {"phase": "Running", "qosClass": kube_qos,
                   "containerStatuses": [{"name": "app", "containerID": f"containerd://{cid}",
                                          "state": {"running": {}}}]},
    }


def first_start(tmp_path: Path, version: int = 1) -> dict[str, Any]:
    """A node with RDT (cat_l3, mba), resctrl mounted with its root group only, an LS and a BE pod."""
    ref = FakeHost(str(tmp_path / "ref"), version=version, n_cpus=8, resctrl=True)
    sys_files = {rel: ref.read(f"sys/fs/resctrl/{rel}") for rel in (
        "info/L3/cbm_mask", "info/L3/min_cbm_bits", "info/L3/num_closids", "info/MB/min_bandwidth",
        "info/MB/bandwidth_gran", "schemata", "tasks")}
    tasks = "tasks" if version == 1 else "cgroup.threads"
    sub = "cpu/" if version == 1 else ""
    return {
        "now": 1000.0, "cgroupVersion": version, "strategies": ["resctrlReconcile"], "ticks": 1,
        "proc": {"cpuinfo": ref.read("proc/cpuinfo")},
        "sys": {f"fs/resctrl/{rel}": text for rel, text in sys_files.items()},
        "nodeSLO": {"resourceQOSStrategy": {
            "lsClass": {"resctrlQOS": {"enable": True, "catRangeStartPercent": 10, "catRangeEndPercent": 60,
                                       "mbaPercent": 55}},
            "beClass": {"resctrlQOS": {"enable": True}},
        }},
        "pods": [
            _pod("ls-1", LS_UID, "LS", "Burstable", LS_CID, {"cpu": "1", "memory": "1Gi"}),
            _pod("be-1", BE_UID, "BE", "BestEffort", BE_CID, {}),
        ],
        "cgroups": {
            f"{sub}kubepods/burstable/pod{LS_UID}/{LS_CID}/{tasks}": "4001\n4002\n",
            f"{sub}kubepods/besteffort/pod{BE_UID}/{BE_CID}/{tasks}": "5001\n",
        },
    }


def test_first_start_writes_both_schemata_and_the_tasks(tmp_path: Path) -> None:
    for version in (1, 2):
        got = run_scenario(parse_scenario(first_start(tmp_path / f"v{version}", version)))
        made = [r["target"] for r in got["audit"] if r["action"] == "mkdir" and r["executed"]]
        assert made == ["sys/fs/resctrl/LSR", "sys/fs/resctrl/LS", "sys/fs/resctrl/BE"]
        writes = [(w["file"], w["value"]) for w in got["writes"]]
        # LS: ways 11, start ceil(1.1) = 2, end ceil(6.6) = 7 -> 0x80 - 0x4 = 0x7c; MB 55 % -> 60 (steps of 10)
        # BE: the class defaults, cat 0-30 % -> ceil(3.3) = 4 ways -> 0xf, MB 100
        # LSR: resctrl QoS off -> the whole cache and 100 %: what the kernel gave the new group, not written
        assert ("sys/fs/resctrl/LS/schemata", "L3:0=7c;\nMB:0=60;") in writes
        assert ("sys/fs/resctrl/BE/schemata", "L3:0=f;\nMB:0=100;") in writes
        assert [v for f, v in writes if f == "sys/fs/resctrl/LS/tasks"] == ["4001", "4002"]
        assert [v for f, v in writes if f == "sys/fs/resctrl/BE/tasks"] == ["5001"]
        # the files as the kernel shows them afterwards
        assert got["files"]["sys/fs/resctrl/LS/schemata"] == "L3:0=7c\nMB:0=60"
        assert got["files"]["sys/fs/resctrl/BE/schemata"] == "L3:0=f\nMB:0=100"
        assert got["files"]["sys/fs/resctrl/LS/tasks"] == "4001\n4002"
        assert got["files"]["sys/fs/resctrl/BE/tasks"] == "5001"
        assert got["errors"] == [] and not [r for r in got["audit"] if r.get("error")]
