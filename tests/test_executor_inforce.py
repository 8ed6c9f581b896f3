"""The executor's in-force room: a BE protection (the BE QoS dir's CFS quota or cpuset) the agent decided
but the file does not hold is never "ok" (#16 §2), and another writer cannot keep it undone for long
(#16 §4)."""

from __future__ import annotations

import errno
import itertools

import pytest

from qosmanager.executor.executor import Write
from qosmanager.framework.conditions import Conditions
from test_executor import BE, make, put, read

QUOTA = "cpu.cfs_quota_us"
NOT_IN_FORCE = "executor/not-in-force/cpuSuppress/cpu.cfs_quota_us"
CONFLICT = "executor/write-conflict/cpu.cfs_quota_us"
TARGET = f"cpu/{BE}/{QUOTA}"


def setup(tmp_path, version: int = 1, value: str = "-1\n"):
    conditions = Conditions()
    ex, layout, clock, audit = make(tmp_path, version, conditions=conditions)
    sub, name = ("cpu", QUOTA) if version == 1 else ("", "cpu.max")
    path = put(layout, sub, BE, name, value)
    return ex, clock, audit, conditions, path


def refuse(ex, path: str, err: int):
    """The kernel refuses writes to ``path`` with ``err`` (as v1 does a parent quota below a child's)."""
    real = ex._pwrite
    state = {"on": True}

    def pwrite(items, payloads):
        errs = real([it for it in items if it.path != path or not state["on"]],
                    [p for it, p in zip(items, payloads) if it.path != path or not state["on"]])
        out = iter(errs)
        return [err if it.path == path and state["on"] else next(out) for it in items]

    ex._pwrite = pwrite
    return state


def suppress(value: str = "150000", **kw) -> Write:
    return Write("cpuSuppress", QUOTA, value, BE, reason="suppress BE", cacheable=False, **kw)


def test_a_be_quota_the_kernel_refuses_is_degraded_naming_strategy_file_and_errno(tmp_path) -> None:
    ex, clock, _audit, conditions, path = setup(tmp_path)
    refusing = refuse(ex, path, errno.EINVAL)
    for _ in range(3):
        assert ex.apply([suppress()])[0].status == "failed"
        clock.t += 1
    cond = conditions.get(NOT_IN_FORCE)
    assert cond is not None
    assert "cpuSuppress" in cond.message and TARGET in cond.message and "EINVAL" in cond.message
    assert "150000" in cond.message
    assert ex.not_in_force() == {("cpuSuppress", QUOTA): 1}
    # a BE pod quota (not the QoS dir) is no protection knob: refused, but not this condition
    pod = f"{BE}/pod1"
    put(ex.layout, "cpu", pod, QUOTA, "-1\n")
    ex.apply([Write("cpuSuppress", QUOTA, "150000", pod, cacheable=False)])
    assert ex.not_in_force() == {("cpuSuppress", QUOTA): 1}
    # the kernel takes it again: in force, the condition and the count are gone
    refusing["on"] = False
    assert ex.apply([suppress()])[0].status == "written" and read(path) == "150000\n"
    assert conditions.get(NOT_IN_FORCE) is None and ex.not_in_force() == {}


@pytest.mark.parametrize("version", [1, 2])
def test_a_be_cpuset_the_kernel_refuses_is_degraded_naming_strategy_file_and_errno(tmp_path, version: int) -> None:
    """The cpuset policy's protection: a BE QoS dir cpuset the kernel refuses (v1: EBUSY while a child
    holds a CPU outside it) is not in force, said with the strategy, the file, the value and the errno,
    until the kernel takes it."""
    conditions = Conditions()
    ex, layout, _clock, _audit = make(tmp_path, version, conditions=conditions)
    path = put(layout, "cpuset" if version == 1 else "", BE, "cpuset.cpus", "0-7\n")
    refusing = refuse(ex, path, errno.EBUSY)
    narrow = Write("cpuSuppress", "cpuset.cpus", "0-1", BE, reason="suppress BE", cacheable=False)
    assert ex.apply([narrow])[0].status == "failed"
    cond = conditions.get("executor/not-in-force/cpuSuppress/cpuset.cpus")
    assert cond is not None
    assert "cpuSuppress" in cond.message and "cpuset.cpus" in cond.message and "EBUSY" in cond.message
    assert "0-1" in cond.message
    assert ex.not_in_force() == {("cpuSuppress", "cpuset.cpus"): 1}
    refusing["on"] = False
    assert ex.apply([narrow])[0].status == "written" and read(path).strip() == "0-1"
    assert conditions.get("executor/not-in-force/cpuSuppress/cpuset.cpus") is None and ex.not_in_force() == {}


