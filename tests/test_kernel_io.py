"""Block IO on a real kernel: ``io.max`` / ``io.weight`` of the BE class from the real agent, and the
kernel holding BE's reads of a real disk to the limit.  cgroup v2: ``test_guest.py`` runs this file
in the guest, whose ``QOSM_GUEST_DISK`` is a virtio disk.  One agent run serves both tests.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from realnode import Pod, RealNode, real_node

pytestmark = pytest.mark.kernel

MiB = 1 << 20
LIMIT = 4 * MiB  # bytes per second BE may read from the disk
READ = 12 * MiB


@dataclass
class IORun:
    node: RealNode
    disk: str
    devno: str
    be: Pod
    ls: Pod
    io_max: str
    io_weight: str
    refused: list[dict[str, Any]]
    agent_log: str


@pytest.fixture(scope="module")
def io_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IORun]:
    """The BE class with readBPS and ioWeightPercent for the disk; the agent's results, after it stopped."""
    disk = os.environ.get("QOSM_GUEST_DISK")
    with real_node(tmp_path_factory.mktemp("io"), version=2, controllers=("io",)) as node:
        if not disk:
            pytest.skip("needs a block device to read in QOSM_GUEST_DISK (the test guest has one)")
        rdev = os.stat(disk).st_rdev
        devno = f"{os.major(rdev)}:{os.minor(rdev)}"
        be = node.add_pod("be", "BE")
        ls = node.add_pod("ls", "LS")
        be_dir = node.layout.qos_dir("BestEffort")
        node.write_nodeslo({"resourceQOSStrategy": {"beClass": {"blkioQOS": {"enable": True, "blocks": [
            {"name": disk, "type": "device", "ioCfg": {"readBPS": LIMIT, "ioWeightPercent": 50}}]}}}})
        with node.agent("--strategies", "blkioReconcile", "--feature-gates", "BlkIOReconcile=true",
                        "--collect-interval", "500ms", "--reconcile-interval-seconds", "0.5") as agent:
            agent.wait_for("BE's io.max", lambda: f"{devno} rbps={LIMIT} " in node.read(be_dir, "io.max") + " ", 60)
            time.sleep(1.5)  # a few more reconcile rounds
        yield IORun(node, disk, devno, be, ls, node.read(be_dir, "io.max"), node.read(be_dir, "io.weight"),
                    [r for r in agent.audit("blkioReconcile") if not r["executed"]], agent.log())


def read_rate(node: RealNode, pod: Pod, disk: str) -> float:
    """Bytes per second a direct read of READ bytes of ``disk`` gets in the pod's container."""
    t0 = time.monotonic()
    proc = node.start(pod, ["dd", f"if={disk}", "of=/dev/null", "bs=1M", f"count={READ // MiB}", "iflag=direct"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return READ / (time.monotonic() - t0)


def test_io_max_holds_be_reads_to_the_limit(io_run: IORun) -> None:
    """The BE class's readBPS becomes the BE dir's ``io.max`` for the disk's MAJ:MIN (the limit stays
    after the agent stopped), and a BE container's reads of the disk slow to the limit while an LS
    container reads at full speed."""
    r = io_run
    assert f"{r.devno} rbps={LIMIT} wbps=max riops=max wiops=max" in r.io_max.splitlines(), r.io_max
    assert not [w for w in r.refused if w["target"].endswith("/io.max")], r.refused
    be_rate, ls_rate = read_rate(r.node, r.be, r.disk), read_rate(r.node, r.ls, r.disk)
    assert be_rate <= LIMIT * 1.25, f"BE read at {be_rate / MiB:.1f} MiB/s under a {LIMIT / MiB:.0f} MiB/s limit"
    assert ls_rate > 2 * LIMIT, f"LS read at {ls_rate / MiB:.1f} MiB/s: the limit is BE's alone"


def test_io_weight_is_accepted_or_left_alone(io_run: IORun) -> None:
    """ioWeightPercent 50 is ``MAJ:MIN 4950`` in ``io.weight`` where the kernel takes it; where it cannot
    (no iocost on the disk: EOPNOTSUPP) the agent reports the refusal once and does not send it again
    in the rounds that follow."""
    r = io_run
    refused = [w for w in r.refused if w["target"].endswith("/io.weight")]
    if f"{r.devno} 4950" in r.io_weight.splitlines():
        assert not refused, refused
    else:
        assert "default 100" in r.io_weight, r.io_weight
        assert len(refused) == 1 and refused[0]["error"].startswith("ENOTSUP"), refused
        assert r.agent_log.count("not sent again until the wanted value changes") == 1, r.agent_log
