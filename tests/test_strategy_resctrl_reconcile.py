"""resctrlReconcile (koordlet-qos §4.6): L3 masks and MB values per class, pod threads into groups.

cbm_mask 0x7ff = 11 cache ways.  Masks by hand: startWay = ceil(11*start/100), endWay = ceil(11*end/100),
mask = (1 << endWay) - (1 << startWay).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object
from qosmanager.strategies.resctrl_reconcile import ensure_resctrl_groups, schemata_lines

NAME = "resctrlReconcile"
GROUPS = ("LSR", "LS", "BE")


def cid(n: int) -> str:
    return f"containerd://{n:064x}"


def harness(version: int = 1, *, groups: bool = True, **kw: Any) -> Harness:
    kw.setdefault("resctrl", True)
    h = Harness(version=version, strategies=[NAME], sockets=2, **kw)  # RdtResctrl is on by default
    h.set_node(node_object(h.host))
    if groups and kw["resctrl"]:
        for g in GROUPS:
            h.write_file(f"sys/fs/resctrl/{g}/schemata", "L3:0=7ff;1=7ff\nMB:0=100;1=100\n")
            h.write_file(f"sys/fs/resctrl/{g}/tasks", "")
    return h


def schemata(h: Harness, group: str) -> str | None:
    return h.read_file(f"sys/fs/resctrl/{group}/schemata")


def task_writes(h: Harness, group: str) -> list[str]:
    return [w["value"] for w in h.recorded.writes if w["file"] == f"sys/fs/resctrl/{group}/tasks"]


SLO = {"resourceQOSStrategy": {
    "lsClass": {"resctrlQOS": {"enable": True, "catRangeStartPercent": 10, "catRangeEndPercent": 60,
                               "mbaPercent": 55}},
    "beClass": {"resctrlQOS": {"enable": True}},  # BE defaults: cat 0-30 %, mba 100 %
}}


@pytest.mark.parametrize(("start", "end", "mba", "vendor", "want"), [
    # ways 11: start 10 -> ceil(1.1) = 2, end 60 -> ceil(6.6) = 7: 0x80 - 0x4 = 0x7c; MB 55 -> 60 (Intel)
    (10, 60, 55, "GenuineIntel", "L3:0=7c;1=7c;\nMB:0=60;1=60;\n"),
    # end 30 -> ceil(3.3) = 4: 0xf; MB 100 on AMD = 2048 (unlimited)
    (0, 30, 100, "AuthenticAMD", "L3:0=f;1=f;\nMB:0=2048;1=2048;\n"),
    # AMD 55 % = int(160 * 55 / 100) = 88; Intel 40 stays 40
    (0, 100, 55, "AuthenticAMD", "L3:0=7ff;1=7ff;\nMB:0=88;1=88;\n"),
    (0, 100, 40, "GenuineIntel", "L3:0=7ff;1=7ff;\nMB:0=40;1=40;\n"),
    # MB out of [1, 100] or unset: no MB line; start/end unset: no L3 line
    (0, 50, 0, "GenuineIntel", "L3:0=3f;1=3f;\n"),   # end 50 -> ceil(5.5) = 6: 0x3f
    (None, 50, 100, "GenuineIntel", "MB:0=100;1=100;\n"),
])
def test_schemata_lines(start: int | None, end: int | None, mba: int | None, vendor: str, want: str) -> None:
    text, problems = schemata_lines(start, end, mba, 0x7FF, [0, 1], vendor)
    assert (text, problems) == (want, [])


def test_bad_cat_range_or_cbm_is_reported_and_skipped() -> None:
    text, problems = schemata_lines(60, 60, 100, 0x7FF, [0], "GenuineIntel")  # end must be > start
    assert text == "MB:0=100;\n" and "start 60, end 60" in problems[0]
    text, problems = schemata_lines(0, 50, None, 0x5, [0], "GenuineIntel")  # 0b101 is not 2^k - 1
    assert text == "" and "illegal cbm" in problems[0]


@pytest.mark.parametrize("version", [1, 2])
def test_policy_per_class_intel(version: int) -> None:
    h = harness(version)
    h.set_nodeslo(SLO)
    h.tick(NAME, 1000.0)
    # LS: 0x7c / 60; BE: 0xf / 100; LSR: resctrl QoS disabled -> None values (0-100 %, 100) = the full mask
    assert schemata(h, "LS") == "L3:0=7c;1=7c\nMB:0=60;1=60\n"
    assert schemata(h, "BE") == "L3:0=f;1=f\nMB:0=100;1=100\n"
    assert schemata(h, "LSR") == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"  # equal already: not written
    assert [w["file"] for w in h.recorded.writes] == ["sys/fs/resctrl/LS/schemata", "sys/fs/resctrl/BE/schemata"]
    # steady state: nothing rewritten
    h.recorded.writes.clear()
    h.tick(NAME, 1001.0)
    assert h.recorded.writes == []


def test_policy_amd_and_restore_when_disabled() -> None:
    h = harness(vendor="AuthenticAMD")
    h.set_nodeslo(SLO)
    h.tick(NAME, 1000.0)
    assert schemata(h, "LS") == "L3:0=7c;1=7c\nMB:0=88;1=88\n"  # int(160*55/100) = 88
    assert schemata(h, "BE") == "L3:0=f;1=f\nMB:0=2048;1=2048\n"
    # switching LS off: koordlet's None values (whole cache, unlimited bandwidth) are written back
    h.set_nodeslo({"resourceQOSStrategy": {"beClass": {"resctrlQOS": {"enable": True}}}})
    h.tick(NAME, 1001.0)
    assert schemata(h, "LS") == "L3:0=7ff;1=7ff\nMB:0=2048;1=2048\n"


def mkdirs(h: Harness) -> list[tuple[str, str, bool, str | None]]:
    return [(r["target"], r["value"], r["executed"], r.get("error")) for r in h.audit.recent
            if r["action"] == "mkdir"]


def test_missing_groups_are_created_and_unmounted_resctrl_does_nothing() -> None:
    h = harness(groups=False)
    h.set_nodeslo(SLO)
    h.tick(NAME, 1000.0)
    for g in GROUPS:
        assert os.path.isdir(h.path(f"sys/fs/resctrl/{g}"))
    # through the executor: one audit record per group created, with the directory's mode
    assert mkdirs(h) == [(f"sys/fs/resctrl/{g}", "0755", True, None) for g in GROUPS]
    assert all(r["strategy"] == NAME for r in h.audit.recent if r["action"] == "mkdir")
    # the kernel fills a new group with schemata (the root's lines) and tasks: the first tick writes them
    assert schemata(h, "LS") == "L3:0=7c;1=7c\nMB:0=60;1=60\n" and h.manager.stats[NAME].errors == 0
    assert schemata(h, "BE") == "L3:0=f;1=f\nMB:0=100;1=100\n"
    assert ensure_resctrl_groups(h.context(1001.0), NAME) == list(GROUPS)  # already there
    h.tick(NAME, 1001.0)
    assert len(mkdirs(h)) == 3  # nothing new to make, nothing new audited
    # not mounted (no cbm_mask): no write, no group created
    h2 = harness(groups=False)
    os.remove(h2.path("sys/fs/resctrl/info/L3/cbm_mask"))
    h2.set_nodeslo(SLO)
    assert h2.tick(NAME, 1000.0) == []
    assert not os.path.isdir(h2.path("sys/fs/resctrl/LS")) and mkdirs(h2) == []


@pytest.mark.parametrize("version", [1, 2])
def test_dry_run_decides_the_groups_and_what_goes_into_them_and_creates_nothing(version: int) -> None:
    h = harness(version, groups=False, dry_run=True)
    h.set_pods(_pods(h))
    h.set_nodeslo(SLO)
    before = sorted(os.listdir(h.path("sys/fs/resctrl")))
    h.tick(NAME, 1000.0)
    h.tick(NAME, 1001.0)
    assert sorted(os.listdir(h.path("sys/fs/resctrl"))) == before  # nothing made
    # each group decided once (not once per tick), not executed
    assert mkdirs(h) == [(f"sys/fs/resctrl/{g}", "0755", False, None) for g in GROUPS]
    recs = [r for r in h.audit.recent if r["action"] == "write"]
    assert not [r for r in recs if r["executed"] or r.get("error")]
    # the writes into the would-be groups are decided against empty files (old: null), not skipped
    schem = {r["target"]: (r["value"], r["old"]) for r in recs if r["target"].endswith("/schemata")}
    assert schem["sys/fs/resctrl/LS/schemata"] == ("L3:0=7c;1=7c;\nMB:0=60;1=60;", None)
    assert schem["sys/fs/resctrl/BE/schemata"] == ("L3:0=f;1=f;\nMB:0=100;1=100;", None)
    assert len([r for r in recs if r["target"].endswith("/schemata")]) == 3  # cached: once, not per tick
    tasks = [r["value"] for r in recs if r["target"] == "sys/fs/resctrl/LS/tasks"]
    assert tasks[:4] == ["50", "101", "300", "301"]
    assert h.manager.stats[NAME].errors == 0


def test_a_group_the_kernel_refuses_is_audited_once_and_its_files_left_alone() -> None:
    h = harness(groups=False)
    h.set_nodeslo(SLO)
    for g in ("LSR", "BE"):  # these exist (as the kernel would fill them)
        h.write_file(f"sys/fs/resctrl/{g}/schemata", "L3:0=7ff;1=7ff\nMB:0=100;1=100\n")
        h.write_file(f"sys/fs/resctrl/{g}/tasks", "")
    h.write_file("sys/fs/resctrl/LS", "")  # a file where the LS group would go: mkdir fails
    h.tick(NAME, 1000.0)
    h.tick(NAME, 1100.0)
    [(target, _, executed, error)] = mkdirs(h)
    assert target == "sys/fs/resctrl/LS" and executed is False and error is not None and "EEXIST" in error
    assert schemata(h, "BE") == "L3:0=f;1=f\nMB:0=100;1=100\n"  # the other groups are handled
    assert not [r for r in h.audit.recent if r["action"] == "write" and "/LS/" in r["target"]]
    assert h.manager.stats[NAME].errors == 0


def test_cpu_without_cat_and_mba_is_not_supported() -> None:
    h = harness(resctrl=False)
    h.set_nodeslo(SLO)
    h.write_file("sys/fs/resctrl/info/L3/cbm_mask", "7ff\n")  # mounted, but the CPU has no flags
    assert h.tick(NAME, 1000.0) == []
    assert not os.path.isdir(h.path("sys/fs/resctrl/LS"))


def test_nil_class_and_no_nodeslo() -> None:
    h = harness()
    assert h.tick(NAME, 1000.0) == []  # no NodeSLO
    h.set_nodeslo(SLO)
    spec = h.store.nodeslo
    import dataclasses
    h.store.nodeslo = dataclasses.replace(
        spec, resource_qos_strategy=dataclasses.replace(spec.resource_qos_strategy, ls_class=None))
    h.tick(NAME, 1001.0)
    assert schemata(h, "LS") == "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"  # skipped, not a crash
    assert schemata(h, "BE") == "L3:0=f;1=f\nMB:0=100;1=100\n"
    assert h.manager.stats[NAME].errors == 0


def _pods(h: Harness) -> list[dict[str, Any]]:
    """LS pod (2 containers + sandbox), BE pod, a BE pod handled by runtime hooks, an LSR pod (class not
    enabled), a finished LS pod."""
    specs = [
        (FakePod("ls-1", "default", "ls-1", KubeQoS.BURSTABLE,
                 [FakeContainer("a", cid(1)), FakeContainer("b", cid(2))], sandbox_id=cid(3)), {}, "Running"),
        (FakePod("be-1", "default", "be-1", KubeQoS.BESTEFFORT, [FakeContainer("a", cid(4))]), {}, "Running"),
        (FakePod("be-hook", "default", "be-hook", KubeQoS.BESTEFFORT, [FakeContainer("a", cid(5))]),
         {"node.koordinator.sh/resctrl": "{}"}, "Running"),
        (FakePod("lsr-1", "default", "lsr-1", KubeQoS.GUARANTEED, [FakeContainer("a", cid(6))]), {}, "Running"),
        (FakePod("ls-done", "default", "ls-done", KubeQoS.BURSTABLE, [FakeContainer("a", cid(7))]), {}, "Succeeded"),
    ]
    pids = {cid(1): [300, 101], cid(2): [301], cid(3): [50], cid(4): [400, 401], cid(5): [500], cid(6): [600],
            cid(7): [700]}
    objs = []
    for fp, ann, phase in specs:
        h.host.add_pod(fp)
        pod_rel = h.layout.pod_dir(fp.qos, fp.uid)
        for c in [*fp.containers, *([FakeContainer("sandbox", fp.sandbox_id)] if fp.sandbox_id else [])]:
            h.host.set_tasks(h.layout.container_dir(pod_rel, c.container_id), pids[c.container_id])
        objs.append(pod_object(fp, annotations=ann, phase=phase))
    return objs


@pytest.mark.parametrize("version", [1, 2])
def test_pod_threads_move_into_their_class_group(version: int) -> None:
    h = harness(version)
    h.write_file("sys/fs/resctrl/LS/tasks", "101\n")  # already there
    h.set_pods(_pods(h))
    h.set_nodeslo(SLO)
    h.tick(NAME, 1000.0)
    # LS: containers 300, 101, 301 and the sandbox's 50, minus 101 -> ascending, one write each
    assert task_writes(h, "LS") == ["50", "300", "301"]
    # BE: 400, 401; the pod with node.koordinator.sh/resctrl is left to the runtime hooks
    assert task_writes(h, "BE") == ["400", "401"]
    # LSR class not enabled; the finished pod is ignored
    assert task_writes(h, "LSR") == []
    recs = [w for w in h.recorded.writes if w["file"].endswith("/tasks")]
    assert all(w["strategy"] == NAME for w in recs)


def test_threads_already_in_the_group_are_not_written_again() -> None:
    h = harness()
    h.set_pods(_pods(h))
    h.set_nodeslo(SLO)
    h.write_file("sys/fs/resctrl/LS/tasks", "50\n101\n300\n301\n")
    h.write_file("sys/fs/resctrl/BE/tasks", "400\n401\n")
    h.tick(NAME, 1000.0)
    assert task_writes(h, "LS") == [] and task_writes(h, "BE") == []
    # a new thread in a container shows up on the next tick
    h.host.set_tasks(h.layout.container_dir(h.layout.pod_dir("BestEffort", "be-1"), cid(4)), [400, 401, 402])
    h.tick(NAME, 1001.0)
    assert task_writes(h, "BE") == ["402"]


def test_thread_ids_skip_odd_lines_but_keep_per_file_counts() -> None:
    from qosmanager.strategies.resctrl_reconcile import thread_ids
    assert thread_ids(["1\n2\n", None, "3\n"]).tolist() == [1, 2, 3]
    # a garbled line reads as -1 (no thread), so each file still contributes one id per line
    assert thread_ids(["1\nx\n", "99999999999999999999\n4\n"]).tolist() == [1, -1, -1, 4]


def test_a_garbled_tasks_line_is_never_written() -> None:
    h = harness()
    h.set_pods(_pods(h))
    h.set_nodeslo(SLO)
    h.host.set_tasks(h.layout.container_dir(h.layout.pod_dir("BestEffort", "be-1"), cid(4)), [400])
    path = h.cgroup_file("cpu", h.layout.container_dir(h.layout.pod_dir("BestEffort", "be-1"), cid(4)), "tasks")
    h.write_file(path, "400\nbogus\n")
    h.tick(NAME, 1000.0)
    assert task_writes(h, "BE") == ["400"]
    assert not [r for r in h.audit.recent if r.get("error")]


def test_unchanged_tasks_files_give_the_last_decision_and_a_changed_group_file_is_seen() -> None:
    """The tasks decision is kept while every tasks file reads the same: the same files give the same
    writes again, and a change in a group's file (not only in a container's) is seen."""
    h = harness()
    h.set_pods(_pods(h))
    h.set_nodeslo(SLO)
    h.write_file("sys/fs/resctrl/LS/tasks", "50\n101\n300\n301\n")
    h.write_file("sys/fs/resctrl/BE/tasks", "400\n401\n")
    h.tick(NAME, 1000.0)
    h.tick(NAME, 1001.0)  # nothing changed: still nothing to move
    assert task_writes(h, "BE") == []
    # a thread leaves the BE group (another writer moved it): seen although no container's file changed
    h.write_file("sys/fs/resctrl/BE/tasks", "400\n")
    h.tick(NAME, 1002.0)
    assert task_writes(h, "BE") == ["401"]
    # the group file reads as before that write (the thread left again): the same writes again
    h.write_file("sys/fs/resctrl/BE/tasks", "400\n")
    h.tick(NAME, 1003.0)
    assert task_writes(h, "BE") == ["401", "401"]
    h.tick(NAME, 1004.0)  # the thread is in the group now
    assert task_writes(h, "BE") == ["401", "401"]
