"""The kubelet's CPU manager read from the node: its checkpoint (cpu_manager_state) and its configuration
file, in the formats the kubelet writes, with the flag as an override; missing, garbled and changed files."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from qosmanager.agent import config_from_args
from qosmanager.cli import build_parser
from qosmanager.framework.conditions import Conditions
from qosmanager.host.kubelet_cpu import (
    COND_CONFIG,
    COND_STATE,
    SOURCE_FLAG,
    KubeletCPUSource,
    parse_cpu_manager_state,
    parse_kubelet_config,
)

POD_A = "235148fe-393f-47a8-a17d-bd55bc1a836b"
POD_B = "7d1c2a3e-0f9b-4c5e-9a6b-1e2f3a4b5c6d"
# what a kubelet with the static policy writes (checkpoint v2): two pods with exclusive CPUs
STATIC = ('{"policyName":"static","defaultCpuSet":"0,3-5,7","entries":{"POD_A":{"app":"1-2"},'
          '"POD_B":{"db":"6"}},"checksum":1552716370}').replace("POD_A", POD_A).replace("POD_B", POD_B)
NONE = '{"policyName":"none","defaultCpuSet":"","checksum":3242152201}'
# checkpoint v1 (before Kubernetes 1.18): entries keyed by container ID
STATIC_V1 = '{"policyName":"static","defaultCpuSet":"0,3-7","entries":{"abc123":"1-2"},"checksum":2297946051}'
CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
cpuManagerPolicy: static
cpuManagerReconcilePeriod: 10s
reservedSystemCPUs: "0,4"
"""


