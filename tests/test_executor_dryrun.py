"""The executor's dry-run room: directories only decided, uncacheable writes decided once per window."""

from __future__ import annotations

from qosmanager.executor.dryrun import DryRun

K = ("resctrl/BE/tasks", "resctrl.tasks", "")


def test_files_of_a_decided_directory_are_known_and_decisions_last_a_window() -> None:
    d = DryRun(force_seconds=60)
    assert not d.in_dir("/sys/fs/resctrl/BE/schemata")
    d.dirs.add("/sys/fs/resctrl/BE")
    assert d.in_dir("/sys/fs/resctrl/BE/schemata") and not d.in_dir("/sys/fs/resctrl/LS/schemata")
    d.decide(K, "123", 1000.0)
    assert d.seen(K, "123", 1059.0) and not d.seen(K, "124", 1001.0) and not d.seen(K, "123", 1060.0)
    d.gc(1061.0)
    assert not d.decided
