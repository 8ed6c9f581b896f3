"""Properties of NodeSLO validation (``api/nodeslo.py``), driven by the schema itself.

A document is drawn field by field from the dataclasses' field specs: each field absent, valid,
``null``, or wrong (of another type, out of its range, an unknown enum value, any JSON value).
Whatever the document, ``parse_nodeslo`` yields a spec whose every field is valid for its spec,
every wrong value is named in ``invalid_fields`` by its JSON path, and nothing valid is named.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from props import props
from qosmanager.api import nodeslo
from qosmanager.api.nodeslo import _INT64, KEEP, NodeSLOSpec, _schema, _SpecBody, parse_nodeslo
from qosmanager.api.quantity import value

GOOD, BAD, UNSURE = "good", "bad", "unsure"
QUANTITIES_OK = ["1", "100m", "2Gi", "0", "1.5", 3, "1e3"]
QUANTITIES_BAD = ["x", "1..2", True, [], {"a": 1}, "1 Gi"]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.text(max_size=6),
                         st.floats(allow_nan=False, allow_infinity=False))
json_any = st.recursive(
    json_scalars,
    lambda k: st.one_of(st.lists(k, max_size=2), st.dictionaries(st.text(max_size=4), k, max_size=2)),
    max_leaves=5)


def spec_ok(spec: Any, v: Any) -> bool:
    """Whether a JSON value is usable for a field, by the field's spec (independently of the parser)."""
    kind = spec.kind
    if kind == "int":
        return isinstance(v, int) and not isinstance(v, bool) and spec.lo <= v <= spec.hi
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str)
    if kind == "enum":
        return isinstance(v, str) and (v in spec.choices or spec.unknown is not None)
    if kind == "quantity":
        try:
            value(v)
        except ValueError:
            return False
        return True
    if kind == "intstr":
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            return False
        if isinstance(v, int):
            return 0 <= v <= 100
        try:
            value(v)
        except ValueError:
            return False
        return True
    if kind == "any":
        return isinstance(v, Mapping)
    raise AssertionError(kind)


def leaf_values(spec: Any) -> st.SearchStrategy[Any]:
    kind = spec.kind
    if kind == "int":
        lo, hi = spec.lo, spec.hi
        return st.one_of(st.integers(lo, min(hi, lo + 1000) if lo > -(2**20) else hi), st.integers(lo, hi),
                         st.sampled_from([lo - 1, hi + 1, 1.5, "1", True]), json_any)
    if kind == "bool":
        return st.one_of(st.booleans(), st.sampled_from(["true", 1, 0]), json_any)
    if kind == "str":
        return st.one_of(st.text(max_size=8), json_any)
    if kind == "enum":
        return st.one_of(st.sampled_from(list(spec.choices) or [""]), st.sampled_from(["bogus", 3]), json_any)
    if kind == "quantity":
        return st.sampled_from(QUANTITIES_OK + QUANTITIES_BAD)
    if kind == "intstr":
        return st.one_of(st.integers(-5, 105), st.sampled_from(["50", "1.5", "x", "50%", True]), json_any)
    if kind == "any":
        return st.one_of(st.dictionaries(st.text(max_size=5), json_any, max_size=3), json_any)
    raise AssertionError(kind)


@st.composite
def document(draw: st.DrawFn, cls: type, path: str, verdicts: dict[str, str],
             misread_bad: bool = True) -> dict[str, Any]:
    """A JSON object for ``cls``; ``verdicts`` gets each drawn value's path and whether it is usable
    (``misread_bad``: an enum value koordlet reads as another counts as bad, as in a NodeSLO; a pod
    annotation's decoding only warns about it)."""
    out: dict[str, Any] = {}
    for _name, spec, _default in _schema(cls).fields:
        if not draw(st.integers(0, 3)):  # about a quarter of the fields are written
            continue
        fpath = f"{path}.{spec.json}"
        if draw(st.integers(0, 9)) == 0:
            out[spec.json] = None  # null: as if not written
            continue
        if spec.kind == "obj":
            if draw(st.integers(0, 9)) == 0:
                out[spec.json] = draw(st.sampled_from([1, "x", [], True]))
                verdicts[fpath] = BAD
            else:
                out[spec.json] = draw(document(spec.cls, fpath, verdicts, misread_bad))
        elif spec.kind == "list":
            if draw(st.integers(0, 9)) == 0:
                out[spec.json] = draw(st.sampled_from([{}, "x", 3]))
                verdicts[fpath] = BAD
            else:
                n = draw(st.integers(0, 2))
                items = []
                for i in range(n):
                    if draw(st.integers(0, 9)) == 0:
                        items.append(draw(st.sampled_from([1, "x", []])))
                        verdicts[f"{fpath}[{i}]"] = BAD
                    else:
                        items.append(draw(document(spec.cls, f"{fpath}[{i}]", verdicts, misread_bad)))
                out[spec.json] = items
        elif spec.kind == "boolmap":
            if draw(st.integers(0, 9)) == 0:
                out[spec.json] = draw(st.sampled_from([1, "x", []]))
                verdicts[fpath] = BAD
            else:
                m = draw(st.dictionaries(st.sampled_from(["A", "B", "C.d"]),
                                         st.one_of(st.booleans(), st.sampled_from(["yes", 1])), max_size=3))
                for k, v in m.items():
                    verdicts[f"{fpath}.{k}"] = GOOD if isinstance(v, bool) else BAD
                out[spec.json] = m
        else:
            v = draw(leaf_values(spec))
            out[spec.json] = v
            if v is None:
                continue
            if v == "" and spec.kind != "str":
                verdicts[fpath] = UNSURE  # "" keeps a string default (Go's omitempty), else it is wrong
            else:
                # an enum value koordlet reads as another one is reported like a bad value
                misread = (misread_bad and spec.kind == "enum" and v not in spec.choices
                           and spec.unknown != KEEP)
                verdicts[fpath] = GOOD if spec_ok(spec, v) and not misread else BAD
    return out


