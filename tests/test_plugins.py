"""Strategies from plugins: discovery through entry points, isolation, and the executor's rules for them.

The plugins here are made on the fly (tests/plugindist.py): a good one, and the ways one can be broken
or hostile.  The packaged example (examples/be-burst-cap) is pip-installed by the tests at the end of
this file and run under ``run``, ``replay`` and ``simulate``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from plugindist import make_dist, on_path
from promtext import parse
from qosmanager.agent import Agent, AgentConfig
from qosmanager.exporter.agent_metrics import AgentMetrics
from qosmanager.framework import plugins
from qosmanager.framework.builtins import builtin_strategies
from qosmanager.framework.gates import UnknownGateError
from qosmanager.host.cgroups import KubeQoS
from qosmanager.sim.fakehost import FakeContainer, FakeHost, FakePod
from qosmanager.sim.harness import Harness
from qosmanager.sim.objects import node_object, pod_object

NOW = 1000.0

GOOD = """
from qosmanager.plugin import Context, Strategy

class Shares(Strategy):
    name = "testShares"
    gates = ("TestShares",)
    api = "1.0"

    def tick(self, ctx: Context):
        return [self.write("cpu.shares", ctx.qos_dir("Burstable"), 1234, "a plugin's write")]
"""

# a strategy whose behaviour the test sets through module globals
KNOBS = """
import sys
import threading

from qosmanager.plugin import POD, Context, MakeDir, Need, Plan, Restore, Strategy, Write

ACT = {"mode": "shares", "value": "1234"}
RELEASE = threading.Event()  # what a hung call waits for
AFTER = {}  # what an abandoned call met when it went on


def hang(ctx):
    RELEASE.wait(120)
    try:
        ctx.mkdir(MakeDir("testKnobs", "cgroup", "made-after-the-deadline"))
        AFTER["mkdir"] = "made"
    except Exception as e:
        AFTER["mkdir"] = repr(e)

class Knobs(Strategy):
    name = "testKnobs"
    gates = ("TestKnobs",)

    def needs(self, ctx: Context):
        mode = ACT["mode"]
        if mode == "needs-raise":
            raise RuntimeError("no needs today")
        if mode == "needs-exit":
            sys.exit(7)
        if mode == "needs-hang":
            hang(ctx)
        if mode == "needs-none":
            return None
        if mode == "needs-junk":
            return [Need("pod_cpu_usage", POD), "pod_memory_usage"]
        if mode == "near-junk":
            return [Need("pod_memory_usage", POD, near=lambda ctx: "close")]
        if mode == "near-exit":
            return [Need("pod_memory_usage", POD, near=lambda ctx: sys.exit(8))]
        return ()

    def tick(self, ctx: Context):
        mode, value = ACT["mode"], ACT["value"]
        be = ctx.qos_dir("BestEffort")
        if mode == "raise":
            raise RuntimeError("the plugin broke")
        if mode == "exit":
            sys.exit(5)
        if mode == "hang":
            hang(ctx)
            return [self.write("cpu.shares", ctx.qos_dir("Burstable"), "4321", "after the deadline")]
        if mode == "shares":
            return [self.write("cpu.shares", ctx.qos_dir("Burstable"), value, "test")]
        if mode == "quota":
            return [self.write("cpu.cfs_quota_us", be, value, "test", cacheable=False)]
        if mode == "spoof":
            return [Write("cpuSuppress", "cpu.cfs_quota_us", value, be, reason="in another name"),
                    self.write("cpu.shares", ctx.qos_dir("Burstable"), "1500", "its own")]
        if mode == "raw":
            return [self.write("cpu.shares", ctx.qos_dir("Burstable"), "junk", "raw", raw=True)]
        if mode == "lease":
            return [self.write("cpu.shares", ctx.qos_dir("Burstable"), value, "held", lease=1e9)]
        if mode == "restore-other":
            return [Restore("cpuSuppress", "cpu.cfs_quota_us", be)]
        if mode == "plan-spoof":
            return [Plan(self.name, "p", value, lambda: [Write("cpuSuppress", "cpu.cfs_quota_us", value, be),
                                                         self.write("cpu.shares", be, "3", "ok")])]
        if mode == "evict-as":
            ctx.evict("memoryEvict", [])
        if mode == "dir":  # value: the directory
            return [self.write("cpu.shares", value, "5", "a directory of its choosing")]
        if mode == "restore-dir":
            return [Restore(self.name, "cpu.shares", value)]
        if mode == "junk":
            return ["cpu.shares=5", self.write("cpu.shares", ctx.qos_dir("Burstable"), "1500", "its own")]
        return []
"""

BROKEN_IMPORT = "raise ImportError('a dependency is missing')\n"
EXITS_BUILT = """
import sys
from qosmanager.plugin import Strategy