def write(path: Path, text: str) -> None:
    """Write and move the mtime forward, as a later write by the kubelet does."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def policy_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "qosmanager.host.kubelet_cpu"]


def test_static_checkpoint_gives_policy_and_exclusive_cpus(tmp_path: Path) -> None:
    write(tmp_path / "cpu_manager_state", STATIC)
    k = KubeletCPUSource(Conditions(), str(tmp_path)).current()
    assert (k.policy, k.source) == ("static", str(tmp_path / "cpu_manager_state"))
    assert k.exclusive == {POD_A: {"app": frozenset({1, 2})}, POD_B: {"db": frozenset({6})}}
    assert k.exclusive_cpus == {1, 2, 6} and k.reserved_cpus == frozenset()


def test_none_checkpoint_and_v1_checkpoint(tmp_path: Path) -> None:
    assert parse_cpu_manager_state(json.loads(NONE)).policy == "none"
    assert parse_cpu_manager_state(json.loads(NONE)).exclusive_cpus == frozenset()
    v1 = parse_cpu_manager_state(json.loads(STATIC_V1))
    assert v1.policy == "static" and v1.exclusive_cpus == {1, 2} and v1.default_cpuset == {0, 3, 4, 5, 6, 7}


@pytest.mark.parametrize(("text", "error"), [
    ("{not json", "not valid JSON"),
    ('{"defaultCpuSet":"0-3"}', "policyName"),
    ('{"policyName":"static","defaultCpuSet":"0-3","entries":{"p":{"c":"3-1"}}}', "entries['p']['c']"),
    ('{"policyName":"static","defaultCpuSet":"0-3","entries":{"p":7}}', "entries['p']"),
    ('{"policyName":"static","defaultCpuSet":"zero"}', "zero"),
    ('{"policyName":"static","defaultCpuSet":"","checksum":"x"}', "checksum"),
    ('["static"]', "object"),
])
def test_garbled_checkpoint_is_a_degraded_condition_and_nothing_is_guessed(
        tmp_path: Path, text: str, error: str) -> None:
    write(tmp_path / "cpu_manager_state", text)
    conditions = Conditions()
    k = KubeletCPUSource(conditions, str(tmp_path)).current()
    assert k.policy is None and k.exclusive_cpus == frozenset()
    message = conditions.snapshot()[COND_STATE].message
    assert error in message and "not used" in message


def test_garbled_checkpoint_keeps_the_last_good_reading(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "qosmanager.host.kubelet_cpu")
    state = tmp_path / "cpu_manager_state"
    write(state, STATIC)
    conditions = Conditions()
    src = KubeletCPUSource(conditions, str(tmp_path))
    assert src.current().policy == "static"
    write(state, STATIC[:40])  # a torn write
    k = src.current()
    assert (k.policy, k.exclusive_cpus) == ("static", {1, 2, 6})
    assert k.source.endswith("(last good reading)")
    assert "last good reading stays in force" in conditions.snapshot()[COND_STATE].message
    for _ in range(3):
        src.current()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # said once, not every tick
    write(state, NONE)
    assert src.current().policy == "none" and COND_STATE not in conditions.snapshot()


def test_missing_files_fall_back_with_one_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "qosmanager.host.kubelet_cpu")
    src = KubeletCPUSource(Conditions(), str(tmp_path / "nowhere"), str(tmp_path / "config.yaml"))
    for _ in range(5):
        k = src.current()
    assert k.policy is None and k.exclusive_cpus == frozenset()
    lines = policy_lines(caplog)
    assert len([m for m in lines if "cpu_manager_state not readable" in m]) == 1
    assert len([m for m in lines if "config.yaml not readable" in m]) == 1
    assert len([m for m in lines if "policy: not known" in m]) == 1
    # the flag alone still decides
    flagged = KubeletCPUSource(Conditions(), str(tmp_path / "nowhere"), flag="static").current()
    assert (flagged.policy, flagged.source) == ("static", SOURCE_FLAG)


def test_kubelet_config_decides_when_there_is_no_checkpoint(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    write(config, CONFIG)
    src = KubeletCPUSource(Conditions(), str(tmp_path), str(config))
    k = src.current()
    assert (k.policy, k.source, k.reserved_cpus) == ("static", str(config), {0, 4})
    # the checkpoint, once there, is what the kubelet actually runs
    write(tmp_path / "cpu_manager_state", NONE)
    k = src.current()
    assert (k.policy, k.source) == ("none", str(tmp_path / "cpu_manager_state"))
    assert k.reserved_cpus == {0, 4}  # reservedSystemCPUs still come from the configuration
    # a configuration without cpuManagerPolicy runs the kubelet's default, none
    assert parse_kubelet_config({"kind": "KubeletConfiguration"}).policy == "none"


def test_kubelet_config_as_json_and_garbled(tmp_path: Path) -> None:
    config = tmp_path / "kubelet.json"
    write(config, json.dumps({"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1",
                              "cpuManagerPolicy": "Static"}))
    conditions = Conditions()
    src = KubeletCPUSource(conditions, None, str(config))
    assert src.current().policy == "static"
    write(config, "kind: Pod\n")
    assert src.current().policy == "static"  # the last good reading
    assert "not KubeletConfiguration" in conditions.snapshot()[COND_CONFIG].message
    write(config, "kind: KubeletConfiguration\nreservedSystemCPUs: all\n")
    assert src.current().policy == "static"
    assert "reservedSystemCPUs" in conditions.snapshot()[COND_CONFIG].message


def test_flag_overrides_the_files_but_exclusive_cpus_stay(tmp_path: Path) -> None:
    write(tmp_path / "cpu_manager_state", STATIC)
    k = KubeletCPUSource(Conditions(), str(tmp_path), flag="none").current()
    assert (k.policy, k.source, k.exclusive_cpus) == ("none", SOURCE_FLAG, {1, 2, 6})


def test_changed_while_running_is_reread_and_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "qosmanager.host.kubelet_cpu")
    state = tmp_path / "cpu_manager_state"
    write(state, NONE)
    src = KubeletCPUSource(Conditions(), str(tmp_path))
    first = src.current()
    assert first.policy == "none" and src.current() is first  # unchanged: the same answer, not re-read
    write(state, STATIC)
    for _ in range(3):
        k = src.current()
    assert (k.policy, k.exclusive_cpus) == ("static", {1, 2, 6})
    decided = [m for m in policy_lines(caplog) if m.startswith("kubelet CPU manager policy:")]
    assert decided == [f"kubelet CPU manager policy: none (from {state})",
                       f"kubelet CPU manager policy: static (from {state})"]
    # a new assignment (same policy) is picked up without a new policy line
    write(state, STATIC.replace('"6"', '"5-6"'))
    assert src.current().exclusive_cpus == {1, 2, 5, 6}
    assert len([m for m in policy_lines(caplog) if m.startswith("kubelet CPU manager policy:")]) == 2
    # deleted (an operator resetting the CPU manager): falls back, said once
    state.unlink()
    assert src.current().policy is None


def test_run_flags_reach_the_agent_config() -> None:
    parser = build_parser()
    cfg = config_from_args(parser.parse_args(["run", "--pods-file", "p.json"]))
    got = (cfg.kubelet_root_dir, cfg.kubelet_config, cfg.qos.cpu_manager_policy)
    assert got == ("/var/lib/kubelet", None, None)
    cfg = config_from_args(parser.parse_args(["run", "--pods-file", "p.json", "--kubelet-root-dir", "",
                                              "--kubelet-config", "/k/config.yaml",
                                              "--kubelet-cpu-manager-policy", "static"]))
    assert (cfg.kubelet_root_dir, cfg.kubelet_config, cfg.qos.cpu_manager_policy) == (None, "/k/config.yaml",
                                                                                       "static")
