"""Properties of scenario files (``sim/replay.py``): any mutation of a real scenario is either a
scenario or refused with one line naming the field; one that parses runs to its output.

The mutations start from the scenarios in ``tests/scenarios``: a value anywhere replaced by any
JSON value, a key removed or added, a list emptied or doubled.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from props import props
from qosmanager.sim.replay import Scenario, ScenarioError, parse_scenario, run_scenario

SCENARIOS = sorted(p for p in (Path(__file__).parent / "scenarios").glob("*.yaml")
                   if ".expected." not in p.name)
BASES = [yaml.safe_load(p.read_text()) for p in SCENARIOS]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.text(max_size=8),
                         st.floats(allow_nan=True, allow_infinity=True))
json_any = st.recursive(
    json_scalars,
    lambda k: st.one_of(st.lists(k, max_size=2), st.dictionaries(st.text(max_size=5), k, max_size=2)),
    max_leaves=5)


def paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value of the document (keys and list indices)."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(paths(v, (*prefix, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(paths(v, (*prefix, i)))
    return out


@st.composite
def mutated_scenarios(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        all_paths = paths(doc)
        path = draw(st.sampled_from(all_paths))
        if not path:
            continue
        parent: Any = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        op = draw(st.sampled_from(["replace", "replace", "remove", "add", "empty", "double"]))
        if op == "replace":
            parent[last] = draw(json_any)
        elif op == "remove":
            del parent[last]
        elif op == "add" and isinstance(parent, dict):
            key = draw(st.sampled_from(["extra", "name", "uid", "enable", "samples", "now"]))
            parent[key] = draw(json_any)
        elif op == "empty" and isinstance(parent[last], (list, dict)):
            parent[last] = type(parent[last])()
        elif op == "double" and isinstance(parent[last], list):
            parent[last] = parent[last] * 2
    return doc


@props(150)
@given(doc=st.one_of(mutated_scenarios(), json_any))
def test_a_scenario_is_parsed_or_refused_in_one_line_naming_the_field(doc: Any) -> None:
    try:
        sc = parse_scenario(doc)
    except ScenarioError as e:
        message = str(e)
        assert message and "\n" not in message, message
        return
    assert isinstance(sc, Scenario)
    assert sc.ticks >= 1 and math.isfinite(sc.now)


@props(12)
@given(doc=mutated_scenarios())
def test_a_scenario_that_parses_runs_to_its_output(doc: Any) -> None:
    try:
        sc = parse_scenario(doc)
    except ScenarioError:
        return
    out = run_scenario(sc)
    json.dumps(out)  # the output is one JSON document
    assert {"writes", "evictions", "files", "errors"} <= set(out)
