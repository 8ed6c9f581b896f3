"""Host writes that fail inside the executor's batch, on the fake kernel's trees (``faultinject`` makes
chosen files fail with a chosen errno; every other file is written for real, in the batch's order).

Each case: the batch goes on past the failure, what failed is neither cached nor audited as done,
it is tried again on the next apply, and the failure is reported (once) where it is not a plain
"the cgroup is gone".
"""

from __future__ import annotations

import errno
import logging
import os
import shutil

import pytest

from faultinject import IOFaults
from qosmanager._native import pure_sysio
from qosmanager.executor import executor as executor_mod
from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, Write
from qosmanager.host.cgroups import CgroupLayout
from test_executor import Clock, put
from test_executor import make as executor_on_fake_kernel

POD = "kubepods/burstable/podf1"
CTRS = [f"{POD}/c{i}" for i in range(6)]


def make(tmp_path, version: int = 1) -> tuple[Executor, CgroupLayout, Clock, AuditLog]:
    """A pod and its containers on the fake kernel (test_executor's tree), their quotas unlimited."""
    ex, layout, clock, audit = executor_on_fake_kernel(tmp_path, version)
    for d in [POD, *CTRS]:
        put(layout, "cpu", d, "cpu.cfs_quota_us", "-1\n")
    return ex, layout, clock, audit


def quota(layout: CgroupLayout, d: str) -> str:
    with open(layout.file("cpu", d, "cpu.cfs_quota_us")) as f:
        return f.read().strip()


def lower_all(value: int) -> list[Write]:
    """A falling limit for the pod and its containers: one batch, children first."""
    return [Write("cpuBurst", "cpu.cfs_quota_us", str(value), d, reason="test") for d in [POD, *CTRS]]


def done(audit: AuditLog) -> set[str]:
    return {r["target"].split("/")[-2] for r in audit.recent if r["action"] == "write" and r["executed"]}


def test_cgroups_vanishing_between_decision_and_write_cost_only_themselves(tmp_path, monkeypatch) -> None:
    ex, layout, clock, audit = make(tmp_path)
    faults = IOFaults(monkeypatch)
    faults.fail("/c1/", errno.ENOENT)
    faults.fail("/c4/", errno.ENODEV)  # a v1 file of a removed cgroup can answer ENODEV
    res = ex.apply(lower_all(50000))
    status = {r.write.cgroup.rsplit("/", 1)[-1]: r.status for r in res}
    assert status == {"podf1": "written", "c0": "written", "c1": "missing", "c2": "written", "c3": "written",
                      "c4": "missing", "c5": "written"}
    assert [quota(layout, d) for d in CTRS] == ["50000", "-1", "50000", "50000", "-1", "50000"]
    assert done(audit) == {"podf1", "c0", "c2", "c3", "c5"}  # nothing audited as written that was not
    assert not [r for r in audit.recent if not r["executed"]]  # a vanished cgroup is no failure to report
    assert ex.stats.missing == 2 and ex.stats.failed == 0
    # next tick: the two are tried again (not cached), the others cost nothing
    faults.clear()
    tried = len(faults.attempts)
    clock.t += 1
    res = ex.apply(lower_all(50000))
    assert sorted(p.rsplit("/", 2)[-2] for p, _ in faults.attempts[tried:]) == ["c1", "c4"]
    assert [quota(layout, d) for d in CTRS] == ["50000"] * 6
    assert {r.status for r in res} == {"cached", "written"}


def test_a_cgroup_really_removed_after_the_decision_is_skipped_quietly(tmp_path) -> None:
    """The strategy decided; before the executor opens the files, one container's cgroup is removed."""
    ex, layout, clock, audit = make(tmp_path)
    writes = lower_all(50000)
    gone = layout.abs_dir("cpu", CTRS[2])
    shutil.rmtree(gone)  # rmdir: the kernel's files go with the cgroup
    for _ in range(3):
        res = ex.apply(writes)
        assert {r.write.cgroup: r.status for r in res}[CTRS[2]] == "missing"
        clock.t += 1
    assert [quota(layout, d) for d in CTRS if d != CTRS[2]] == ["50000"] * 5
    assert not os.path.exists(gone)  # never recreated by a write
    assert CTRS[2] not in done(audit) and not [r for r in audit.recent if not r["executed"]]
    assert ex.stats.missing == 3


