"""The executor's report room: a write failing every tick is said in full once, then as a count."""

from __future__ import annotations

import logging

import pytest

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.report import Reporter
from qosmanager.executor.types import Write

K = ("cpu/kubepods/besteffort/cpu.cfs_quota_us", "cpu.cfs_quota_us", "")
LOG = "qosmanager.executor.executor"


def test_a_repeating_failure_is_one_line_then_a_count_then_works_again(caplog: pytest.LogCaptureFixture) -> None:
    audit = AuditLog()
    rep = Reporter(audit, repeat_seconds=300.0, clock=lambda: 1000.0)
    w = Write("s", "cpu.cfs_quota_us", "50000", "kubepods/besteffort", reason="r")
    with caplog.at_level(logging.WARNING, logger=LOG):
        for t in range(100):
            rep.refused(K, "failed", w, K[0], "50000", "-1", "EINVAL: Invalid argument", 1000.0 + t)
        assert len(caplog.records) == 1 and len(audit.recent) == 1
        rep.sweep(1400.0)  # past the interval: the count is said
        assert len(audit.recent) == 2 and audit.recent[-1]["repeats"] == 99
        rep.refused(K, "failed", w, K[0], "50000", "-1", "EINVAL: Invalid argument", 1401.0)  # counted
        rep.recovered(K, "s", K[0], 1402.0)
    assert "works again" in caplog.records[-1].getMessage()


def test_lines_alike_within_a_batch_become_one(caplog: pytest.LogCaptureFixture) -> None:
    audit = AuditLog()
    rep = Reporter(audit, repeat_seconds=300.0, clock=lambda: 1000.0)
    with caplog.at_level(logging.WARNING, logger=LOG), rep.batch():
        for i in range(50):
            w = Write("s", "cpu.cfs_quota_us", "50000", f"kubepods/pod{i}")
            rep.refused((f"pod{i}", "q", ""), "failed", w, f"pod{i}", "50000", None, "EMFILE", 1000.0)
    assert len(caplog.records) == 1 and "50 writes failed" in caplog.records[0].getMessage()
    assert len(audit.recent) == 50  # every one is in the audit