class ExitsBuilt(Strategy):
    name = "testExitsBuilt"
    gates = ("TestExitsBuilt",)

    def __init__(self, cfg, gates):
        sys.exit("no configuration")

    def tick(self, ctx):
        return []
"""
EXITS = "import sys\nsys.exit(3)\n"
NOT_BUILT = """
from qosmanager.plugin import Strategy

class NotBuilt(Strategy):
    name = "testNotBuilt"
    gates = ("TestNotBuilt",)

    def __init__(self, cfg, gates):
        raise ValueError("bad configuration")

    def tick(self, ctx):
        return []
"""
BAD_CLASSES = """
from qosmanager.plugin import Strategy

class Clash(Strategy):
    name = "cpuSuppress"
    gates = ("TestClash",)
    def tick(self, ctx):
        return []

class TwoGates(Strategy):
    name = "testTwoGates"
    gates = ("TestTwoGates", "CPUBurst")
    def tick(self, ctx):
        return []

class Abstract(Strategy):
    name = "testAbstract"
    gates = ("TestAbstract",)

class Future(Strategy):
    name = "testFuture"
    gates = ("TestFuture",)
    api = "2.0"
    def tick(self, ctx):
        return []

class OnBuiltinGate(Strategy):
    name = "testOnBuiltinGate"
    gates = ("CPUBurst",)
    def tick(self, ctx):
        return []

