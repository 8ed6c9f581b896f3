"""docs/interfaces.md is the operators' contract: every flag, strategy and gate it names exists with the
default it states, so the page and the code cannot drift apart."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from qosmanager.cli import build_parser
from qosmanager.framework.builtins import builtin_strategies
from qosmanager.framework.gates import KNOWN

DOC = (Path(__file__).resolve().parent.parent / "docs" / "interfaces.md").read_text()


def section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:] if end < 0 else DOC[start:end]


def run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["run"]


def test_every_run_flag_in_the_table_exists_with_its_default() -> None:
    table = re.findall(r"^\| `(--[a-z-]+)` \| ([^|]+) \|", section("`qosmanager run`"), re.M)
    assert len(table) >= 18
    actions = {opt: a for a in run_parser()._actions for opt in a.option_strings}
    plain = {"`/sys/fs/cgroup`": "/sys/fs/cgroup", "`/proc`": "/proc", "`/sys`": "/sys", "`auto`": "auto",
             "`/`": "/", "`127.0.0.1:9316`": "127.0.0.1:9316", "`/var/lib/kubelet`": "/var/lib/kubelet",
             "`demand`": "demand"}
    for flag, default in table:
        assert flag in actions, f"{flag} is documented but not a flag of run"
        want = plain.get(default.strip())
        if want is not None:
            assert actions[flag].default == want, flag
    for flag in re.findall(r"`(--[a-z-]+)`", section("`qosmanager run`")):
        assert flag in actions, f"{flag} is documented but not a flag of run"


def test_strategy_names_and_gates_with_their_defaults() -> None:
    text = section("Strategy names and feature gates")
    names = re.findall(r"`([a-z][A-Za-z]+)`", text.split("Feature gates")[0])
    assert sorted(names) == sorted(builtin_strategies())
    gates = dict(re.findall(r"`([A-Z][A-Za-z]+)`( \(on\))?", text.split("Feature gates")[1]))
    interface_gates = {g for g in gates if g in KNOWN}
    assert len(interface_gates) == 15, sorted(set(gates) - set(KNOWN))
    for gate in interface_gates:
        assert KNOWN[gate][0] == bool(gates[gate]), f"{gate}: default {KNOWN[gate][0]}"


def test_every_test_file_the_readme_cites_exists() -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    cited = set(re.findall(r"`(test_[a-z0-9_]+\.py)`", readme))
    assert len(cited) >= 10
    missing = sorted(name for name in cited if not (root / "tests" / name).exists())
    assert missing == []
