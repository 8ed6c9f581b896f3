"""Executor plans (writes with an identity, skipped while unchanged) and per-file restores."""

from __future__ import annotations

import os

from qosmanager.executor.executor import Plan, PlanGroup, Restore, Write
from test_executor import BE, make, put, read

PODS = [f"{BE}/pod{k}" for k in range(4)]


class Counting:
    """A plan's build function that counts how often the executor asked for the writes."""

    def __init__(self, values: dict[str, str], strategy: str = "s") -> None:
        self.values = values
        self.strategy = strategy
        self.builds = 0

    def __call__(self) -> list[Write]:
        self.builds += 1
        return [Write(self.strategy, "cpu.cfs_quota_us", v, d, reason="r") for d, v in self.values.items()]


def tree(layout, value: str = "-1\n") -> dict[str, str]:
    return {d: put(layout, "cpu", d, "cpu.cfs_quota_us", value) for d in [BE, *PODS]}


def test_an_unchanged_plan_is_skipped_without_building_its_writes(tmp_path) -> None:
    ex, layout, clock, _ = make(tmp_path)
    paths = tree(layout)
    build = Counting(dict.fromkeys(PODS, "50000"))
    version = ("v1",)
    res = ex.apply([Plan("s", "quota", version, build)])
    assert [r.status for r in res] == ["written"] * 4 and build.builds == 1
    reads, writes = ex.stats.read_syscalls, ex.stats.write_syscalls
    for _ in range(10):
        clock.t += 5
        assert ex.apply([Plan("s", "quota", ("v1",), build)]) == []  # an equal version: skipped
    assert build.builds == 1 and ex.stats.plans_skipped == 10
    assert (ex.stats.read_syscalls, ex.stats.write_syscalls) == (reads, writes)
    assert all(read(paths[d]) == "50000\n" for d in PODS)


def test_a_changed_file_is_corrected_once_the_force_window_is_over(tmp_path) -> None:
    ex, layout, clock, audit = make(tmp_path)
    paths = tree(layout)
    build = Counting(dict.fromkeys(PODS, "50000"))
    ex.apply([Plan("s", "quota", 1, build)])
    with open(paths[PODS[2]], "w") as f:
        f.write("-1\n")  # someone else resets one file
    clock.t += 59
    assert ex.apply([Plan("s", "quota", 1, build)]) == []  # within the window the plan is trusted
    assert read(paths[PODS[2]]) == "-1\n"
    clock.t += 1
    reads = ex.stats.read_syscalls
    res = ex.apply([Plan("s", "quota", 1, build)])
    # every file of the plan was re-read (not answered by the write cache): the three that show what
    # they showed when read back after the write by one compare, the changed one corrected
    assert [(r.write.cgroup, r.status) for r in res] == [(PODS[2], "written")]
    assert ex.stats.verified == 3 and ex.stats.read_syscalls - reads == 4 + 1 + 1  # compare, read, read back
    assert read(paths[PODS[2]]) == "50000\n"
    assert audit.recent[-1]["target"].endswith("pod2/cpu.cfs_quota_us") and audit.recent[-1]["old"] == "-1"
    # and the next window starts from that re-check
    clock.t += 30
    assert ex.apply([Plan("s", "quota", 1, build)]) == [] and build.builds == 2


def test_every_recheck_compares_the_files_and_sends_only_a_reset_one(tmp_path) -> None:
    ex, layout, clock, audit = make(tmp_path)
    paths = tree(layout)
    build = Counting(dict.fromkeys(PODS, "50000"))
    ex.apply([Plan("s", "quota", 1, build)])
    for rounds in range(3):
        with open(paths[PODS[rounds]], "w") as f:
            f.write("-1\n")  # another writer resets one file in each window
        clock.t += 59
        assert ex.apply([Plan("s", "quota", 1, build)]) == []
        clock.t += 1
        verified, reads = ex.stats.verified, ex.stats.read_syscalls
        res = ex.apply([Plan("s", "quota", 1, build)])
        # the files still as last read are confirmed by one compare; the reset one goes through the
        # pipeline (read again, corrected, audited), and so does, once more, the one reset the window
        # before (found holding this agent's value: its count of changes in a row ends there)
        before = [(PODS[rounds - 1], "unchanged")] if rounds else []
        assert [(r.write.cgroup, r.status) for r in res] == [*before, (PODS[rounds], "written")]
        assert ex.stats.verified - verified == 4 - len(res)
        # compare (each file not in a count of changes), read, read back
        assert ex.stats.read_syscalls - reads == (4 - len(before)) + len(res) + 1
        assert read(paths[PODS[rounds]]) == "50000\n" and audit.recent[-1]["old"] == "-1"
        assert set(ex.fights.fights) == {ex.locator.where[("cpu.cfs_quota_us", PODS[rounds])][4]}
    assert all(read(paths[d]) == "50000\n" for d in PODS)
    # a file only ever confirmed by the compare is still this plan's strategy's (its claim renewed, not
    # dropped as unused after cache_ttl)
    assert ex.owner("cpu.cfs_quota_us", PODS[3]) == "s"


