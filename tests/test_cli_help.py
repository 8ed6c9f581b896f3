"""The command line a person expects: every option's default in --help, the gates split into those
the agent acts on and those it accepts for koordlet's sake, and an unknown gate answered helpfully."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from qosmanager.cli import build_parser, main
from qosmanager.framework.gates import ACCEPTED_ONLY, ACTED_ON, KNOWN, FeatureGates, UnknownGateError
from qosmanager.framework.manager import load_strategies


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("command", ["run", "simulate", "replay", "restore"])
def test_every_option_says_its_default(command: str) -> None:
    parser = subcommands()[command]
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.default is argparse.SUPPRESS or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._HelpAction) or action.required:
            continue
        text = formatter._get_help_string(action) or ""
        assert "default" in text, f"{command} {action.option_strings[0]}: {text!r}"


def test_the_gates_are_split_into_acted_on_and_accepted() -> None:
    assert set(ACTED_ON) | set(ACCEPTED_ONLY) == set(KNOWN) and not set(ACTED_ON) & set(ACCEPTED_ONLY)
    strategy_gates = {g for cls in load_strategies().values() for g in cls.gates}
    assert strategy_gates <= set(ACTED_ON)
    # BECPUManager changes what cpuSuppress does; BECPUIdle puts the BE QoS dir in cpu.idle;
    # BEMemoryReclaim adds level 2 to memoryHigh
    assert set(ACTED_ON) - strategy_gates == {"BECPUManager", "BECPUIdle", "BEMemoryReclaim"}
    text = " ".join(subcommands()["run"].format_help().split())
    acted, accepted = text.split("Accepted for koordlet compatibility", 1)
    for gate in ACTED_ON:
        assert re.search(rf"\b{gate}\b", acted.split("Acted on here:", 1)[1]), gate
    for gate in ACCEPTED_ONLY:
        assert re.search(rf"\b{gate}\b", accepted), gate
    for name in load_strategies():
        assert name in text


def test_an_unknown_gate_names_a_close_one_and_the_acted_on_gates() -> None:
    with pytest.raises(UnknownGateError) as e:
        FeatureGates.from_overrides({"becpusuppress": True})
    msg = str(e.value)
    assert "did you mean BECPUSuppress?" in msg
    acted_part = msg.split("acts on:", 1)[1].split("koordlet's other", 1)[0]
    assert all(g in acted_part for g in ACTED_ON)
    assert not any(re.search(rf"\b{g}\b", acted_part) for g in ACCEPTED_ONLY)


def test_a_misspelt_gate_or_strategy_names_the_one_meant(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    with pytest.raises(UnknownGateError, match=r"BECPUSupress: did you mean BECPUSuppress\?"):
        FeatureGates.from_overrides({"BECPUSupress": True})  # a letter missing
    with pytest.raises(UnknownGateError, match=r"CPUBrust: did you mean CPUBurst\?"):
        FeatureGates.from_overrides({"CPUBrust": True})  # two swapped
    with pytest.raises(UnknownGateError) as e:
        FeatureGates.from_overrides({"Turbo": True})  # nothing close: no guess
    assert "did you mean" not in str(e.value)
    pods = tmp_path / "pods.json"
    pods.write_text('{"kind": "PodList", "items": []}')
    assert main(["run", "--pods-file", str(pods), "--strategies", "cpuSupress", "--duration", "1s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cpuSupress: unknown strategy (did you mean cpuSuppress?)" in err


def test_run_refuses_an_unknown_gate_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    pods = tmp_path / "pods.json"
    pods.write_text('{"kind": "PodList", "items": []}')
    assert main(["run", "--pods-file", str(pods), "--feature-gates", "NoSuchGate=true", "--duration", "1s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NoSuchGate" in err and "acts on" in err


def test_simulate_keep_leaves_one_node_name_and_says_how_to_run_the_agent_on_it(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """The kept node's pods name the Node that is there (so a Kubernetes-mode agent of that node sees
    them), and the printed command runs the strategies the simulation ran, as a dry run."""
    import json
    import shlex

    from qosmanager.agent import Agent, config_from_args

    assert main(["simulate", "--containers", "20", "--duration", "2", "--keep", "--workdir", str(tmp_path),
                 "--cpus", "4", "--memory-gib", "8"]) == 0
    out = capsys.readouterr()
    (root,) = tmp_path.glob("qosm-sim-*")
    node = json.loads((root / "node.json").read_text())
    pods = json.loads((root / "pods.json").read_text())["items"]
    slo = json.loads((root / "nodeslo.json").read_text())
    names = {p["spec"]["nodeName"] for p in pods}
    assert names == {node["metadata"]["name"]} == {slo["metadata"]["name"]}
    (line,) = [x for x in (out.out + out.err).splitlines() if x.strip().startswith("qosmanager run")]
    argv = shlex.split(line)[1:]
    args = build_parser().parse_args(argv)
    assert args.dry_run and args.node_name == node["metadata"]["name"]
    agent = Agent(config_from_args(args))
    try:
        running = {s.name for s in agent.manager.enabled()}
    finally:
        agent.close()
    assert {"cpuSuppress", "memoryEvict"} <= running
    # the README's dry run on a kept node is this command: the same flags (its own audit log besides)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Run it safely", 1)[1].split("```", 2)[1]
    shown = shlex.split(section.replace("\\\n", " ").split("qosmanager run", 1)[1].splitlines()[0])
    flags = {a for a in shown if a.startswith("--")} - {"--audit-log"}
    assert flags == {a for a in argv if a.startswith("--")}
    assert shown[shown.index("--feature-gates") + 1] == argv[argv.index("--feature-gates") + 1]
    assert shown[shown.index("--node-name") + 1] == node["metadata"]["name"]


def test_the_command_line_loads_no_shutil_and_wraps_help_as_argparse_would() -> None:
    """argparse's formatter, built for every add_argument, imports shutil for the terminal's width,
    and shutil imports bz2 and lzma (about 0.8 MiB of every agent); the agent's formatter asks the
    terminal itself, with the same answer ($COLUMNS, else the terminal, else 80)."""
    import json
    import os
    import subprocess
    import sys

    code = ("import sys, json; from qosmanager.cli import build_parser; p = build_parser(); "
            "p.parse_args(['run', '--node-name', 'n']); "
            "loaded = sorted(m for m in ('shutil', 'bz2', 'lzma') if m in sys.modules); "
            "import argparse, shutil; "
            "print(json.dumps([loaded, p._get_formatter()._width, argparse.HelpFormatter('x')._width]))")
    for columns in ("", "57", "0", "wide"):
        env = dict(os.environ, COLUMNS=columns)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        loaded, ours, theirs = json.loads(out.stdout)
        assert loaded == [], f"COLUMNS={columns!r}: {loaded} imported by the command line"
        assert ours == theirs, f"COLUMNS={columns!r}"
    assert theirs == 78  # no terminal (captured output), COLUMNS unusable: 80 less argparse's margin
