"""A failure that repeats every tick is said once, then as a count every few minutes.

The executor's failed and refused writes (log and audit) and the node readers (a garbled or missing
``/proc/stat``) go through :class:`qosmanager.logfmt.RepeatLimiter`.
"""

from __future__ import annotations

import logging
import os

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, Write
from qosmanager.host.cgroups import CgroupLayout
from qosmanager.host.roots import HostRoots
from qosmanager.metrics.cache import MetricCache
from qosmanager.metrics.collector import Collector
from qosmanager.sim.fakehost import FakeHost
from qosmanager.states.store import StateStore

BE = "kubepods/besteffort"


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _executor(tmp_path, **kw):
    roots = HostRoots(cgroup=str(tmp_path / "cgroup"), proc=str(tmp_path / "proc"), sys=str(tmp_path / "sys"))
    layout = CgroupLayout(roots, 1, "cgroupfs")
    clock = Clock()
    audit = AuditLog(str(tmp_path / "audit.log"), clock=clock)
    return Executor(layout, audit, clock=clock, **kw), layout, clock, audit


def _refusing_file(layout: CgroupLayout, name: str = "cpu.cfs_quota_us") -> str:
    """A FIFO where the file should be: it opens, but every pread/pwrite fails with ESPIPE."""
    path = layout.file("cpu", BE, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path)
    return path


def _failed(audit: AuditLog) -> list[dict]:
    return [r for r in audit.recent if r["action"] == "write" and not r["executed"]]


def test_a_write_refused_every_tick_is_audited_and_logged_once_then_as_a_count(tmp_path, caplog) -> None:
    ex, layout, clock, audit = _executor(tmp_path)
    _refusing_file(layout)
    with caplog.at_level(logging.WARNING, logger="qosmanager.executor.executor"):
        for tick in range(601):  # ten minutes at one tick a second, the value changing every tick
            want = Write("cpuSuppress", "cpu.cfs_quota_us", str(100000 + tick), BE, reason="suppress")
            res = ex.apply([want])
            assert res[0].status == "failed"
            clock.t += 1.0
    assert ex.stats.failed == 601  # every failure is still counted
    recs = _failed(audit)
    assert len(recs) == 3, recs  # the first, then one summary per 5 minutes
    assert recs[0]["error"].startswith("ESPIPE") and "repeats" not in recs[0]
    assert recs[0]["value"] == "100000" and recs[0]["reason"] == "suppress"
    assert [r["repeats"] for r in recs[1:]] == [300, 300]
    assert "failed 300 more times in the last 5 min" in recs[1]["reason"]
    assert recs[2]["value"] == "100600"  # the summary names the latest wish
    logs = [r.getMessage() for r in caplog.records]
    assert len(logs) == 3
    assert "cpuSuppress: writing cpu/kubepods/besteffort/cpu.cfs_quota_us = 100000 failed: ESPIPE" in logs[0]
    assert logs[1].endswith("= 100300 failed 300 more times in the last 5 min: ESPIPE: Illegal seek")
    # the lines reached the file too: one per report, not one per tick
    audit.flush()
    assert len((tmp_path / "audit.log").read_text().splitlines()) == 3


def test_recovery_is_said_and_the_next_failure_is_news_again(tmp_path, caplog) -> None:
    ex, layout, clock, audit = _executor(tmp_path)
    path = _refusing_file(layout)
    for _ in range(5):
        ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
        clock.t += 1.0
    assert len(_failed(audit)) == 1
    os.unlink(path)  # the file is fine again
    with open(path, "w") as f:
        f.write("-1\n")
    ex.files.drop(path)
    with caplog.at_level(logging.WARNING, logger="qosmanager.executor.executor"):
        res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
    assert res[0].status == "written"
    msgs = [r.getMessage() for r in caplog.records]
    assert any("works again (it failed 4 more times in the last 5 s)" in m for m in msgs), msgs
    os.unlink(path)
    os.mkfifo(path)
    ex.files.drop(path)
    clock.t += 100  # past the write cache
    ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "110000", BE)])
    assert len(_failed(audit)) == 2 and "repeats" not in _failed(audit)[-1]