def test_a_new_version_sends_only_what_changed_and_a_failure_again(tmp_path) -> None:
    ex, layout, clock, _ = make(tmp_path)
    tree(layout)
    values = dict.fromkeys(PODS, "50000")
    ex.apply([Plan("s", "quota", 1, Counting(values))])
    changed = {**values, PODS[1]: "60000"}
    clock.t += 1
    res = ex.apply([Plan("s", "quota", 2, Counting(changed))])
    assert [(r.write.cgroup, r.status) for r in res] == [(PODS[1], "written")]
    # a write that fails is sent again on the next round, though the version did not change
    odd = f"{BE}/podx"
    bad = layout.file("cpu", odd, "cpu.cfs_quota_us")
    os.makedirs(bad)  # a directory: the write fails with EISDIR
    clock.t += 1
    more = {**changed, odd: "70000"}
    res = ex.apply([Plan("s", "quota", 3, Counting(more))])
    assert [(r.write.cgroup, r.status) for r in res] == [(odd, "failed")]
    clock.t += 1
    res = ex.apply([Plan("s", "quota", 3, Counting(more))])
    assert [(r.write.cgroup, r.status) for r in res] == [(odd, "failed")]
    os.rmdir(bad)
    put(layout, "cpu", odd, "cpu.cfs_quota_us", "-1\n")
    clock.t += 1
    res = ex.apply([Plan("s", "quota", 3, Counting(more))])
    assert [(r.write.cgroup, r.status) for r in res] == [(odd, "written")]
    clock.t += 1
    assert ex.apply([Plan("s", "quota", 3, Counting({}))]) == []  # landed: skipped again


def test_a_recheck_reuses_what_it_compares_only_while_no_descriptor_was_closed(tmp_path) -> None:
    """What a plan's re-check compares (descriptors, texts) is made once and kept; once the table has
    closed a descriptor it is made again: the number may name another file by now (here files that
    hold the very text the plan's files held)."""
    ex, layout, clock, _ = make(tmp_path, max_open_files=4)
    paths = tree(layout)
    build = Counting(dict.fromkeys(PODS, "50000"))
    ex.apply([Plan("s", "quota", 1, build)])
    clock.t += 60
    assert ex.apply([Plan("s", "quota", 1, build)]) == [] and ex.stats.verified == 4  # made and kept
    st = ex.plans.plans[("s", "quota")]
    kept = st.prepared
    assert kept is not None
    clock.t += 60
    assert ex.apply([Plan("s", "quota", 1, build)]) == [] and ex.stats.verified == 8 and st.prepared is kept
    # four other files written: the table (4 descriptors) closes the plan's and opens theirs, which
    # hold the same text; and one of the plan's files is reset by someone else
    others = [f"{BE}/other{k}" for k in range(4)]
    for d in others:
        put(layout, "cpu", d, "cpu.cfs_quota_us", "-1\n")
    ex.apply([Write("t", "cpu.cfs_quota_us", "50000", d) for d in others])
    with open(paths[PODS[1]], "w") as f:
        f.write("-1\n")
    clock.t += 60
    res = ex.apply([Plan("s", "quota", 1, build)])
    # made again: no descriptor is kept for the plan's files now, so all four go through the pipeline
    assert sorted((r.write.cgroup, r.status) for r in res) == [
        (d, "written" if d == PODS[1] else "unchanged") for d in PODS]
    assert read(paths[PODS[1]]) == "50000\n" and st.prepared is not kept


def test_plans_are_told_apart_by_strategy_and_key_and_dropped_on_release(tmp_path) -> None:
    ex, layout, clock, _ = make(tmp_path)
    tree(layout)
    a, b = Counting({PODS[0]: "50000"}), Counting({PODS[1]: "50000"}, strategy="t")
    ex.apply([Plan("s", "k", 1, a), Plan("t", "k", 1, b)])
    clock.t += 1
    ex.apply([Plan("s", "k", 1, a), Plan("t", "k", 1, b), Plan("s", "other", 1, a)])
    assert (a.builds, b.builds) == (2, 1)
    ex.release("s")
    clock.t += 1
    ex.apply([Plan("s", "k", 1, a), Plan("t", "k", 1, b)])
    assert (a.builds, b.builds) == (3, 1)


