"""The executor's order room: the phase of each write, so a parent never holds less than a child."""

from __future__ import annotations

from qosmanager.executor import order
from qosmanager.executor.types import Item, Write, WriteResult
from qosmanager.host import resources as res


def item(resource: str, value: str, cgroup: str) -> Item:
    w = Write("s", resource, value, cgroup)
    t = f"{cgroup}/{resource}"
    return Item(w, res.get(resource), (t, resource, ""), "/x/" + t, t, cgroup.count("/") + 1,
                WriteResult(w, t, "planned"))


def canonical(_r: res.Resource, content: str) -> str:
    return content.strip()


def test_a_rising_quota_goes_parents_first_a_falling_one_children_first() -> None:
    up = item("cpu.cfs_quota_us", "200000", "kubepods/besteffort")
    down = item("cpu.cfs_quota_us", "50000", "kubepods/besteffort/pod1")
    assert order.steps(up, "100000", "200000", "200000", canonical) == [(0, "200000", "200000")]
    assert order.steps(down, "100000", "50000", "50000", canonical) == [(1, "50000", "50000")]
    unlimited = item("cpu.cfs_quota_us", "-1", "kubepods")
    assert order.steps(unlimited, "100000", "-1", "-1", canonical)[0][0] == 0  # -1 is the largest


def test_a_cpuset_widens_to_the_union_first_then_narrows() -> None:
    it = item("cpuset.cpus", "2-3", "kubepods/besteffort")
    assert order.steps(it, "0-1", "2-3", "2-3", canonical) == [(0, "0-3", "0-3"), (1, "2-3", "2-3")]
    grow = item("cpuset.cpus", "0-3", "kubepods/besteffort")
    assert order.steps(grow, "0-1", "0-3", "0-3", canonical) == [(0, "0-3", "0-3")]  # the union is exact
    shrink = item("cpuset.cpus", "0", "kubepods/besteffort")
    assert order.steps(shrink, "0-1", "0", "0", canonical) == [(1, "0", "0")]


def test_phases_sort_by_depth_each_its_own_way() -> None:
    parent, child = item("cpu.cfs_quota_us", "1", "a"), item("cpu.cfs_quota_us", "1", "a/b/c")
    parent.steps, child.steps = [(0, "p0", "p0"), (1, "p1", "p1")], [(0, "c0", "c0"), (1, "c1", "c1")]
    first, second = order.phases([child, parent])
    assert [e for _, e, _ in first] == ["p0", "c0"] and [e for _, e, _ in second] == ["c1", "p1"]