def test_the_gauge_and_healthz_show_a_refused_be_quota(tmp_path) -> None:
    from promtext import parse
    from qosmanager.exporter import AgentMetrics
    from qosmanager.states.store import StateStore

    store = StateStore()
    ex, layout, _clock, _audit = make(tmp_path, conditions=store.conditions)
    path = put(layout, "cpu", BE, QUOTA, "-1\n")
    refuse(ex, path, errno.EINVAL)
    ex.apply([suppress()])
    m = AgentMetrics(node_name="n1", clock=lambda: 1000.0, executor=ex, store=store, process=False)
    fams = parse(m.registry.render())
    assert fams["qosmanager_decided_not_in_force"].value(strategy="cpuSuppress", resource=QUOTA) == 1
    assert fams["qosmanager_degraded"].value(condition=NOT_IN_FORCE) == 1


@pytest.mark.parametrize("version", [1, 2])
def test_a_conflict_on_the_be_quota_backs_off_seconds_and_ends_when_the_other_writer_stops(
        tmp_path, version: int) -> None:
    unlimited = "-1\n" if version == 1 else "max 100000\n"
    ex, clock, _audit, conditions, path = setup(tmp_path, version, unlimited)
    written: list[float] = []
    for _ in range(40):  # the other writer resets the quota after every tick
        if ex.apply([suppress()])[0].status == "written":
            written.append(clock.t - 1000.0)
        with open(path, "w") as f:
            f.write(unlimited)
        clock.t += 1
    # five checks in a row found it undone: held, then retried after 1, 2, 4, 4, ... seconds
    assert written[:5] == [0.0, 1.0, 2.0, 3.0, 4.0]
    gaps = [b - a for a, b in itertools.pairwise(written[4:])]
    assert gaps and max(gaps) <= 5.0, written
    cond = conditions.get(NOT_IN_FORCE)
    assert cond is not None and "held back" in cond.message and conditions.get(CONFLICT) is not None
    # the other writer stops: this agent's value is back within the cap, the conditions go
    back = None
    for k in range(10):
        ex.apply([suppress()])
        if back is None and read(path).split()[0] == "150000":
            back = k
        clock.t += 1
    assert back is not None and back <= 5
    assert conditions.get(NOT_IN_FORCE) is None and conditions.get(CONFLICT) is None
    assert ex.conflicts() == {} and ex.not_in_force() == {}


def test_a_kubelet_resetting_the_be_quota_once_a_minute_is_undone_within_a_tick_and_no_fight(tmp_path) -> None:
    """The kubelet's systemd driver sets the BE slice's quota back to unlimited about once a minute
    (koordinator #1734): re-asserted at the next tick every time (cpuSuppress writes it uncached) and
    never taken for a fight."""
    ex, clock, _audit, conditions, path = setup(tmp_path)
    seen: list[object] = []
    ex.on_conflict.append(seen.append)
    unlimited_ticks = 0
    for k in range(600):
        ex.apply([suppress()])
        assert read(path) == "150000\n", k  # in force after every tick
        if k % 60 == 59:
            with open(path, "w") as f:
                f.write("-1\n")  # the kubelet's reset, between two ticks
            unlimited_ticks += 1
        clock.t += 1
    assert unlimited_ticks == 10 and seen == []
    assert conditions.get(CONFLICT) is None and conditions.get(NOT_IN_FORCE) is None