def test_dry_run_and_audit_see_every_decision_of_a_plan(tmp_path) -> None:
    ex, layout, clock, audit = make(tmp_path, dry_run=True)
    paths = tree(layout)
    build = Counting(dict.fromkeys(PODS, "50000"))
    res = ex.apply([Plan("s", "quota", 1, build)])
    assert [r.status for r in res] == ["dry-run"] * 4
    decided = [r for r in audit.recent if r["action"] == "write"]
    assert len(decided) == 4 and all(r["executed"] is False and r["value"] == "50000" for r in decided)
    assert all(read(p) == "-1\n" for p in paths.values())
    clock.t += 30
    assert ex.apply([Plan("s", "quota", 1, build)]) == []
    with open(paths[PODS[3]], "w") as f:
        f.write("70000\n")  # someone else changes one file
    clock.t += 30  # the window is over: every file is re-read
    res = ex.apply([Plan("s", "quota", 1, build)])
    # the three still as they were when decided: those decisions stand (audited once, as a written
    # file's are); the changed one is decided and audited again, against what it holds now
    assert [(r.write.cgroup, r.status) for r in res] == [(PODS[3], "dry-run")]
    assert len([r for r in audit.recent if r["action"] == "write"]) == 5 and audit.recent[-1]["old"] == "70000"
    assert ex.stats.verified == 3
    # a new version is decided and audited for what changed
    clock.t += 1
    res = ex.apply([Plan("s", "quota", 2, Counting({**dict.fromkeys(PODS, "50000"), PODS[0]: "1000"}))])
    assert [(r.write.cgroup, r.status) for r in res] == [(PODS[0], "dry-run")]
    assert audit.recent[-1]["value"] == "1000" and audit.recent[-1]["executed"] is False


def test_spread_plans_end_their_first_window_in_its_second_half(tmp_path) -> None:
    ex, layout, clock, _ = make(tmp_path)
    tree(layout)
    builds = {d: Counting({d: "50000"}) for d in PODS}
    plans = [Plan("s", d, 1, builds[d], spread=True) for d in PODS]
    ex.apply(plans)
    first = {p.key: p.state.expires for p in plans if p.state is not None}
    first_recheck: dict[str, float] = {}
    for _ in range(61):
        clock.t += 1
        ex.apply(plans)
        for p in plans:  # a re-check starts the plan's next window
            if p.state is not None and p.state.expires != first[p.key] and p.key not in first_recheck:
                first_recheck[p.key] = clock.t - 1000.0
    assert set(first_recheck) == set(PODS)
    assert all(30 <= t <= 60 for t in first_recheck.values())
    assert len(set(first_recheck.values())) > 1


def test_a_group_is_skipped_in_one_step_and_walked_when_a_window_ends(tmp_path) -> None:
    ex, layout, clock, _ = make(tmp_path)
    paths = tree(layout)
    builds = {d: Counting({d: "50000"}) for d in PODS}
    plans = [Plan("s", d, 1, builds[d], spread=True) for d in PODS]
    ex.apply([PlanGroup("s", "all", plans)])
    assert all(b.builds == 1 for b in builds.values())
    with open(paths[PODS[1]], "w") as f:
        f.write("-1\n")  # changed behind the agent's back
    walks = 0
    for _ in range(60):
        clock.t += 1
        before = ex.stats.plans_skipped
        ex.apply([PlanGroup("s", "all", plans)])
        walks += ex.stats.plans_skipped - before != len(PODS)  # a walk skips only some of them
    # every plan re-checked once within the window (the changed file corrected: its plan built again to
    # send it), in a few walks
    assert ex.stats.plans_verified == len(PODS)
    assert {d: b.builds for d, b in builds.items()} == {d: 2 if d == PODS[1] else 1 for d in PODS}
    assert read(paths[PODS[1]]) == "50000\n"
    assert walks <= 4


def test_a_new_sequence_walks_the_group_and_a_failure_is_retried_next_round(tmp_path) -> None:
    ex, layout, clock, _ = make(tmp_path)
    tree(layout)
    builds = {d: Counting({d: "50000"}) for d in PODS}
    plans = [Plan("s", d, 1, builds[d]) for d in PODS]
    ex.apply([PlanGroup("s", "all", plans)])
    odd = f"{BE}/podx"
    os.makedirs(layout.file("cpu", odd, "cpu.cfs_quota_us"))  # the write fails with EISDIR
    bad = Plan("s", odd, 1, Counting({odd: "50000"}))
    plans = [*plans[:2], Plan("s", PODS[2], 2, Counting({PODS[2]: "60000"})), plans[3], bad]
    clock.t += 1
    res = ex.apply([PlanGroup("s", "all", plans)])
    assert sorted((r.write.cgroup, r.status) for r in res) == [(PODS[2], "written"), (odd, "failed")]
    clock.t += 1
    res = ex.apply([PlanGroup("s", "all", plans)])  # the same sequence, but a retry is pending
    assert [(r.write.cgroup, r.status) for r in res] == [(odd, "failed")]
    assert all(b.builds == 1 for b in builds.values())