def test_permission_denied_on_write_is_reported_once_retried_and_recovers(tmp_path, monkeypatch, caplog) -> None:
    ex, layout, clock, audit = make(tmp_path)
    faults = IOFaults(monkeypatch)
    faults.fail("/c3/", errno.EACCES)
    with caplog.at_level(logging.WARNING, logger="qosmanager.executor.executor"):
        for _ in range(5):
            res = ex.apply(lower_all(50000))
            assert {r.write.cgroup: r.status for r in res}[CTRS[3]] == "failed"
            clock.t += 1
    assert len(faults.written("/c3/")) == 5  # tried every tick: a failure is never cached
    assert [quota(layout, d) for d in CTRS] == ["50000"] * 3 + ["-1"] + ["50000"] * 2
    failed = [r for r in audit.recent if not r["executed"]]
    assert len(failed) == 1 and failed[0]["error"].startswith("EACCES"), failed  # said once
    assert failed[0]["target"].endswith("/c3/cpu.cfs_quota_us")
    assert sum("c3/cpu.cfs_quota_us = 50000 failed" in m for m in caplog.messages) == 1
    assert ex.stats.failed == 5
    faults.clear()
    with caplog.at_level(logging.WARNING, logger="qosmanager.executor.executor"):
        ex.apply(lower_all(50000))
    assert quota(layout, CTRS[3]) == "50000"
    assert any("works again" in m for m in caplog.messages)


def test_permission_denied_on_the_read_before_a_write_still_writes(tmp_path, monkeypatch) -> None:
    """The executor reads a file to skip writing what it holds already; a read refused (EACCES) only
    costs that saving: the value is written, its old value audited as unknown."""
    ex, layout, _clock, audit = make(tmp_path)
    faults = IOFaults(monkeypatch)
    faults.fail("/c2/", errno.EACCES, on="read")
    res = ex.apply(lower_all(50000))
    assert {r.status for r in res} == {"written"}
    assert [quota(layout, d) for d in CTRS] == ["50000"] * 6
    rec = next(r for r in audit.recent if r["target"].endswith("/c2/cpu.cfs_quota_us"))
    assert rec["executed"] and rec["old"] is None
    assert any("/c2/" in p for p in faults.reads)


@pytest.mark.parametrize("err", [errno.EINTR, errno.EAGAIN])
def test_eintr_or_eagain_from_a_write_is_retried_not_cached_and_never_raised(tmp_path, monkeypatch,
                                                                               err: int) -> None:
    """Through the plain-Python twin of the batch writer, whose ``os.pwrite`` raises: the errno comes
    back for that file alone, the rest of the batch is written, the next apply writes it.  (The native
    batch writer retries EINTR itself, in ext/sysio.c.)"""
    ex, layout, clock, audit = make(tmp_path)
    monkeypatch.setattr(executor_mod, "sysio", pure_sysio)
    real = os.pwrite
    hit: list[str] = []

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "/c5/" in path and len(hit) < 2:
            hit.append(path)
            raise OSError(err, os.strerror(err))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    res = ex.apply(lower_all(50000))
    by = {r.write.cgroup: r for r in res}
    assert by[CTRS[5]].status == "failed" and by[CTRS[5]].error.startswith(errno.errorcode[err])
    assert all(by[d].status == "written" for d in [POD, *CTRS[:5]])
    clock.t += 1
    assert {r.write.cgroup: r.status for r in ex.apply(lower_all(50000))}[CTRS[5]] == "failed"
    clock.t += 1
    assert {r.write.cgroup: r.status for r in ex.apply(lower_all(50000))}[CTRS[5]] == "written"
    assert [quota(layout, d) for d in CTRS] == ["50000"] * 6
    assert len([r for r in audit.recent if not r["executed"]]) == 1  # reported once
