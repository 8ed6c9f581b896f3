"""Another writer on the same file (a koordlet-like agent resetting what this one sets): the executor
stops rewriting it at every check, reports the conflict once, retries with backoff, and clears the
conflict when its value sticks."""

from __future__ import annotations

from typing import Any

from qosmanager.executor.executor import Plan, Write, WriteConflict
from qosmanager.framework.conditions import Conditions
from qosmanager.sim.harness import Harness
from qosmanager.states.kube.events import WRITE_CONFLICT, ObjectRef, WriteConflictEvents
from test_executor import BE, make, put, read

QUOTA = "cpu.cfs_quota_us"
COND = "executor/write-conflict/cpu.cfs_quota_us"
# not a protection knob: those (the BE QoS dir's quota and cpuset) retry within seconds, see
# test_executor_inforce.py
DIR = "kubepods/burstable"


def fight(tmp_path, **kw: Any):
    conditions = Conditions()
    ex, layout, clock, audit = make(tmp_path, conditions=conditions, **kw)
    path = put(layout, "cpu", DIR, QUOTA, "-1\n")
    seen: list[WriteConflict] = []
    ex.on_conflict.append(seen.append)
    return ex, clock, audit, conditions, path, seen


def reset(path: str, value: str = "-1\n") -> None:
    with open(path, "w") as f:
        f.write(value)


def test_a_file_reset_every_tick_is_held_back_reported_once_and_retried_with_backoff(tmp_path) -> None:
    ex, clock, audit, conditions, path, seen = fight(tmp_path)
    w = lambda: Write("cpuSuppress", QUOTA, "270000", DIR, reason="suppress", cacheable=False)  # noqa: E731
    written_at: list[float] = []
    for _ in range(700):  # one tick a second; the other writer resets the quota after every tick
        st = ex.apply([w()])[0].status
        if st == "written":
            written_at.append(clock.t - 1000.0)
        reset(path)
        clock.t += 1
    # written at the start and four more times while the resets were counted, then held back at the
    # fifth check in a row, then retried after 60, 120, 240 s (backoff) instead of every second
    assert written_at[:5] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert written_at[5:] == [65.0, 185.0, 425.0]
    assert len(seen) == 1 and seen[0].active
    assert (seen[0].target, seen[0].ours, seen[0].theirs, seen[0].times) == (
        f"cpu/{DIR}/{QUOTA}", "270000", "-1", 5)
    assert ex.conflicts() == {QUOTA: 1}
    cond = conditions.get(COND)
    assert cond is not None and f"cpu/{DIR}/{QUOTA}" in cond.message
    held = [r for r in audit.recent if r.get("error", "").startswith("conflict")]
    assert len(held) == 1 and held[0]["executed"] is False and held[0]["old"] == "-1"
    assert ex.stats.conflicts > 600


def test_a_conflict_that_stops_clears_the_condition(tmp_path) -> None:
    ex, clock, _audit, conditions, path, seen = fight(tmp_path)
    w = lambda: Write("cpuSuppress", QUOTA, "270000", DIR, cacheable=False)  # noqa: E731
    for _ in range(70):  # into the conflict and past the first retry (at 65 s)
        ex.apply([w()])
        reset(path)
        clock.t += 1
    assert conditions.get(COND) is not None
    statuses = []
    for _ in range(200):  # the other writer has stopped: the next retry finds this agent's value
        statuses.append(ex.apply([w()])[0].status)
        clock.t += 1
    assert "written" in statuses and statuses[-1] == "unchanged"
    assert read(path) == "270000\n"
    assert conditions.get(COND) is None and ex.conflicts() == {}
    assert [c.active for c in seen] == [True, False]
    # a single later reset is an ordinary correction, not a new conflict
    reset(path)
    assert ex.apply([w()])[0].status == "written" and conditions.get(COND) is None


def test_occasional_outside_changes_are_corrected_without_a_conflict(tmp_path) -> None:
    ex, clock, _audit, conditions, path, seen = fight(tmp_path)
    for k in range(300):
        assert ex.apply([Write("s", QUOTA, "270000", DIR, cacheable=False)])[0].status != "conflict"
        if k % 3 == 0:  # changed back now and then, our value sticking in between
            reset(path)
        clock.t += 1
    assert seen == [] and conditions.get(COND) is None


def test_a_strategy_changing_its_own_value_is_no_conflict(tmp_path) -> None:
    ex, clock, _audit, _conditions, _path, seen = fight(tmp_path)
    for k in range(20):  # a new value every tick, nobody else writing
        assert ex.apply([Write("s", QUOTA, str(200000 + 1000 * k), DIR, cacheable=False)])[0].status == "written"
        clock.t += 1
    assert seen == []


def test_a_reset_is_a_revert_even_when_the_wanted_value_moves(tmp_path) -> None:
    ex, clock, _audit, conditions, path, seen = fight(tmp_path)
    statuses = []
    for k in range(10):  # the strategy's value drifts; the other writer resets the file every tick
        statuses.append(ex.apply([Write("s", QUOTA, str(200000 + 1000 * k), DIR, cacheable=False)])[0].status)
        reset(path)
        clock.t += 1
    assert statuses[:5] == ["written"] * 5 and set(statuses[5:]) == {"conflict"}
    assert len(seen) == 1 and conditions.get(COND) is not None


