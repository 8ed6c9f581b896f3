"""qosmanager.restore: the originals journal the agent keeps and the write-back of ``qosmanager restore``
(on a fake host; tests/test_kernel_restore.py does it on the real kernel)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from qosmanager.cli import main
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, Write
from qosmanager.restore import OriginalsJournal, read_originals, restore
from qosmanager.sim.fakehost import FakeHost
from qosmanager.sim.harness import Harness

BE = "kubepods/besteffort"


def quota(h: Harness, rel: str) -> str:
    return (h.read_file(h.cgroup_file("cpu", rel, "cpu.cfs_quota_us")) or "").strip()


def write_quota(h: Harness, rel: str, value: int, strategy: str = "cpuSuppress") -> None:
    h.executor.apply([Write(strategy, "cpu.cfs_quota_us", str(value), cgroup=rel)])


def test_the_first_original_is_kept_across_changes_and_restarts(tmp_path: Path) -> None:
    h = Harness()
    path = str(tmp_path / "originals.jsonl")
    j = OriginalsJournal(path, h.executor, clock=lambda: h.now)
    h.executor.on_write.append(j.on_write)
    assert quota(h, BE) == "-1"
    write_quota(h, BE, 120000)
    h.now += 100  # past the write cache's window: the next change is read and written again
    write_quota(h, BE, 60000)
    j.close()
    j = OriginalsJournal(path, h.executor)  # a restarted agent
    h.executor.on_write.append(j.on_write)
    h.now += 100
    write_quota(h, BE, 30000)
    j.close()
    [o] = read_originals(path)
    assert (o.resource, o.cgroup, o.value, o.raw, o.strategy) == ("cpu.cfs_quota_us", BE, "-1", True, "cpuSuppress")


def test_a_restart_drops_the_files_that_are_gone_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    h = Harness()
    pod = FakeHost.make_pods(2, containers_per_pod=1, seed=3)[0]
    h.host.add_pods([pod])
    pod_dir = h.host.pod_dir(pod.uid)
    path = str(tmp_path / "originals.jsonl")
    j = OriginalsJournal(path, h.executor)
    h.executor.on_write.append(j.on_write)
    write_quota(h, BE, 120000)
    write_quota(h, pod_dir, 150000, "cpuBurst")  # above the kubelet's 100000 (its container holds that)
    j.close()
    with open(path, "a") as f:
        f.write('{"resource": "cpu.cfs_quo')  # a node that lost power inside a write
    assert len(read_originals(path)) == 2
    shutil.rmtree(h.path(h.cgroup_file("cpu", pod_dir, "")))  # the pod is deleted
    j = OriginalsJournal(path, h.executor)
    j.close()
    assert [o.cgroup for o in read_originals(path)] == [BE]


def test_restore_writes_back_skips_what_is_gone_and_the_command_renames_the_file(tmp_path: Path) -> None:
    h = Harness()
    pod = FakeHost.make_pods(2, containers_per_pod=1, seed=3)[0]
    h.host.add_pods([pod])
    pod_dir = h.host.pod_dir(pod.uid)
    path = str(tmp_path / "originals.jsonl")
    j = OriginalsJournal(path, h.executor)
    h.executor.on_write.append(j.on_write)
    before = quota(h, pod_dir)
    write_quota(h, BE, 120000)
    write_quota(h, pod_dir, 150000, "cpuBurst")  # above the kubelet's 100000 (its container holds that)
    j.close()
    assert quota(h, BE) == "120000"
    fresh = Executor(h.layout, AuditLog(None))  # restore runs once the agent (and its claims) are gone
    by = restore(fresh, read_originals(path))
    assert [r.target for r in by["written"]] == ["cpu/kubepods/besteffort/cpu.cfs_quota_us",
                                                 f"cpu/{pod_dir}/cpu.cfs_quota_us"]
    assert quota(h, BE) == "-1" and quota(h, pod_dir) == before

    # the command: the pod gone meanwhile, BE suppressed again
    write_quota(h, BE, 90000)
    shutil.rmtree(h.path(h.cgroup_file("cpu", pod_dir, "")))
    host = h.host.roots
    argv = ["restore", "--cgroup-root", host.cgroup, "--proc-root", host.proc, "--sys-root", host.sys,
            "--cgroup-version", "1", "--cgroup-driver", "cgroupfs", "--originals-file", path]
    assert main([*argv, "--dry-run"]) == 0 and quota(h, BE) == "90000" and os.path.exists(path)
    assert main(argv) == 0
    assert quota(h, BE) == "-1"
    assert not os.path.exists(path) and os.path.exists(path + ".restored")
    assert main(argv) == 0  # nothing recorded any more: nothing to do
