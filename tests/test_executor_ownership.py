"""The executor's ownership room: one strategy owns a file; the merge rule settles a disagreement."""

from __future__ import annotations

from qosmanager.executor.audit import AuditLog
from qosmanager.executor.ownership import Claims
from qosmanager.executor.types import ExecutorStats, Item, Write, WriteResult
from qosmanager.host import resources as res

T = "cpu/kubepods/besteffort/cpu.cfs_quota_us"
K = (T, "cpu.cfs_quota_us", "")


def item(strategy: str, value: str, lease: float = 5.0) -> Item:
    w = Write(strategy, "cpu.cfs_quota_us", value, "kubepods/besteffort", lease=lease)
    return Item(w, res.get("cpu.cfs_quota_us"), K, "/x/" + T, T, 2, WriteResult(w, T, "cached"))


def test_the_lower_quota_wins_and_the_loser_is_audited_once() -> None:
    audit, stats = AuditLog(), ExecutorStats()
    c = Claims(audit, stats)
    assert c.settle(item("a", "50000"), 1000.0) and c.owner(K) == "a"
    for t in (1001.0, 1002.0):
        lost = item("b", "90000")
        assert not c.settle(lost, t) and lost.result.status == "lost"
    assert stats.lost == 2 and c.owner(K) == "a"
    assert [r["strategy"] for r in audit.recent] == ["b"]  # a standing disagreement: audited once
    assert "owned by a" in audit.recent[0]["reason"]
    assert c.settle(item("b", "40000"), 1003.0) and c.owner(K) == "b"  # lower: b takes the file
    assert [r["strategy"] for r in audit.recent] == ["b", "a"]


def test_a_claim_ends_with_its_lease_or_its_strategy() -> None:
    c = Claims(AuditLog(), ExecutorStats())
    assert c.settle(item("a", "50000", lease=5.0), 1000.0)
    assert c.settle(item("b", "90000"), 1005.1)  # a's lease ran out: anyone may write
    c.release("b")
    assert c.owner(K) is None
    assert c.settle(item("a", "50000"), 1006.0)
    c.gc(1006.0 + 121.0, ttl=120.0)
    assert c.owner(K) is None