not_a_class = 42
"""


@pytest.fixture
def dists(tmp_path: Any) -> Any:
    good = make_dist(str(tmp_path / "good"), "good-plugin", "1.2.3", {"TestShares": "good_mod:Shares"},
                     {"good_mod": GOOD})
    knobs = make_dist(str(tmp_path / "knobs"), "knobs-plugin", "0.1", {"TestKnobs": "knobs_mod:Knobs"},
                      {"knobs_mod": KNOBS})
    bad = make_dist(str(tmp_path / "bad"), "bad-plugins", "9.9", {
        "TestBroken": "broken_mod:Whatever", "TestExits": "exits_mod:Whatever",
        "TestNotBuilt": "notbuilt_mod:NotBuilt", "TestClash": "bad_mod:Clash", "TestTwoGates": "bad_mod:TwoGates",
        "TestAbstract": "bad_mod:Abstract", "TestFuture": "bad_mod:Future", "CPUBurst": "bad_mod:OnBuiltinGate",
        "TestNotAClass": "bad_mod:not_a_class", "lowercase": "bad_mod:Clash",
        "TestExitsBuilt": "exitsbuilt_mod:ExitsBuilt",
    }, {"broken_mod": BROKEN_IMPORT, "exits_mod": EXITS, "notbuilt_mod": NOT_BUILT, "bad_mod": BAD_CLASSES,
        "exitsbuilt_mod": EXITS_BUILT})
    return good, knobs, bad


def by_gate(d: plugins.Discovery) -> dict[str, plugins.PluginInfo]:
    return {p.gate: p for p in d.plugins}


def test_discovery_names_every_plugin_with_its_package_and_loads_only_the_sound_ones(dists: Any) -> None:
    with on_path(*dists) as d:
        found = by_gate(d)
        good = found["TestShares"]
        assert (good.status, good.strategy, good.package, good.version) == ("loaded", "testShares", "good-plugin",
                                                                             "1.2.3")
        assert set(d.strategies()) == {"testShares", "testKnobs", "testNotBuilt", "testExitsBuilt"}
        why = {g: p.error for g, p in found.items() if p.status == "failed"}
        assert "ImportError: a dependency is missing" in why["TestBroken"]
        assert "SystemExit" in why["TestExits"]
        assert "already taken by a built-in strategy" in why["TestClash"]
        assert "exactly its own gate" in why["TestTwoGates"]
        assert "does not implement tick()" in why["TestAbstract"]
        assert "needs strategy API 2.0" in why["TestFuture"]
        assert "already a built-in gate" in why["CPUBurst"]
        assert "not a subclass" in why["TestNotAClass"]
        assert "not a feature gate name" in why["lowercase"]
        # NotBuilt and ExitsBuilt load; they fail when the manager builds them
        assert found["TestNotBuilt"].status == "loaded" and found["TestExitsBuilt"].status == "loaded"
        # every plugin's gate is known and off: naming a broken plugin's gate does not stop the agent
        gates = plugins.feature_gates({"TestBroken": True, "TestShares": True})
        assert gates.enabled("TestShares") and not gates.enabled("TestKnobs")
        assert not plugins.feature_gates({"AllAlpha": True}).enabled("TestShares")
        text = "\n".join(plugins.lines(d, gates))
        assert "TestShares: testShares from good-plugin 1.2.3 (good_mod:Shares): on" in text
        assert "TestBroken: - from bad-plugins 9.9 (broken_mod:Whatever): failed: import failed" in text
    # gone again: the gate is unknown, the built-ins are what they were
    with pytest.raises(UnknownGateError):
        plugins.feature_gates({"TestShares": True})
    assert "testShares" not in builtin_strategies()


def test_a_broken_plugin_is_named_and_the_built_ins_keep_running(dists: Any) -> None:
    with on_path(*dists):
        h = Harness(gates={"TestShares": True, "TestNotBuilt": True, "TestBroken": True, "TestExitsBuilt": True})
        try:
            conds = h.store.conditions.snapshot()
            assert "raised when built: SystemExit: no configuration" in conds["plugin/TestExitsBuilt"].message
            assert "ImportError" in conds["plugin/TestBroken"].message
            assert "raised when built: ValueError: bad configuration" in conds["plugin/TestNotBuilt"].message
            assert "bad-plugins 9.9" in conds["plugin/TestNotBuilt"].message
            assert "testNotBuilt" not in h.manager.strategies
            status = {p.gate: p.status for p in h.manager.plugins}
            assert status["TestNotBuilt"] == "failed" and status["TestShares"] == "loaded"
            names = [s.name for s in h.manager.enabled()]
            assert "cpuSuppress" in names and "cpuBurst" in names and "testShares" in names
            assert "testKnobs" not in names  # its gate is off
            h.tick("testShares", NOW)
            bu_shares = h.cgroup_file("cpu", h.layout.qos_dir("Burstable"), "cpu.shares")
            assert (h.read_file(bu_shares) or "").strip() == "1234"
            # /metrics: one qosmanager_plugin_info series per plugin, and the conditions
            fams = parse(AgentMetrics(store=h.store, manager=h.manager, process=False).registry.render())
            info = fams["qosmanager_plugin_info"]
            assert info.value(gate="TestShares", strategy="testShares", package="good-plugin", version="1.2.3",
                              state="on") == 1.0
            assert info.value(gate="TestKnobs", strategy="testKnobs", package="knobs-plugin", version="0.1",
                              state="off") == 1.0
            assert info.value(gate="TestNotBuilt", strategy="testNotBuilt", package="bad-plugins", version="9.9",
                              state="failed") == 1.0
            assert info.value(gate="TestBroken", strategy="", package="bad-plugins", version="9.9",
                              state="failed") == 1.0
            assert fams["qosmanager_degraded"].value(condition="plugin/TestBroken") == 1.0
        finally:
            h.close()


def knobs(mode: str, value: str = "1234") -> None:
    sys.modules["knobs_mod"].ACT.update(mode=mode, value=value)


def test_a_plugin_whose_tick_keeps_raising_is_stopped_and_what_it_changed_restored(dists: Any) -> None:
    with on_path(*dists):
        h = Harness(gates={"TestKnobs": True})
        try:
            shares = h.cgroup_file("cpu", h.layout.qos_dir("Burstable"), "cpu.shares")
            before = (h.read_file(shares) or "").strip()
            knobs("shares", "1234")
            h.tick("testKnobs", NOW)
            assert (h.read_file(shares) or "").strip() == "1234"
            knobs("raise")
            for i in range(1, plugins.MAX_FAILED_TICKS):
                h.tick("testKnobs", NOW + i)
                cond = h.store.conditions.get("plugin/TestKnobs")
                assert cond is not None and f"{i} in a row" in cond.message and "the plugin broke" in cond.message
            assert (h.read_file(shares) or "").strip() == "1234"  # still running: nothing restored yet
            h.tick("testKnobs", NOW + plugins.MAX_FAILED_TICKS)
            cond = h.store.conditions.get("plugin/TestKnobs")
            assert cond is not None and "is stopped" in cond.message and "1 file(s)" in cond.message
            assert (h.read_file(shares) or "").strip() == before
            assert {p.gate: p.status for p in h.manager.plugins}["TestKnobs"] == "stopped"
            assert "testKnobs" not in [s.name for s in h.manager.enabled()]
            knobs("shares", "1234")
            h.tick("testKnobs", NOW + 10)  # stopped: not run again
            assert (h.read_file(shares) or "").strip() == before
            errors = [r for r in h.audit.recent if r["action"] == "error" and r["strategy"] == "testKnobs"]
            assert len(errors) == plugins.MAX_FAILED_TICKS
        finally:
            h.close()


def test_a_failing_plugin_leaves_the_agent_healthy_and_degraded(dists: Any, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """/healthz: a plugin's failed ticks are a degraded condition (200), never the failed strategies check
    that would have the agent restarted over a plugin."""
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=4)
    host.add_pods([LS, BE])
    (tmp_path / "pods.json").write_text(json.dumps({"items": [pod_object(LS), pod_object(BE)]}))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    with on_path(*dists):
        agent = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"),
                                  node_file=str(tmp_path / "node.json"), metrics_addr="127.0.0.1:0",
                                  feature_gates={"TestKnobs": True}))
        try:
            assert "testKnobs" in agent.strategy_names and agent.exporter is not None
            # a plugin whose needs() raises is named and costs no read-everything collection
            knobs("needs-raise")
            agent.plan(agent.clock())
            cond = agent.store.conditions.get("plugin/TestKnobs")
            assert cond is not None and "needs() raised (RuntimeError: no needs today)" in cond.message
            assert "collecting everything" not in caplog.text
            knobs("raise")
            job = next(j for j in agent.scheduler.jobs if j.name == "testKnobs")
            for _ in range(plugins.MAX_FAILED_TICKS):  # the job's failure streak at the check's bound
                agent.scheduler.run_job(job)
            ok, body = agent.exporter.health.check(liveness=True)
            assert ok and body["checks"]["strategies"]["ok"], body
            assert "is stopped" in body["degraded"]["plugin/TestKnobs"]["detail"]
        finally:
            agent.close()


def test_a_plugin_that_calls_sys_exit_in_its_tick_is_failing_not_the_end_of_the_agent(dists: Any) -> None:
    with on_path(*dists):
        h = Harness(gates={"TestKnobs": True})
        try:
            knobs("exit")
            assert h.tick("testKnobs", NOW) == []  # SystemExit did not leave the manager
            cond = h.store.conditions.get("plugin/TestKnobs")
            assert cond is not None and "SystemExit: 5" in cond.message and "1 in a row" in cond.message
            errors = [r for r in h.audit.recent if r["action"] == "error" and r["strategy"] == "testKnobs"]
            assert errors and errors[-1]["error"] == "SystemExit: 5"
            h.tick("cpuSuppress", NOW + 1)  # the built-ins run on
            assert h.manager.stats["cpuSuppress"].errors == 0
        finally:
            h.close()


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(("mode", "why"), [
    ("needs-none", "needs() returned NoneType, not a list of Need"),
    ("needs-junk", "needs() returned a str among its needs, not a Need"),
    ("needs-exit", "needs() raised (RuntimeError: SystemExit(7))"),
])
def test_a_plugins_broken_needs_do_not_stop_the_collection(dists: Any, tmp_path: Path, mode: str, why: str) -> None:
    """What a plugin's needs() hands back reaches the collector's planner only once checked: None, a non-Need
    or SystemExit made the whole collector tick fail, for the built-ins as well."""
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=4)
    host.add_pods([LS, BE])
    (tmp_path / "pods.json").write_text(json.dumps({"items": [pod_object(LS), pod_object(BE)]}))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    with on_path(*dists):
        agent = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"),
                                  node_file=str(tmp_path / "node.json"), feature_gates={"TestKnobs": True},
                                  node_slo_file=str(EXAMPLES / "standalone" / "nodeslo.yaml")))
        try:
            knobs("shares")  # needs nothing: the built-ins' plan
            agent.source.poll(agent.clock())
            plain = agent.plan(agent.clock())
            assert plain.node_cpu and plain.demands  # the built-ins read the node and their pods
            knobs(mode)
            assert agent.plan(agent.clock()) == plain
            cond = agent.store.conditions.get("plugin/TestKnobs")
            assert cond is not None and why in cond.message
            agent.collect(agent.clock())  # the whole collector tick
        finally:
            agent.close()


@pytest.mark.parametrize("mode", ["near-junk", "near-exit"])
def test_a_plugins_broken_trigger_estimate_collects_what_it_asks(dists: Any, tmp_path: Path, mode: str) -> None:
    """A ``near`` estimate that is not a number, or that exits, counts as near (its need is read), as one that
    raises does; before, the planner's comparison raised, or SystemExit went through, and nothing was read."""
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=4)
    host.add_pods([LS, BE])
    (tmp_path / "pods.json").write_text(json.dumps({"items": [pod_object(LS), pod_object(BE)]}))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    with on_path(*dists):
        agent = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"),
                                  node_file=str(tmp_path / "node.json"), feature_gates={"TestKnobs": True}))
        try:
            agent.source.poll(agent.clock())
            knobs(mode)
            plan = agent.plan(agent.clock())
            assert "testKnobs" in plan.near
            agent.collect(agent.clock())
        finally:
            agent.close()