def test_restore_puts_back_one_file_and_only_once(tmp_path) -> None:
    ex, _layout, clock, audit = make(tmp_path)
    vm = tmp_path / "proc" / "sys" / "vm"
    vm.mkdir(parents=True)
    (vm / "min_free_kbytes").write_text("67584\n")
    (vm / "watermark_scale_factor").write_text("10\n")
    ex.apply([Write("sys", "min_free_kbytes", "100000"), Write("sys", "watermark_scale_factor", "150")])
    assert ex.apply([Restore("other", "min_free_kbytes")]) == []  # another strategy changed nothing
    clock.t += 1
    res = ex.apply([Restore("sys", "min_free_kbytes", reason="unset")])
    assert [r.status for r in res] == ["written"]
    assert (vm / "min_free_kbytes").read_text() == "67584"
    assert (vm / "watermark_scale_factor").read_text() == "150"
    assert audit.recent[-1]["reason"] == "unset" and audit.recent[-1]["old"] == "100000"
    assert ex.apply([Restore("sys", "min_free_kbytes")]) == []  # put back already: nothing more
    # the strategy wants its value again within the write cache's window: written (the cache knows the
    # restore), and the original is recorded anew
    clock.t += 1
    assert ex.apply([Write("sys", "min_free_kbytes", "100000")])[0].status == "written"
    assert ex.read("min_free_kbytes") == "100000"
    ex.apply([Restore("sys", "min_free_kbytes")])
    assert (vm / "min_free_kbytes").read_text() == "67584"


def test_restore_of_entries_puts_back_each_entrys_own_state(tmp_path) -> None:
    ex, _layout, clock, _ = make(tmp_path)
    dbg = tmp_path / "sys" / "kernel" / "debug"
    dbg.mkdir(parents=True)
    f = dbg / "sched_features"
    f.write_text("GENTLE_FAIR_SLEEPERS NO_HRTICK ID_ABSOLUTE_EXPEL\n")
    ex.apply([Write("sys", "sched_features", "HRTICK", entry="HRTICK"),
              Write("sys", "sched_features", "NO_ID_ABSOLUTE_EXPEL", entry="ID_ABSOLUTE_EXPEL")])
    assert f.read_text().split() == ["GENTLE_FAIR_SLEEPERS", "HRTICK", "NO_ID_ABSOLUTE_EXPEL"]
    clock.t += 1
    # every entry the strategy changed but HRTICK: the one token, not the whole old file
    res = ex.apply([Restore("sys", "sched_features", entry=None, keep=frozenset({"HRTICK"}))])
    assert [(r.write.value, r.status) for r in res] == [("ID_ABSOLUTE_EXPEL", "written")]
    assert sorted(f.read_text().split()) == ["GENTLE_FAIR_SLEEPERS", "HRTICK", "ID_ABSOLUTE_EXPEL"]
    clock.t += 1
    res = ex.apply([Restore("sys", "sched_features", entry="HRTICK")])
    assert [r.write.value for r in res] == ["NO_HRTICK"]
    assert sorted(f.read_text().split()) == ["GENTLE_FAIR_SLEEPERS", "ID_ABSOLUTE_EXPEL", "NO_HRTICK"]


def test_whole_strategy_restore_uses_entry_originals_too(tmp_path) -> None:
    ex, _layout, _clock, _ = make(tmp_path)
    dbg = tmp_path / "sys" / "kernel" / "debug"
    dbg.mkdir(parents=True)
    f = dbg / "sched_features"
    f.write_text("A NO_B\n")
    ex.apply([Write("sys", "sched_features", "B", entry="B")])
    ex.restore("sys")
    assert sorted(f.read_text().split()) == ["A", "NO_B"]


def test_requests_of_another_kind_are_refused(tmp_path) -> None:
    ex, *_ = make(tmp_path)
    try:
        ex.apply(["cpu.cfs_quota_us=1"])  # type: ignore[list-item]
    except TypeError as e:
        assert "not a Write, Plan, PlanGroup or Restore" in str(e)
    else:
        raise AssertionError("a string was accepted as a request")
