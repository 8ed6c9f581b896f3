"""``qosmanager replay``: scenario files against hand-derived expectations, validation, determinism.

Each ``tests/scenarios/<name>.yaml`` with a ``<name>.expected.yaml`` next to it is replayed; the
expectation file holds the writes (strategy, file, value, in order), the evictions (strategy, pod,
uid, in order) and a subset of the final files, with the arithmetic that gives them (from the spec,
not from the implementation) in its comments.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from qosmanager.executor.executor import Write
from qosmanager.framework.context import Context
from qosmanager.framework.manager import load_strategies
from qosmanager.framework.strategy import REGISTRY, Strategy
from qosmanager.sim.replay import ScenarioError, load_scenario, parse_scenario, replay_main, run_scenario

SCENARIOS = Path(__file__).parent / "scenarios"
EXPECTED = sorted(SCENARIOS.glob("*.expected.yaml"))


def _scenario_for(expected: Path) -> Path:
    return expected.with_name(expected.name.replace(".expected.yaml", ".yaml"))


def _needs(path: Path) -> None:
    """Skip (saying which) when a strategy the scenario runs is not implemented in this checkout."""
    wanted = yaml.safe_load(path.read_text()).get("strategies") or []
    missing = [s for s in wanted if s not in load_strategies()]
    if missing:
        pytest.skip(f"strategy not implemented yet: {', '.join(missing)}")


def _replay(path: Path) -> dict[str, Any]:
    return run_scenario(load_scenario(str(path)))


@pytest.mark.parametrize("expected", EXPECTED, ids=[p.name.split(".")[0] for p in EXPECTED])
def test_scenario_matches_hand_derived_expectation(expected: Path) -> None:
    scenario = _scenario_for(expected)
    _needs(scenario)
    want = yaml.safe_load(expected.read_text())
    got = _replay(scenario)
    assert [{k: w[k] for k in ("strategy", "file", "value")} for w in got["writes"]] == want["writes"]
    assert [{k: e[k] for k in ("strategy", "pod", "uid")} for e in got["evictions"]] == want["evictions"]
    for rel, content in want["files"].items():
        assert got["files"].get(rel) == content, rel
    assert got["errors"] == []


def test_the_expectation_files_cover_the_required_cases() -> None:
    names = {p.name.split(".")[0] for p in EXPECTED}
    assert {"cfs-quota-v1", "cfs-quota-v2", "cpuset-v1", "memory-evict-be"} <= names


def test_ticks_run_at_now_plus_k_intervals_and_files_hold_the_last_write() -> None:
    path = SCENARIOS / "cfs-quota-v1.yaml"
    _needs(path)
    got = _replay(path)
    assert [w["ts"] for w in got["writes"]] == [1000.0, 1001.0, 1002.0]
    # each write names the value it replaced: the scenario's initial file, then the previous write
    assert [w["old"] for w in got["writes"]] == ["400000", "270000", "350000"]
    assert got["files"]["cpu/kubepods/besteffort/cpu.cfs_quota_us"] == got["writes"][-1]["value"]


def test_systemd_driver_names_the_slices() -> None:
    path = SCENARIOS / "cfs-quota-v1.yaml"
    _needs(path)
    doc = yaml.safe_load(path.read_text())
    doc["cgroupDriver"] = "systemd"
    quota = "cpu/kubepods.slice/kubepods-besteffort.slice/cpu.cfs_quota_us"
    doc["cgroups"] = {quota: "400000"}
    got = run_scenario(parse_scenario(doc))
    # the numbers of cfs-quota-v1, in the systemd layout (koordlet-qos §1.5)
    assert [(w["file"], w["value"]) for w in got["writes"]] == [(quota, "270000"), (quota, "350000"),
                                                                (quota, "420000")]


def test_files_named_in_the_scenario_are_reported_even_when_untouched(tmp_path: Path) -> None:
    sc = {
        "now": 10.0,
        "strategies": [],
        "cgroups": {"cpu/kubepods/burstable/cpu.shares": 2048},
        "proc": {"sys/vm/min_free_kbytes": "4096"},
        "sys": {"fs/resctrl/info/L3/cbm_mask": "7ff"},
    }
    got = run_scenario(parse_scenario(sc))
    assert got["writes"] == [] and got["evictions"] == []
    assert got["files"] == {
        "cpu/kubepods/burstable/cpu.shares": "2048",
        "proc/sys/vm/min_free_kbytes": "4096",
        "sys/fs/resctrl/info/L3/cbm_mask": "7ff",
    }


def test_container_series_are_addressed_by_name_and_stored_under_the_runtime_id() -> None:
    doc = yaml.safe_load((SCENARIOS / "cfs-quota-v1.yaml").read_text())
    uid = doc["pods"][1]["metadata"]["uid"]
    doc["metrics"] = [
        {"name": "container_cpu_usage", "pod": uid, "container": "job", "samples": [[1000.0, 1.25]]},
        {"name": "container_throttled_ratio", "pod": uid, "container": "job", "samples": [[1000, 0.5]]},
    ]
    sc = parse_scenario(doc)
    cid = "containerd://" + "2" * 64
    assert [s.labels for s in sc.metrics] == [{"container": cid}, {"container": cid}]
    no_such = r"metrics\[0\]\.container: pod default/be-1 has no container 'nope'"
    with pytest.raises(ScenarioError, match=no_such):
        doc["metrics"][0]["container"] = "nope"
        parse_scenario(doc)


def test_a_pod_with_two_containers_of_one_name_is_refused_at_parse() -> None:
    """The API server gives each container of a pod (init containers included) its own name; the fake
    host lays out one dir per name, so such a scenario is refused when it is read, not half-way through
    its run (a scenario that parses runs)."""
    doc = yaml.safe_load((SCENARIOS / "cfs-quota-v1.yaml").read_text())
    pod = doc["pods"][1]
    pod["spec"]["initContainers"] = [dict(pod["spec"]["containers"][0])]
    with pytest.raises(ScenarioError, match=r"pods\[1\]: container name 'job' is used twice"):
        parse_scenario(doc)
    pod["spec"]["initContainers"][0]["name"] = "setup"
    parse_scenario(doc)


def test_feature_gates_cpu_manager_policy_and_config_reach_the_agent() -> None:
    sc = parse_scenario({"now": 1.0, "featureGates": {"BEMemoryEvict": True, "CPUBurst": False},
                         "kubeletCPUManagerPolicy": "static",
                         "config": {"memoryEvictCoolTimeSeconds": 9, "collectIntervalSeconds": 2}})
    assert sc.feature_gates == {"BEMemoryEvict": True, "CPUBurst": False}
    assert sc.config.cpu_manager_policy == "static"
    assert sc.config.memory_evict_cool_time == 9.0
    assert sc.config.collect_interval == 2.0


def test_omitted_strategies_means_every_enabled_one() -> None:
    path = SCENARIOS / "cfs-quota-v1.yaml"
    _needs(path)
    doc = yaml.safe_load(path.read_text())
    del doc["strategies"]
    got = run_scenario(parse_scenario(doc))
    be_quota = "cpu/kubepods/besteffort/cpu.cfs_quota_us"
    quota = [(w["strategy"], w["value"]) for w in got["writes"] if w["file"] == be_quota]
    # cpuSuppress ran among the others, with the numbers of cfs-quota-v1
    assert quota == [("cpuSuppress", "270000"), ("cpuSuppress", "350000"), ("cpuSuppress", "420000")]


# ----------------------------------------------------------------------------------------------
# bad scenarios: exit 2, one line naming the field
# ----------------------------------------------------------------------------------------------
BAD = {
    "unknown-key": ("now: 1\nextra: 2\n", "unknown key extra"),
    "bad-type": ("now: 1\nticks: two\n", "ticks: expected an integer, got a string"),
    "zero-ticks": ("now: 1\nticks: 0\n", "ticks: must be within [1, 100000], got 0"),
    "missing-now": ("cgroupVersion: 1\n", "now: required"),
    "bad-version": ("now: 1\ncgroupVersion: 3\n", "cgroupVersion: must be one of 1, 2, got 3"),
    "unknown-strategy": ("now: 1\nstrategies: [cpuSupress]\n",
                         "strategies[0]: unknown strategy 'cpuSupress'"),
    "unknown-metric": ("now: 1\nmetrics: [{name: node_cpu, samples: [[1, 1]]}]\n",
                       "metrics[0].name: unknown metric 'node_cpu'"),
    "metric-address": ("now: 1\nmetrics: [{name: pod_cpu_usage, samples: [[1, 1]]}]\n",
                       "metrics[0]: pod_cpu_usage needs pod: <uid>"),
    "bad-sample": ("now: 1\nmetrics: [{name: node_cpu_usage, samples: [[1]]}]\n",
                   "metrics[0].samples[0]: expected [timestamp, value]"),
    "metric-key": ("now: 1\nmetrics: [{name: node_cpu_usage, samples: [], pod: x}]\n",
                   "metrics[0]: node_cpu_usage takes no pod: address"),
    "unknown-gate": ("now: 1\nfeatureGates: {NoSuchGate: true}\n",
                     "featureGates: unknown feature gate(s): NoSuchGate"),
    "gate-type": ("now: 1\nfeatureGates: {BEMemoryEvict: yes please}\n",
                  "featureGates.BEMemoryEvict: expected true or false"),
    # a nodeSLO that is not a NodeSLO at all (a bad field is dropped and listed, see below)
    "nodeslo-kind": ("now: 1\nnodeSLO: {kind: Node, spec: {}}\n",
                     'nodeSLO: kind: must be "NodeSLO", got "Node"'),
    "nodeslo-spec": ("now: 1\nnodeSLO: {spec: [1]}\n", "nodeSLO: spec: must be an object, got [1]"),
    "bad-pod": ("now: 1\npods: [{metadata: {name: p}}]\n", "pods[0]: pod 'p': metadata.uid: required"),
    "duplicate-cpu": ("now: 1\ncpus: [{id: 0, core: 0, socket: 0, node: 0},\n"
                      "       {id: 0, core: 1, socket: 0, node: 0}]\n",
                      "cpus[1].id: CPU 0 is listed twice"),
    "file-escape": ("now: 1\ncgroups: {'../etc/passwd': x}\n", "must be a relative path"),
    "not-yaml": ("now: [1\n", "not valid YAML/JSON"),
    "not-an-object": ("- now: 1\n", "expected an object at the top level"),
    "disabled-strategy": ("now: 1\nstrategies: [memoryEvict]\n",
                          "memoryEvict is not enabled by the feature gates"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_scenario_exits_2_with_one_line(tmp_path: Path, name: str) -> None:
    text, fragment = BAD[name]
    if name == "disabled-strategy" and "memoryEvict" not in load_strategies():
        pytest.skip("strategy not implemented yet: memoryEvict")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    assert replay_main(str(path), out, err) == 2
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and err.getvalue().endswith("\n"), err.getvalue()
    assert lines[0].startswith("qosmanager replay: ")
    assert fragment in lines[0]


def test_a_nodeslo_with_bad_fields_runs_and_lists_them_under_refused(tmp_path: Path) -> None:
    """koordlet's rule: a bad NodeSLO field affects that field only.  The cfs-quota scenario with
    two more NodeSLO fields out of range writes the same BE quotas, and says what it dropped."""
    path = SCENARIOS / "cfs-quota-v1.yaml"
    _needs(path)
    doc = yaml.safe_load(path.read_text())
    doc["nodeSLO"]["spec"]["systemStrategy"] = {"watermarkScaleFactor": 500}
    doc["nodeSLO"]["spec"]["resourceUsedThresholdWithBE"]["cpuEvictBESatisfactionUpperPercent"] = 120
    bad = tmp_path / "bad-fields.yaml"
    bad.write_text(yaml.safe_dump(doc))
    out, err = io.StringIO(), io.StringIO()
    assert replay_main(str(bad), out, err) == 0, err.getvalue()
    got = json.loads(out.getvalue())
    want = yaml.safe_load((SCENARIOS / "cfs-quota-v1.expected.yaml").read_text())
    assert [{k: w[k] for k in ("strategy", "file", "value")} for w in got["writes"]] == want["writes"]
    refused = [r for r in got["refused"] if r.get("source") == "nodeSLO"]
    assert [r["field"] for r in refused] == [
        "spec.resourceUsedThresholdWithBE.cpuEvictBESatisfactionUpperPercent",
        "spec.systemStrategy.watermarkScaleFactor",
    ]
    assert all("got 120" in r["reason"] or "got 500" in r["reason"] for r in refused)
    # and a scenario without bad fields lists none
    assert not [r for r in _replay(path)["refused"] if r.get("source") == "nodeSLO"]


def test_bad_scenario_through_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"now": 5, "cgroups": {"cpu/x": 1.5}}))
    proc = subprocess.run([sys.executable, "-m", "qosmanager", "replay", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "qosmanager replay: cgroups['cpu/x']: expected a string, got a number"]


def test_scenario_from_standard_input() -> None:
    proc = subprocess.run([sys.executable, "-m", "qosmanager", "replay", "-", "--compact"],
                          input=json.dumps({"now": 7, "strategies": [],
                                            "proc": {"sys/vm/watermark_scale_factor": "150"}}),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"writes": [], "evictions": [],
                                       "files": {"proc/sys/vm/watermark_scale_factor": "150"}}


def test_missing_scenario_file_exits_2(tmp_path: Path) -> None:
    err = io.StringIO()
    assert replay_main(str(tmp_path / "nope.yaml"), io.StringIO(), err) == 2
    assert err.getvalue().count("\n") == 1 and "No such file" in err.getvalue()


# ----------------------------------------------------------------------------------------------
# determinism and the output document
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["cpuset-v1", "memory-evict-be"])
def test_same_scenario_gives_byte_identical_output(name: str) -> None:
    path = SCENARIOS / f"{name}.yaml"
    _needs(path)
    outs = []
    for hash_seed in ("1", "2"):  # different dict/set hashing in each process
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run([sys.executable, "-m", "qosmanager", "replay", str(path)], capture_output=True,
                              env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    doc = json.loads(outs[0])
    assert {"writes", "evictions", "files"} <= set(doc)
    assert all({"strategy", "file", "value"} <= set(w) for w in doc["writes"])
    assert all({"strategy", "pod", "uid", "reason"} <= set(e) for e in doc["evictions"])


def test_compact_output_holds_the_pinned_fields_only(tmp_path: Path) -> None:
    out = io.StringIO()
    path = tmp_path / "s.yaml"
    path.write_text("now: 1\nstrategies: []\n")
    assert replay_main(str(path), out, io.StringIO(), compact=True) == 0
    assert json.loads(out.getvalue()) == {"writes": [], "evictions": [], "files": {}}


# ----------------------------------------------------------------------------------------------
# a strategy that raises is reported, not fatal
# ----------------------------------------------------------------------------------------------
class _Boom(Strategy):
    name = "testReplayBoom"
    gates: ClassVar[tuple[str, ...]] = ("BECPUSuppress",)

    def tick(self, ctx: Context) -> list[Write]:
        raise RuntimeError(f"boom at {ctx.now}")


@pytest.fixture
def boom() -> Iterator[str]:
    REGISTRY[_Boom.name] = _Boom
    try:
        yield _Boom.name
    finally:
        REGISTRY.pop(_Boom.name, None)


def test_a_raising_strategy_is_listed_under_errors(boom: str) -> None:
    got = run_scenario(parse_scenario({"now": 50.0, "strategies": [boom], "ticks": 2}))
    assert got["errors"] == [{"strategy": boom, "error": "RuntimeError: boom at 50.0", "ts": 50.0},
                             {"strategy": boom, "error": "RuntimeError: boom at 51.0", "ts": 51.0}]
    assert got["writes"] == []


def test_memory_protection_levels_are_reported_per_tick() -> None:
    """memoryHigh's decision at each tick: the level, the cap, BE's budget and usage, the reclaim step, why
    (the numbers are the scenario's hand-derived ones: memory-high-v2.expected.yaml)."""
    _needs(SCENARIOS / "memory-high-v2.yaml")
    got = _replay(SCENARIOS / "memory-high-v2.yaml")
    levels = got["memoryProtection"]
    assert [(p["ts"], p["level"], p["cap"], p["budget"], p["beUsage"], p["reclaim"]) for p in levels] == [
        (3000.0, 2, 10 << 30, 7680 << 20, 10 << 30, 32 << 20),
        (3001.0, 2, 10 << 30, 7680 << 20, (10 << 30) - (32 << 20), 32 << 20)]
    assert all("reclaim" in p["reason"] for p in levels)
    # a scenario without memoryHigh has no such key
    assert "memoryProtection" not in _replay(SCENARIOS / "memory-evict-be.yaml")
