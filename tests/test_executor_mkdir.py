"""The executor's mkdir room: made where asked only, audited once per outcome, decided under a dry run."""

from __future__ import annotations

import os

import pytest

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.dryrun import DryRun
from qosmanager.executor.mkdir import Dirs
from qosmanager.executor.types import MakeDir
from qosmanager.sim.fakehost import FakeHost

_HOSTS: dict[str, FakeHost] = {}  # each test's host, kept alive with its fake kernel for the test


@pytest.fixture(autouse=True)
def _hosts():
    yield
    _HOSTS.clear()


def dirs(tmp_path, dry: bool = False) -> tuple[Dirs, AuditLog]:
    """The mkdir room on a fake host with resctrl mounted (its root group only) and the fake kernel."""
    host = _HOSTS[str(tmp_path)] = FakeHost(str(tmp_path), version=1, n_cpus=4, resctrl=True)
    audit = AuditLog()
    return Dirs(host.roots, audit, DryRun(60) if dry else None), audit


def test_created_once_then_exists(tmp_path) -> None:
    d, audit = dirs(tmp_path)
    md = MakeDir("resctrl", "sys", "fs/resctrl/BE")
    assert d.mkdir(md, 1.0) == "created" and os.path.isdir(tmp_path / "sys/fs/resctrl/BE")
    # the kernel makes the group's files with it
    assert (tmp_path / "sys/fs/resctrl/BE/schemata").read_text() == "L3:0=7ff\nMB:0=100\n"
    assert (tmp_path / "sys/fs/resctrl/BE/tasks").read_text() == ""
    assert d.mkdir(md, 2.0) == "exists"
    assert [(r["action"], r["target"], r["executed"]) for r in audit.recent] == [
        ("mkdir", "sys/fs/resctrl/BE", True)]


def test_a_failure_is_audited_once_per_errno(tmp_path) -> None:
    d, audit = dirs(tmp_path)
    md = MakeDir("resctrl", "sys", "fs/resctrl/nope/BE")  # its parent is missing
    assert [d.mkdir(md, float(t)) for t in range(3)] == ["failed"] * 3
    assert len(audit.recent) == 1 and audit.recent[0]["error"].startswith("ENOENT")


def test_a_dry_run_decides_once_and_makes_nothing(tmp_path) -> None:
    d, audit = dirs(tmp_path, dry=True)
    md = MakeDir("resctrl", "sys", "fs/resctrl/BE")
    assert d.mkdir(md, 1.0) == d.mkdir(md, 2.0) == "dry-run"
    assert not os.path.exists(tmp_path / "sys/fs/resctrl/BE") and len(audit.recent) == 1
    assert d.dry is not None and d.dry.in_dir(str(tmp_path / "sys/fs/resctrl/BE/schemata"))


@pytest.mark.parametrize("rel", ["", "/abs", "a/../b", "a//b", "./a"])
def test_only_plain_relative_paths(tmp_path, rel: str) -> None:
    d, _ = dirs(tmp_path)
    with pytest.raises(ValueError):
        d.mkdir(MakeDir("s", "sys", rel), 1.0)