@pytest.mark.parametrize("mode", ["hang", "needs-hang"])
def test_a_plugin_call_that_never_returns_is_abandoned_and_the_plugin_stopped(
        dists: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """A tick (or needs()) that blocks is left on the plugin's thread after the deadline: the agent's loop
    goes on, the plugin is stopped at once and what it changed restored; when the call goes on at last it
    can act no more and its writes go nowhere."""
    monkeypatch.setattr(plugins, "CALL_DEADLINE", 2.0)  # a tick of this plugin takes microseconds
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=4)
    host.add_pods([LS, BE])
    (tmp_path / "pods.json").write_text(json.dumps({"items": [pod_object(LS), pod_object(BE)]}))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    with on_path(*dists):
        mod = sys.modules["knobs_mod"]
        mod.RELEASE.clear()
        mod.AFTER.clear()
        agent = Agent(AgentConfig(roots=host.roots, pods_file=str(tmp_path / "pods.json"),
                                  node_file=str(tmp_path / "node.json"), feature_gates={"TestKnobs": True}))
        try:
            shares = f"cgroup/cpu/{agent.layout.qos_dir('Burstable')}/cpu.shares"
            before = host.read(shares)
            job = next(j for j in agent.scheduler.jobs if j.name == "testKnobs")
            knobs("shares", "1234")
            agent.scheduler.run_job(job)
            assert host.read(shares).strip() == "1234"
            knobs(mode)
            if mode == "hang":
                agent.scheduler.run_job(job)
            else:
                agent.plan(agent.clock())
            cond = agent.store.conditions.get("plugin/TestKnobs")
            assert cond is not None and "is stopped" in cond.message and "did not return within 2 s" in cond.message
            assert "1 file(s) it changed were restored" in cond.message
            assert host.read(shares) == before
            assert "testKnobs" not in [s.name for s in agent.manager.enabled()]
            agent.collect(agent.clock())  # the collector's tick runs as before
            mod.RELEASE.set()
            deadline = time.monotonic() + 60
            while "mkdir" not in mod.AFTER and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "is stopped; it may create directories no more" in mod.AFTER["mkdir"]
            assert host.read(shares) == before  # the abandoned tick's write went nowhere
            assert not os.path.exists(host.roots.cgroup_path("made-after-the-deadline"))
        finally:
            sys.modules["knobs_mod"].RELEASE.set()
            agent.close()


