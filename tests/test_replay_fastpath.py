"""``qosmanager replay`` models the fast path: with the kube QoS dirs' usage in the scenario
(``kubepods_cpu_usage``, ``besteffort_cpu_usage``) and the node's, it samples them every 50 ms of scenario
time between the ticks and lowers BE's quota when LS demand rises (``reactMode: fast``, the default, as
``run``); ``reactMode: tick`` leaves that to the next tick."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from qosmanager.sim.replay import ScenarioError, parse_scenario, replay_main, run_scenario

SCENARIOS = Path(__file__).parent / "scenarios"
NOW = 1000.0
RISE = 1001.4  # between the ticks at 1001 and 1002: the sample at 1001.5 is the first that shows it
LS_UID = "0a0a0a0a-0000-4000-8000-000000000001"


def series(name: str, value: Any) -> dict[str, Any]:
    """Samples every 100 ms from 998 s to 1003 s; ``value(t)`` the rate (cores) over the 100 ms up to t."""
    ts = [round(998.0 + 0.1 * i, 1) for i in range(51)]
    return {"name": name, "samples": [[t, value(t)] for t in ts]}


def scenario(**extra: Any) -> dict[str, Any]:
    """The cfsQuota scenario with LS at 1 core, then 4 from ``RISE`` on; BE 1 core, the system 0.5."""
    doc = copy.deepcopy(yaml.safe_load((SCENARIOS / "cfs-quota-v1.yaml").read_text()))
    del doc["cgroups"]

    def ls(t: float) -> float:
        return 4.0 if t > RISE + 0.05 else 1.0

    doc["metrics"] = [series("node_cpu_usage", lambda t: ls(t) + 1.5),
                      series("kubepods_cpu_usage", lambda t: ls(t) + 1.0),
                      series("besteffort_cpu_usage", lambda t: 1.0),
                      {"name": "pod_cpu_usage", "pod": LS_UID, "samples": [[NOW, 1.0]]}]
    doc.update(extra)
    return doc


def quota_writes(doc: dict[str, Any]) -> list[tuple[float, int, str]]:
    return [(w["ts"], int(w["value"]), w["reason"]) for w in doc["writes"]
            if w["file"] == "cpu/kubepods/besteffort/cpu.cfs_quota_us"]


def test_replay_lowers_be_between_ticks_in_fast_mode() -> None:
    writes = quota_writes(run_scenario(parse_scenario(scenario())))
    # the first tick: 5200m - LS 1000m - system 500m = 3700m
    assert writes[0][:2] == (NOW, 370000)
    fast = [w for w in writes if "(fast path)" in w[2]]
    assert fast, writes
    # the first within two samples (100 ms) of the rise, and before the next tick the budget under it:
    # 5200m - 4000m - 500m = 700m
    assert RISE < fast[0][0] <= RISE + 0.15
    settled = [w for w in fast if w[0] < NOW + 2][-1]
    assert settled[0] <= RISE + 0.25 and abs(settled[1] - 70000) <= 1000, fast
    # nothing between the first tick and the rise
    assert all(w[0] == NOW or w[0] > RISE for w in writes)


def test_replay_in_tick_mode_lowers_be_at_the_next_tick_only() -> None:
    writes = quota_writes(run_scenario(parse_scenario(scenario(reactMode="tick"))))
    assert not [w for w in writes if "(fast path)" in w[2]]
    lowered = [w for w in writes if w[1] < 370000]
    assert lowered and lowered[0][0] == NOW + 2, writes


def test_replay_without_the_qos_dirs_usage_has_no_fast_path() -> None:
    """The pinned golden scenarios give no kube QoS-dir usage: their output is the tick's alone."""
    doc = scenario()
    doc["metrics"] = [m for m in doc["metrics"] if m["name"] != "kubepods_cpu_usage"]
    assert not [w for w in quota_writes(run_scenario(parse_scenario(doc))) if "(fast path)" in w[2]]


def test_a_bad_react_mode_is_a_bad_scenario(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="reactMode"):
        parse_scenario(scenario(reactMode="sometimes"))
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario(reactMode="sometimes")))
    err = io.StringIO()
    assert replay_main(str(path), io.StringIO(), err) == 2
    assert "reactMode" in err.getvalue()
