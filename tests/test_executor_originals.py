"""The executor's originals room: what a file held before a strategy changed it, put back once."""

from __future__ import annotations

from qosmanager.executor.originals import Originals
from qosmanager.executor.types import Item, Restore, Write, WriteResult
from qosmanager.host import resources as res

T = "cpu/kubepods/besteffort/cpu.cfs_quota_us"
K = (T, "cpu.cfs_quota_us", "")


def written(strategy: str, value: str, old: str | None, *, restore: bool = False) -> Item:
    w = Write(strategy, "cpu.cfs_quota_us", value, "kubepods/besteffort", restore=restore, raw=restore)
    return Item(w, res.get("cpu.cfs_quota_us"), K, "/x/" + T, T, 2, WriteResult(w, T, "written", value, old))


def test_the_first_change_is_remembered_and_a_restore_writes_it_back_raw() -> None:
    o = Originals()
    o.remember(written("s", "50000", "-1"))
    o.remember(written("s", "40000", "50000"))  # a later change keeps the first original
    out: list[Write] = []
    o.writes_for(Restore("s", "cpu.cfs_quota_us", "kubepods/besteffort"), K, out)
    assert [(w.value, w.raw, w.restore) for w in out] == [("-1", True, True)]
    o.writes_for(Restore("other", "cpu.cfs_quota_us", "kubepods/besteffort"), K, out)
    assert len(out) == 1  # another strategy changed nothing here
    assert [w.value for w in o.all_writes("s")] == ["-1"]
    o.put_back(written("s", "-1", "40000", restore=True))
    assert not o and o.all_writes("s") == []


def test_restores_and_unknown_old_values_record_nothing() -> None:
    o = Originals()
    o.remember(written("s", "-1", "50000", restore=True))
    o.remember(written("s", "50000", None))
    assert not o
    o.remember(written("s", "50000", "-1"))
    o.forget(("cpu/kubepods/besteffort/",))
    assert not o
