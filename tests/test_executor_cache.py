"""The executor's write cache room: a value written within the force window costs no syscall."""

from __future__ import annotations

from qosmanager.executor.cache import WriteCache

K = ("cpu/kubepods/besteffort/cpu.cfs_quota_us", "cpu.cfs_quota_us", "")


def test_an_entry_vouches_for_its_value_within_the_force_window_only() -> None:
    c = WriteCache(force_seconds=60, ttl=120)
    c.put(K, "120000", 1000.0, "120000\n")
    assert c.fresh(K, "120000", 1059.9) is c.entries[K]
    assert c.fresh(K, "130000", 1010.0) is None  # another value: read and compare
    assert c.fresh(K, "120000", 1060.0) is None  # the window is over: re-checked
    assert c.entries[K].content == "120000\n"  # what the file held: saves the read of a change


def test_gc_drops_entries_unused_for_the_ttl_and_forget_a_pods_files() -> None:
    c = WriteCache(force_seconds=60, ttl=120)
    other = ("cpu/kubepods/burstable/podx/cpu.cfs_quota_us", "cpu.cfs_quota_us", "")
    c.put(K, "1", 1000.0)
    c.put(other, "2", 1100.0)
    c.gc(1121.0)
    assert list(c.entries) == [other]
    c.forget(("cpu/kubepods/burstable/podx/",))
    assert not c.entries