def test_a_failure_that_stops_repeating_is_still_summed_up(tmp_path) -> None:
    ex, layout, clock, audit = _executor(tmp_path, repeat_seconds=60.0)
    _refusing_file(layout)
    for _ in range(10):
        ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "120000", BE)])
        clock.t += 1.0
    clock.t += 120
    ex.apply([])  # the strategy no longer asks for that write
    recs = _failed(audit)
    assert [r.get("repeats") for r in recs] == [None, 9]


def test_an_invalid_value_every_tick_is_audited_once_then_counted(tmp_path) -> None:
    ex, _layout, clock, audit = _executor(tmp_path, repeat_seconds=60.0)
    for tick in range(61):
        res = ex.apply([Write("cpuBurst", "cpu.cfs_quota_us", str(-5 - tick), BE)])
        assert res[0].status == "invalid"
        clock.t += 1.0
    recs = _failed(audit)
    assert len(recs) == 2 and ex.stats.invalid == 61
    assert recs[1]["repeats"] == 60 and "refused (invalid value) 60 more times" in recs[1]["reason"]


def test_a_bad_proc_stat_is_logged_once_then_as_a_count(tmp_path, caplog) -> None:
    host = FakeHost(str(tmp_path / "host"), version=2, n_cpus=2)
    t = [1000.0]
    collector = Collector(host.layout, MetricCache(), StateStore(), clock=lambda: t[0])
    stat = host.roots.proc_path("stat")
    with open(stat) as f:
        good = f.read()
    try:
        with caplog.at_level(logging.WARNING, logger="qosmanager.metrics.collector"):
            for i in range(400):
                # garbled differently every tick (the counters move): still the same failure
                with open(stat, "w") as f:
                    f.write(f"cpu  {i} x 3 4 5 6 7 8 9 10\n")
                collector.collect(t[0])
                t[0] += 1.0
            with open(stat, "w") as f:
                f.write(good)
            collector.collect(t[0])
    finally:
        collector.close()
    msgs = [r.getMessage() for r in caplog.records if "proc/stat" in r.getMessage()]
    assert len(msgs) == 3, msgs
    assert msgs[0].startswith("cannot read node CPU usage from")
    assert "failed 300 more times in the last 5 min" in msgs[1]
    assert msgs[2].startswith("proc/stat readable again") and "99 more times" in msgs[2]


def test_a_batch_of_alike_failures_is_one_log_line_each_way_and_every_one_audited(tmp_path, caplog) -> None:
    """An EMFILE storm or a broken tree fails every file of a batch the same way: one warning with the
    count and an example, not one per file (2,000 lines a tick on a dense node); the same for their
    recovery; the audit still has every write."""
    ex, layout, clock, audit = _executor(tmp_path)
    rels = [f"{BE}/pod{i}" for i in range(30)]
    paths = [layout.file("cpu", r, "cpu.cfs_quota_us") for r in rels]
    for p in paths:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.mkfifo(p)
    with caplog.at_level(logging.WARNING, logger="qosmanager.executor.executor"):
        res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "50000", r) for r in rels])
        assert {r.status for r in res} == {"failed"}
        clock.t += 1.0
        ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "50000", r) for r in rels])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("cpuSuppress: 30 writes failed: ESPIPE") and "e.g. writing cpu/" in lines[0]
    assert len(_failed(audit)) == 30  # every file's first failure, each in the audit
    for p in paths:  # the files are fine again
        os.unlink(p)
        with open(p, "w") as f:
            f.write("-1\n")
        ex.files.drop(p)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="qosmanager.executor.executor"):
        res = ex.apply([Write("cpuSuppress", "cpu.cfs_quota_us", "50000", r) for r in rels])
    assert {r.status for r in res} == {"written"}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("cpuSuppress: writing 30 files works again, e.g. cpu/"), lines