def test_a_tick_that_works_again_clears_the_condition(dists: Any) -> None:
    with on_path(*dists):
        h = Harness(gates={"TestKnobs": True})
        try:
            knobs("raise")
            h.tick("testKnobs", NOW)
            assert h.store.conditions.get("plugin/TestKnobs") is not None
            knobs("shares", "1300")
            h.tick("testKnobs", NOW + 1)
            assert h.store.conditions.get("plugin/TestKnobs") is None
            assert h.manager.stats["testKnobs"].streak == 0
        finally:
            h.close()


@pytest.mark.parametrize(("mode", "reason"), [
    ("spoof", "a write in the name of 'cpuSuppress'"),
    ("raw", "raw or restore content"),
    ("lease", "an ownership lease of 1000000000.0 s"),
    ("restore-other", "a Restore in the name of 'cpuSuppress'"),
    ("plan-spoof", "a write in the name of 'cpuSuppress'"),
    ("junk", "str is not a Write, Plan, PlanGroup or Restore"),
])
def test_a_plugin_acts_only_in_its_own_name_and_through_validation(dists: Any, mode: str, reason: str) -> None:
    with on_path(*dists):
        h = Harness(gates={"TestKnobs": True})
        try:
            quota = h.cgroup_file("cpu", h.layout.qos_dir("BestEffort"), "cpu.cfs_quota_us")
            h.write_file(quota, "400000\n")
            knobs(mode, "100000")
            h.tick("testKnobs", NOW)
            assert h.read_file(quota) == "400000\n"  # nothing in cpuSuppress's name, no restore of its files
            refused = [r for r in h.audit.recent if r["reason"].startswith("refused:")]
            assert refused and reason in refused[0]["reason"] and refused[0]["strategy"] == "testKnobs"
            assert not refused[0]["executed"]
            cond = h.store.conditions.get("plugin/TestKnobs")
            assert cond is not None and reason in cond.message
            if mode in ("spoof", "junk"):  # its own write in the same tick still goes through
                shares = h.cgroup_file("cpu", h.layout.qos_dir("Burstable"), "cpu.shares")
                assert (h.read_file(shares) or "").strip() == "1500"
            if mode == "plan-spoof":
                shares = h.cgroup_file("cpu", h.layout.qos_dir("BestEffort"), "cpu.shares")
                assert (h.read_file(shares) or "").strip() == "3"
        finally:
            h.close()


@pytest.mark.parametrize("version", [1, 2])
def test_a_plugin_writes_only_below_the_cgroup_root(dists: Any, tmp_path: Path, version: int) -> None:
    """A directory that climbs out of the cgroup tree ('..') or is absolute is refused before the executor,
    which would join it to the root as it is and write a file of that name wherever it points."""
    outside = tmp_path / "outside"
    outside.mkdir()
    shares = outside / ("cpu.shares" if version == 1 else "cpu.weight")
    shares.write_text("2\n")
    with on_path(*dists):
        h = Harness(version=version, gates={"TestKnobs": True})
        try:
            climb = os.path.relpath(outside, h.layout.abs_dir("cpu", ""))
            assert climb.startswith("..")
            for mode, where in (("dir", climb), ("dir", str(outside)), ("dir", f"kubepods/../{climb}"),
                                ("restore-dir", climb)):
                knobs(mode, where)
                assert h.tick("testKnobs", NOW) == []
                assert shares.read_text() == "2\n"
                refused = [r for r in h.audit.recent if r["reason"].startswith("refused:")]
                assert refused and "is not below the root" in refused[-1]["reason"], (mode, where)
                assert refused[-1]["strategy"] == "testKnobs" and not refused[-1]["executed"]
            cond = h.store.conditions.get("plugin/TestKnobs")
            assert cond is not None and "is not below the root" in cond.message
        finally:
            h.close()