def disabled_prefixes(spec_doc: Mapping[str, Any]) -> list[str]:
    """A disabled cpu/resctrl/memory QoS of the LSR, LS and BE classes takes koordlet's "None" values:
    what the document wrote inside it is replaced, so it is neither used nor named."""
    out: list[str] = []
    strategy = nodeslo.merge_spec(spec_doc).get("resourceQOSStrategy")  # enable may be a default
    if not isinstance(strategy, Mapping):
        return out
    for klass in ("lsrClass", "lsClass", "beClass"):
        cfgs = strategy.get(klass)
        if not isinstance(cfgs, Mapping):
            continue
        for qos in ("cpuQOS", "resctrlQOS", "memoryQOS"):
            cfg = cfgs.get(qos)
            if isinstance(cfg, Mapping) and cfg.get("enable") is False:
                out.append(f"spec.resourceQOSStrategy.{klass}.{qos}.")
    return out


def check_valid(obj: Any, path: str) -> None:
    """Every field of a built object holds a value its spec allows (or is unset)."""
    for name, spec, default in _schema(type(obj)).fields:
        v = getattr(obj, name)
        fpath = f"{path}.{spec.json}"
        if v is None or (v == default and spec.kind != "obj"):
            continue
        if spec.kind == "obj":
            assert isinstance(v, spec.cls), fpath
            check_valid(v, fpath)
        elif spec.kind == "list":
            assert isinstance(v, tuple), fpath
            for i, item in enumerate(v):
                assert isinstance(item, spec.cls), f"{fpath}[{i}]"
                check_valid(item, f"{fpath}[{i}]")
        elif spec.kind == "boolmap":
            assert all(isinstance(k, str) and isinstance(b, bool) for k, b in v.items()), fpath
        elif spec.kind == "quantity":
            assert isinstance(v, int) and not isinstance(v, bool), fpath
        elif spec.kind == "enum":
            assert isinstance(v, str) and (v in spec.choices or spec.unknown == KEEP
                                           or v == spec.unknown), (fpath, v)
        else:
            assert spec_ok(spec, v), (fpath, v)
        if spec.kind == "int":
            assert _INT64[0] <= v <= _INT64[1]


@props(80)
@given(data=st.data())
def test_any_nodeslo_yields_valid_fields_and_names_every_bad_one(data: st.DataObject) -> None:
    verdicts: dict[str, str] = {}
    spec_doc = data.draw(document(_SpecBody, "spec", verdicts))
    doc = {"apiVersion": nodeslo.API_VERSION, "kind": nodeslo.KIND, "metadata": {"name": "n"},
           "spec": spec_doc}
    parsed = parse_nodeslo(doc)
    assert isinstance(parsed, NodeSLOSpec)
    # every field of the result is valid
    for attr in ("resource_used_threshold_with_be", "resource_qos_strategy", "cpu_burst_strategy",
                 "system_strategy"):
        check_valid(getattr(parsed, attr), "spec")
    for app in parsed.host_applications:
        check_valid(app, "spec.hostApplications[]")
        assert app.name
    assert len({a.name for a in parsed.host_applications}) == len(parsed.host_applications)
    # every bad value is named by its path; nothing good is
    named = [p for p, _why in parsed.invalid_fields]
    skip = disabled_prefixes(spec_doc)
    for path, verdict in verdicts.items():
        if any(path.startswith(p) for p in skip):
            continue
        if verdict == BAD:
            assert path in named, (path, parsed.invalid_fields)
    for path in named:
        host_app_name = path.startswith("spec.hostApplications[") and path.endswith("].name")
        assert verdicts.get(path) in (BAD, UNSURE) or host_app_name, (path, parsed.invalid_fields)
    # the summary names them all
    summary = parsed.invalid_summary()
    assert all(p in summary for p in named)


@props(100)
@given(doc=st.one_of(json_any, st.dictionaries(st.sampled_from(["apiVersion", "kind", "metadata", "spec"]),
                                               json_any, max_size=4)))
def test_any_document_is_a_nodeslo_or_a_clear_refusal(doc: Any) -> None:
    try:
        parsed = parse_nodeslo(doc)
    except nodeslo.NodeSLOError as e:
        assert str(e)
        return
    assert isinstance(parsed, NodeSLOSpec)
    check_valid(parsed.resource_qos_strategy, "spec.resourceQOSStrategy")


@props(80)
@given(data=st.data(), cls=st.sampled_from([nodeslo.CPUBurstConfig, nodeslo.PodMemoryQOSConfig,
                                            nodeslo.BlkIOQOS]))
def test_annotation_configs_are_all_valid_or_refused_naming_the_field(data: st.DataObject, cls: type) -> None:
    """The pod annotations' strict decoding: the config with every field valid, or NodeSLOError naming
    a field that is bad (the pod's feature is then skipped)."""
    verdicts: dict[str, str] = {}
    raw = data.draw(document(cls, "annotation", verdicts, misread_bad=False))
    try:
        config, _warnings = nodeslo.from_dict(cls, raw, "annotation")
    except nodeslo.NodeSLOError as e:
        bad = [p for p, v in verdicts.items() if v in (BAD, UNSURE)]
        assert bad and any(str(e).startswith(f"{p}: ") for p in bad), (str(e), verdicts)
        return
    assert not [p for p, v in verdicts.items() if v == BAD], verdicts
    check_valid(config, "annotation")
    assert all(not isinstance(getattr(config, f.name), float) or math.isfinite(getattr(config, f.name))
               for f in dataclasses.fields(config))