def test_cached_writes_and_plans_are_watched_at_each_forced_recheck(tmp_path) -> None:
    ex, clock, _audit, conditions, path, seen = fight(tmp_path, force_seconds=10.0)
    version = ("q", 270000)
    build = lambda: [Write("cpuBurst", QUOTA, "270000", DIR)]  # noqa: E731
    writes = 0
    for _ in range(300):
        writes += sum(r.status == "written" for r in ex.apply([Plan("cpuBurst", "q", version, build)]))
        reset(path)
        clock.t += 1
    # written at 0, 10, 20, 30, 40; held back at 50; retried at 60, 80, 120, 200 (backoff from 10 s)
    assert writes == 9
    assert [c.active for c in seen] == [True] and conditions.get(COND) is not None


def test_dry_run_watches_nothing(tmp_path) -> None:
    ex, clock, _audit, _conditions, path, seen = fight(tmp_path, dry_run=True)
    for _ in range(200):
        assert ex.apply([Write("s", QUOTA, "270000", DIR, cacheable=False)])[0].status in ("dry-run", "cached")
        reset(path)
        clock.t += 1
    assert seen == [] and read(path) == "-1\n"


def test_a_pod_that_goes_ends_its_conflicts(tmp_path) -> None:
    conditions = Conditions()
    ex, layout, clock, _ = make(tmp_path, conditions=conditions)
    pod = f"{BE}/podx"
    path = put(layout, "cpu", pod, QUOTA, "-1\n")
    for _ in range(7):
        ex.apply([Write("s", QUOTA, "270000", pod, cacheable=False)])
        reset(path)
        clock.t += 1
    assert ex.conflicts() == {QUOTA: 1}
    ex.forget([pod])
    assert ex.conflicts() == {} and conditions.get(COND) is None


def test_cpu_suppress_against_a_koordlet_like_writer() -> None:
    """The whole agent (cpuSuppress, cfsQuota policy) beside a writer that resets the BE quota to
    unlimited after every tick: the fight is reported once and the quota, a protection knob, is
    rewritten with a short backoff (1, 2, then every 4 s), never left to the other writer for longer."""
    from test_strategy_cpu_suppress import NOW, slo, usage, with_pods
    from test_strategy_cpu_suppress import make as make_node

    h: Harness = make_node()
    with_pods(h)
    slo(h, policy="cfsQuota")
    be_quota = h.cgroup_file("cpu", h.layout.qos_dir("BestEffort"), QUOTA)
    writes = 0
    for k in range(200):
        usage(h, NOW + k - 1, 2.5, ls_1=2.0)
        writes += sum(r.status == "written" for r in h.tick("cpuSuppress", NOW + k))
        h.write_file(be_quota, "-1\n")  # the other agent puts its own value back after every tick
    assert h.manager.stats["cpuSuppress"].errors == 0
    # written for five ticks, held at the fifth reset in a row, then retried after 1, 2, 4, 4, ... s:
    # 200 ticks hold about 50 retries (not 200 writes, nor the 3 a minutes-long backoff would give)
    assert 40 <= writes <= 5 + 195 // 4 + 2
    cond = h.store.conditions.get(COND)
    assert cond is not None and "besteffort" in cond.message
    assert h.executor.conflicts() == {QUOTA: 1}
    # the count is exported by resource
    from promtext import parse
    from qosmanager.exporter import AgentMetrics

    m = AgentMetrics(node_name="n1", clock=lambda: h.now, layout=h.layout, store=h.store, cache=h.cache,
                     executor=h.executor, coordinator=h.coordinator, manager=h.manager, process=False)
    fams = parse(m.registry.render())
    assert fams["qosmanager_write_conflicts"].value(resource=QUOTA) == 1
    assert fams["qosmanager_degraded"].value(condition=COND) == 1


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, ref: ObjectRef, type_: str, reason: str, message: str, action: str = "") -> bool:
        self.events.append((ref.name, reason, message))
        return True


def test_conflicts_become_node_events_folded_per_resource() -> None:
    rec = FakeRecorder()
    now = [1000.0]
    ev = WriteConflictEvents(rec, lambda: ObjectRef("Node", "n1"), clock=lambda: now[0])  # type: ignore[arg-type]

    def conflict(target: str, active: bool = True) -> WriteConflict:
        return WriteConflict("cpuSuppress", QUOTA, target, "270000", "-1", 3, active)

    ev.on_conflict(conflict("cpu/kubepods/besteffort/cpu.cfs_quota_us"))
    assert len(rec.events) == 1
    node, reason, message = rec.events[0]
    assert (node, reason) == ("n1", WRITE_CONFLICT)
    assert "cpu/kubepods/besteffort/cpu.cfs_quota_us" in message and "270000" in message and "-1" in message
    for k in range(40):  # many files within the minute: one more Event, later, naming the first
        ev.on_conflict(conflict(f"cpu/kubepods/besteffort/pod{k}/cpu.cfs_quota_us"))
    ev.on_conflict(conflict("cpu/x", active=False))  # an end is not an Event
    assert len(rec.events) == 1
    now[0] += 60
    ev.flush()
    assert len(rec.events) == 2 and "pod0/cpu.cfs_quota_us (and 39 more files" in rec.events[1][2]
    now[0] += 60
    ev.flush()
    assert len(rec.events) == 2