def test_a_plugin_cannot_evict_in_another_strategys_name(dists: Any) -> None:
    with on_path(*dists):
        h = Harness(gates={"TestKnobs": True})
        try:
            knobs("evict-as")
            h.tick("testKnobs", NOW)
            errors = [r for r in h.audit.recent if r["action"] == "error"]
            assert errors and "may evict only in its own name" in errors[0]["error"]
        finally:
            h.close()


def test_invalid_values_and_dry_run_hold_for_a_plugin(dists: Any) -> None:
    with on_path(*dists):
        h = Harness(gates={"TestKnobs": True})
        try:
            shares = h.cgroup_file("cpu", h.layout.qos_dir("Burstable"), "cpu.shares")
            before = h.read_file(shares)
            knobs("shares", "-5")
            res = h.tick("testKnobs", NOW)
            assert [r.status for r in res] == ["invalid"] and h.read_file(shares) == before
        finally:
            h.close()
        h = Harness(gates={"TestKnobs": True}, dry_run=True)
        try:
            knobs("shares", "1234")
            res = h.tick("testKnobs", NOW)
            assert [r.status for r in res] == ["dry-run"] and h.read_file(shares) == before
            rec = [r for r in h.audit.recent if r["action"] == "write"]
            assert rec and rec[-1]["strategy"] == "testKnobs" and rec[-1]["executed"] is False
        finally:
            h.close()


LS = FakePod("ls-1", "default", "ls", KubeQoS.BURSTABLE, [FakeContainer("c", "containerd://" + "b" * 64)])
BE = FakePod("be-1", "default", "be", KubeQoS.BESTEFFORT, [FakeContainer("c", "containerd://" + "a" * 64)])


def suppressing(version: int = 1) -> Harness:
    """cpuSuppress on cfsQuota over an LS and a BE pod, and the test plugin beside it."""
    h = Harness(version=version, gates={"TestKnobs": True})
    h.set_node(node_object(h.host))
    h.set_pods([pod_object(LS), pod_object(BE)])
    h.set_nodeslo({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                                   "cpuSuppressPolicy": "cfsQuota"}})
    return h


def usage(h: Harness, t: float) -> None:
    h.add_samples("node_cpu_usage", [(t, 3.0)])
    h.add_samples("pod_cpu_usage", [(t, 2.0)], pod="ls-1")
    h.add_samples("pod_cpu_usage", [(t, 0.5)], pod="be-1")


@pytest.mark.parametrize("version", [1, 2])
def test_a_plugin_cannot_quietly_fight_a_built_in_over_a_file(dists: Any, version: int) -> None:
    """cpuSuppress owns BE's quota; the file's merge rule (the lower quota wins) decides against the
    plugin and for it, audited both ways and named in the plugin's ownership condition."""
    with on_path(*dists):
        h = suppressing(version)
        try:
            be = h.layout.qos_dir("BestEffort")
            usage(h, NOW - 1)
            h.tick("cpuSuppress", NOW)
            assert h.executor.owner("cpu.cfs_quota_us", be) == "cpuSuppress"
            quota = h.strategy("cpuSuppress").policy_status  # the policy in use
            assert quota["cfsQuota"] == "using"
            written = [w for w in h.recorded.writes if w["strategy"] == "cpuSuppress"
                       and w["file"].endswith(("cpu.cfs_quota_us", "cpu.max"))][-1]["value"]
            assert written.split()[0] == "270000"  # 8 CPUs x 65 % - LS 2.0 - system 0.5 (cpu_suppress's test by hand)
            # a higher quota from the plugin loses: the file keeps cpuSuppress's value
            knobs("quota", "500000")
            res = h.tick("testKnobs", NOW + 0.5)
            assert [r.status for r in res] == ["lost"]
            assert h.executor.owner("cpu.cfs_quota_us", be) == "cpuSuppress"
            lost = [r for r in h.audit.recent if r["strategy"] == "testKnobs" and r["action"] == "write"]
            assert lost and "owned by cpuSuppress: the lower CFS quota wins" in lost[-1]["reason"]
            cond = h.store.conditions.get("plugin/TestKnobs/ownership")
            assert cond is not None and "cpuSuppress keeps it" in cond.message
            # a lower one wins, and cpuSuppress's next write is the one not written, named just the same
            knobs("quota", "100000")
            res = h.tick("testKnobs", NOW + 0.7)
            assert [r.status for r in res] == ["written"]
            usage(h, NOW)
            res = h.tick("cpuSuppress", NOW + 1)
            assert [r.status for r in res] == ["lost"]
            assert h.executor.owner("cpu.cfs_quota_us", be) == "testKnobs"
            cond = h.store.conditions.get("plugin/TestKnobs/ownership")
            assert cond is not None and "testKnobs keeps it" in cond.message
            lost = [r for r in h.audit.recent if r["strategy"] == "cpuSuppress" and not r["executed"]]
            assert lost and "owned by testKnobs" in lost[-1]["reason"]
            # no contest for a while: the condition clears on the plugin's next tick
            knobs("shares", "1234")
            h.tick("testKnobs", NOW + 1 + plugins.CONTEST_QUIET + 1)
            assert h.store.conditions.get("plugin/TestKnobs/ownership") is None
        finally:
            h.close()


