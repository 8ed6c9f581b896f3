"""``--dry-run`` changes nothing on the host: every change is decided and audited, none is made.

The executor's directory operation is checked on its own first; then the real agent runs a dry run
with every strategy and gate on over a fake node under pressure, and the cgroup, proc and sys trees
must come out byte-identical (contents, directory listings, modes) while the audit shows the decisions.
"""

from __future__ import annotations

import os

import pytest

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.executor import Executor, MakeDir, Write
from qosmanager.sim.fakehost import FakeHost


def executor(tmp_path, *, dry_run: bool) -> tuple[FakeHost, Executor, AuditLog]:
    host = FakeHost(str(tmp_path / "host"), resctrl=True)
    audit = AuditLog(None, clock=lambda: 1000.0)
    return host, Executor(host.layout, audit, dry_run=dry_run, clock=lambda: 1000.0), audit


def records(audit: AuditLog, action: str) -> list[dict]:
    return [r for r in audit.recent if r["action"] == action]


def test_mkdir_creates_once_and_audits_it(tmp_path) -> None:
    host, ex, audit = executor(tmp_path, dry_run=False)
    d = MakeDir("resctrlReconcile", "sys", "fs/resctrl/LS", reason="the LS group")
    assert ex.mkdir(d) == "created"
    assert os.path.isdir(host.roots.sys_path("fs/resctrl/LS"))
    assert ex.mkdir(d) == "exists"
    [rec] = records(audit, "mkdir")
    assert {k: rec[k] for k in ("strategy", "target", "value", "old", "uid", "reason", "executed")} == {
        "strategy": "resctrlReconcile", "target": "sys/fs/resctrl/LS", "value": "0755", "old": None,
        "uid": None, "reason": "the LS group", "executed": True}


def test_mkdir_refuses_paths_that_climb_or_are_absolute(tmp_path) -> None:
    _host, ex, audit = executor(tmp_path, dry_run=False)
    for rel in ("", "/etc/x", "fs/../../x", "fs/resctrl/./LS", "fs//LS"):
        with pytest.raises(ValueError, match="bad directory"):
            ex.mkdir(MakeDir("s", "sys", rel))
    with pytest.raises(ValueError, match="unknown root"):
        ex.mkdir(MakeDir("s", "etc", "x"))
    assert records(audit, "mkdir") == []


def test_mkdir_failure_is_audited_once_per_error_not_every_tick(tmp_path) -> None:
    host, ex, audit = executor(tmp_path, dry_run=False)
    d = MakeDir("s", "sys", "fs/resctrl/nothere/LS")  # the parent is missing: only the last part is made
    assert [ex.mkdir(d) for _ in range(3)] == ["failed"] * 3
    [rec] = records(audit, "mkdir")
    assert rec["executed"] is False and rec["error"].startswith("ENOENT")
    assert not os.path.exists(host.roots.sys_path("fs/resctrl/nothere"))


def test_dry_run_mkdir_is_decided_once_and_files_in_it_are_decided_not_skipped(tmp_path) -> None:
    host, ex, audit = executor(tmp_path, dry_run=True)
    d = MakeDir("resctrlReconcile", "sys", "fs/resctrl/BE")
    assert [ex.mkdir(d) for _ in range(3)] == ["dry-run"] * 3
    assert not os.path.exists(host.roots.sys_path("fs/resctrl/BE"))
    [rec] = records(audit, "mkdir")
    assert rec["executed"] is False and "error" not in rec and rec["target"] == "sys/fs/resctrl/BE"
    res = ex.apply([Write("resctrlReconcile", "resctrl.schemata", "L3:0=f;\n", "BE"),
                    Write("resctrlReconcile", "resctrl.tasks", "42", "BE", entry="42", compare=False,
                          cacheable=False),
                    Write("resctrlReconcile", "resctrl.schemata", "L3:0=f;\n", "elsewhere")])
    assert [r.status for r in res] == ["dry-run", "dry-run", "missing"]  # a file of no would-be dir: missing
    writes = records(audit, "write")
    assert [(r["target"], r["value"], r["old"], r["executed"]) for r in writes] == [
        ("sys/fs/resctrl/BE/schemata", "L3:0=f;", None, False),
        ("sys/fs/resctrl/BE/tasks", "42", None, False)]
    assert not os.path.exists(host.roots.sys_path("fs/resctrl/BE"))
