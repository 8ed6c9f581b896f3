"""Memory QoS on a real kernel: ``memory.min/low/high`` from the real agent, as the kernel holds and
enforces them.  cgroup v2 only (upstream v1 has no such files): ``test_guest.py`` runs this file in
the cgroup v2 guest, whose ``QOSM_GUEST_DISK`` is a virtio disk to read page cache from.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from realnode import kv_file, real_node

pytestmark = pytest.mark.kernel

MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


def pages(n: int) -> int:
    """What the kernel reads back for a byte value: whole pages."""
    return n // PAGE * PAGE


def test_memory_qos_values_and_memory_high_throttles(tmp_path) -> None:
    """Per class and pod, the kernel holds the min/low/high the NodeSLO asks for (QoS dirs the sums),
    refuses none of them, and a BE container reading page cache past its memory.high is throttled
    back to it (the high event count rises) without stalling."""
    disk = os.environ.get("QOSM_GUEST_DISK")
    with real_node(tmp_path, version=2, controllers=("memory",)) as node:
        if not disk:
            pytest.skip("needs a block device to read page cache from in QOSM_GUEST_DISK (the test guest has one)")
        # LS: request 64 MiB, limit 128 MiB (set by the kubelet); BE: 40 MiB of batch memory requested, an
        # 80 MiB limit (koordlet's hook: memory.max), memory.high half-way between
        ls = node.add_pod("ls", "LS", memory=128 * MiB)
        be = node.add_pod("be", "BE", memory=40 * MiB, memory_max=80 * MiB)
        assert node.read(be.containers[0], "memory.max") == str(80 * MiB)
        node.write_nodeslo({"resourceQOSStrategy": {
            "lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 50, "lowLimitPercent": 75,
                                      "throttlingPercent": 50}},
            "beClass": {"memoryQOS": {"enable": True, "minLimitPercent": 10, "lowLimitPercent": 20,
                                      "throttlingPercent": 50}},
        }})
        expected = {
            # containers: min/low a share of the request, high from the request towards the limit
            (ls.containers[0], "memory.min"): 32 * MiB, (ls.containers[0], "memory.low"): 48 * MiB,
            (ls.containers[0], "memory.high"): 64 * MiB + 64 * MiB * 50 // 100,
            (be.containers[0], "memory.min"): 4 * MiB, (be.containers[0], "memory.low"): 8 * MiB,
            (be.containers[0], "memory.high"): 40 * MiB + 40 * MiB * 50 // 100,
            # pods: min/low of their request
            (ls.dir, "memory.min"): 32 * MiB, (ls.dir, "memory.low"): 48 * MiB,
            (be.dir, "memory.min"): 4 * MiB, (be.dir, "memory.low"): 8 * MiB,
            # QoS dirs: the sum over their pods; the pods root over every class
            (node.layout.qos_dir("Burstable"), "memory.min"): 32 * MiB,
            (node.layout.qos_dir("Burstable"), "memory.low"): 48 * MiB,
            (node.layout.qos_dir("BestEffort"), "memory.min"): 4 * MiB,
            (node.layout.qos_dir("BestEffort"), "memory.low"): 8 * MiB,
            (node.layout.kubepods_dir(), "memory.min"): 36 * MiB,
            (node.layout.kubepods_dir(), "memory.low"): 56 * MiB,
        }

        def all_in_place() -> bool:
            return all(node.read(rel, name) == str(pages(v)) for (rel, name), v in expected.items())

        with node.agent("--strategies", "cgroupReconcile", "--feature-gates", "CgroupReconcile=true",
                        "--collect-interval", "500ms", "--reconcile-interval-seconds", "0.5") as agent:
            agent.wait_for("every memory QoS value in the kernel", all_in_place, 60)
            assert node.read(ls.dir, "memory.high") == "max", "memory.high is a container knob"
            assert node.read(ls.containers[0], "memory.max") == str(128 * MiB), "the kubelet's limit stays"
            assert node.read(be.containers[0], "memory.max") == str(80 * MiB), "koordlet's limit stays"
            refused = [r for r in agent.audit("cgroupReconcile") if not r["executed"]]
            assert not refused, f"writes the kernel refused: {refused[:3]}"

            ctr = be.containers[0]
            events = node.path(ctr, "memory.events")
            assert kv_file(events)["high"] == 0
            reader = node.start(be, ["dd", f"if={disk}", "of=/dev/null", "bs=1M", "count=128"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, err = reader.communicate(timeout=120)  # page cache is reclaimable: no stall
            assert reader.returncode == 0, err
            high = kv_file(events)["high"]
            current = int(node.read(ctr, "memory.current"))
            assert high > 0, "128 MiB read through a 60 MiB memory.high (80 MiB memory.max) must have hit it"
            assert current <= 60 * MiB + 4 * MiB, f"memory.current {current} stays near memory.high"
            assert kv_file(events)["oom_kill"] == 0