def test_the_plugin_module_lists_what_it_finds(dists: Any) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*dists, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "qosmanager.plugin"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 1, out.stderr  # some of them do not load
    assert "strategy API 1.0" in out.stdout
    assert "TestShares: testShares from good-plugin 1.2.3 (good_mod:Shares): loaded" in out.stdout
    assert "TestBroken: - from bad-plugins 9.9" in out.stdout
    good_only = {**os.environ, "PYTHONPATH": os.pathsep.join([dists[0], os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "qosmanager.plugin"], capture_output=True, text=True,
                         env=good_only, timeout=120)
    assert out.returncode == 0 and "1 plugin(s)" in out.stdout


# --------------------------------------------------------------------------------------------------
# the example package, pip-installed from its own directory, under every command
# --------------------------------------------------------------------------------------------------
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "be-burst-cap"


@pytest.fixture(scope="module")
def example_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/be-burst-cap (pip builds in the source tree: the checkout stays clean)."""
    src = tmp_path_factory.mktemp("be-burst-cap-src") / "be-burst-cap"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*"))
    return src


@pytest.fixture(scope="module")
def example(example_src: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example installed with pip from its own directory into a directory of its own (the test venv
    stays as the README's command made it); returns the directory, which goes on PYTHONPATH."""
    target = str(tmp_path_factory.mktemp("be-burst-cap-installed"))
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-input",
                          "--disable-pip-version-check", "--target", target, str(example_src)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return target


def env_with(*paths: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_the_example_is_discovered_from_its_installed_package(example: str) -> None:
    out = subprocess.run([sys.executable, "-m", "qosmanager.plugin"], capture_output=True, text=True,
                         env=env_with(example), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "BEBurstCap: beBurstCap from be-burst-cap 0.1.0 (be_burst_cap:BEBurstCap): loaded" in out.stdout


def test_the_examples_own_tests_pass_against_the_installed_package(example: str, example_src: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                          "-p", "no:benchmark", "tests"], cwd=example_src, capture_output=True, text=True,
                         env=env_with(example), timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_the_example_under_replay(example: str, tmp_path: Path) -> None:
    ls_uid, be_uid = "ls-1", "be-1"
    ls_id, be_id = "containerd://" + "b" * 64, "containerd://" + "a" * 64

    def pod(uid: str, qos: str, label: str, cid: str) -> dict[str, Any]:
        return {"metadata": {"uid": uid, "name": uid, "namespace": "default",
                             "labels": {"koordinator.sh/qosClass": label}},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Running", "qosClass": qos,
                           "containerStatuses": [{"name": "c", "containerID": cid, "state": {"running": {}}}]}}

    be_pod_dir = f"cpu/kubepods/besteffort/pod{be_uid}"
    scenario = {
        "now": 1000.0, "cgroupVersion": 1,
        "node": {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "8", "memory": "32Gi"},
                                                        "allocatable": {"cpu": "8", "memory": "32Gi"}}},
        "pods": [pod(ls_uid, "Burstable", "LS", ls_id), pod(be_uid, "BestEffort", "BE", be_id)],
        "featureGates": {"BEBurstCap": True}, "strategies": ["beBurstCap"],
        "metrics": [{"name": "container_throttled_ratio", "pod": ls_uid, "container": "c",
                     "samples": [[999.0, 0.3], [1000.0, 0.3]]}],
        "cgroups": {f"{be_pod_dir}/cpu.cfs_burst_us": "50000", f"{be_pod_dir}/{'a' * 64}/cpu.cfs_burst_us": "50000"},
    }
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    out = subprocess.run([sys.executable, "-m", "qosmanager", "replay", str(path)], capture_output=True,
                         text=True, env=env_with(example), timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {(w["strategy"], w["file"], w["value"]) for w in doc["writes"]} == {
        ("beBurstCap", f"{be_pod_dir}/cpu.cfs_burst_us", "0"),
        ("beBurstCap", f"{be_pod_dir}/{'a' * 64}/cpu.cfs_burst_us", "0")}
    # without the plugin on the path the scenario names an unknown gate: refused, not guessed
    bare = subprocess.run([sys.executable, "-m", "qosmanager", "replay", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert bare.returncode == 2 and "BEBurstCap" in bare.stderr


def test_the_example_under_simulate(example: str, tmp_path: Path) -> None:
    js = tmp_path / "sim.json"
    out = subprocess.run([sys.executable, "-m", "qosmanager", "simulate", "--containers", "40", "--duration", "10",
                          "--feature-gates", "BEBurstCap=true", "--json", str(js)], capture_output=True, text=True,
                         env=env_with(example), timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads(js.read_text())
    assert "beBurstCap" in doc["strategies"]
    job = doc["agent"]["jobs"]["beBurstCap"]
    assert job["runs"] >= 5 and job["errors"] == 0 and doc["agent"]["errors"] == {}


def test_the_example_under_run_caps_be_burst_while_ls_is_throttled(example: str, tmp_path: Path) -> None:
    """``qosmanager run`` on a fake host whose LS container's cpu.stat shows throttling while the agent
    runs: the plugin is listed at start with its package and version, and BE's burst files go to 0."""
    host = FakeHost(str(tmp_path / "host"), version=1, n_cpus=8, memory_bytes=32 << 30)
    host.add_pods([LS, BE])
    pods = {"apiVersion": "v1", "kind": "PodList", "items": [pod_object(LS), pod_object(BE)]}
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    (tmp_path / "node.json").write_text(json.dumps(node_object(host)))
    be_files = [f"{host.pod_dir('be-1')}/cpu.cfs_burst_us", f"{host.container_dir('be-1', 'c')}/cpu.cfs_burst_us"]
    for f in be_files:
        host.write(f"cgroup/cpu/{f}", "50000\n")
    audit = tmp_path / "audit.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "qosmanager", "run", "--log-format", "json",
         "--cgroup-root", host.roots.cgroup, "--proc-root", host.roots.proc, "--sys-root", host.roots.sys,
         "--pods-file", str(tmp_path / "pods.json"), "--node-file", str(tmp_path / "node.json"),
         "--kubelet-root-dir", "", "--metrics-addr", "", "--audit-log", str(audit),
         "--collect-interval", "200ms", "--reconcile-interval-seconds", "0.2",
         "--feature-gates", "BEBurstCap=true", "--duration", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_with(example))
    try:
        ls_dir = host.container_dir("ls-1", "c")
        periods = throttled = 0
        deadline = time.monotonic() + 50
        capped = False
        while time.monotonic() < deadline and proc.poll() is None and not capped:
            periods, throttled = periods + 100, throttled + 40  # 40 % of the periods throttled
            host.set_throttle(ls_dir, periods, throttled, throttled * 50_000)
            time.sleep(0.1)
            capped = all(host.read(f"cgroup/cpu/{f}").strip() == "0" for f in be_files)
        assert capped, "the BE burst files were not capped"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    start = next(json.loads(line) for line in err.splitlines() if '"starting: ' in line)
    assert {"gate": "BEBurstCap", "strategy": "beBurstCap", "package": "be-burst-cap", "version": "0.1.0",
            "state": "on"} in start["plugins"]
    assert "plugin BEBurstCap: beBurstCap from be-burst-cap 0.1.0 on" in start["msg"]
    recs = [json.loads(line) for line in audit.read_text().splitlines()]
    caps = [r for r in recs if r["strategy"] == "beBurstCap" and r["action"] == "write" and r["executed"]]
    assert {r["target"] for r in caps} == {f"cpu/{f}" for f in be_files}
    assert all(r["value"] == "0" and r["old"] == "50000" for r in caps)


def test_the_docs_harness_example_runs_against_the_example_plugin(example: str, example_src: Path) -> None:
    """docs/strategies.md's Harness snippet, as a newcomer would paste it, with the example's helpers for its
    Kubernetes objects."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "strategies.md").read_text(encoding="utf-8")
    snippet = doc.split("## Testing against the fake kernel", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    prelude = ("from test_be_burst_cap import BE_ID, LS_ID, node, pod\n"
               "node_obj, ls_container_id = node(), LS_ID\n"
               "ls_pod, be_pod = pod('ls-1', 'Burstable', LS_ID, 'LS'), pod('be-1', 'BestEffort', BE_ID, 'BE')\n")
    out = subprocess.run([sys.executable, "-c", prelude + snippet], capture_output=True, text=True, timeout=300,
                         env=env_with(example, str(example_src / "tests")))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
