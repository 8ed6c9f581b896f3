"""deploy/README.md's "Living beside koordlet": the table's strategies and gates are the agent's own, and
the example koordlet configuration turns off exactly those gates."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from qosmanager.framework.gates import KNOWN, OWN
from qosmanager.framework.manager import load_strategies

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def table() -> dict[str, list[str]]:
    """strategy -> koordlet gates to turn off, from the section's table."""
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    section = text.split("## Living beside koordlet", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`\w+`", cells[0]):
            continue
        rows[cells[0].strip("`")] = re.findall(r"`(\w+)`", cells[1])
    return rows


def example_gates() -> dict[str, bool]:
    ops = yaml.safe_load((DEPLOY / "koordlet" / "koordlet-feature-gates.yaml").read_text(encoding="utf-8"))
    assert isinstance(ops, list) and len(ops) == 1
    op = ops[0]
    assert (op["op"], op["path"]) == ("add", "/spec/template/spec/containers/0/args/-")
    flag, _, value = op["value"].partition("=")
    assert flag == "-feature-gates"
    gates: dict[str, bool] = {}
    for item in value.split(","):
        name, _, v = item.partition("=")
        assert v in ("true", "false"), item
        assert name not in gates, f"{name} twice"
        gates[name] = v == "true"
    return gates


def test_the_table_names_every_strategy_with_its_own_gates() -> None:
    rows = table()
    # every strategy koordlet also has, in the agent's order (qosmanager's own, memoryHigh, have no
    # koordlet gate to turn off)
    strategies = {n: cls for n, cls in load_strategies().items() if not set(cls.gates) <= set(OWN)}
    assert list(rows) == list(strategies)
    for name, gates in rows.items():
        assert gates, name
        assert set(gates) == set(strategies[name].gates), name  # the gates that enable it here
        assert all(g in KNOWN for g in gates)  # koordlet's names (the agent's gates module has them all)


def test_the_example_turns_off_exactly_the_tables_gates() -> None:
    gates = example_gates()
    assert all(name in KNOWN for name in gates)
    assert not any(gates.values())
    assert sorted(gates) == sorted(g for gs in table().values() for g in gs)


def test_the_readme_points_at_the_example() -> None:
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    assert "(koordlet/koordlet-feature-gates.yaml)" in text


def test_the_helm_values_turn_off_the_same_gates_and_keep_the_charts_own() -> None:
    """deploy/koordlet/koordinator-values.yaml: koordinator's chart puts ``koordlet.features`` into
    koordlet's -feature-gates in place of its default, so it holds the patch's gates and the chart's
    non-QoS default (Accelerators) still on."""
    values = yaml.safe_load((DEPLOY / "koordlet" / "koordinator-values.yaml").read_text(encoding="utf-8"))
    assert list(values) == ["koordlet"] and list(values["koordlet"]) == ["features"]
    gates: dict[str, bool] = {}
    for item in values["koordlet"]["features"].split(","):
        name, _, v = item.partition("=")
        assert v in ("true", "false") and name not in gates, item
        gates[name] = v == "true"
    assert gates.pop("Accelerators") is True
    assert gates == example_gates()
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    assert "(koordlet/koordinator-values.yaml)" in text and "helm upgrade" in text
